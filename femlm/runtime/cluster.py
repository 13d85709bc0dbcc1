"""Which process of which job this is, whoever started it: torchrun (and `accelerate launch`) export RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; SLURM's `srun` (directly, or through submitit, which
`hydra/launcher=slurm_node` uses) exports its own names instead. `adopt_slurm_env` translates SLURM's into
torchrun's, so everything after (the CLI's rank-0-writes rule, torch's `env://` process group) reads one set.

SLURM's task count only means "join a process group" inside an srun step (SLURM_STEP_ID set): a batch script's
own shell also sees SLURM_NTASKS=N and SLURM_PROCID=0, and as rank 0 of N it would wait for N-1 peers forever.
No torch here: the CLI reads the rank before it imports anything heavy.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping, MutableMapping

# The same port range and draw as submitit's TorchDistributedEnvironment, so both agree on a job's port.
PORT_RANGE = (20000, 60000)


def first_host(nodelist: str) -> str:
    """The first host of a SLURM hostlist: 'gpu[07-09,12],cpu3' -> 'gpu07', 'a[1-2]-ib[3]' -> 'a1-ib3'."""
    group = re.match(r"([^,\[]|\[[^\]]*\])+", nodelist.strip())
    if group is None:
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r}: not a SLURM host list")
    return re.sub(r"\[([^\]\-,]+)[^\]]*\]", r"\1", group.group(0))


def slurm_torchrun_env(environ: Mapping[str, str]) -> dict[str, str]:
    """torchrun's variables for this SLURM task ({} when torchrun's are already set, or srun did not start
    several tasks). MASTER_ADDR / MASTER_PORT given by the job win; otherwise the first node of the job and a
    port drawn from the job id, the same on every task."""
    if "RANK" in environ or "SLURM_STEP_ID" not in environ or int(environ.get("SLURM_NTASKS", "1")) <= 1:
        return {}
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or "127.0.0.1"
    port = environ.get("MASTER_PORT") or str(random.Random(environ.get("SLURM_JOB_ID", "0")).randint(*PORT_RANGE))
    return {"RANK": environ["SLURM_PROCID"], "WORLD_SIZE": environ["SLURM_NTASKS"],
            "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
            "MASTER_ADDR": environ.get("MASTER_ADDR") or first_host(nodelist), "MASTER_PORT": port}


def adopt_slurm_env(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Export torchrun's variables from SLURM's in this process (see `slurm_torchrun_env`); what was set."""
    found = slurm_torchrun_env(environ)
    environ.update(found)
    return found


def process_rank() -> int:
    """This process's global rank (0 outside any launcher)."""
    adopt_slurm_env()
    return int(os.environ.get("RANK", "0"))
