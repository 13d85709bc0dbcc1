"""femlm's submitit launchers (hydra/launcher=slurm_gpu, slurm_node, and submitit_local through the CLI):
hydra-submitit-launcher's own, unchanged in what they submit and how a job is checkpointed and requeued
(`checkpoint()` resubmits the same hydra job into the same directory, where femlm continues the run: femlm.cli),
except that a job that ended without a result is reported in one line instead of submitit's traceback.

A job's own stderr ends with femlm's one-line error (`femlm: error: ...`, e.g. "job not requeued: timed-out too
many times (hydra.launcher.max_num_timeout)"); that line is what the sweep prints, with the job's log file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher as _HydraLocal
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _HydraSlurm


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


class _OneLineFailures:
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from submitit.core.utils import UncompletedJobError

        try:
            return super().launch(job_overrides, initial_job_idx)  # type: ignore[misc]
        except UncompletedJobError as err:
            sys.stderr.write(f"femlm: error: {one_line(str(err))}\n")
            raise SystemExit(1) from None


class SlurmLauncher(_OneLineFailures, _HydraSlurm):
    pass


class LocalLauncher(_OneLineFailures, _HydraLocal):
    pass
