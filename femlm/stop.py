"""Stop requests: Ctrl-C, SIGTERM and a cluster's pre-kill signal (SIGUSR2, submitit's and SLURM's usual
`--signal`; SIGUSR1 where a site configures it) ask the running command to stop at its next safe point.

The handler only sets a flag (never a save, a collective or an exit inside a signal handler: the signal may land
in the middle of a step or of a write). Long loops poll it, a function call per unit of work: the training loop
(where all ranks agree on the step they stop after, femlm.train.interrupt) and its evaluation; elsewhere `check`
raises StopRequested at the next safe point: the analyses per gradient chunk (femlm.analysis.gradients), fine-tuning
per step, scored batch and seed (femlm.eval.classifier, finetune), evaluate per checkpoint, data preparation per
batch of documents, unit and copied chunk, with worker processes stopped by the parent (femlm.data.prepare; the
workers `ignore` the signals). Each of those writes its completion marker last and atomically (analysis.json,
results.json "complete", efficiency.json "complete", a corpus's meta.json), so a stopped command leaves nothing a
later run takes as complete, and running the same command again completes the work.
Once the state is saved, `handoff` does what the launcher expects: under submitit (hydra/launcher=slurm_gpu,
slurm_node, submitit_local) it calls submitit's own handler, which records the job for a requeue, requeues it and
exits; elsewhere the process exits with 128 + the signal's number (130 for Ctrl-C), which torchrun and a
resubmission script see as a stopped run to start again with `resume=auto`.

A second Ctrl-C stops at once (the newest complete state is then the last one saved). Handlers are installed
only in the main thread and never over SIG_IGN; SIGINT only over Python's default handler.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2") if hasattr(signal, name))
_state: dict[str, Any] = {"signum": None, "previous": {}}


class StopRequested(KeyboardInterrupt):
    """Raised once a stop request has been honoured (the state saved where the command keeps one)."""

    def __init__(self, message: str = "", signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = signum if signum is not None else _state["signum"]


def requested() -> int | None:
    """The signal that asked this process to stop (None: none did)."""
    return _state["signum"]


def check(where: str) -> None:
    """Raise StopRequested if a stop was asked for: for loops with nothing to save (`where`: what stopped)."""
    if _state["signum"] is not None:
        raise StopRequested(f"stopped during {where}")


def ignore() -> None:
    """In a worker process that its parent stops (data preparation's): ignore the stop signals. A cluster signals
    every process of a job and Ctrl-C the whole foreground group; the parent polls, stops the workers itself and
    removes what they wrote."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum is not None else "a stop request"


def _handle(signum: int, frame: Any) -> None:
    if signum == signal.SIGINT and _state["signum"] == signal.SIGINT:
        raise KeyboardInterrupt  # the second Ctrl-C: at once
    if _state["signum"] is None:
        _state["signum"] = signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Turn the stop signals into a flag for the duration of a command (nested uses share the outer one)."""
    if threading.current_thread() is not threading.main_thread() or _state["previous"]:
        yield
        return
    previous: dict[int, Any] = {}
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN or (signum == signal.SIGINT and current is not signal.default_int_handler):
            continue
        previous[signum] = signal.signal(signum, _handle)
    _state["previous"], _state["signum"] = previous, None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        # The flag lives as long as the command: a stop it raised carries its signal (StopRequested.signum), and
        # code run afterwards in this process (tests, a library caller) is not stopped by an old request.
        _state["previous"], _state["signum"] = {}, None


def launcher_handler(signum: int | None) -> Any:
    """The handler that was installed for `signum` before ours, if it is a launcher's (submitit's) own."""
    handler = _state["previous"].get(signum) if signum is not None else None
    owner = getattr(getattr(handler, "__self__", None), "__class__", None)
    return handler if owner is not None and owner.__module__.startswith("submitit.") else None


def exit_status(signum: int | None) -> int:
    """What a stopped process exits with when no launcher handler takes over: 128 + the signal's number."""
    return 128 + (signum if signum is not None else signal.SIGINT)


def handoff(signum: int | None) -> int:
    """After the state is saved: hand the stop to the launcher (submitit: checkpoint + requeue + exit on global
    rank 0; it raises submitit's UncompletedJobError when the job may not be requeued). Returns the exit status
    for the caller to exit with when the launcher's handler returned or there is none (0 when submitit's
    requeue handler returned: ranks > 0, whose job rank 0 requeues)."""
    handler = launcher_handler(signum)
    if handler is None:
        return exit_status(signum)
    handler(signum, None)
    return 0 if getattr(handler, "__name__", "") == "checkpoint_and_try_requeue" else exit_status(signum)
