"""The one training entry (femlm.train.loop.run_pretrain) as the GPU study calls it in process: token blocks it
prepared instead of the domain's, and a deadline that stops a run cleanly at a step that reads the device."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from femlm.runs import Run
from femlm.train import inputs
from femlm.train.loop import DeadlineReached, run_pretrain
from helpers.tiny import synthetic_blocks, tiny_config, tiny_tokenizer


def _refuse(*args: object) -> None:
    raise AssertionError("the domain's blocks were read although prepared blocks were given")


def _prepared(tokenizer_dir: Path) -> SimpleNamespace:
    vocab = len(tiny_tokenizer(tokenizer_dir))
    return SimpleNamespace(train=synthetic_blocks(64, 32, vocab, seed=3), validation=synthetic_blocks(16, 32, vocab, 4))


def test_prepared_blocks_train_in_process_without_reading_the_domain(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "load_blocks", _refuse)
    prepared = _prepared(tmp_path / "tok")
    cfg = tiny_config(tmp_path / "tok", max_steps=4, eval_every=2, log_every=2)
    cfg.seed = 7
    run = Run(dir=tmp_path / "run", command="pretrain-scratch")
    run.dir.mkdir()
    summary = run_pretrain(cfg, run, prepared=prepared)
    saved = json.loads((run.dir / "summary.json").read_text())
    assert saved["steps"] == summary["steps"] == 4 and saved["vocabulary_sha256"]
    # the held-out set is the prepared validation blocks: 16 of them, masked once
    evals = [json.loads(line) for line in run.metrics_path.read_text().splitlines() if "eval_loss" in line]
    assert [r["step"] for r in evals] == [0, 2, 4]
    assert (run.dir / "checkpoints" / "final" / "femlm.json").is_file()


def test_a_passed_deadline_stops_the_run_before_its_end_and_leaves_no_result(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "load_blocks", _refuse)
    prepared = _prepared(tmp_path / "tok")
    cfg = tiny_config(tmp_path / "tok", max_steps=6, eval_every=3, log_every=3)
    run = Run(dir=tmp_path / "run", command="pretrain-scratch")
    run.dir.mkdir()
    with pytest.raises(DeadlineReached, match="after step 3 of 6"):
        run_pretrain(cfg, run, prepared=prepared, deadline=time.time() - 1)
    assert not (run.dir / "summary.json").exists() and not (run.dir / "checkpoints" / "final").exists()
    steps = [json.loads(line).get("step") for line in run.metrics_path.read_text().splitlines()]
    assert max(steps) < 6  # stopped at the first step that reads the device (3), not at the end
