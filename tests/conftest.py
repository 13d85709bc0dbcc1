"""Shared fixtures: an isolated femlm environment and a way to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "data"


@pytest.fixture
def mirror() -> Path:
    """The local data mirror (../shared/data); tests that need it skip when it is absent."""
    if not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    return MIRROR


@pytest.fixture
def femlm_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Runs and caches go under tmp_path; wandb never leaves the machine."""
    env = {
        "FEMLM_RUNS": str(tmp_path / "runs"),
        "FEMLM_CACHE": str(tmp_path / "cache"),
        "WANDB_MODE": "disabled",
        "OMP_NUM_THREADS": "1",
        # tests/ too: subprocess scripts import tests/helpers as `helpers`, as pytest does
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    if MIRROR.is_dir():
        env["FEMLM_MIRROR"] = str(MIRROR)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(femlm_env: dict[str, str], tmp_path: Path):
    """Run `femlm ...` in a subprocess (real exit codes, real stderr)."""

    def run(*args: str, timeout: float = 300, cwd: Path | None = None) -> CliResult:
        proc = subprocess.run([sys.executable, "-m", "femlm.cli", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or tmp_path, env={**os.environ, **femlm_env})
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def cli_in_process(femlm_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`femlm ...` in this process, for command lines that end before Hydra starts (--help, --cfg job, errors
    found while composing): the same exit status, stdout and stderr as `cli`, without starting Python and
    importing femlm per call. A command line that would start Hydra fails the test (use `cli` for those)."""
    import hydra
    from typer.testing import CliRunner

    from femlm.cli import app

    def no_hydra(*args, **kwargs):
        raise AssertionError("this command line starts Hydra: run it with the `cli` fixture (a subprocess)")

    monkeypatch.setattr(hydra, "main", no_hydra)
    monkeypatch.setenv("FEMLM_RUN_UID", "")  # the CLI sets it; restored after the test
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> CliResult:
        result = CliRunner().invoke(app, list(args))
        if isinstance(result.exception, AssertionError):
            raise result.exception
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def cli_in_process_with_hydra(femlm_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`femlm ...` in this process, Hydra's run included: the exit status and what femlm writes to stdout and
    stderr, as `cli` gives them, without a Python start-up and femlm's imports per call. Meant for command lines
    that fail or plan (bad input, dry runs). The process-wide state a run changes is restored afterwards:
    logging handlers (Hydra's job logging), sys.argv, the working directory, torch's thread count and Hydra's
    global state. Not covered: output written to file descriptors 1 and 2 below Python (keep one real CLI
    subprocess, `cli`, per command and per kind of failure)."""
    import logging

    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from typer.testing import CliRunner

    from femlm.cli import app

    monkeypatch.setenv("FEMLM_RUN_UID", "")  # the CLI sets it
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the CLI hands Hydra its overrides through sys.argv
    monkeypatch.chdir(tmp_path)
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    saved = {lg: (lg.handlers[:], lg.level, lg.disabled, lg.propagate) for lg in loggers}
    threads = torch.get_num_threads()

    def run(*args: str) -> CliResult:
        result = CliRunner().invoke(app, list(args))
        stderr = result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            import traceback  # a bug: show it as the subprocess would

            stderr += "".join(traceback.format_exception(result.exception))
        return CliResult(result.exit_code, result.stdout, stderr)

    yield run
    for lg in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        if not isinstance(lg, logging.Logger):
            continue
        handlers, level, disabled, propagate = saved.get(lg, ([], logging.NOTSET, False, True))
        for handler in lg.handlers:
            if handler not in handlers:
                handler.close()
        lg.handlers[:], lg.disabled, lg.propagate = handlers, disabled, propagate
        lg.setLevel(level)
    torch.set_num_threads(threads)
    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None


@pytest.fixture(scope="session")
def local_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 128-token tokenizer, a 40-document corpus over its words and a two-label task directory."""
    from helpers.golden import write_inputs

    return write_inputs(tmp_path_factory.mktemp("local-inputs"))


@pytest.fixture
def tiny_local(local_inputs: dict[str, Path]) -> list[str]:
    """Overrides for a seconds-long pre-training run (or dry run) on the local inputs: no mirror needed."""
    return ["preset=tiny", f"model.tokenizer={local_inputs['tok']}", f"domain.sources=[file:{local_inputs['corpus']}]",
            "model.arch.hidden_size=16", "model.arch.num_hidden_layers=1", "model.arch.num_attention_heads=2",
            "model.arch.intermediate_size=32", "data.block_size=32", "data.eval_blocks=4", "trainer.batch_size=8",
            "runtime.threads=1", "logger.progress=false", "logger.wandb.mode=disabled",
            "trainer.max_passes=null"]
