"""Masked-LM pre-training: `loop.run_pretrain` (the command), `plan.plan_pretrain` (what a --dry-run checks),
`core.PretrainCore` (one optimizer step as a pure function of seed, step and weights), `objective` (the
sparse masked-LM loss), `inputs` (tokenizer, model, blocks, masker), `checkpoint` and `resume` (exact
resume), `distributed` (torchrun), `tracking` (metrics.jsonl, wandb, progress bar), `probe` and `flops`."""
