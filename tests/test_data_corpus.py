"""Corpus -> token blocks on a tiny WikiText-style corpus in tmp_path, with a WordPiece vocab trained here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from femlm.data import corpus, prepare, workers
from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import blocks_meta, load_documents, prepare_blocks
from femlm.data.registry import REGISTRY
from femlm.data.wordpiece import train_wordpiece
from femlm.errors import UserError
from femlm.models.load import load_tokenizer

WORDS = ["the", "model", "masks", "tokens", "and", "predicts", "them", "from", "context", "with", "lower",
         "gradient", "variance"]


def _article(i: int, n_lines: int) -> str:
    rng = np.random.default_rng(i)
    lines = [" ".join(rng.choice(WORDS, 12)) + " ." for _ in range(n_lines)]
    return f" = Article {i} = \n \n" + "".join(f" {line} \n" for line in lines)


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DomainConfig, DownloadConfig, Path]:
    """A mirror whose wikitext2 files hold 40 small articles; the registry's checksums dropped for them."""
    mirror = tmp_path / "mirror"
    entry = REGISTRY["wikitext2"]
    for role, start in (("valid", 0), ("test", 20)):
        path = mirror / entry.file(role).path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(_article(i, 3) for i in range(start, start + 20)))
    unchecked = tuple(dataclasses.replace(f, sha256=None, url=None) for f in entry.files)
    monkeypatch.setitem(REGISTRY, "wikitext2", dataclasses.replace(entry, files=unchecked))
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    cfg = DownloadConfig(mirror=str(mirror), cache_dir=str(tmp_path / "cache"), offline=True)
    domain = DomainConfig("toy", ["wikitext2"], None, None, None, validation_fraction=0.2)
    return domain, cfg, tmp_path


@pytest.fixture
def tokenizer(toy: tuple[DomainConfig, DownloadConfig, Path]):  # noqa: ANN201 (a transformers class)
    domain, cfg, tmp = toy
    return train_wordpiece(load_documents(domain, cfg), 120, tmp / "tok")


def test_blocks_are_exact_split_by_document_and_cached(toy, tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    domain, cfg, tmp = toy
    calls = {"n": 0}
    real = workers._tokenize_into

    def counting(docs: list, handle: object, dtype: str) -> np.ndarray:
        calls["n"] += 1
        return real(docs, handle, dtype)

    monkeypatch.setattr(workers, "_tokenize_into", counting)
    dd = prepare_blocks(domain, tokenizer, 32, cfg, tmp / "blocks-cache", num_proc=2, seed=0)
    assert set(dd) == {"train", "validation"} and calls["n"] > 0
    for split in dd.values():
        ids = split.numpy()
        assert ids.ndim == 2 and ids.shape[1] == 32 and isinstance(split.array, np.memmap)
    # Each document is wrapped in [CLS] ... [SEP]; the first block starts a document.
    train = dd["train"].numpy().ravel()
    assert train[0] == tokenizer.cls_token_id
    # 32 train documents of ~40 tokens, fewer than 32 tokens dropped at the end: every [CLS] survives.
    assert (train == tokenizer.cls_token_id).sum() == 32
    assert (train == tokenizer.sep_token_id).sum() in (31, 32)
    meta = blocks_meta(next((tmp / "blocks-cache" / "blocks").iterdir()))
    assert meta["train"]["documents"] == 32 and meta["validation"]["documents"] == 8
    assert meta["train"]["blocks"] == len(dd["train"]) and meta["train"]["dropped"] < 32

    # Second preparation: loaded from disk; no reading, no tokenizing.
    calls["n"] = 0

    def no_reading(*args: object, **kwargs: object) -> list:
        raise AssertionError("documents were read again")

    monkeypatch.setattr(prepare, "plan_units", no_reading)
    again = prepare_blocks(domain, tokenizer, 32, cfg, tmp / "blocks-cache", num_proc=2, seed=0)
    assert calls["n"] == 0
    assert (again["train"].numpy() == dd["train"].numpy()).all()
    # Any change of the key (block size, seed, tokenizer) is a different cache entry.
    with pytest.raises(AssertionError, match="read again"):
        prepare_blocks(domain, tokenizer, 16, cfg, tmp / "blocks-cache", seed=0)
    with pytest.raises(AssertionError, match="read again"):
        prepare_blocks(domain, tokenizer, 32, cfg, tmp / "blocks-cache", seed=1)


def test_validation_documents_are_unseen(toy, tokenizer) -> None:
    domain, cfg, _ = toy
    docs = load_documents(domain, cfg)
    parts = corpus._split_documents(docs, domain.validation_fraction, seed=0)
    assert len(parts["validation"]) == 8 and not set(parts["train"]) & set(parts["validation"])
    assert sorted(parts["train"] + parts["validation"]) == sorted(docs)
    assert parts == corpus._split_documents(docs, domain.validation_fraction, seed=0)


def test_subsample_and_errors(toy, tokenizer) -> None:
    domain, cfg, tmp = toy
    sub = dataclasses.replace(domain, max_documents=5)
    assert len(load_documents(sub, cfg, seed=1)) == 5
    assert load_documents(sub, cfg, seed=1) != load_documents(sub, cfg, seed=2)
    with pytest.raises(UserError, match="shorter than one block"):
        prepare_blocks(domain, tokenizer, 100_000, cfg, tmp / "c")
    with pytest.raises(UserError, match="not a corpus"):
        load_documents(dataclasses.replace(domain, sources=["sst2"]), cfg)
    empty = tmp / "mirror" / REGISTRY["wikitext2"].file("valid").path
    empty.write_text("")
    (tmp / "mirror" / REGISTRY["wikitext2"].file("test").path).write_text(" = Only a heading = \n")
    with pytest.raises(UserError, match="hold no documents"):
        load_documents(domain, cfg)


def test_trained_wordpiece_reloads(toy, tokenizer) -> None:
    _, cfg, tmp = toy
    again = load_tokenizer(str(tmp / "tok"), cfg)
    text = "The model masks tokens ."
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])[0] == "[CLS]"
    assert len(tokenizer) <= 120
