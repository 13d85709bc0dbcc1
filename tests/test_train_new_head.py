"""Continual pre-training of an encoder saved without its masked-LM head (model.new_mlm_head) and a head-only
warm-up (trainer.trainable), on a tiny BertModel and synthetic blocks: seconds on one CPU thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from femlm.errors import UserError
from femlm.runs import Run
from femlm.train import inputs
from femlm.train.loop import run_pretrain
from helpers.tiny import TINY_ARCH, fake_load_blocks, tiny_config, tiny_tokenizer

torch.set_num_threads(1)


@pytest.fixture
def encoder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A BertModel (encoder only, no MLM head) saved with its tokenizer, like all-MiniLM-L6-v2's package."""
    from transformers import BertConfig, BertModel

    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    tokenizer = tiny_tokenizer(tmp_path / "enc")
    arch = {k: v for k, v in TINY_ARCH.items() if k != "model_type"}
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), **arch)).save_pretrained(tmp_path / "enc")
    return tmp_path / "enc"


def continual(root: Path, name: str, encoder: Path, **settings) -> tuple[Run, object]:
    cfg = tiny_config(encoder, max_steps=4, eval_every=2, save_every=4, **settings)
    cfg.command = "continual-pretrain"
    cfg.model.name_or_path = str(encoder)
    cfg.model.tokenizer = None
    run = Run(dir=root / name, command="continual-pretrain")
    run.dir.mkdir()
    return run, cfg


def test_encoder_without_head_refused_then_accepted_with_notice(encoder: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    run, cfg = continual(tmp_path, "refused", encoder)
    with pytest.raises(UserError, match="without masked-LM head weights.*model.new_mlm_head=true"):
        run_pretrain(cfg, run)

    run, cfg = continual(tmp_path, "accepted", encoder)
    cfg.model.new_mlm_head = True
    summary = run_pretrain(cfg, run)
    notices = [line for line in capsys.readouterr().out.splitlines() if line.startswith("notice: model.new_mlm_head")]
    assert len(notices) == 1 and "fresh head" in notices[0] and "cls.predictions.bias" in notices[0]
    recorded = json.loads((run.dir / "summary.json").read_text())["new_mlm_head"]
    assert recorded == summary["new_mlm_head"] and "cls.predictions.transform.dense.weight" in recorded
    assert not any(name.startswith("bert.") for name in recorded)  # the encoder's weights were all loaded

    # A checkpoint that has its head (the run just saved one) needs no flag and records no fresh head.
    run, cfg = continual(tmp_path, "again", run.dir / "checkpoints" / "final")
    assert run_pretrain(cfg, run)["new_mlm_head"] == []


def test_trainable_patterns_freeze_everything_else(encoder: Path, tmp_path: Path) -> None:
    run, cfg = continual(tmp_path, "head_only", encoder, lr=1e-2)
    cfg.model.new_mlm_head = True
    cfg.trainer.trainable = ["cls.*"]
    run_pretrain(cfg, run)
    before = load_file(encoder / "model.safetensors")
    after = load_file(run.dir / "checkpoints" / "final" / "model.safetensors")
    encoder_weights = {k: v for k, v in before.items() if not k.startswith("pooler.")}  # no pooler in an MLM
    for name, value in encoder_weights.items():  # every encoder weight unchanged, the tied decoder included
        assert torch.equal(after[f"bert.{name}"], value), name
    norm = after["cls.predictions.transform.LayerNorm.weight"]  # initialised to ones, then trained
    assert not torch.equal(norm, torch.ones_like(norm))

    run, cfg = continual(tmp_path, "nothing", encoder)
    cfg.model.new_mlm_head = True
    cfg.trainer.trainable = ["no.such.*"]
    with pytest.raises(UserError, match=r"trainer.trainable=\['no.such.\*'\]: matches no parameter"):
        run_pretrain(cfg, run)
