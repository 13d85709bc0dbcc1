"""The compute plan of a pre-training run from the model's shape alone (no weights read): total training FLOPs,
the peak memory of one micro-batch, and hours on named GPUs at a measured (else an assumed) MFU.
`femlm <pretraining command> --dry-run` prints it (femlm.train.plan), and the README's paper-scale estimates are
its output.

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
* Hours: FLOPs / (the GPU's dense bf16 peak x MFU), one GPU; with data-parallel GPUs divide by their number
  (less what communication costs). The MFU is MEASURED where `make gpu-check` has measured that card with the
  current training step (`measured_mfu`: the newest committed results/gpu/<card>-<date>/results.json of that card
  whose `step_version` is STEP_VERSION or later, at the row of the same sequence length and the nearest batch,
  compiled or eager as `runtime.compile` says; its block-timed MFU where the record has one); elsewhere it is
  `runtime.assumed_mfu`, printed as an assumption.
  results/gpu is found beside the package, i.e. in the repository checkout femlm runs from (an editable install);
  femlm installed as a wheel has no results/gpu beside it, so its dry runs use the assumption for every card.
* Memory calibration (results/gpu/nvidia-h100-80gb-hbm3-2026-11-26, torch 2.11 on one H100, bf16): eager steps
  measured 0.98x this estimate with fused attention at 64 x 128 and 16 x 512; compiled steps measured 6.78 GiB at
  16 x 512 (1.40x the fused estimate): compiled, torch's automatic SDPA choice kept the attention probabilities.
  With that term (`fused_attention=False`) both compiled rows measure 0.88x. So a compiled run that allows the
  math kernel (`runtime.sdpa_backend` auto, or a list holding math) is estimated with the probabilities kept;
  eager runs and fused kernels only (runtime=gpu's [flash, efficient]; cudnn) without them. The micro-batch
  choice of benchmarks/gpu_check.py follows. tests/test_train_estimate.py checks the recorded figures.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from femlm.masking.config import PASSES
from femlm.masking.passes import mask_visits
from femlm.runtime.attention import keeps_probabilities
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
# Where `make gpu-check` commits its records: the repository checkout that holds this package (absent beside a
# wheel installed in site-packages: the dry run then assumes runtime.assumed_mfu everywhere).
RESULTS_GPU = Path(__file__).resolve().parents[2] / "results" / "gpu"
# The training step whose speed a gpu-check record measured: 1 before issue 36; 2 from issue 36 on (fixed shapes
# for one compiled graph, no host reads in non-logging steps, the next batch prefetched, runtime.sdpa_backend); 3 from
# issue 46 on (the attention kernels entered inside the compiled step, fused by default on GPUs; runtime.tf32).
# Only records of STEP_VERSION or later price a run; older ones are history.
STEP_VERSION = 3


def step_version() -> int:
    """The version of the training step this checkout runs (gpu_check records it), from the runtime keys each
    version added (issue 36: sdpa_backend, prefetch; issue 46: tf32)."""
    from femlm.runtime.config import RuntimeConfig

    names = {f.name for f in fields(RuntimeConfig)}
    return STEP_VERSION if "tf32" in names else 2 if {"sdpa_backend", "prefetch"} <= names else 1


def device_peak(device: torch.device, override: float | None = None) -> tuple[float | None, str]:
    """(FLOP/s that MFU is measured against, where it comes from): `runtime.peak_flops` when given; on CUDA the
    card's data-sheet dense bf16 peak (GPU_PEAK_BF16); else None (a CPU has no data-sheet figure here)."""
    if override:
        return float(override), "runtime.peak_flops"
    if device.type != "cuda":
        return None, f"none on {device.type} (set runtime.peak_flops to a measured rate)"
    name = torch.cuda.get_device_name(device)
    key = gpu_key(name)
    if key is None:
        return None, f"{name}: not in femlm/train/estimate.py's GPU_PEAK_BF16 (set runtime.peak_flops)"
    return GPU_PEAK_BF16[key], f"{key} data-sheet dense bf16 peak"


def gpu_key(name: str) -> str | None:
    """The key of GPU_PEAK_BF16 for a CUDA device name such as "NVIDIA H100 80GB HBM3" (None: not in the table;
    an H100 NVL has no entry)."""
    if "H100" in name:
        return "H100 PCIe" if "PCIe" in name else None if "NVL" in name else "H100 SXM"
    for key, pattern in (("H200", r"H200"), ("A100", r"A100"), ("L4", r"\bL4\b"), ("A10", r"\bA10\b")):
        if re.search(pattern, name):
            return key
    return None


@dataclass(frozen=True)
class MeasuredMfu:
    """One gpu-check row that prices a run: its MFU and where it was measured."""

    mfu: float
    record: str  # the record's directory name, results/gpu/<card>-<date>
    batch: int
    seq: int
    compiled: bool
    commit: str | None

    def label(self) -> str:
        mode = "compiled" if self.compiled else "eager"
        at = f" at commit {self.commit}" if self.commit else ""
        return f"MEASURED {self.mfu:.1%} MFU (results/gpu/{self.record}, {self.batch} x {self.seq} {mode}{at})"


