"""Running a femlm command as the CLI does and stopping it with a real signal (tests/test_preemption_*.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_stopped(name: str, cfg: Any, run_dir: Path) -> int:
    """`femlm <name>` as the CLI runs it (femlm.cli._run_command) under the stop handlers; its exit status."""
    from femlm import stop
    from femlm.cli import _run_command
    from femlm.commands import COMMANDS
    from femlm.runs import Run

    run_dir.mkdir(parents=True, exist_ok=True)
    with stop.stop_signals(), pytest.raises(SystemExit) as ended:
        _run_command(name, COMMANDS[name], cfg, Run(dir=run_dir, command=name))
    return ended.value.code


def without(data: Any, keys: set[str]) -> Any:
    """`data` with every dict key in `keys` dropped, at any depth (timings, hardware, paths)."""
    if isinstance(data, dict):
        return {k: without(v, keys) for k, v in data.items() if k not in keys}
    if isinstance(data, list):
        return [without(v, keys) for v in data]
    return data


def said_interrupted(capsys: pytest.CaptureFixture, signum: int, *parts: str) -> None:
    """The CLI's line for a stop (femlm.cli._stopped) names the signal and each of `parts`; no traceback."""
    err = capsys.readouterr().err
    assert f"femlm: interrupted ({signal.Signals(signum).name})" in err and "Traceback" not in err, err
    assert all(part in err for part in parts), err
