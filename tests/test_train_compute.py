"""Equal compute both ways (femlm.train.compute): batch layouts, and tiny runs whose counts show it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from femlm.errors import UserError
from femlm.masking import MaskingConfig
from femlm.runs import Run
from femlm.train import inputs
from femlm.train.compute import step_layout
from femlm.train.loop import run_pretrain
from helpers.tiny import fake_load_blocks, tiny_config, tiny_tokenizer

torch.set_num_threads(1)
FE = MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4)


def test_layouts() -> None:
    rows = step_layout("same_rows", 48, 40_000, 4)
    assert (rows.sequences, rows.rows, rows.steps, rows.every(1000)) == (12, 48, 40_000, 1000)
    seqs = step_layout("same_sequences", 48, 40_000, 4)
    assert (seqs.sequences, seqs.rows, seqs.steps, seqs.every(1000)) == (48, 192, 10_000, 250)
    mlm = [step_layout(mode, 48, 40_000, 1) for mode in ("same_rows", "same_sequences")]
    assert mlm[0] == mlm[1].__class__("same_rows", 1, 48, 40_000, 1) and mlm[1].rows == 48  # MLM: one run
    with pytest.raises(UserError, match="trainer.batch_size=30 is not a multiple of masking.num_masks=4"):
        step_layout("same_rows", 30, 100, 4)
    with pytest.raises(UserError, match="trainer.max_steps=10 is not a multiple of masking.num_masks=4"):
        step_layout("same_sequences", 32, 10, 4)
    with pytest.raises(UserError, match="do not split over 3 processes"):
        step_layout("same_sequences", 32, 100, 4, world_size=3)


def _run(tmp: Path, name: str, masking: MaskingConfig | None, mode: str) -> dict:
    cfg = tiny_config(tmp / "tok", max_steps=8, eval_every=4, save_every=8, log_every=4)
    cfg.trainer.equal_compute = mode
    if masking is not None:
        cfg.masking = masking
    run = Run(dir=tmp / name, command="pretrain-scratch")
    run.dir.mkdir()
    summary = run_pretrain(cfg, run)
    summary["records"] = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    return summary


def test_each_mode_counts_what_it_claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    mlm = _run(tmp_path, "mlm", None, "same_rows")
    fe_rows = _run(tmp_path, "fe_rows", FE, "same_rows")
    fe_seqs = _run(tmp_path, "fe_seqs", FE, "same_sequences")
    m, r, q = mlm["seen"], fe_rows["seen"], fe_seqs["seen"]
    # same_rows: the same rows per step and steps; K times fewer distinct sequences.
    assert fe_rows["steps"] == mlm["steps"] == 8 and r["rows"] == m["rows"] == 64
    assert r["sequences"] * 4 == m["sequences"] and r["source_tokens"] * 4 == m["source_tokens"]
    # same_sequences: the same sequences per step, K copies each, in K times fewer steps: the same rows in all.
    assert fe_seqs["sequences_per_step"] == mlm["sequences_per_step"] == 8 and fe_seqs["rows_per_step"] == 32
    assert fe_seqs["steps"] == 2 and q["rows"] == m["rows"] == 64 and q["sequences"] * 4 == m["sequences"]
    # Every copy masks tau tokens, so masked targets and FLOPs are equal in both modes.
    assert r["masked_targets"] == q["masked_targets"] == m["masked_targets"]
    assert r["train_flops"] == pytest.approx(m["train_flops"]) and q["train_flops"] == pytest.approx(m["train_flops"])
    # Evaluations of the same_sequences arm fall at the same compute as MLM's (cadence divided by K).
    evals = {name: [e["rows_seen"] for e in s["records"] if "eval_loss" in e] for name, s in
             (("mlm", mlm), ("fe_seqs", fe_seqs))}
    assert evals["mlm"] == evals["fe_seqs"] == [0, 32, 64]
    assert all("sequences_seen" in rec and "train_flops" in rec for rec in mlm["records"] if "loss" in rec)
