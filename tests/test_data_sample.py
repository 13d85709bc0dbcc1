"""``domain.max_documents``: an exactly uniform seeded sample of distinct documents, the same whatever the number
of worker processes or the order of the shards."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chisquare

from femlm.data import prepare, sample
from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import load_documents, prepare_blocks
from femlm.data.wordpiece import train_wordpiece
from femlm.errors import UserError

WORDS = ["the", "model", "masks", "tokens", "and", "predicts", "them", "from", "context", "with", "lower",
         "gradient", "variance"]


def test_sample_is_uniform_over_subsets() -> None:
    """5 documents, samples of 2: each of the 10 subsets equally likely over seeds (chi-square), and the
    inclusion rate of every document is N/D on a larger corpus."""
    hashes = sample.hash_docs([f"document {i}" for i in range(5)])
    counts: dict[tuple, int] = {}
    seeds = 4000
    for seed in range(seeds):
        chosen = tuple(sorted(sample.sample_hashes(hashes, 2, seed).tolist()))
        counts[chosen] = counts.get(chosen, 0) + 1
    assert len(counts) == 10 and sum(counts.values()) == seeds
    assert chisquare(list(counts.values())).pvalue > 1e-3
    many = sample.hash_docs([f"doc {i}" for i in range(40)])
    inclusion = np.zeros(40)
    for seed in range(2000):
        picked = sample.member(many, sample.sample_hashes(many, 8, seed))
        assert picked.sum() == 8
        inclusion += picked
    assert chisquare(inclusion).pvalue > 1e-3
    # Nested: a smaller sample of the same seed is a subset of a larger one.
    assert set(sample.sample_hashes(many, 5, 3).tolist()) <= set(sample.sample_hashes(many, 12, 3).tolist())


def test_split_is_exact_and_order_free() -> None:
    hashes = sample.hash_docs([f"d{i}" for i in range(101)])
    val = sample.validation_hashes(hashes, 0.1, seed=7)
    assert len(val) == 10 and (val == sample.validation_hashes(hashes[::-1], 0.1, seed=7)).all()
    assert sample.validation_size(2, 0.5) == 1 and sample.validation_size(3, 0.01) == 1


def _write_shards(root: Path, n_docs: int = 240, shards: int = 6) -> list[Path]:
    """jsonl shards with duplicates (every 10th document repeats an earlier one, across shards)."""
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, 18)) + f" number {i} ." for i in range(n_docs)]
    docs = [docs[i - 37] if i % 10 == 9 and i >= 37 else d for i, d in enumerate(docs)]
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        path = root / f"part-{s:02d}.jsonl"
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[s::shards]))
        paths.append(path)
    return paths


@pytest.fixture
def shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Path], DownloadConfig, Path]:
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    return _write_shards(tmp_path / "corpus"), DownloadConfig(cache_dir=str(tmp_path / "cache"), offline=True), tmp_path


def test_sample_same_documents_whatever_shard_order(shards) -> None:
    paths, cfg, _ = shards
    distinct = len(load_documents(DomainConfig("s", [f"file:{p}" for p in paths]), cfg))
    assert distinct < 240  # the duplicates are gone before sampling
    picks = []
    for order in (paths, paths[::-1], [paths[i] for i in (3, 0, 5, 1, 4, 2)]):
        domain = DomainConfig("s", [f"file:{p}" for p in order], max_documents=50)
        picks.append(set(load_documents(domain, cfg, seed=11)))
    assert all(p == picks[0] for p in picks) and len(picks[0]) == 50
    other = set(load_documents(DomainConfig("s", [f"file:{p}" for p in paths], max_documents=50), cfg, seed=12))
    assert other != picks[0]
    with pytest.raises(UserError, match=rf"domain.max_documents=500 exceeds the corpus's {distinct} distinct "
                                        "documents") as err:
        load_documents(DomainConfig("s", [f"file:{p}" for p in paths], max_documents=500), cfg)
    assert "\n" not in str(err.value)


def test_prepared_sample_identical_with_one_or_two_processes(shards, monkeypatch: pytest.MonkeyPatch) -> None:
    paths, cfg, tmp = shards
    domain = DomainConfig("s", [f"file:{tmp}/corpus/*.jsonl"], max_documents=120, validation_fraction=0.1)
    tokenizer = train_wordpiece(load_documents(dataclasses.replace(domain, max_documents=None), cfg), 80, tmp / "tok")
    monkeypatch.setattr(prepare, "MIN_PARALLEL_BYTES", 0)  # tiny files: force real worker processes
    one = prepare_blocks(domain, tokenizer, 16, cfg, tmp / "one", num_proc=1, seed=5)
    two = prepare_blocks(domain, tokenizer, 16, cfg, tmp / "two", num_proc=2, seed=5)
    assert one.meta["workers"] == 1 and two.meta["workers"] == 2
    for split in ("train", "validation"):
        assert (one[split].numpy() == two[split].numpy()).all()
        assert one.meta[split] == two.meta[split]
    assert one.meta["train"]["documents"] + one.meta["validation"]["documents"] == 120
    assert one.meta["sample"]["distinct_documents"] == len(load_documents(
        dataclasses.replace(domain, max_documents=None), cfg))
    # The same documents as load_documents' sample: same total number of tokens.
    docs = load_documents(domain, cfg, seed=5)
    tokens = sum(len(tokenizer(d)["input_ids"]) for d in docs)
    assert one.meta["train"]["tokens"] + one.meta["validation"]["tokens"] == tokens
    # Shuffled shard order: the same documents in each split (same counts and token totals).
    shuffled = dataclasses.replace(domain, sources=[f"file:{p}" for p in itertools.chain(paths[3:], paths[:3])])
    again = prepare_blocks(shuffled, tokenizer, 16, cfg, tmp / "shuffled", num_proc=1, seed=5)
    for split in ("train", "validation"):
        assert {k: again.meta[split][k] for k in ("documents", "tokens")} == \
               {k: one.meta[split][k] for k in ("documents", "tokens")}
    with pytest.raises(UserError, match="exceeds the corpus's"):
        prepare_blocks(dataclasses.replace(domain, max_documents=10_000), tokenizer, 16, cfg, tmp / "x")
