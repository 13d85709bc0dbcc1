"""Multi-node training simulated on one machine, through the real CLI (gloo, loopback only, a seconds-long run):

- `torchrun --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d` (two launcher processes, one per "node") writes
  final weights byte-identical (sha256) to `torchrun --nnodes 1 --nproc_per_node 2` for the same command;
- two tasks started the way `srun` starts them (SLURM's variables, no torchrun) do too, and so does one job of
  two tasks started by submitit's local executor (hydra/launcher=slurm_node's job shape, on this machine);
- the two-node job killed outright (SIGKILL to both launchers and their workers) after a saved state, then
  started again with resume=<run dir>, ends with the same bytes again.

Slow: six multi-process CLI launches (about 3 minutes on 2 shared cores); `make test-all` runs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil  # accelerate's dependency
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("femlm_env"),
              pytest.mark.xdist_group("process-groups")]  # ports: one xdist worker, as test_train_ddp
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables (pytest may itself run under one), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}
    return {**env, **extra}


def torchrun(nodes: int, per_node: int, port: int, args: list[str]) -> list[subprocess.Popen]:
    """One torchrun per "node", all meeting at a c10d rendezvous on 127.0.0.1 (workers bind 127.0.0.1 too)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc_per_node",
               str(per_node), "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "femlm",
               "--local-addr", "127.0.0.1", "-m", "femlm.cli", *args]
    return [subprocess.Popen(command, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True) for _ in range(nodes)]


def srun_tasks(tasks: int, port: int, args: list[str]) -> list[subprocess.Popen]:
    """`tasks` plain `femlm` processes with the variables `srun --ntasks=<tasks>` gives its tasks on one node
    (the master address comes from the node list, the port from the job script)."""
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NTASKS": str(tasks), "SLURM_NNODES": "1",
             "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "127.0.0.1",
             "SLURM_NODELIST": "127.0.0.1", "MASTER_PORT": str(port)}
    return [subprocess.Popen([sys.executable, "-m", "femlm.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True,
                             env=clean_env(**slurm, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank)))
            for rank in range(tasks)]


def finish(procs: list[subprocess.Popen]) -> None:
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n----\n".join(o[-3000:] for o in outputs)


def weights_sha(run: Path) -> str:
    return hashlib.sha256((run / "checkpoints" / "final" / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture
def command(tiny_local: list[str]) -> list[str]:
    # fp32 and one thread: the bytes depend only on the computation, not on a per-machine precision probe
    return ["pretrain-scratch", *tiny_local, "runtime.precision=fp32", "trainer.max_steps=24",
            "runtime.save_every=2", "runtime.eval_every=8", "runtime.log_every=4", "masking=fe_subword"]


def test_two_nodes_and_slurm_tasks_match_one_node_and_resume_after_a_kill(command: list[str], tmp_path: Path) -> None:
    finish(torchrun(1, 2, free_port(), [*command, f"hydra.run.dir={tmp_path / 'one'}"]))
    reference = weights_sha(tmp_path / "one")

    finish(torchrun(2, 1, free_port(), [*command, f"hydra.run.dir={tmp_path / 'two'}"]))
    finish(srun_tasks(2, free_port(), [*command, f"hydra.run.dir={tmp_path / 'slurm'}"]))
    # hydra/launcher=slurm_node's job shape (one job, a task per GPU), run by submitit's local executor
    finish([subprocess.Popen([sys.executable, "-m", "femlm.cli", command[0], "-m", "hydra/launcher=submitit_local",
                              "hydra.launcher.tasks_per_node=2", f"hydra.sweep.dir={tmp_path / 'submitit'}",
                              *command[1:]], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)])

    killed = tmp_path / "killed"
    procs = torchrun(2, 1, free_port(), [*command, f"hydra.run.dir={killed}"])
    deadline = time.monotonic() + 600
    while not any(".tmp-" not in p.name for p in (killed / "checkpoints").glob("state_*")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "no state was saved"
        time.sleep(0.01)
    # The whole job at once, as a node failure or SLURM's kill of the job's cgroup leaves it: the launchers and
    # their workers (torchrun starts each worker in a session of its own, so a process-group kill would miss it).
    launchers = [psutil.Process(p.pid) for p in procs]
    job = [*launchers, *(c for launcher in launchers for c in launcher.children(recursive=True))]
    assert len(job) >= 2 * len(launchers), job  # each launcher and its worker
    for process in job:
        process.send_signal(signal.SIGKILL)
    for p in procs:
        p.communicate()
    assert not psutil.wait_procs(job, timeout=30)[1], "a process of the job survived SIGKILL"
    states = sorted(int(p.name.split("_")[1]) for p in (killed / "checkpoints").glob("state_*") if ".tmp-" not in p.name)
    assert not (killed / "checkpoints" / "final").exists() and states[-1] < 24, states
    logged = [line for line in (killed / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["step"] <= states[-1]]
    finish(torchrun(2, 1, free_port(), [*command, f"resume={killed}"]))
    # resumed from the state, not restarted: what was logged up to it is kept as it was (wall times included)
    assert (killed / "metrics.jsonl").read_text().splitlines()[:len(logged)] == logged
    assert len(json.loads((killed / "run.json").read_text())["resumed_from"]) == 1

    shas = {name: weights_sha(tmp_path / name) for name in ("two", "slurm", "submitit/0", "killed")}
    print(f"\nfinal weights sha256: one node x 2 = {reference}; " + "; ".join(f"{k} = {v}" for k, v in shas.items())
          + f" (killed after state_{states[-1]} of 24)")
    assert shas == dict.fromkeys(shas, reference)
