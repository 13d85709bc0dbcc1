"""Stopping a training run on a signal: Ctrl-C, SIGTERM, SIGUSR1/SIGUSR2 (femlm.stop turns them into a flag).

Every rank finishes the current optimizer step; then the ranks agree (one small all-reduce per step) whether any
of them was asked to stop, so they all stop after the same step, take part in the same save, and hand the same
signal to the launcher (femlm.stop.handoff): a signal delivered to one rank only stops the whole job. The
all-reduce is posted without waiting and read one step later (its result long there by then), so no step waits
on it: under DDP a stop takes effect one step after the signal (signal_delay_s: two steps plus one save).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from femlm.stop import StopRequested, requested, stop_signals
from femlm.train.distributed import DistInfo


class StopRequest:
    """`with StopRequest(dist) as stop:` ... `if stop.agreed(): save, then raise stop.stopped(message)`."""

    def __init__(self, dist: DistInfo) -> None:
        self.dist = dist
        self.signum: int | None = None
        self._signals: Any = None
        self._pending: Callable[[], torch.Tensor] | None = None  # DDP: the last all-reduced flag, not yet read

    def __enter__(self) -> StopRequest:
        self._signals = stop_signals()
        self._signals.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pending is not None and exc[0] is None:  # the last posted all-reduce, before the group goes
            self._pending()
            self._pending = None
        self._signals.__exit__(*exc)

    @property
    def requested(self) -> bool:
        """Whether this rank was asked to stop (no collective: for loops inside a step or an evaluation)."""
        return requested() is not None

    def agreed(self, now: bool = False) -> bool:
        """Whether any rank was asked to stop (a collective: every rank calls it at the same point). Under DDP the
        answer is the previous call's all-reduce (posted then, read now); `now`: post and wait for this one."""
        signum = requested() or 0
        if self.dist.distributed:
            signum = self._reduce_lagged(signum, now)
        self.signum = signum or None
        return self.signum is not None

    def _reduce_lagged(self, signum: int, now: bool) -> int:
        import torch.distributed as dist

        device = self.dist.device
        flag = torch.full((1,), float(signum), device=device)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True)
        if device.type == "cuda":  # the step's stream waits for the collective, the host does not
            work.wait()
            host = torch.empty(1, pin_memory=True).copy_(flag, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
            entry: Callable[[], torch.Tensor] = lambda: (ready.synchronize(), host)[1]  # noqa: E731
        else:
            entry = lambda: (work.wait(), flag)[1]  # noqa: E731
        previous, self._pending = (entry, None) if now else (self._pending, entry)
        return 0 if previous is None else int(previous()[0])  # posted a step ago: there by now

    def stopped(self, message: str) -> StopRequested:
        return StopRequested(message, self.signum)
