"""The configs ship with the package: a wheel built from the repository, installed into a fresh virtual
environment outside it, runs the CLI from another working directory with no source tree in sight.

The fresh environment borrows the test environment's dependencies (torch, transformers, ...) through a .pth
line instead of installing gigabytes again; femlm itself comes only from the wheel (checked below).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Building a wheel and a virtual environment takes a minute on 2 cores: the slow tier (docs/testing.md).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(root / "dist"), str(REPO)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (root / "dist").glob("femlm-*.whl")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: the borrowed site-packages may hold femlm itself (an editable install), which pip would
    # otherwise take as "already satisfied" and skip the wheel.
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                              "-q", str(wheel)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    return env_dir


def femlm(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FEMLM_CONF")}
    env.update({"FEMLM_RUNS": str(cwd / "runs"), "FEMLM_CACHE": str(cwd / "cache"), "WANDB_MODE": "disabled",
                "HF_HUB_OFFLINE": "1"})
    return subprocess.run([str(env_dir / "bin" / "femlm"), *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def test_the_wheel_carries_its_configs_and_runs_anywhere(installed: Path, tmp_path: Path,
                                                         local_inputs: dict[str, Path]) -> None:
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import femlm, femlm.compose as c; "
                            "print(femlm.__file__); print(c.CONF_DIR)"], capture_output=True, text=True, cwd=tmp_path,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    module, conf = where.stdout.split()
    assert str(installed) in module and str(installed) in conf and not module.startswith(str(REPO)), where.stdout
    assert (Path(conf) / "masking" / "fe_subword.yaml").is_file()

    help_ = femlm(installed, tmp_path, "--help")
    assert help_.returncode == 0 and "continual-pretrain" in help_.stdout
    assert "fe_subword" in femlm(installed, tmp_path, "continual-pretrain", "--help").stdout

    tiny = ["preset=tiny", f"model.tokenizer={local_inputs['tok']}", f"domain.sources=[file:{local_inputs['corpus']}]",
            "model.arch.hidden_size=16", "model.arch.num_hidden_layers=1", "model.arch.num_attention_heads=2",
            "model.arch.intermediate_size=32", "data.block_size=32", "trainer.batch_size=8", "trainer.max_passes=null"]
    scratch = femlm(installed, tmp_path, "pretrain-scratch", *tiny, "trainer.max_steps=2", "logger.progress=false")
    assert scratch.returncode == 0, scratch.stderr[-2000:]
    (run,) = (tmp_path / "runs" / "pretrain-scratch").iterdir()
    checkpoint = run / "checkpoints" / "final"
    continual = femlm(installed, tmp_path, "continual-pretrain", "--dry-run", *tiny, f"model.name_or_path={checkpoint}")
    assert continual.returncode == 0, continual.stderr[-2000:]
    assert "[dry run] continual-pretrain: every check passed" in continual.stdout
    if os.environ.get("FEMLM_MIRROR"):  # ACL-ARC's files come from the data mirror
        finetune = femlm(installed, tmp_path, "finetune", "task=aclarc", "--dry-run", "preset=tiny",
                         f"model.name_or_path={checkpoint}")
        assert finetune.returncode == 0, finetune.stderr[-2000:]
    sweep = femlm(installed, tmp_path, "continual-pretrain", "-m", "--dry-run", *tiny,
                  f"model.name_or_path={checkpoint}", "masking=mlm_subword,fe_subword")
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert len(list((tmp_path / "runs" / "continual-pretrain").glob("multirun_*/*/plan.json"))) == 2
    # Offline with the paper preset: the real checks run and say so in one line (no missing-config crash).
    paper = femlm(installed, tmp_path, "continual-pretrain", "--dry-run")
    assert paper.returncode == 2 and paper.stderr.count("\n") == 1 and "Hub corpus" in paper.stderr, paper.stderr
