"""What fine-tuning and evaluation records (issue 29, loose ends): the precision it ran in (bf16 and fp16 follow
fp32) and the encoder it ran (architecture, checkpoint, sha256 of the weights). Fixtures: test_eval_finetune."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
import test_eval_finetune as base
from test_eval_finetune import make_cfg, new_run, toy_task
from transformers import BertForMaskedLM

from femlm.eval.evaluate import run_evaluate
from femlm.eval.finetune import run_finetune

checkpoint, toy_data = base.checkpoint, base.toy_data  # the same fixtures: a tiny BERT checkpoint, toy task data



def test_finetune_in_bf16_and_fp16_follows_fp32(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    """runtime.precision=bf16|fp16 fine-tunes under autocast (fp16 with GradScaler, on CPU too): the same seed's
    training losses stay within a tolerance of fp32's without being identical, and results.json names the dtype."""
    losses = {}
    for precision in ("fp32", "bf16", "fp16"):
        cfg = make_cfg(checkpoint, toy_task(patience=None, epochs=2))
        cfg.runtime.precision = precision
        run = new_run(tmp_path / precision)
        run_finetune(cfg, run)
        on_disk = json.loads((run.dir / "results.json").read_text())
        assert on_disk["recipe"]["precision"] == precision
        history = json.loads((run.dir / "seed_1" / "scores.json").read_text())["history"]
        losses[precision] = [r["train_loss"] for r in history]
        assert all(math.isfinite(v) for v in losses[precision])
    for precision in ("bf16", "fp16"):
        assert losses[precision] != losses["fp32"]  # autocast was on
        assert losses[precision] == pytest.approx(losses["fp32"], rel=0.01), precision  # measured: < 3e-4


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_finetune_and_evaluate_results_name_their_encoder(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    """results.json of finetune and of evaluate carry `encoder`: architecture, checkpoint and the weights' sha256."""
    run = new_run(tmp_path / "ft")
    run_finetune(make_cfg(checkpoint, toy_task(epochs=1), save_model=True), run)
    encoder = json.loads((run.dir / "results.json").read_text())["encoder"]
    assert encoder["architecture"] == "bert" and encoder["class"] == "BertForSequenceClassification"
    assert encoder["checkpoint"] == str(checkpoint) and encoder["origin"] == "local"
    assert encoder["weights"] == "model.safetensors"
    assert encoder["sha256"] == sha256_of(checkpoint / "model.safetensors")

    ev = make_cfg(checkpoint, toy_task(), evaluate=True)
    ev.evaluate.checkpoints = str(run.dir / "seed_1" / "model")
    ev.runtime.precision = "fp32"
    evaluate_dir = tmp_path / "ev"
    run_evaluate(ev, new_run(evaluate_dir, "evaluate"))
    scored = json.loads((evaluate_dir / "results.json").read_text())
    assert scored["precision"] == "fp32"
    (row,) = scored["checkpoints"]
    model_dir = run.dir / "seed_1" / "model"
    assert row["encoder"]["architecture"] == "bert" and row["encoder"]["checkpoint"] == str(model_dir)
    assert row["encoder"]["sha256"] == sha256_of(model_dir / "model.safetensors") != encoder["sha256"]
    assert row["finetune"]["checkpoint"] == str(checkpoint)  # and the fine-tuned model names its own origin


def test_weights_sha256_of_a_sharded_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    from femlm.provenance import weights_sha256

    model = BertForMaskedLM.from_pretrained(checkpoint)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="5KB")
    record = weights_sha256(tmp_path / "sharded")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 1 and record["weights"] == shards
    joined = "\n".join(sha256_of(tmp_path / "sharded" / s) for s in shards)
    assert record["sha256"] == hashlib.sha256(joined.encode()).hexdigest()
    assert weights_sha256(tmp_path) == {"weights": None, "sha256": None}
