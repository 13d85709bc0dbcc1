"""Fine-tuning and evaluation: `finetune.run_finetune` and `evaluate.run_evaluate` (the commands), the
per-seed classifier loop (`classifier`), inputs, metrics and result files."""
