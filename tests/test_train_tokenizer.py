"""Runs that train their own WordPiece vocabulary on the same documents share one (arms must compare)."""

from __future__ import annotations

from pathlib import Path

import pytest

from femlm.config import FemlmConfig
from femlm.train.distributed import DistInfo
from femlm.train.inputs import scratch_tokenizer, shared_wordpiece


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FemlmConfig:
    corpus = tmp_path / "corpus.txt"
    words = ["masked", "language", "models", "learn", "by", "predicting", "hidden", "tokens", "from", "their", "context"]
    docs = [" ".join(words[i:] + words[:i]) * 3 for i in range(len(words))]
    corpus.write_text("\n\n".join(docs))
    monkeypatch.delenv("FEMLM_CACHE", raising=False)
    cfg = FemlmConfig()
    cfg.domain.sources = [f"file:{corpus}"]
    cfg.download.cache_dir = str(tmp_path / "cache")
    cfg.model.tokenizer = None
    cfg.model.vocab_size = 120
    return cfg


def test_two_runs_share_one_trained_vocabulary(cfg: FemlmConfig, tmp_path: Path) -> None:
    first = shared_wordpiece(cfg)
    assert shared_wordpiece(cfg) == first
    single = DistInfo()
    a = scratch_tokenizer(cfg, tmp_path / "run_a", single)
    b = scratch_tokenizer(cfg, tmp_path / "run_b", single)
    assert a.get_vocab() == b.get_vocab()
    assert (tmp_path / "run_a" / "tokenizer" / "tokenizer_config.json").is_file()
    cfg.model.vocab_size = 100
    assert shared_wordpiece(cfg) != first
