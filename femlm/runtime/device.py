"""Device and autocast dtype for every command (pre-training, fine-tuning, analysis), and per-process setup."""

from __future__ import annotations

from typing import Any

import torch

from femlm.errors import UserError


def pick_device(preference: str, local_rank: int = 0) -> torch.device:
    """`auto`: the local rank's GPU when there is one, else the CPU. A task that sees fewer GPUs than its
    node's tasks (srun --gpus-per-task=1 gives each task its own single device) counts modulo what it sees."""
    if preference == "auto":
        return pick_device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"runtime.device={preference!r} but no CUDA device is visible; use runtime.device=auto or cpu")
    if preference == "cuda":
        return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
    return torch.device(preference)


def pick_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype (None: fp32). `auto`: bf16 on GPUs that have it, else fp16; on a CPU the faster of bf16
    and fp32 as measured on this machine (femlm.runtime.precision). fp16 works on any device; pre-training scales
    its loss (torch.amp.GradScaler)."""
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        from femlm.runtime.precision import faster_cpu_dtype

        return faster_cpu_dtype()
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def configure_process(runtime: Any) -> None:
    """Threads, host-memory reuse and TF32 (`runtime.tf32`): process-wide settings, applied once before any work."""
    if torch.cuda.is_available():  # TF32 tensor cores for fp32 matmuls and convolutions (autocast covers the rest)
        tf32 = bool(getattr(runtime, "tf32", True))
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    if runtime.keep_freed_memory:
        from femlm.runtime.host_memory import keep_freed_memory

        keep_freed_memory()


def tf32_record(device: torch.device) -> bool | None:
    """Whether this process's fp32 matmuls on `device` use TF32 (summary.json, femlm.json `tf32`, beside the
    precision); None off CUDA, where TF32 does not exist."""
    return bool(torch.backends.cuda.matmul.allow_tf32) if device.type == "cuda" else None
