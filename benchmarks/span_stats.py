"""Span masking on real text: span lengths (words), tokens per copy, masking throughput, per strategy and K.

    PYTHONPATH=. .venv/bin/python benchmarks/span_stats.py [--blocks 400 --draws 4 --threads 1] [--smoke]

Blocks: CS abstracts (``cs_csabstruct`` train) tokenised per document with [CLS]/[SEP] by BERT's WordPiece
and cut into 512-token blocks, as ``femlm.data.corpus`` packs them (so blocks hold inner [CLS]/[SEP]).
It measures whichever ``femlm`` is importable, so pointing PYTHONPATH at an export of an older commit
(``git archive <commit> femlm | tar -x -C /tmp/old``) gives the "before" numbers with the same script.

Columns: ``tau`` = mean budget per copy; ``tok/copy`` = mean tokens per copy; ``span`` = mean placed span in words (a span as the sampler placed it: old sampler = one grown
span, new = one segment piece); ``run`` = mean maximal run of masked adjacent words in a copy (what the model
sees; touching spans merge); ``p(=MLM)`` = chi-square homogeneity p-value of the placed-span histogram against
the MLM-span row of the same ratio (small = different law); ``tok-tau`` = mean / min / max of (tokens in a copy - tau); ``rows/s`` =
model rows per CPU-second of the collator (pad + select + 80/10/10) on ``--batch`` blocks: process CPU time,
best of ``--repeats`` calls, so that other jobs on shared cores inflate it less than wall-clock time would;
``sel/s`` = the same for ``masker.select`` alone (the span sampler without padding and replacement).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from femlm.masking import (
    MaskingCollator,
    MaskingConfig,
    make_generator,
    word_ids_from_starts,
    word_start_table,
)
from femlm.masking.sampling import numpy_rng, sample_word_spans, truncated_geometric_pmf

MIRROR = Path(os.environ.get("FEMLM_MIRROR") or Path(__file__).resolve().parents[2] / "shared" / "data")
VOCAB = MIRROR / "tokenizers" / "bert-base-uncased" / "vocab.txt"
CORPUS = MIRROR / "corpus" / "cs_csabstruct" / "train.jsonl"
CONFIGS = [  # (label, strategy, ratio, K)
    ("MLM-span", "random", 0.15, 1),
    ("FE-span K=2", "fully_explored", 0.15, 2),
    ("FE-span K=4", "fully_explored", 0.15, 4),
    ("iid-span K=4", "iid", 0.15, 4),
    ("MLM-span r=0.125", "random", 0.125, 1),
    ("FE-span K=8 r=0.125", "fully_explored", 0.125, 8),
]


def load_blocks(tok, count: int, size: int = 512) -> torch.Tensor:
    """``count`` blocks of ``size`` ids: documents with [CLS]/[SEP], concatenated and cut (group_texts)."""
    texts = [
        " ".join(json.loads(line)["sentences"]) for line in CORPUS.read_text(encoding="utf-8").splitlines()
    ]
    flat: list[int] = []
    for ids in tok(texts, add_special_tokens=True)["input_ids"]:
        flat += ids
        if len(flat) >= count * size:
            break
    n = min(count, len(flat) // size)
    return torch.tensor(flat[: n * size]).view(n, size)


def row_words(wid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(word_len, adjacent) of one row's maskable tokens from their word ids (as the masker computes them)."""
    first = np.flatnonzero(np.diff(wid, prepend=wid[0] - 1))
    word_len = np.diff(first, append=wid.size)
    return word_len, wid[first][1:] == wid[first][:-1] + 1


def placed_span_lengths(
    masker, ids: torch.Tensor, wid: torch.Tensor, valid: torch.Tensor, seed: int
) -> list[int]:
    """Placed span lengths of one draw of every row: the new sampler's pieces, or the old grown spans."""
    cfg, k = masker.cfg, masker.num_copies
    tau = masker.budget(valid.sum(1)).tolist()
    gen = make_generator(seed, 0)
    try:
        from femlm.masking.spans import batch_words, draw_rows, placed_spans
    except ImportError:  # before: anchor-and-grow, exactly as select_word_level called it
        rng, out = numpy_rng(gen), []
        for b in range(ids.shape[0]):
            word_len, adjacent = row_words(wid[b][valid[b]].numpy())
            calls = [[tau[b]] * k] if cfg.strategy == "fully_explored" else [[tau[b]]] * k
            for budgets in calls:
                spans = sample_word_spans(word_len.tolist(), adjacent.tolist(), budgets, rng,
                                          masker.span_lengths, masker.span_pmf)  # fmt: skip
                out += [n for _, _, n in spans]
        return out
    per_draw = k if cfg.strategy == "fully_explored" else 1
    w, v, t = wid.numpy(), valid.numpy(), np.array(tau)
    if per_draw == 1 and k > 1:
        w, v, t = (np.repeat(x, k, axis=0) for x in (w, v, t))
    _, _, _, word_len, new_run, word_row = batch_words(w, v)
    draw = draw_rows(word_len, new_run, word_row, t, per_draw, numpy_rng(gen), masker.span_law)
    return placed_spans(draw)[2].tolist()


