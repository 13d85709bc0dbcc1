"""Worker tokenization gives exactly ``tokenizer(text)["input_ids"]`` (special tokens included), including the
plain-ASCII fast path of BERT-style tokenizers."""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pytest

from femlm.data import workers
from femlm.data.config import DownloadConfig
from femlm.models.load import load_tokenizer

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
pytestmark = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no local mirror at {MIRROR}")
TRICKY = ["Plain ASCII, with punctuation: (a) [b] {c}; d's \"e\" -- f.", "Tabs\tand\nnew\r\nlines  ",
          "Control\x01chars\x7fand\x0bvertical\x0ctabs\x1f", "Café naïve Ångström", "中文字符 and 日本語",
          "emoji 🙂 and curly ‘quotes’ — dashes", "UPPER lower MiXeD 123 4.5e-6", "", "   ", "\x00nul"]


def _random_ascii(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    alphabet = np.array(list(string.printable + "\x01\x02\x1b\x7f"))
    return ["".join(rng.choice(alphabet, rng.integers(1, 300))) for _ in range(n)]


@pytest.mark.parametrize("name", ["bert-base-uncased", "roberta-base"])
def test_worker_ids_equal_the_tokenizer(name: str) -> None:
    tokenizer = load_tokenizer(name, DownloadConfig(mirror=str(MIRROR), offline=True))
    job = workers.Job("tokenize", DownloadConfig(), tokenizer_json=tokenizer.backend_tokenizer.to_str())
    workers.init_worker(job, in_process=True)
    assert (workers._STATE["ascii_tokenizer"] is not None) == (name == "bert-base-uncased")
    docs = TRICKY + _random_ascii(400)
    expected = tokenizer(docs, add_special_tokens=True, verbose=False)["input_ids"]
    assert workers.encode(docs) == expected
