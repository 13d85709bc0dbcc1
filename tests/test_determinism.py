"""Corpus preparation and vocabulary training give the same bytes for the same input in one environment (issue
40): a vocabulary trained in two processes, and a corpus prepared with one and two worker processes, have the
same sha256; the fingerprints results record are those of the files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from femlm.data import prepare
from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import prepare_blocks
from femlm.data.tokenizer import vocabulary_fingerprint
from femlm.data.tokens import corpus_fingerprints, file_sha256
from femlm.data.wordpiece import train_wordpiece

REPO = Path(__file__).resolve().parent.parent
# Many words of equal count: merges tie, which is where tokenizers 0.23's trainer differs between processes (it
# gave 4 different vocabularies in 4 processes on this corpus before femlm trained in two passes).
TRAIN = """
import json, sys
import numpy as np
from femlm.data.wordpiece import train_wordpiece
rng = np.random.default_rng(0)
letters = list("abcdefghijklmnopqrstuvwxyz")
words = ["".join(rng.choice(letters, rng.integers(2, 8))) for _ in range(300)]
docs = [" ".join(rng.choice(words, 40)) for _ in range(60)]
if len(sys.argv) > 2:
    json.dump(docs, open(sys.argv[2], "w"))
train_wordpiece(docs, 200, sys.argv[1])
"""


def _train_in_process(out: Path, docs_file: Path | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", TRAIN, str(out)] + ([str(docs_file)] if docs_file else [])
    subprocess.run(argv, check=True, env=env, cwd=REPO, capture_output=True, timeout=300)


def test_vocabulary_is_the_same_in_two_processes(tmp_path: Path) -> None:
    _train_in_process(tmp_path / "a", tmp_path / "docs.json")
    docs = json.loads((tmp_path / "docs.json").read_text())
    tokenizer = train_wordpiece(docs, 200, tmp_path / "b")  # this process: another hash-map seed
    a, b = (tmp_path / "a" / "vocab.txt").read_bytes(), (tmp_path / "b" / "vocab.txt").read_bytes()
    assert a == b
    assert len(a.splitlines()) == 200
    # the fingerprint results record is the vocab.txt's sha256
    assert vocabulary_fingerprint(tokenizer) == hashlib.sha256(b).hexdigest()


def test_corpus_is_the_same_with_one_or_two_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    words = ["mask", "token", "variance", "gradient", "corpus", "block", "the", "of", "model", "seed"]
    (tmp_path / "corpus").mkdir()
    for shard in range(3):
        docs = [" ".join(rng.choice(words, 30)) + f" doc {shard}-{i}" for i in range(40)]
        (tmp_path / "corpus" / f"part{shard}.txt").write_text("\n\n".join(docs))
    domain = DomainConfig("toy", [f"file:{tmp_path}/corpus/*.txt"], validation_fraction=0.1)
    cfg = DownloadConfig(offline=True, cache_dir=str(tmp_path / "cache"))
    tokenizer = train_wordpiece([" ".join(words)] * 3, 60, tmp_path / "tok")
    monkeypatch.setattr(prepare, "MIN_PARALLEL_BYTES", 0)  # tiny files: real worker processes
    one = prepare_blocks(domain, tokenizer, 16, cfg, tmp_path / "one", num_proc=1, seed=3)
    two = prepare_blocks(domain, tokenizer, 16, cfg, tmp_path / "two", num_proc=2, seed=3)
    assert (one.meta["workers"], two.meta["workers"]) == (1, 2)
    assert one.meta["sha256"] == two.meta["sha256"]
    assert one.meta["sha256"] == {s: file_sha256(one.path / f"{s}.bin") for s in ("train", "validation")}
    # a corpus prepared before meta.json held its fingerprints: hashed from its files, the same values
    assert corpus_fingerprints({"path": str(two.path)}) == one.meta["sha256"]
    assert corpus_fingerprints({"path": str(tmp_path / "gone")}) is None
