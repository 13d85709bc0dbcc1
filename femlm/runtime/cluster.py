"""Which process of which job this is, whoever started it: torchrun (and `accelerate launch`) export RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; SLURM's `srun` (directly, or through submitit, which
`hydra/launcher=slurm_node` uses) exports its own names, and submitit's local executor (`hydra/launcher=
submitit_local hydra.launcher.tasks_per_node=N`, the same job shape on one machine) its own again.
`adopt_launcher_env` translates either into torchrun's, so everything after (the CLI's rank-0-writes rule,
torch's `env://` process group) reads one set.

A task count only means "join a process group" inside a step that started the tasks (SLURM_STEP_ID set by
srun): a batch script's own shell also sees SLURM_NTASKS=N and SLURM_PROCID=0, and as rank 0 of N it would wait
for N-1 peers forever. No torch here: the CLI reads the rank before it imports anything heavy.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping, MutableMapping

# The same port range and draw as submitit's TorchDistributedEnvironment, so both agree on a job's port.
PORT_RANGE = (20000, 60000)
# (variable that marks a started task, job id, task count, global rank, local rank) per launcher
LAUNCHERS = {
    "slurm": ("SLURM_STEP_ID", "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"),
    "submitit_local": ("SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_JOB_ID", "SUBMITIT_LOCAL_NTASKS",
                       "SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_LOCALID"),
}


def first_host(nodelist: str) -> str:
    """The first host of a SLURM hostlist: 'gpu[07-09,12],cpu3' -> 'gpu07', 'a[1-2]-ib[3]' -> 'a1-ib3'."""
    group = re.match(r"([^,\[]|\[[^\]]*\])+", nodelist.strip())
    if group is None:
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r}: not a SLURM host list")
    return re.sub(r"\[([^\]\-,]+)[^\]]*\]", r"\1", group.group(0))


def launcher_torchrun_env(environ: Mapping[str, str]) -> dict[str, str]:
    """torchrun's variables for this task of a SLURM step (or of a submitit local job): {} when torchrun's are
    already set, or the step runs one task. MASTER_ADDR / MASTER_PORT given by the job win; otherwise the job's
    first node (127.0.0.1 for a local job) and a port drawn from the job id, the same on every task."""
    if "RANK" in environ:
        return {}
    for name, (marker, job, tasks, rank, local) in LAUNCHERS.items():
        if marker in environ and int(environ.get(tasks, "1")) > 1:
            nodelist = (environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")) if name == "slurm" else None
            port = environ.get("MASTER_PORT") or str(random.Random(environ.get(job, "0")).randint(*PORT_RANGE))
            return {"RANK": environ[rank], "WORLD_SIZE": environ[tasks], "LOCAL_RANK": environ.get(local, "0"),
                    "MASTER_ADDR": environ.get("MASTER_ADDR") or first_host(nodelist or "127.0.0.1"),
                    "MASTER_PORT": port}
    return {}


def adopt_launcher_env(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Export torchrun's variables from SLURM's (or submitit local's) in this process; what was set."""
    found = launcher_torchrun_env(environ)
    environ.update(found)
    return found


def process_rank() -> int:
    """This process's global rank (0 outside any launcher)."""
    adopt_launcher_env()
    return int(os.environ.get("RANK", "0"))


def submitit_job_id(environ: Mapping[str, str] = os.environ) -> str | None:
    """The id submitit gives this process's job (None outside a submitit job): SLURM keeps it across a requeue
    (an array task's is `<array job>_<task>`), and submitit's local executor restarts a requeued job's tasks under
    the same id, so a run directory whose run.json records it belongs to this job, started before a requeue."""
    executor = environ.get("SUBMITIT_EXECUTOR")
    if executor == "local":
        return environ.get("SUBMITIT_LOCAL_JOB_ID")
    if executor == "slurm":
        array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
        return f"{array}_{task}" if array and task else environ.get("SLURM_JOB_ID")
    return None
