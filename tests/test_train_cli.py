"""End to end through the real CLI and the data mirror: pretrain-scratch, resume of that run by directory,
then continual-pretrain from its checkpoints/final. Slow (tokenizer training, corpus blocks, three CLI starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "data"
SMALL = ["preset=tiny", "runtime.threads=1", "logger.wandb.mode=disabled", "logger.progress=false",
         "model.arch.hidden_size=64", "model.arch.num_hidden_layers=2", "model.arch.num_attention_heads=2",
         "model.arch.intermediate_size=128", "model.vocab_size=2000", "data.block_size=64", "data.eval_blocks=16",
         "trainer.batch_size=8", "runtime.eval_every=3", "runtime.save_every=3", "runtime.log_every=1"]


def femlm(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FEMLM_MIRROR": str(MIRROR), "FEMLM_RUNS": str(tmp / "runs"),
           "FEMLM_CACHE": str(tmp / "cache"), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "femlm.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.mirror
def test_cli_scratch_resume_then_continual(tmp_path: Path) -> None:
    if not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    out = femlm(tmp_path, "pretrain-scratch", *SMALL, "trainer.max_steps=6", "masking=fe_subword")
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = (tmp_path / "runs" / "pretrain-scratch").iterdir()
    assert (run / "checkpoints" / "final" / "femlm.json").is_file() and (run / "tokenizer").is_dir()

    # resume the finished run by directory: nothing left to do, the curve is unchanged
    before = records(run)
    out = femlm(tmp_path, "pretrain-scratch", *SMALL, "trainer.max_steps=6", "masking=fe_subword",
                f"resume={run}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [(r["step"], r.get("loss"), r.get("eval_loss")) for r in records(run)] == \
        [(r["step"], r.get("loss"), r.get("eval_loss")) for r in before]
    # a different masking is refused with one line, exit 2, and the run directory survives
    out = femlm(tmp_path, "pretrain-scratch", *SMALL, "trainer.max_steps=6", "masking=mlm_subword",
                f"resume={run}")
    assert out.returncode == 2 and "masking" in out.stderr and run.is_dir()

    out = femlm(tmp_path, "continual-pretrain", *SMALL, "trainer.max_steps=3", "domain=cs",
                "domain.max_documents=200", f"model.name_or_path={run / 'checkpoints' / 'final'}")
    assert out.returncode == 0, out.stderr[-3000:]
    (cont,) = (tmp_path / "runs" / "continual-pretrain").iterdir()
    info = json.loads((cont / "checkpoints" / "final" / "femlm.json").read_text())
    assert info["init_from"].endswith("final") and info["domain"] == "cs" and info["masking"] == "fe_subword"
    summary = json.loads((cont / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["final_eval_loss"] is not None
