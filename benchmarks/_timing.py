"""How the training benchmarks time and profile steps (bench_train.py's interleaved runs, gpu_check.py).

A run is a `Schedule` of steps: warm-up steps and `steps` measured steps, each synchronised with the device (the
history: figures comparable with every earlier record); then, when `block` > 1, as many steps again timed in
blocks of `block` with one synchronisation per block (what the training loop does: it never waits between steps
that do not log), the two sides interleaved block by block; then, when `profile`, one step per side under
torch.profiler, whose attention operators are counted (`attention_ops`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# The operators that show which attention kernel ran (torch.profiler names), and the batched matmuls the unfused
# math kernel lowers to (a BERT layer has no other bmm).
_ATTENTION_WORDS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
_MATMULS = ("aten::bmm", "aten::baddbmm")


@dataclass(frozen=True)
class Schedule:
    """Steps 1..total of one benchmarked configuration: warm-up, measured per-step synced, block-timed, profiled."""

    warmup: int
    steps: int
    block: int = 1  # steps per timed block; 1: no block phase
    profile: bool = False  # one more step per side under torch.profiler

    @property
    def block_steps(self) -> int:
        return self.steps - self.steps % self.block if self.block > 1 else 0

    @property
    def total(self) -> int:
        return self.warmup + self.steps + self.block_steps + int(self.profile)

    def phase(self, step: int) -> str:
        """warmup | synced | block | profile."""
        if step <= self.warmup:
            return "warmup"
        if step <= self.warmup + self.steps:
            return "synced"
        return "block" if step <= self.warmup + self.steps + self.block_steps else "profile"

    def block_start(self, step: int) -> int | None:
        """The first step of the block `step` ends (None: `step` ends no block)."""
        offset = step - self.warmup - self.steps
        if self.phase(step) != "block" or offset % self.block:
            return None
        return step - self.block + 1


def block_seconds(blocks: list[tuple[int, int, float]], compiled: list[bool]) -> float:
    """Mean seconds per step over the blocks (first step, last step, seconds) in which no step compiled
    (`compiled[s - 1]`: step s compiled something); NaN without such a block."""
    flags = compiled + [False] * (max((b[1] for b in blocks), default=0) - len(compiled))
    clean = [(last - first + 1, s) for first, last, s in blocks if not any(flags[first - 1:last])]
    return sum(s for _, s in clean) / sum(n for n, _ in clean) if clean else math.nan


@contextlib.contextmanager
def profiled(cuda: bool, into: dict[str, Any]) -> Iterator[None]:
    """Run the block under torch.profiler; `into["ops"]` gets its attention operator counts (`attention_ops`)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        yield
    into["ops"] = attention_ops(prof)


def attention_ops(prof: Any) -> dict[str, int]:
    """{operator: calls} of the attention operators and batched matmuls a profile holds, and of its fp32 GEMM
    kernels (`xmma_gemm_f32`, the non-tensor-core kind), by name."""
    counts: dict[str, int] = {}
    for event in prof.key_averages():
        name = event.key
        if any(w in name for w in _ATTENTION_WORDS) or name in _MATMULS or "xmma_gemm_f32" in name:
            counts[name] = counts.get(name, 0) + int(event.count)
    return dict(sorted(counts.items()))


def ops_text(ops: dict[str, int] | None) -> str:
    """`_scaled_dot_product_flash_attention x2, bmm x0` style, shortest names first; `not profiled` for None."""
    if ops is None:
        return "not profiled"
    if not ops:
        return "no attention operator"
    ordered = sorted(ops.items(), key=lambda kv: len(kv[0]))
    return ", ".join(f"{name.removeprefix('aten::')} x{n}" for name, n in ordered)
