"""Preemption through the real CLI and launchers (gloo, loopback, a tiny fp32 run; each step padded with a short
sleep by tests/helpers/slow_steps so the signal lands mid-run):

- a `submitit_local` job sent submitit's preemption signal (SIGUSR2 to its task) saves, is requeued by submitit,
  continues its own run directory and ends with final weights whose sha256 equals an uninterrupted run's;
- the same for a job of two tasks (the signal sent to one task only: the ranks agree to stop);
- a `torchrun` job of 2 processes sent SIGTERM stops with a saved state; the same command line with resume=auto
  then continues it and ends bit-identical; run once more, the finished run is not run again;
- a job timed out more often than submitit allows (submitit_local: 3 requeues) ends the sweep with one line, not a
  traceback nor a loop.

Slow (several multi-process CLI starts: about 3 minutes on 2 shared cores). The sha256s are printed (-s).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers.processes import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("process-groups")]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")
SLOW_STEPS = REPO / "tests" / "helpers" / "slow_steps"


def env(femlm_env: dict[str, str], **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "SUBMITIT_"))}
    return {**base, **femlm_env, "PYTHONPATH": os.pathsep.join([str(SLOW_STEPS), femlm_env["PYTHONPATH"]]), **extra}


def sha(run: Path) -> str:
    return hashlib.sha256((run / "checkpoints" / "final" / "model.safetensors").read_bytes()).hexdigest()


def start(args: list[str], environ: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "femlm.cli", *args], env=environ, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def wait_for_state(root: Path, proc: subprocess.Popen, pattern: str = "**/checkpoints/state_*") -> None:
    deadline = time.monotonic() + 300
    while not [p for p in root.glob(pattern) if ".tmp-" not in p.name]:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no state was saved"
        time.sleep(0.05)


def tasks_of(proc: subprocess.Popen) -> list[psutil.Process]:
    """submitit's task processes under a sweep's femlm process (femlm -> controller -> tasks), rank order."""
    deadline = time.monotonic() + 60
    while True:
        found = [c for c in psutil.Process(proc.pid).children(recursive=True)
                 if "submitit.core._submit" in " ".join(c.cmdline())]
        if found or time.monotonic() > deadline:
            return sorted(found, key=lambda c: int(c.environ().get("SUBMITIT_LOCAL_GLOBALID", "0")))
        time.sleep(0.1)


@pytest.fixture
def command(tiny_local: list[str]) -> list[str]:
    return ["pretrain-scratch", *tiny_local, "runtime.precision=fp32", "trainer.max_steps=30",
            "runtime.save_every=3", "runtime.eval_every=10", "runtime.log_every=5"]


@pytest.mark.parametrize("tasks", [1, 2])
def test_submitit_local_job_preempted_requeues_and_matches(command: list[str], femlm_env: dict[str, str],
                                                           tmp_path: Path, tasks: int) -> None:
    # the reference: the same job uninterrupted (the same launcher and number of tasks: 2 ranks average their
    # gradients in another order than 1 process, so only a run of the same world size can be bit-identical)
    ref = tmp_path / "ref"
    reference = start([command[0], "-m", "hydra/launcher=submitit_local", f"hydra.launcher.tasks_per_node={tasks}",
                       f"hydra.sweep.dir={ref}", *command[1:]], env(femlm_env), tmp_path)
    assert reference.wait(timeout=600) == 0, reference.communicate()[1][-3000:]
    sweep = tmp_path / "sweep"
    proc = start([command[0], "-m", "hydra/launcher=submitit_local", f"hydra.launcher.tasks_per_node={tasks}",
                  f"hydra.sweep.dir={sweep}", *command[1:]], env(femlm_env, FEMLM_TEST_STEP_SLEEP="0.3"), tmp_path)
    wait_for_state(sweep, proc)
    victims = tasks_of(proc)
    assert len(victims) == tasks
    victims[-1].send_signal(signal.SIGUSR2)  # submitit's preemption signal, to one task (the last rank) only
    out, err = proc.communicate(timeout=600)
    logs = "\n".join(p.read_text() for p in (sweep / ".submitit").rglob("*.err"))
    assert proc.returncode == 0, err[-3000:] + logs[-3000:]
    assert "interrupted (SIGUSR2)" in logs and "was requeued: continuing" in logs, logs[-3000:]
    job = sweep / "0"
    assert len(json.loads((job / "run.json").read_text())["resumed_from"]) == 1
    assert sorted(p.name for p in sweep.iterdir() if p.name.isdigit()) == ["0"]  # no second run directory
    got, want = sha(job), sha(ref / "0")
    print(f"\nsubmitit_local, {tasks} task(s), SIGUSR2 then requeue: final weights sha256 {got}; "
          f"uninterrupted: {want}")
    assert got == want


def test_torchrun_sigterm_then_resume_auto_is_bit_identical(command: list[str], femlm_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    import socket

    def torchrun(extra: list[str], environ: dict[str, str]) -> subprocess.Popen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
                                 "2", "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "femlm.cli",
                                 *command, *extra], env=environ, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)

    ref = torchrun([f"hydra.run.dir={tmp_path / 'ref'}"], env(femlm_env))
    assert ref.wait(timeout=600) == 0, ref.communicate()[0][-3000:]
    runs = tmp_path / "auto"
    auto = env(femlm_env, FEMLM_RUNS=str(runs))
    first = torchrun(["resume=auto"], {**auto, "FEMLM_TEST_STEP_SLEEP": "0.3"})
    wait_for_state(runs, first)
    first.send_signal(signal.SIGTERM)  # torchrun passes it on to its workers
    output = first.communicate(timeout=300)[0]
    assert first.returncode != 0, output[-3000:]
    assert "interrupted (SIGTERM)" in output and "resume=auto" in output, output[-3000:]
    (stopped,) = [p.parent for p in runs.glob("pretrain-scratch/*/run.json")]
    assert not (stopped / "checkpoints" / "final").exists()
    again = torchrun(["resume=auto"], auto)  # the same command line
    assert again.wait(timeout=600) == 0, again.communicate()[0][-3000:]
    assert [p.parent for p in runs.glob("pretrain-scratch/*/run.json")] == [stopped]
    got, want = sha(stopped), sha(tmp_path / "ref")
    print(f"\ntorchrun x2, SIGTERM then resume=auto: final weights sha256 {got}; uninterrupted: {want}")
    assert got == want
    once_more = torchrun(["resume=auto"], auto)
    output = once_more.communicate(timeout=300)[0]
    assert once_more.returncode == 0 and "already finished" in output, output[-3000:]


def latest_state(root: Path) -> int:
    steps = [int(p.name.split("_")[1]) for p in root.glob("**/checkpoints/state_*") if ".tmp-" not in p.name]
    return max(steps, default=-1)


def test_timeouts_exhausted_is_one_line(command: list[str], femlm_env: dict[str, str], tmp_path: Path) -> None:
    """timeout_min=5: submitit counts every signal as a timeout (any signal after min(0.8 T, T - 10 min) < 0), and
    submitit_local's executor allows max_num_timeout = 3 requeues (hydra's local launcher does not expose the key;
    slurm_gpu / slurm_node set it): the 4th signal ends the sweep with one line, not a traceback nor a loop."""
    sweep = tmp_path / "sweep"
    proc = start([command[0], "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
                  f"hydra.sweep.dir={sweep}", *command[1:], "trainer.max_steps=120"],
                 env(femlm_env, FEMLM_TEST_STEP_SLEEP="0.3"), tmp_path)
    signals, last = 0, -1
    while proc.poll() is None and signals < 6:
        deadline = time.monotonic() + 300
        while latest_state(sweep) <= last and proc.poll() is None:  # a state saved since the last requeue
            assert time.monotonic() < deadline, "no new state was saved"
            time.sleep(0.05)
        if proc.poll() is not None:
            break
        (task,) = tasks_of(proc)  # the task that saved that state: its handlers are in place
        task.send_signal(signal.SIGUSR2)
        signals += 1
        task.wait(timeout=300)
        last = latest_state(sweep)  # the state its stop saved; the next signal waits for one the requeued task saves
    out, err = proc.communicate(timeout=600)
    errors = [line for line in err.splitlines() if line.startswith("femlm: error:")]
    assert signals == 4, (signals, err[-3000:])
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert "timed-out too many times" in errors[0] and "max_num_timeout" in errors[0] and "resume=" in errors[0]
    print(f"\n{errors[0]}")
    assert latest_state(sweep) >= 0 and not (sweep / "0" / "checkpoints" / "final").exists()
