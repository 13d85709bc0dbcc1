"""Stopping a training run on a signal: Ctrl-C, SIGTERM, SIGUSR1/SIGUSR2 (femlm.stop turns them into a flag).

Every rank finishes the current optimizer step; then the ranks agree (one small all-reduce per step) whether any
of them was asked to stop, so they all stop after the same step, take part in the same save, and hand the same
signal to the launcher (femlm.stop.handoff): a signal delivered to one rank only stops the whole job.
"""

from __future__ import annotations

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

    def __enter__(self) -> StopRequest:
        self._signals = stop_signals()
        self._signals.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._signals.__exit__(*exc)

    @property
    def requested(self) -> bool:
        """Whether this rank was asked to stop (no collective: for loops inside a step or an evaluation)."""
        return requested() is not None

    def agreed(self) -> bool:
        """Whether any rank was asked to stop (a collective: every rank calls it at the same point)."""
        signum = requested() or 0
        if self.dist.distributed:
            import torch.distributed as dist

            flag = torch.tensor([float(signum)], device=self.dist.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            signum = int(flag.item())
        self.signum = signum or None
        return self.signum is not None

    def stopped(self, message: str) -> StopRequested:
        return StopRequested(message, self.signum)
