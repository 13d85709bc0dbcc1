"""The CLI foundation: help, composition, overrides, sweeps, validation errors and run directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from femlm.commands import COMMANDS

pytestmark = pytest.mark.usefixtures("femlm_env")


def assert_one_line_error(result, *needles: str) -> None:
    assert result.code == 2, (result.code, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_top_level_help_lists_every_subcommand(cli_in_process):
    result = cli_in_process("--help")
    assert result.code == 0
    for name in COMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_subcommand_help_lists_groups(cli_in_process, name):
    result = cli_in_process(name, "--help")
    assert result.code == 0, result.stderr
    assert "--multirun" in result.stdout and "--dry-run" in result.stdout
    if name in ("continual-pretrain", "pretrain-scratch"):
        assert "masking:" in result.stdout and "fe_span" in result.stdout
        assert "preset:" in result.stdout and "tiny" in result.stdout
    command = COMMANDS[name]
    if command.positional:  # what bare arguments may be, from the object the command validates with
        assert f"Bare arguments set {command.positional}: {command.accepted()}" in result.stdout
    else:
        assert "No bare arguments" in result.stdout
    if name == "analyze":
        from femlm.analysis.config import KINDS

        assert all(kind in result.stdout for kind in KINDS) and "decomposition" in KINDS


def test_cfg_job_prints_composed_choices(cli_in_process):
    result = cli_in_process("continual-pretrain", "--cfg", "job", "domain=cs", "masking=fe_span")
    assert result.code == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert cfg["command"] == "continual-pretrain"
    assert cfg["domain"]["name"] == "cs"
    assert cfg["masking"]["name"] == "fe_span"
    assert cfg["masking"]["granularity"] == "span"


def test_preset_tiny_overrides_paper_defaults(cli_in_process):
    cli = cli_in_process
    result = cli("pretrain-scratch", "--cfg", "job", "preset=tiny")
    cfg = yaml.safe_load(result.stdout)
    assert cfg["model"]["name"] == "tiny" and cfg["data"]["block_size"] == 128
    paper = yaml.safe_load(cli("pretrain-scratch", "--cfg", "job").stdout)
    assert paper["model"]["name"] == "bert_base" and paper["data"]["block_size"] == 512
    assert paper["trainer"]["batch_size"] == 256 and paper["trainer"]["max_steps"] == 1_000_000
    cont = yaml.safe_load(cli("continual-pretrain", "--cfg", "job", "domain=news").stdout)
    assert cont["trainer"]["batch_size"] == 48 and cont["trainer"]["lr"] == pytest.approx(1e-4)
    assert cont["trainer"]["max_steps"] == 20000 and cont["masking"]["num_masks"] == 4


def test_multirun_dry_run_expands_sweep(cli, tmp_path: Path, tiny_local: list[str]):
    result = cli("pretrain-scratch", "-m", "--dry-run", *tiny_local, "masking.num_masks=2,4")
    assert result.code == 0, result.stderr
    sweeps = list((tmp_path / "runs" / "pretrain-scratch").glob("multirun_*"))
    assert len(sweeps) == 1
    jobs = sorted(p for p in sweeps[0].iterdir() if p.is_dir() and p.name.isdigit())
    assert [j.name for j in jobs] == ["0", "1"]
    ks = sorted(yaml.safe_load((j / "config.yaml").read_text())["masking"]["num_masks"] for j in jobs)
    assert ks == [2, 4]
    for job in jobs:
        assert (job / "plan.json").is_file() and (job / "run.json").is_file()
    # the compute plan (femlm.train.estimate), labelled as an assumption where it is one
    plans = [json.loads((job / "plan.json").read_text())["compute"] for job in jobs]
    assert all(p["train_flops"] > 0 and p["gpu_hours"]["A100"] >= 0 for p in plans)
    assert "training FLOPs" in result.stdout and "ASSUMED 30% MFU" in result.stdout


def test_two_runs_get_two_directories(cli_in_process_with_hydra, tmp_path: Path, tiny_local: list[str]):
    cli = cli_in_process_with_hydra  # dry runs through the real CLI: test_multirun_dry_run_expands_sweep
    for _ in range(2):
        assert cli("pretrain-scratch", "--dry-run", *tiny_local).code == 0
    runs = [p for p in (tmp_path / "runs" / "pretrain-scratch").iterdir() if p.is_dir()]
    assert len(runs) == 2
    for run in runs:
        info = yaml.safe_load((run / "run.json").read_text())
        assert info["git_commit"] and "torch" in info["packages"]
        assert (run / "metrics.jsonl").exists()


BAD_CONFIGS = [
    (["masking=nope"], ["masking", "fe_subword"]),
    (["trainer.mx_steps=3"], ["mx_steps"]),
    (["trainer.max_steps=abc"], ["trainer.max_steps", "abc"]),
    (["masking.num_masks=8", "masking.ratio=0.2"], ["num_masks", "ratio"]),
    (["masking.num_masks=0"], ["num_masks"]),
    (["masking.ratio=0"], ["ratio"]),
    (["masking.ratio=-0.1"], ["ratio"]),
    (["domain=mars"], ["domain", "cs"]),
    (["runtime.precision=fp8"], ["runtime.precision", "bf16"]),
]


@pytest.mark.parametrize(("args", "needles"), BAD_CONFIGS)
def test_bad_config_is_one_line_exit_2_in_process(capsys, args, needles):
    # In-process: the same validation path as the CLI, without a Python start-up per case.
    from femlm.cli import _check_all

    with pytest.raises(SystemExit) as exit_info:
        _check_all("continual-pretrain", args, multirun=False, print_job=False)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_bad_config_through_the_real_cli(cli, tmp_path: Path):
    result = cli("continual-pretrain", "--dry-run", "masking.num_masks=8", "masking.ratio=0.2")
    assert_one_line_error(result, "num_masks", "ratio")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("run.json"))


def test_bad_value_in_sweep_is_caught_before_any_job(cli, tmp_path: Path):
    result = cli("continual-pretrain", "-m", "--dry-run", "masking.num_masks=2,0")
    assert_one_line_error(result, "num_masks")
    assert not any((tmp_path / "runs").rglob("run.json")) if (tmp_path / "runs").exists() else True


def test_resume_requires_a_run_directory(cli, tmp_path: Path):
    result = cli("pretrain-scratch", "--dry-run", f"resume={tmp_path / 'nowhere'}")
    assert_one_line_error(result, "resume")


def test_resume_by_directory_reuses_the_runs_overrides(cli_in_process_with_hydra, tmp_path: Path,
                                                      tiny_local: list[str]):
    cli = cli_in_process_with_hydra  # resume= through the real CLI: test_resume_requires_a_run_directory
    assert cli("pretrain-scratch", "--dry-run", *tiny_local, "masking=mlm_subword").code == 0
    (run_dir,) = [p for p in (tmp_path / "runs" / "pretrain-scratch").iterdir() if p.is_dir()]
    result = cli("pretrain-scratch", "--dry-run", f"resume={run_dir}", "trainer.max_steps=7")
    assert result.code == 0, result.stderr
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["masking"]["name"] == "mlm_subword" and cfg["model"]["name"] == "tiny"
    assert cfg["trainer"]["max_steps"] == 7
    assert len([p for p in (tmp_path / "runs" / "pretrain-scratch").iterdir() if p.is_dir()]) == 1



def test_a_missing_checkpoint_is_refused_before_transformers_is_imported(femlm_env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    """The commands' `check` entries (femlm.commands) run before the command's code loads: the one-line errors
    come without importing transformers (seconds of start-up). One process, three commands; the errors' wording
    is tests/test_bad_input.py's."""
    import subprocess
    import sys

    from helpers.processes import child_env

    script = """
import sys
from femlm.cli import main
for args in (["finetune", "preset=tiny", "model.name_or_path=/nonexistent/ckpt"],
             ["evaluate", "preset=tiny", "evaluate.checkpoints=/nonexistent/dir"],
             ["continual-pretrain", "preset=tiny", "model.name_or_path=/nonexistent/ckpt"]):
    sys.argv = ["femlm", *args]
    try:
        main()
    except SystemExit as exit:
        print(args[0], exit.code, "transformers" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**child_env(), **femlm_env})
    assert proc.stdout.splitlines() == [f"{c} 2 False" for c in ("finetune", "evaluate", "continual-pretrain")], \
        proc.stdout + proc.stderr[-2000:]
    assert proc.stderr.count("femlm: error: ") == 3 and proc.stderr.count("no such") == 3, proc.stderr[-2000:]
