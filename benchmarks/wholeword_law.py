"""Whole-word FE vs MLM whole-word: the numbers quoted in docs/masking-laws.md (issue 27, item 5).

    PYTHONPATH=. .venv/bin/python benchmarks/wholeword_law.py [--rows 40 --draws 1500]

Prints (1) exact laws by enumerating every word order on small rows: TV between one FE copy and the MLM mask,
P(conflict), P(copy under budget), for the sampler in femlm.masking.wholeword and the previous greedy
K-budget sampler (``sample_word_spans``); (2) on wikitext-2 with bert-base-uncased (128-token blocks, ratio
0.15): the conflict rate and the per-word masking probability by word length, FE copy vs MLM, old and new.
Also times both FE samplers on the same rows.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from femlm.masking import sample_word_spans, word_ids_from_starts, word_start_table  # noqa: E402
from femlm.masking.sampling import mask_budget, row_words  # noqa: E402
from femlm.masking.wholeword import deal_whole_words, sample_whole_words  # noqa: E402

MIRROR = ROOT.parent / "shared" / "data"
ONE = (np.array([1]), np.array([1.0]))
CASES = [([1, 1, 2, 2], 2, 3), ([1, 1, 1, 1, 1, 2, 2, 3, 1], 4, 2), ([3, 2, 1, 1, 1, 2, 1], 2, 3),
         ([1, 3, 2, 2, 1], 3, 2), ([1, 1, 3, 1, 1, 1, 3], 2, 2)]  # fmt: skip


class Scripted:
    def __init__(self, *perms: list[int]) -> None:
        self.perms = list(perms)

    def permutation(self, n: int) -> np.ndarray:
        return np.array(self.perms.pop(0))


def exact(word_len: list[int], tau: int, k: int) -> str:
    n, mlm, new, old, conflicts = len(word_len), Counter(), Counter(), Counter(), 0
    for order in itertools.permutations(range(n)):
        mlm[frozenset(w for w, o in enumerate(deal_whole_words(word_len, tau, 1, order)[0]) if o == 0)] += k
        owner, conflict = deal_whole_words(word_len, tau, k, order)
        conflicts += conflict
        for c in range(k):
            new[frozenset(w for w, o in enumerate(owner) if o == c)] += 1
        for priority in itertools.permutations(range(k)):
            spans = sample_word_spans(word_len, [True] * (n - 1), [tau] * k, Scripted(list(priority), list(order)), *ONE)
            for c in range(k):
                old[frozenset(w0 for copy, w0, _ in spans if copy == c)] += 1

    def law(c: Counter) -> dict:
        total = sum(c.values())
        return {s: Fraction(v, total) for s, v in c.items()}

    mu, p_new, p_old = law(mlm), law(new), law(old)
    tv = lambda p: float(sum(abs(p.get(s, 0) - mu.get(s, 0)) for s in set(p) | set(mu)) / 2)  # noqa: E731
    under = lambda p: float(sum(v for s, v in p.items() if sum(word_len[w] for w in s) < tau))  # noqa: E731
    pc = conflicts / len(list(itertools.permutations(range(n))))
    return (f"{str(word_len):<30} tau {tau} K {k}: new TV {tv(p_new):.4f} (P(conflict) {pc:.4f}, under {under(p_new):.3f})"
            f"   old TV {tv(p_old):.4f} (under {under(p_old):.3f})")  # fmt: skip


def real_rows(rows: int, body: int = 126) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MIRROR / "tokenizers" / "bert-base-uncased"))
    text = (MIRROR / "corpus" / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8")
    ids = tok(text[: 6 * rows * body + 20_000], add_special_tokens=False)["input_ids"]
    ids = torch.tensor(ids[: rows * body]).view(rows, body)
    wid = word_ids_from_starts(ids, word_start_table(tok), torch.zeros_like(ids, dtype=torch.bool))
    return [row_words(w.numpy())[0].tolist() for w in wid]


def simulate(rows: list[list[int]], ratio: float, k: int, draws: int, sampler: str, seed: int = 0):
    """Per word length 1, 2, 3, 4+: P(word in a given copy); P(conflict); P(copy under budget); seconds."""
    rng = np.random.default_rng(seed)
    hits, offered, conflicts, under, copies = np.zeros(5), np.zeros(5), 0, 0, 0
    start = time.perf_counter()
    for word_len in rows:
        tau = int(mask_budget(torch.tensor([sum(word_len)]), ratio, k)[0])
        cls, lens = np.minimum(word_len, 4), np.asarray(word_len)
        for _ in range(draws):
            if sampler == "new" or k == 1:
                owner, conflict = deal_whole_words(word_len, tau, k, rng.permutation(len(word_len)).tolist())
                owner = np.asarray(owner)
                conflicts += conflict
            else:
                owner = np.full(len(word_len), -1)
                for c, w0, _ in sample_word_spans(word_len, [True] * (len(word_len) - 1), [tau] * k, rng, *ONE):
                    owner[w0] = c
            hits += np.bincount(cls[owner >= 0], minlength=5)
            offered += np.bincount(cls, minlength=5) * k
            under += int((np.bincount(owner[owner >= 0], weights=lens[owner >= 0], minlength=k) < tau).sum())
            copies += k
    seconds = time.perf_counter() - start
    return hits[1:] / offered[1:], conflicts / (len(rows) * draws), under / copies, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--draws", type=int, default=1500)
    ap.add_argument("--no-exact", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="2 rows, 20 draws, one exact case: seconds (figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        args.rows, args.draws = 2, 20
    if not args.no_exact:
        print("exact (every word order):")
        for case in CASES[:1] if args.smoke else CASES:
            print(" ", exact(*case))
    rows = real_rows(args.rows)
    print(f"\nwikitext-2 valid, bert-base-uncased, {args.rows} blocks of 128 tokens, {args.draws} draws per block;"
          " P(word in a copy) for words of 1 / 2 / 3 / 4+ tokens")  # fmt: skip
    for ratio, k in [(0.15, 4), (0.15, 6)]:
        mlm = simulate(rows, ratio, 1, args.draws, "new", seed=1)
        print(f"  ratio {ratio} K {k}:  MLM      p={np.round(mlm[0], 4)}")
        for sampler in ("new", "old"):
            p, pc, under, sec = simulate(rows, ratio, k, args.draws, sampler, seed=2)
            print(f"    FE {sampler}: p={np.round(p, 4)} max|dp|={np.abs(p - mlm[0]).max():.4f} "
                  f"P(conflict)={pc:.4f} P(copy under budget)={under:.4f}  {sec:.2f} s")  # fmt: skip
    timing_rows = rows * (1 if args.smoke else 4)
    for k in (4, 6):
        tau = [int(mask_budget(torch.tensor([sum(w)]), 0.15, k)[0]) for w in timing_rows]
        rng = np.random.default_rng(0)
        start = time.perf_counter()
        for w, t in zip(timing_rows, tau, strict=True):
            sample_word_spans(w, [True] * (len(w) - 1), [t] * k, rng, *ONE)
        old_s = time.perf_counter() - start
        start = time.perf_counter()
        for w, t in zip(timing_rows, tau, strict=True):
            sample_whole_words(w, t, k, rng)
        new_s = time.perf_counter() - start
        print(f"\ntiming, {len(timing_rows)} rows, K {k}: old {1e3 * old_s / len(timing_rows):.3f} ms/row, "
              f"new {1e3 * new_s / len(timing_rows):.3f} ms/row")  # fmt: skip


if __name__ == "__main__":
    main()
