"""The compute plan of a pre-training run from the model's shape alone (no weights read): total training FLOPs,
the peak memory of one micro-batch, and hours on named GPUs at an assumed MFU. `femlm <pretraining command>
--dry-run` prints it (femlm.train.plan), and the README's paper-scale estimates are its output.

* FLOPs: femlm.train.flops's model-FLOP count, the one every run records as `train_flops` (dense encoder at
  every row token, MLM head at the masked targets), over every step of the run.
* Memory of one micro-batch, on the device that trains it (an estimate, not a measurement):
    model states   4 B per parameter (fp32 weights) + 12 B per trainable one (fp32 gradients, AdamW's 2 moments)
    activations    what autograd keeps for backward, per token and encoder layer: the inputs of the Q/K/V,
                   attention-output and two feed-forward matmuls, Q/K/V, the attention output and the GELU's
                   input and output (7h + 2i values in the activation dtype: 2 B under bf16 autocast, 4 B in
                   fp32), the two LayerNorm inputs (fp32: 8h B) and two dropout masks (2h B); the embeddings'
                   LayerNorm input and dropout mask (5h B). An unfused attention (the math kernel, which a CPU
                   takes when attention dropout is on) also keeps its probabilities and their dropout mask
                   (heads x seq x (2 values + 1 B)); GPU kernels (flash / memory-efficient SDPA) keep none.
    MLM head       per predicted token (the masked targets with sparse prediction, every token without): the
                   head's hidden states (3h values + an fp32 LayerNorm input) and the vocabulary logits, their
                   fp32 log-probabilities and, in backward, their fp32 gradient (V x (value + 8 B)).
  tests/test_train_estimate.py checks it against the peak resident memory of real CPU steps (fp32). On a GPU
  add the CUDA context and the caching allocator's slack (commonly 0.5-2 GiB), which it does not count.
* Hours: FLOPs / (the GPU's dense bf16 peak x `runtime.assumed_mfu`), one GPU; with data-parallel GPUs divide
  by their number (less what communication costs). The MFU is an assumption until a run on that GPU measures
  it (benchmarks/bench_train.py prints MFU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from femlm.train.compute import step_layout
from femlm.train.flops import FlopCounts, flop_counts

# Published dense bf16 tensor-core peaks (FLOP/s) from NVIDIA's data sheets; the sheets' headline figures are twice
# these ("with sparsity"), which dense training cannot use. benchmarks/gpu_check.py measures MFU against them.
GPU_PEAK_BF16: dict[str, float] = {
    "H100 SXM": 989e12,  # NVIDIA H100 Tensor Core GPU data sheet: BF16 Tensor Core 1,979 TFLOPS with sparsity
    "H100 PCIe": 756e12,  # same data sheet, H100 PCIe column: 1,513 TFLOPS with sparsity
    "H200": 989e12,  # NVIDIA H200 Tensor Core GPU data sheet (SXM): BF16 Tensor Core 1,979 TFLOPS with sparsity
    "A100": 312e12,  # NVIDIA A100 Tensor Core GPU data sheet: BF16 Tensor Core 312 TFLOPS (624 with sparsity)
    "L4": 121e12,  # NVIDIA L4 Tensor Core GPU data sheet: BF16 Tensor Core 242 TFLOPS with sparsity
    "A10": 125e12,  # NVIDIA A10 Tensor Core GPU data sheet: BF16 Tensor Core 125 TFLOPS (250 with sparsity)
}
PLAN_GPUS = ("H100 SXM", "A100", "L4")  # the GPUs the dry run prices a run on
GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    """What the estimates need of a masked LM: parameter counts, matmul FLOP counts and layer sizes."""

    params: int  # every parameter once (tied embeddings and decoder count once)
    trainable: int
    flops: FlopCounts
    layers: int
    hidden: int
    intermediate: int
    heads: int
    vocab: int


def model_shape(config: Any, attn_implementation: str = "sdpa", trainable: list[str] | None = None) -> ModelShape:
    """The shape of the masked LM `config` describes, from a model built on the meta device (no memory, no
    weights); `trainable`: trainer.trainable's patterns (empty: every parameter trains)."""
    from transformers import AutoModelForMaskedLM

    from femlm.train.core import freeze_except

    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config, attn_implementation=attn_implementation)
    if trainable:
        freeze_except(model, list(trainable))
    hidden = int(config.hidden_size)
    return ModelShape(
        params=sum(p.numel() for p in model.parameters()),
        trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
        flops=flop_counts(model), layers=int(config.num_hidden_layers), hidden=hidden,
        intermediate=int(getattr(config, "intermediate_size", 4 * hidden)),
        heads=int(config.num_attention_heads), vocab=int(config.vocab_size))


