"""Micro-benchmark: masking throughput per strategy vs HF DataCollatorForLanguageModeling, FE across passes as
the trainer builds it, and masking time as a share of a tiny BERT training step.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_masking.py [--sequences 256 --length 128 --threads 1] [--smoke]

All collators see the same pre-tokenised 128-token blocks (wikitext-2 valid split when the shared data mirror
is present, random ids otherwise). Throughput counts *input* sequences per second; K-copy strategies emit K
rows per sequence, so their rows/s is K times larger. Timings are medians over ``--repeats`` calls after a
warm-up call; the default single torch thread mimics a DataLoader worker and keeps the shared cores free.

FE across passes (``fe_passes_*``) masks by sequence key and visit, not through the collator: its table times
what ``PretrainCore.batch`` runs, ``mask_visits`` on the ``[sequences, length]`` block tensor (keys 0..B-1, visits
spread over four cycles), against ``mlm_subword``'s masker (the exact-count MLM arm) on the same tensor, median
of ``--builds`` builds; beside it the per-row code it replaced (issue 46; tests/helpers/passes_reference.py), and
whether the two built the same masks bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _common import ROOT, config  # noqa: I001 (puts the repository on sys.path)

from femlm.masking import MaskingCollator, MaskingConfig, make_generator, sequences_per_batch
from femlm.masking.passes import mask_visits
from femlm.runs import cpu_model
from helpers.passes_reference import mask_visits_per_row

MIRROR = ROOT.parent / "shared" / "data"
BERT_DIR = MIRROR / "tokenizers" / "bert-base-uncased"
WIKI = MIRROR / "corpus" / "wikitext-2" / "wiki.valid.tokens"
CONFIGS = [
    "mlm_bernoulli", "mlm_subword", "fe_subword", "iid_subword", "mlm_wwm", "mlm_span", "fe_span", "iid_span",
]  # fmt: skip
PASSES_ARMS = ["fe_passes_subword", "fe_passes_word", "fe_passes_span"]


def load_tokenizer() -> Any:
    """BERT WordPiece from the shared mirror, else a tiny offline vocabulary."""
    from transformers import BertTokenizerFast

    vocab = BERT_DIR / "vocab.txt"
    if not vocab.exists():
        import tempfile

        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(500)]
        words += [f"##p{i}" for i in range(100)]
        vocab = Path(tempfile.mkdtemp()) / "vocab.txt"
        vocab.write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(vocab=str(vocab))  # transformers >= 5
    if len(tok) < 10:
        tok = BertTokenizerFast(vocab_file=str(vocab))  # transformers 4
    return tok


def make_features(tok: Any, n: int, length: int) -> list[dict[str, list[int]]]:
    """``n`` packed blocks ``[CLS] ... [SEP]`` of ``length`` tokens, as ``run_mlm.py``'s group_texts gives."""
    body = length - 2
    if WIKI.exists():
        text = WIKI.read_text(encoding="utf-8")[: 4_000 * n]
        ids = tok(text, add_special_tokens=False)["input_ids"]
    else:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(5, len(tok), (n * body,), generator=g).tolist()
    while len(ids) < n * body:
        ids = ids + ids
    feats = []
    for i in range(n):
        row = [tok.cls_token_id, *ids[i * body : (i + 1) * body], tok.sep_token_id]
        feats.append({"input_ids": row, "special_tokens_mask": [1] + [0] * body + [1]})
    return feats


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up (lazy init, allocator)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hf_collator(tok: Any) -> Callable[[list[dict]], dict]:
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=0)


def ours(tok: Any, name: str) -> tuple[MaskingConfig, MaskingCollator]:
    cfg = config("pretrain-scratch", f"masking={name}").masking
    return cfg, MaskingCollator.from_tokenizer(cfg, tok, seed=0)


