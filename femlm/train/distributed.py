"""Process-group setup for `torchrun --nproc_per_node N femlm ...` (or `accelerate launch`, or N tasks of
`srun`), and helpers that are no-ops in a single process, so the training loop reads the same either way.

The launcher exports RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT (SLURM's names are translated
to these first: femlm.runtime.cluster); we initialise from them (gloo on CPU, nccl on GPU). Only rank 0 owns a run directory: the CLI gives the other ranks a placeholder,
so `share_run_dir` broadcasts rank 0's directory right after init and every rank resumes from the same state.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


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


def init_distributed(device_preference: str = "auto") -> DistInfo:
    """Join the process group the launcher describes (if any) and choose this rank's device."""
    from femlm.runtime.cluster import adopt_launcher_env
    from femlm.runtime.device import pick_device

    adopt_launcher_env()
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


@contextlib.contextmanager
def process_group(device_preference: str = "auto") -> Iterator[DistInfo]:
    """The launcher's process group (if any) for the duration of a run, destroyed at the end if we made it."""
    info = init_distributed(device_preference)
    try:
        yield info
    finally:
        cleanup(info)
