"""SLURM: femlm's process group from SLURM's (or submitit local's) variables (femlm.runtime.cluster), the
launcher configs a user selects by name (hydra/launcher=slurm_gpu|slurm_node: the sbatch script they submit),
and a sweep through hydra-submitit-launcher's submitit_local, end to end with one report over the sweep
directory."""

from __future__ import annotations

import csv
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

from femlm.runtime.cluster import adopt_launcher_env, first_host, launcher_torchrun_env

# What `srun --ntasks=4` (2 nodes x 2) gives task 3, the second task of the second node.
SRUN_TASK = {"SLURM_JOB_ID": "81234", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2",
             "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NODELIST": "gpu[07-08]"}


@pytest.mark.parametrize(("nodelist", "first"), [
    ("gpu07", "gpu07"), ("gpu[07-08]", "gpu07"), ("gpu[12,3-5],cpu1", "gpu12"), ("a[1-2]-ib[3-4]", "a1-ib3"),
    ("node-[009-010]", "node-009"), ("127.0.0.1", "127.0.0.1")])
def test_first_host_of_a_slurm_host_list(nodelist: str, first: str) -> None:
    assert first_host(nodelist) == first


def test_srun_task_becomes_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    env = launcher_torchrun_env(SRUN_TASK)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")} == \
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu07"}
    # every task of the job draws the same port, and the one submitit's TorchDistributedEnvironment draws
    assert launcher_torchrun_env({**SRUN_TASK, "SLURM_PROCID": "0"})["MASTER_PORT"] == env["MASTER_PORT"]
    from submitit.helpers import TorchDistributedEnvironment

    for key in ("MASTER_PORT", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {**SRUN_TASK, "SUBMITIT_EXECUTOR": "slurm"}.items():
        monkeypatch.setenv(key, value)
    theirs = TorchDistributedEnvironment()
    assert (theirs.master_addr, str(theirs.master_port), theirs.rank) == (env["MASTER_ADDR"], env["MASTER_PORT"], 3)
    # the job script's own MASTER_ADDR / MASTER_PORT win
    given = launcher_torchrun_env({**SRUN_TASK, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29999"})
    assert (given["MASTER_ADDR"], given["MASTER_PORT"]) == ("10.0.0.5", "29999")


def test_submitit_local_task_becomes_torchrun_variables() -> None:
    """hydra/launcher=submitit_local hydra.launcher.tasks_per_node=2: the job shape of slurm_node, here."""
    env = launcher_torchrun_env({"SUBMITIT_LOCAL_JOB_ID": "991", "SUBMITIT_LOCAL_NTASKS": "2",
                                 "SUBMITIT_LOCAL_GLOBALID": "1", "SUBMITIT_LOCAL_LOCALID": "1"})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")} == \
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}


@pytest.mark.parametrize("case", ["torchrun inside an allocation", "batch script without srun", "one task"])
def test_slurm_variables_left_alone(case: str) -> None:
    env = {"torchrun inside an allocation": {**SRUN_TASK, "RANK": "0", "WORLD_SIZE": "8"},
           "batch script without srun": {k: v for k, v in SRUN_TASK.items() if k != "SLURM_STEP_ID"} | {"SLURM_PROCID": "0"},
           "one task": {**SRUN_TASK, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}}[case]
    before = dict(env)
    assert adopt_launcher_env(env) == {} and env == before


def _slurm_task(rank: int, port: int, out: str) -> None:
    """One of two processes started as srun starts tasks: SLURM's variables only, no torchrun's."""
    from femlm.train.distributed import process_group

    torch.set_num_threads(1)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        os.environ.pop(key, None)
    os.environ.update({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_PROCID": str(rank),
                       "SLURM_LOCALID": str(rank), "SLURM_JOB_NODELIST": "127.0.0.1", "MASTER_PORT": str(port)})
    with process_group("cpu") as info:
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        backend = dist.get_backend()
        Path(out, f"rank{rank}.json").write_text(json.dumps(
            {"rank": info.rank, "world": info.world_size, "local": info.local_rank, "sum": total.item(),
             "backend": backend, "addr": os.environ["MASTER_ADDR"]}))


@pytest.mark.xdist_group("process-groups")  # ports and gloo groups: one xdist worker, as test_train_ddp
@pytest.mark.timeout(120)
def test_process_group_comes_up_from_slurm_variables(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_slurm_task, args=(port, str(tmp_path)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert got == [{"rank": r, "world": 2, "local": r, "sum": 3.0, "backend": "gloo", "addr": "127.0.0.1"}
                   for r in range(2)]


def test_slurm_launchers_submit_what_they_say(cli, tmp_path: Path, tiny_local: list[str]) -> None:
    """The sbatch scripts hydra/launcher=slurm_gpu and slurm_node submit (a stand-in `sbatch` on PATH keeps
    the script and refuses the job, so nothing runs)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command, script in (("sbatch", f'cp "$1" "{tmp_path}/submitted_$$.sh"'), ("srun", "")):
        (bin_dir / command).write_text(f"#!/bin/sh\n{script}\nexit 1\n")
        (bin_dir / command).chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"  # the cli fixture passes os.environ on
    sweep = ["pretrain-scratch", "-m", "--dry-run", *tiny_local, "masking.num_masks=2,4"]
    scripts = {}
    for launcher, *overrides in (["slurm_gpu", "hydra.launcher.partition=gpu"],
                                 ["slurm_node", "hydra.launcher.gpus_per_node=4", "hydra.launcher.nodes=2"]):
        result = cli(*sweep, f"hydra/launcher={launcher}", *overrides)
        assert result.code != 0 and "sbatch" in result.stderr  # the stand-in refused it
        (script,) = tmp_path.glob("submitted_*.sh")
        scripts[launcher] = set(script.read_text().splitlines())
        script.unlink()
    gpu, node = scripts["slurm_gpu"], scripts["slurm_node"]
    assert {"#SBATCH --array=0-1%2", "#SBATCH --gpus-per-node=1", "#SBATCH --ntasks-per-node=1",
            "#SBATCH --nodes=1", "#SBATCH --partition=gpu", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=64GB"} <= gpu
    assert {"#SBATCH --gpus-per-node=4", "#SBATCH --ntasks-per-node=4", "#SBATCH --nodes=2",
            "#SBATCH --exclusive"} <= node
    assert any(line.startswith("srun ") and "submitit.core._submit" in line for line in node)


@pytest.mark.parametrize(("multirun", "needle"), [(False, "add -m"), (True, "no sbatch or srun on PATH")])
def test_slurm_launcher_misuse_is_one_line(capsys, monkeypatch: pytest.MonkeyPatch, multirun: bool,
                                           needle: str) -> None:
    from femlm.cli import _check_all

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SystemExit) as exit_info:
        _check_all("continual-pretrain", ["hydra/launcher=slurm_gpu"], multirun=multirun, print_job=False)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err and "slurm_gpu" in err, err
    # --cfg (printing the config, launching nothing) is not refused
    _check_all("continual-pretrain", ["hydra/launcher=slurm_gpu"], multirun=multirun, print_job=False, launch=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_submitit_local_sweep_then_one_report(cli, tmp_path: Path, tiny_local: list[str],
                                              local_inputs: dict[str, Path]) -> None:
    """`femlm continual-pretrain -m hydra/launcher=submitit_local ... masking.num_masks=2,4`: two jobs started by
    submitit, two finished runs in one sweep directory; one job resubmitted with resume= continues in place; then
    `femlm report` over that directory. Slow: four CLI starts and three training processes (about 70 s on 2
    shared cores)."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    checkpoint = tmp_path / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(str(local_inputs["tok"]))
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=64)).save_pretrained(str(checkpoint))
    tokenizer.save_pretrained(str(checkpoint))
    tiny = [o for o in tiny_local if not o.startswith(("model.", "preset="))]
    result = cli("continual-pretrain", "-m", "hydra/launcher=submitit_local", "preset=tiny", "masking.num_masks=2,4",
                 f"model.name_or_path={checkpoint}", *tiny, "trainer.max_steps=3", "runtime.precision=fp32")
    assert result.code == 0, result.stderr[-3000:]
    (sweep,) = (tmp_path / "runs" / "continual-pretrain").glob("multirun_*")
    jobs = sorted(p for p in sweep.iterdir() if p.name.isdigit())
    assert [j.name for j in jobs] == ["0", "1"]
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2  # each job ran as a submitit job
    for job, k in zip(jobs, (2, 4), strict=True):
        summary = json.loads((job / "summary.json").read_text())
        assert summary["steps"] == 3 and summary["final_eval_loss"] is not None
        assert json.loads((job / "checkpoints" / "final" / "femlm.json").read_text())["num_masks"] == k
        assert yaml.safe_load((job / "config.yaml").read_text())["masking"]["num_masks"] == k

    # a job of the sweep resubmitted through the launcher continues in its own directory (a longer run here)
    result = cli("continual-pretrain", "-m", "hydra/launcher=submitit_local", f"resume={jobs[0]}", "trainer.max_steps=5")
    assert result.code == 0, result.stderr[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if p.name.isdigit()) == ["0", "1"]
    assert json.loads((jobs[0] / "summary.json").read_text())["steps"] == 5
    assert json.loads((jobs[0] / "run.json").read_text())["resumed_from"]

    report = cli("report", f"report.inputs=[{sweep}]", f"report.out_dir={tmp_path / 'report'}")
    assert report.code == 0, report.stderr[-3000:]
    assert json.loads((tmp_path / "report" / "report.json").read_text())["counts"]["pretrain"] == 2
    with (tmp_path / "report" / "pretrain_runs.csv").open() as f:
        assert sorted((row["run"], row["K"]) for row in csv.DictReader(f)) == [(str(jobs[0]), "2"), (str(jobs[1]), "4")]