def micro_batch_memory(shape: ModelShape, rows: int, seq: int, predicted: int, value_bytes: int = 2,
                       fused_attention: bool = True, sparse_prediction: bool = True) -> dict[str, float]:
    """Peak memory (bytes) of training one micro-batch of `rows` x `seq` tokens with `predicted` masked targets,
    by part (the module docstring gives each term); `value_bytes`: 2 under bf16/fp16 autocast, 4 in fp32."""
    h, i, v = shape.hidden, shape.intermediate, shape.vocab
    per_layer = value_bytes * (7 * h + 2 * i) + 4 * 2 * h + 2 * h
    if not fused_attention:
        per_layer += shape.heads * seq * (2 * value_bytes + 1)
    tokens = rows * seq
    head_tokens = predicted if sparse_prediction else tokens
    parts = {
        "model_states": 4.0 * shape.params + 12.0 * shape.trainable,
        "activations": float(tokens * (shape.layers * per_layer + 5 * h)),
        "mlm_head": float(head_tokens * (value_bytes * 3 * h + 4 * h + v * (value_bytes + 8))),
    }
    return {**parts, "total": sum(parts.values())}


def masked_per_row(masker: Any, tokenizer: Any, seq: int) -> float:
    """Masked targets per model row: one block of ordinary tokens between the tokenizer's framing specials,
    masked by the run's own masker (exact for exact counts, one draw for Bernoulli ones)."""
    specials = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([t for t in range(len(tokenizer)) if t not in specials])
    gen = torch.Generator().manual_seed(0)
    body = ordinary[torch.randint(len(ordinary), (1, seq - 2), generator=gen)]
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    last = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    block = torch.cat([torch.tensor([[first]]), body, torch.tensor([[last]])], 1)
    labels = masker(block, None, gen)["labels"]
    return float((labels != -100).sum()) / labels.shape[0]


def compute_plan(cfg: Any, shape: ModelShape, masked: float) -> dict[str, Any]:
    """The run's training FLOPs, the memory of its micro-batch under bf16 autocast on a GPU, and its hours on
    each GPU of PLAN_GPUS at runtime.assumed_mfu (one process; `masked`: masked targets per row)."""
    tcfg, runtime, seq = cfg.trainer, cfg.runtime, cfg.data.block_size
    layout = step_layout(tcfg.equal_compute, tcfg.batch_size, tcfg.max_steps, cfg.masking.num_copies)
    flops = layout.steps * shape.flops.per_step(layout.rows, seq, masked * layout.rows)
    micro = min(runtime.micro_batch_size or layout.rows, layout.rows)
    memory = micro_batch_memory(shape, micro, seq, round(masked * micro), value_bytes=2,
                                sparse_prediction=runtime.sparse_prediction)
    mfu = runtime.assumed_mfu
    return {
        "train_flops": flops, "steps": layout.steps, "rows_per_step": layout.rows, "seq": seq,
        "masked_per_row": masked, "params": shape.params,
        "micro_batch": {"rows": micro, "memory_gib": {k: round(b / GIB, 2) for k, b in memory.items()}},
        "assumed_mfu": mfu,
        "gpu_hours": {gpu: round(flops / (GPU_PEAK_BF16[gpu] * mfu) / 3600, 1) for gpu in PLAN_GPUS},
    }


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The compute plan as the dry run prints it; every estimate says it is one."""
    mem = plan["micro_batch"]["memory_gib"]
    hours = ", ".join(f"{gpu} {h:,} h" for gpu, h in plan["gpu_hours"].items())
    return [
        f"compute: {plan['train_flops']:.3g} training FLOPs = {plan['steps']:,} steps x {plan['rows_per_step']} rows "
        f"x {plan['seq']} tokens ({plan['params'] / 1e6:.1f}M parameters, {plan['masked_per_row']:.1f} masked targets "
        "per row; femlm.train.flops)",
        f"  peak memory of one micro-batch of {plan['micro_batch']['rows']} rows (estimate from the model shape, bf16 "
        f"autocast, fused attention): {mem['total']:.1f} GiB = model and AdamW states {mem['model_states']:.1f} + "
        f"activations {mem['activations']:.1f} + MLM head {mem['mlm_head']:.1f}",
        f"  one GPU at an ASSUMED {plan['assumed_mfu']:.0%} MFU (runtime.assumed_mfu; dense bf16 peaks from the "
        f"vendor's data sheets): {hours}; data-parallel GPUs divide it",
    ]
