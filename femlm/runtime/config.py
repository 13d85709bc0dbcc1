"""Typed schema of the `runtime` section (conf/runtime/*.yaml hold only what an option changes)."""

# ruff: noqa: UP045 - Optional[...]: OmegaConf structured configs read these annotations at run time
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from femlm.errors import UserError, require_choice, require_device, require_positive

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass
class RuntimeConfig:
    device: str = "auto"  # auto: this process's GPU when there is one, else the CPU
    threads: Optional[int] = None  # torch intra-op threads (None: torch's default)
    # auto: bf16 autocast on GPUs that have it (else fp16); on a CPU whichever of bf16 and fp32 a short
    # measurement finds faster (femlm.runtime.precision). fp16 (GPU or CPU) trains with a loss scaler. Weights,
    # optimizer state and losses stay fp32.
    precision: str = "auto"
    # torch.compile the training and evaluation steps: one graph each for the whole run (fixed shapes:
    # femlm/train/batches.py bounds the labelled positions from the masking law and pads to that bound)
    compile: bool = False
    # CUDA only: the scaled-dot-product-attention kernels of the encoder and the sparse last layer, entered inside
    # the compiled step (femlm/runtime/attention.py): auto (torch picks per call), one of flash | efficient | cudnn |
    # math, or a list in priority order ([flash, efficient]: runtime=gpu). Training with attention dropout never
    # uses cuDNN. summary.json records the request and the kernel torch dispatches at the run's shapes.
    sdpa_backend: Any = "auto"
    # CUDA only: TF32 tensor cores for the fp32 matmuls (autocast covers the rest); false: strict fp32 matmuls.
    # Recorded beside the precision (summary.json, femlm.json: `tf32`).
    tf32: bool = True
    # FLOP/s that each train record's `mfu` is measured against. None: the GPU's data-sheet dense bf16 peak on
    # CUDA (femlm/train/estimate.py's GPU_PEAK_BF16; no MFU for a card not in it), and no MFU on a CPU.
    peak_flops: Optional[float] = None
    # Build the next step's batch (masks, positions, host-to-device copy) on a background thread while the
    # current step runs (femlm/train/batches.py); false: build it inside the step, as before.
    prefetch: bool = True
    # Rows per forward pass. Pre-training: gradient accumulation makes up trainer.batch_size (None: the whole
    # per-process batch at once). Analysis: rows per per-example-gradient pass (None: 16).
    micro_batch_size: Optional[int] = None
    # Rows per evaluation forward pass (None: pre-training uses the micro-batch, fine-tuning 64).
    eval_batch_size: Optional[int] = None
    # glibc: keep freed host memory in malloc's heap instead of page-faulting it back every step (1.1-1.5x on
    # a BERT-base CPU step; femlm/runtime/host_memory.py).
    keep_freed_memory: bool = True
    # Project to the vocabulary (and run the last BERT layer) only at masked positions: same loss and
    # gradients as the dense computation, a fraction of its cost (femlm/train/sparse_layer.py).
    sparse_prediction: bool = True
    # Worker processes that prepare (read, sample, tokenize) a corpus; None: every CPU core. The prepared blocks
    # are the same for any number (femlm.data.prepare).
    data_workers: Optional[int] = None
    log_every: int = 10  # optimizer steps between training-loss records
    eval_every: int = 1000  # steps between held-out evaluations (also at step 0 and at the end)
    save_every: int = 5000  # steps between milestone checkpoints and resumable states
    keep_last: int = 3  # resumable states kept on disk (milestone models are all kept)
    # Model FLOPs utilisation the dry run's GPU hours assume (femlm/train/estimate.py): an ASSUMPTION until a run
    # on the GPU measures it. 0.3 sits between a stock HF Trainer BERT-base run on A100 (about 20%, derived from
    # mosaicml/examples' HF BERT baseline: 8xA100, 11.5 h) and tuned BERT stacks (37-53%, derived from NVIDIA
    # DeepLearningExamples' BERT throughputs; DeepSpeed reports 52% on V100).
    assumed_mfu: float = 0.3

    def validate(self) -> None:
        require_device("runtime", self.device)
        require_choice("runtime", "precision", self.precision, PRECISIONS)
        from femlm.runtime.attention import parse_backends

        parse_backends(self.sdpa_backend)
        if self.peak_flops is not None and not self.peak_flops > 0:
            raise UserError(f"runtime.peak_flops={self.peak_flops}: FLOP/s, a positive number, or null")
        require_positive("runtime", self, "threads", "micro_batch_size", "eval_batch_size", "data_workers",
                         allow_none=True)
        require_positive("runtime", self, "log_every", "eval_every", "save_every", "keep_last")
        if not 0 < self.assumed_mfu <= 1:
            raise UserError(f"runtime.assumed_mfu={self.assumed_mfu}: a fraction of the GPU's peak, in (0, 1]")

    def workers(self) -> int:
        """Corpus-preparation worker processes: `data_workers`, or every CPU core."""
        return self.data_workers or os.cpu_count() or 1