def run_lengths(sel: torch.Tensor, wid: torch.Tensor) -> list[int]:
    """Lengths in words of maximal runs of masked, adjacent words of every copy."""
    out = []
    for b in range(sel.shape[0]):
        for c in range(sel.shape[1]):
            words = np.unique(wid[b][sel[b, c]].numpy())
            if words.size:
                breaks = np.flatnonzero(np.diff(words) != 1)
                out += np.diff(np.concatenate(([-1], breaks, [words.size - 1]))).tolist()
    return out


def cpu_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Best process CPU time of ``repeats`` calls after a warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=400)
    ap.add_argument("--draws", type=int, default=4, help="independent mask draws per block")
    ap.add_argument("--batch", type=int, default=64, help="blocks per collator call in the timing")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="8 blocks, one draw, one repeat: checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.blocks, args.draws, args.batch, args.repeats = 8, 1, 4, 1
    torch.set_num_threads(args.threads)
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast(vocab=str(VOCAB))  # transformers >= 5 (vocab_file= there gives a 5-token vocab)
    if len(tok) < 10:
        tok = BertTokenizerFast(vocab_file=str(VOCAB))  # transformers 4
    ids = load_blocks(tok, args.blocks)
    table = word_start_table(tok)
    import femlm

    print(f"femlm from {Path(femlm.__file__).parent}; {ids.shape[0]} blocks x {ids.shape[1]} tokens of "
          f"{CORPUS.parent.name}; {args.draws} draws per block; torch threads {args.threads}")  # fmt: skip
    lengths, pmf = truncated_geometric_pmf(0.2, 1, 10)
    print(f"truncated geometric pmf (p=0.2, 1..10) mean {float((lengths * pmf).sum()):.3f} words")
    header = (f"{'config':<21} {'tau':>6} {'tok/copy':>8} {'span':>6} {'p(=MLM)':>8} {'run':>6} "
              f"{'tok-tau mean/min/max':>21} {'rows/s':>8} {'sel/s':>8}")  # fmt: skip
    print(header + "\n" + "-" * len(header))
    mlm_histogram: dict[float, np.ndarray] = {}
    for label, strategy, ratio, k in CONFIGS:
        cfg = MaskingConfig(name=label, strategy=strategy, granularity="span", ratio=ratio, num_masks=k)
        collator = MaskingCollator.from_tokenizer(cfg, tok, seed=0)
        masker = collator.masker
        valid = masker.valid_mask(ids)
        wid = word_ids_from_starts(ids, table, ~valid)
        tau = masker.budget(valid.sum(1))
        spans, runs, dev = [], [], []
        for d in range(args.draws):
            spans += placed_span_lengths(masker, ids, wid, valid, seed=d)
            sel = masker.select(ids, None, make_generator(100 + d, 0))
            runs += run_lengths(sel, wid)
            dev += (sel.sum(-1) - tau[:, None]).flatten().tolist()
        histogram = np.bincount(spans, minlength=11)[1:]
        mlm_histogram.setdefault(ratio, histogram)  # CONFIGS lists MLM-span first for each ratio
        pair = np.stack([histogram, mlm_histogram[ratio]])
        p_same = stats.chi2_contingency(pair[:, pair.sum(0) > 0]).pvalue
        feats = [{"input_ids": row} for row in ids[: args.batch].tolist()]
        block = ids[: args.batch]
        rows_per_s = args.batch * masker.num_copies / cpu_seconds(partial(collator, feats), args.repeats)
        select = partial(masker.select, block, None, make_generator(0, 0))
        sel_per_s = args.batch * masker.num_copies / cpu_seconds(select, args.repeats)
        mean_tau = float(tau.double().mean())
        print(f"{label:<21} {mean_tau:>6.2f} {mean_tau + np.mean(dev):>8.2f} {np.mean(spans):>6.3f} {p_same:>8.2g} "
              f"{np.mean(runs):>6.3f} "
              f"{np.mean(dev):>+9.3f} {min(dev):>+5d} {max(dev):>+5d} {rows_per_s:>8.0f} {sel_per_s:>8.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
