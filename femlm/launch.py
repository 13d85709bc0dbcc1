"""Sweeps through hydra-submitit-launcher (hydra/launcher=slurm_gpu, slurm_node, submitit_local): its launchers
are used unchanged in what they submit and how a job is checkpointed and requeued (`checkpoint()` resubmits the
same hydra job into the same directory, where femlm continues the run: femlm.cli), except that a job that ended
without a result is reported in one line instead of submitit's traceback.

A job's own stderr ends with femlm's one-line error (`femlm: error: ...`, e.g. "job not requeued: timed-out too
many times (hydra.launcher.max_num_timeout)"); that line is what the sweep prints, with the job's log file.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


def one_line(message: str) -> str:
    """What a failed submitit job says, in one line: its last femlm error line, else the last line of its error
    stream, with the job's id."""
    job = re.search(r"Job (\S+) \(task: (\d+)\)", message)
    where = f"sweep job {job.group(1)} (task {job.group(2)})" if job else "a sweep job"
    ours = [line.split("femlm: error:", 1)[1].strip() for line in message.splitlines() if "femlm: error:" in line]
    if ours:
        return f"{where}: {ours[-1]}"
    rest = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith(("---", "  "))]
    return f"{where} did not finish: {rest[-1] if rest else 'no output'} (its log: the sweep's .submitit/ folder)"


def report_failed_jobs_in_one_line() -> None:
    """Wrap hydra-submitit-launcher's `launch` (in the submitting process only; a submitted job runs the same
    launcher's `__call__`, untouched) so that a job that ended without a result stops the sweep with one line.
    Hydra instantiates launchers only from its `hydra_plugins` package, so femlm wraps the method rather than
    subclassing it."""
    try:
        from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
    except ImportError:  # the plugin is not installed: no submitit launcher to wrap
        return
    launch = BaseSubmititLauncher.launch
    if getattr(launch, "femlm_one_line", False):
        return

    def one_line_launch(self: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from submitit.core.utils import UncompletedJobError

        try:
            return launch(self, job_overrides, initial_job_idx)
        except UncompletedJobError as err:
            cause = err.__cause__
            if isinstance(cause, subprocess.CalledProcessError):  # the submission itself failed (sbatch)
                said = (cause.stderr or "").strip().splitlines()
                line = (f"submitting the sweep failed: `{' '.join(map(str, cause.cmd[:1]))}` exited with status "
                        f"{cause.returncode}{': ' + said[-1] if said else ''}")
            else:
                line = one_line(str(err))
            sys.stderr.write(f"femlm: error: {line}\n")
            raise SystemExit(1) from None

    one_line_launch.femlm_one_line = True  # type: ignore[attr-defined]
    BaseSubmititLauncher.launch = one_line_launch  # type: ignore[method-assign]
