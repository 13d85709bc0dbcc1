"""`resume=auto`: the same command line, submitted again, continues its own run.

A resubmission script, `sbatch --requeue` or torchrun's `--max-restarts` starts exactly the same command line each
time. With `resume=auto` in it, femlm looks for the newest run of that command started with the same overrides
(its `.hydra/overrides.yaml`, ignoring `resume` and the run-directory keys): if that run is unfinished it continues
(as `resume=<its directory>` would), if it finished nothing runs again, and if there is none a new run starts.
`hydra.run.dir=<dir>` on the command line narrows the search to that directory.

Under torchrun every rank decides for itself, before rank 0 creates anything: a run directory created after this
process started is never a candidate, so a rank that starts late does not mistake rank 0's brand-new run for an
earlier one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml

SAVED = Path(".hydra") / "overrides.yaml"
# Keys that place a run or say how to start it, not what it computes.
IGNORED = ("resume", "dry_run", "hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.output_subdir",
           "hydra.job_logging", "hydra.hydra_logging", "hydra/job_logging", "hydra/hydra_logging")


def _process_started() -> float:
    try:  # Linux: the process's start, in clock ticks after boot
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - time.process_time()


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def identity(overrides: list[str]) -> list[str]:
    """The overrides that make two command lines the same run (sorted; placement keys dropped)."""
    return sorted(o for o in overrides if _key(o) not in IGNORED)


def _started_with(run_dir: Path) -> list[str] | None:
    try:
        return identity(yaml.safe_load((run_dir / SAVED).read_text()) or [])
    except (OSError, yaml.YAMLError):
        return None


def auto_resume_dir(command_root: Path, overrides: list[str], multirun: bool = False) -> Path | None:
    """The newest run under `command_root` (or the given hydra.run.dir) started with these overrides, or None."""
    given = next((o.split("=", 1)[1] for o in overrides if _key(o) == "hydra.run.dir"), None)
    markers = [Path(given) / "run.json"] if given else list(command_root.glob("*/run.json"))
    if multirun:
        markers += list(command_root.glob("multirun_*/*/run.json"))
    born = _process_started() - 1.0  # a second of slack for clocks that tick coarsely
    wanted = identity(overrides)
    # .hydra/overrides.yaml is written once, when a run starts (a resume keeps it): its time is the run's birth
    found = [m.parent for m in markers if m.is_file() and (m.parent / SAVED).is_file()
             and (m.parent / SAVED).stat().st_mtime < born and _started_with(m.parent) == wanted]
    return max(found, key=lambda d: (d / SAVED).stat().st_mtime) if found else None