def measured_mfu(gpu: str, seq: int, batch: int, compiled: bool, root: Path = RESULTS_GPU) -> MeasuredMfu | None:
    """The MFU gpu-check measured for `gpu` (a GPU_PEAK_BF16 key): the newest record (by its date, then its
    directory name) of that card with step_version >= STEP_VERSION and a femlm MFU at sequence length `seq` in
    the mode `compiled`; in it, the MLM row of the batch nearest `batch` (the larger one on a tie). None when no
    such record exists."""
    records = []
    for path in sorted(root.glob("*/results.json")) if root.is_dir() else []:
        record = json.loads(path.read_text())
        if record.get("smoke") or record.get("step_version", 1) < STEP_VERSION:
            continue
        if gpu_key(record.get("card", "")) != gpu:
            continue
        rows = [r for r in record.get("bench", []) if r.get("seq") == seq and bool(r.get("compile")) == compiled
                and r.get("arm", "mlm") == "mlm" and (r.get("mfu_block") or r.get("mfu"))]
        if rows:
            records.append((str(record.get("date", "")), path.parent.name, record, rows))
    if not records:
        return None
    _, name, record, rows = max(records, key=lambda r: (r[0], r[1]))
    row = min(rows, key=lambda r: (abs(r["batch"] - batch), -r["batch"]))
    # block-timed (one sync per block, as the training loop runs) where the record has it (issue 46 on)
    return MeasuredMfu(float(row.get("mfu_block") or row["mfu"]), name, int(row["batch"]), seq, compiled,
                       record.get("commit"))


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
    if masker.cfg.strategy == PASSES:  # masks keyed by (seed, sequence, visit), not drawn from a generator
        labels = mask_visits(masker, block, [0], [0], 0)["labels"]
    else:
        labels = masker(block, None, gen)["labels"]
    return float((labels != -100).sum()) / labels.shape[0]


def keeps_attention_probabilities(runtime: Any) -> bool:
    """Whether a GPU step of this runtime keeps the attention probabilities for backward (the memory
    calibration in the module docstring): compiled with the math SDPA kernel allowed (auto, or a list holding
    math); fused kernels only (runtime=gpu's [flash, efficient]) keep none."""
    return keeps_probabilities(getattr(runtime, "sdpa_backend", "auto"), bool(runtime.compile))


def compute_plan(cfg: Any, shape: ModelShape, masked: float, gpu_results: Path = RESULTS_GPU) -> dict[str, Any]:
    """The run's training FLOPs, the memory of its micro-batch under bf16 autocast on a GPU, and its hours on
    each GPU of PLAN_GPUS at the MFU gpu-check measured there (`measured_mfu`, records under `gpu_results`), else
    at runtime.assumed_mfu (one process; `masked`: masked targets per row)."""
    tcfg, runtime, seq = cfg.trainer, cfg.runtime, cfg.data.block_size
    layout = step_layout(tcfg.equal_compute, tcfg.batch_size, tcfg.max_steps, cfg.masking.num_copies)
    flops = layout.steps * shape.flops.per_step(layout.rows, seq, masked * layout.rows)
    micro = min(runtime.micro_batch_size or layout.rows, layout.rows)
    fused = not keeps_attention_probabilities(runtime)
    memory = micro_batch_memory(shape, micro, seq, round(masked * micro), value_bytes=2, fused_attention=fused,
                                sparse_prediction=runtime.sparse_prediction)
    mfu: dict[str, dict[str, Any]] = {}
    for gpu in PLAN_GPUS:
        found = measured_mfu(gpu, seq, layout.rows, bool(runtime.compile), gpu_results)
        mfu[gpu] = ({"mfu": found.mfu, "measured": True, "label": found.label()} if found else
                    {"mfu": runtime.assumed_mfu, "measured": False,
                     "label": f"ASSUMED {runtime.assumed_mfu:.0%} MFU (runtime.assumed_mfu; no gpu-check record "
                     "of this card with the current step)"})
    return {
        "train_flops": flops, "steps": layout.steps, "rows_per_step": layout.rows, "seq": seq,
        "masked_per_row": masked, "params": shape.params,
        "micro_batch": {"rows": micro, "fused_attention": fused,
                        "memory_gib": {k: round(b / GIB, 2) for k, b in memory.items()}},
        "assumed_mfu": runtime.assumed_mfu, "mfu": mfu,
        "gpu_hours": {gpu: round(flops / (GPU_PEAK_BF16[gpu] * mfu[gpu]["mfu"]) / 3600, 1) for gpu in PLAN_GPUS},
    }


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The compute plan as the dry run prints it; every estimate says it is one."""
    mem = plan["micro_batch"]["memory_gib"]
    attention = "fused attention" if plan["micro_batch"]["fused_attention"] else "attention probabilities kept"
    return [
        f"compute: {plan['train_flops']:.3g} training FLOPs = {plan['steps']:,} steps x {plan['rows_per_step']} rows "
        f"x {plan['seq']} tokens ({plan['params'] / 1e6:.1f}M parameters, {plan['masked_per_row']:.1f} masked targets "
        "per row; femlm.train.flops)",
        f"  peak memory of one micro-batch of {plan['micro_batch']['rows']} rows (estimate from the model shape, bf16 "
        f"autocast, {attention}): {mem['total']:.1f} GiB = model and AdamW states {mem['model_states']:.1f} + "
        f"activations {mem['activations']:.1f} + MLM head {mem['mlm_head']:.1f}",
        "  hours on one GPU (dense bf16 peaks from the vendors' data sheets; data-parallel GPUs divide them):",
    ] + [f"    {gpu}: {hours:,} h at {plan['mfu'][gpu]['label']}" for gpu, hours in plan["gpu_hours"].items()]
