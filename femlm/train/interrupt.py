"""Ctrl-C during training: finish the current optimizer step, save a state, then stop."""

from __future__ import annotations

import signal
import threading
from typing import Any

import torch

from femlm.train.distributed import DistInfo, all_reduce_sum


class StopRequest:
    """`with StopRequest(dist) as stop:` ... `if stop.agreed(): save, then raise KeyboardInterrupt`.

    A second Ctrl-C stops at once (the newest complete state is then the last one saved). Only installed in the
    main thread and when SIGINT has Python's default handler (never over a handler someone else set, nor over
    SIG_IGN). Under DDP the ranks agree each step (one scalar all-reduce), so they all stop after the same step
    and take part in the same save.
    """

    def __init__(self, dist: DistInfo) -> None:
        self.dist, self.requested = dist, False
        self._previous: Any = None

    def __enter__(self) -> StopRequest:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def agreed(self) -> bool:
        """Whether any rank was interrupted."""
        if not self.dist.distributed:
            return self.requested
        flag = torch.tensor([1.0 if self.requested else 0.0], device=self.dist.device)
        all_reduce_sum(flag, self.dist)
        return bool(flag.item() > 0)