def passes_table(tok: Any, feats: list[dict[str, list[int]]], builds: int, reference: bool) -> None:
    """FE across passes as the trainer builds it, against mlm_subword's masker on the same block tensor."""
    ids = torch.tensor([f["input_ids"] for f in feats])
    rows = ids.shape[0]
    mlm = ours(tok, "mlm_subword")[1].masker
    base = median_time(lambda: mlm(ids, None, make_generator(0, 1)), builds)
    print(f"\nFE across passes as the trainer builds it ({rows}x{ids.shape[1]} block tensor, median of {builds} "
          f"builds, {cpu_model()}, torch threads={torch.get_num_threads()})")
    print(f"{'masks':<36} {'ms/batch':>9} {'vs mlm_subword':>15} {'per-row code':>13} {'speed-up':>9} {'same bits':>9}")
    print(f"{'mlm_subword (masker)':<36} {base * 1e3:>9.2f} {1.0:>14.2f}x")
    keys = torch.arange(rows)
    for name in PASSES_ARMS:
        cfg, collator = ours(tok, name)
        masker = collator.masker
        visits = torch.arange(rows) % (4 * cfg.num_masks)  # every slot of four cycles
        sec = median_time(lambda m=masker, v=visits: mask_visits(m, ids, keys, v, 0), builds)
        line = f"{name:<36} {sec * 1e3:>9.2f} {sec / base:>14.2f}x"
        if reference:
            before = median_time(lambda m=masker, v=visits: mask_visits_per_row(m, ids, keys, v, 0), builds)
            got, want = mask_visits(masker, ids, keys, visits, 0), mask_visits_per_row(masker, ids, keys, visits, 0)
            same = all(torch.equal(got[k], want[k]) for k in want)
            line += f" {before * 1e3:>10.2f} ms {before / sec:>8.1f}x {'yes' if same else 'NO':>9}"
        print(line)


def step_time(tok: Any, rows: int, length: int, repeats: int) -> float:
    """Median seconds of one AdamW step of a 4-layer, hidden-256 BERT MLM on ``rows x length`` tokens."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
    )
    model = BertForMaskedLM(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    _, col = ours(tok, "mlm_subword")
    batch = col(make_features(tok, rows, length))
    batch.pop("sequence_index"), batch.pop("copy_index")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        opt.step()

    return median_time(step, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=256)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--step-batch", type=int, default=32)
    ap.add_argument("--step-repeats", type=int, default=3)
    ap.add_argument("--builds", type=int, default=20, help="builds per FE-across-passes median")
    ap.add_argument("--no-reference", action="store_true", help="skip timing the per-row passes code")
    ap.add_argument("--no-model", action="store_true", help="skip the training-step comparison")
    ap.add_argument("--smoke", action="store_true", help="16 short sequences, one repeat: checks it runs")
    args = ap.parse_args()
    if args.smoke:
        args.sequences, args.length, args.repeats, args.step_batch, args.step_repeats = 16, 32, 1, 4, 1
        args.builds = 1
    torch.set_num_threads(args.threads)
    tok = load_tokenizer()
    feats = make_features(tok, args.sequences, args.length)
    print(f"tokenizer vocab={len(tok)}  data={'wikitext-2' if WIKI.exists() else 'random ids'}  "
          f"batch={args.sequences}x{args.length}  torch threads={args.threads}  CPU: {cpu_model()}")  # fmt: skip

    results: list[tuple[str, int, float]] = []
    hf = hf_collator(tok)
    results.append(("HF DataCollatorForLanguageModeling", 1, median_time(lambda: hf(feats), args.repeats)))
    no_stm = [{"input_ids": f["input_ids"]} for f in feats]
    results.append(("HF (no special_tokens_mask given)", 1, median_time(lambda: hf(no_stm), args.repeats)))
    collators = {}
    for name in CONFIGS:
        cfg, col = ours(tok, name)
        collators[name] = (cfg, col)
        results.append((name, cfg.num_copies, median_time(lambda col=col: col(feats), args.repeats)))

    hf_rate = args.sequences / results[0][2]
    print(f"\n{'collator':<36} {'K':>2} {'ms/batch':>9} {'seq/s':>10} {'rows/s':>10} {'vs HF':>7}")
    for name, k, sec in results:
        rate = args.sequences / sec
        print(f"{name:<36} {k:>2} {sec * 1e3:>9.2f} {rate:>10.0f} {rate * k:>10.0f} {rate / hf_rate:>6.2f}x")
    passes_table(tok, feats, args.builds, not args.no_reference)

    if args.no_model:
        return
    step = step_time(tok, args.step_batch, args.length, args.step_repeats)
    print(
        f"\ntiny BERT (4 layers, hidden 256) AdamW step, batch {args.step_batch}x{args.length}: {step * 1e3:.0f} ms"
    )
    print(f"{'collator':<36} {'seqs in':>7} {'ms/batch':>9} {'% of step':>9}")
    small_hf = feats[: args.step_batch]
    sec = median_time(lambda: hf(small_hf), args.repeats)
    print(
        f"{'HF DataCollatorForLanguageModeling':<36} {args.step_batch:>7} {sec * 1e3:>9.2f} {100 * sec / step:>8.2f}%"
    )
    for name, (cfg, col) in collators.items():
        n = sequences_per_batch(args.step_batch, cfg.num_copies)
        sec = median_time(lambda col=col, n=n: col(feats[:n]), args.repeats)
        print(f"{name:<36} {n:>7} {sec * 1e3:>9.2f} {100 * sec / step:>8.2f}%")


if __name__ == "__main__":
    main()
