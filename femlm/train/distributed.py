"""Process-group setup for `torchrun --nproc_per_node N femlm ...` (or `accelerate launch`), and helpers
that are no-ops in a single process, so the training loop reads the same either way.

The launcher exports RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT; we initialise from them
(gloo on CPU, nccl on GPU). Only rank 0 owns a run directory: the CLI gives the other ranks a placeholder,
so `share_run_dir` broadcasts rank 0's directory right after init and every rank resumes from the same state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from femlm.errors import UserError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    initialized_here: bool = False  # we created the process group, so we destroy it at the end

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(preference: str, local_rank: int = 0, key: str = "trainer.device") -> torch.device:
    """`auto`: the local rank's GPU when there is one, else the CPU. `key` names the setting in errors."""
    if preference == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{key}={preference!r} but no CUDA device is visible; use {key}=auto or cpu")
    if preference == "cuda":
        return torch.device(f"cuda:{local_rank}")
    return torch.device(preference)


def cpu_has_fast_bf16() -> bool:
    """Native bf16 matrix units on this CPU (Intel AMX, Sapphire Rapids and later). There bf16 autocast
    runs a BERT step about 1.4x faster than fp32 (benchmarks/bench_precision.py); on other
    CPUs bf16 is emulated and slower, so `auto` keeps fp32."""
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(check is not None and check())
    except (RuntimeError, AttributeError):
        return False


def pick_precision(precision: str, device: torch.device, key: str = "trainer.precision") -> torch.dtype | None:
    """Autocast dtype (None: fp32). `auto`: bf16 on GPUs that have it, else fp16 on GPUs; on a CPU bf16 where
    it has native bf16 units (AMX), else fp32. Weights, optimizer state and the loss stay fp32 either way."""
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == "cpu" and cpu_has_fast_bf16() else None
    if precision == "fp16" and device.type != "cuda":
        raise UserError(f"{key}=fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def init_distributed(device_preference: str = "auto") -> DistInfo:
    """Join the process group the launcher describes (if any) and choose this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    device = pick_device(device_preference, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    info = DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=device)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
        info.initialized_here = True
    elif dist.is_initialized():
        info.rank, info.world_size = dist.get_rank(), dist.get_world_size()
    return info


def cleanup(info: DistInfo) -> None:
    if info.initialized_here and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(value: Any, info: DistInfo) -> Any:
    """Rank 0's value on every rank (picklable objects)."""
    if not info.distributed:
        return value
    box = [value if info.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(value: Any, info: DistInfo) -> list[Any]:
    """Every rank's value, in rank order, on every rank (used for per-rank RNG states)."""
    if not info.distributed:
        return [value]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, value)
    return out


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """In-place sum over ranks (gloo needs CPU tensors, nccl GPU ones: the caller keeps them on `device`)."""
    if info.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def share_run_dir(run_dir: Path, info: DistInfo) -> Path:
    """Rank 0's run directory on every rank (the CLI gives ranks > 0 a placeholder '.')."""
    return Path(broadcast_object(str(run_dir), info))
