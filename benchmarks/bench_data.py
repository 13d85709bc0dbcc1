"""Corpus preparation throughput: femlm's `prepare_blocks` vs a run_mlm.py-style pipeline, same text, same tokenizer.

    FEMLM_MIRROR=../shared/data .venv/bin/python benchmarks/bench_data.py [--domain cs] [--tokenizer bert-base-uncased]
        [--smoke]

* femlm cold: `prepare_blocks` end to end into an empty cache (reads and parses the mirror files, splits
  documents, tokenizes in worker processes, writes the token files; `femlm.data.prepare`). The mirror's
  corpora are small, so preparation stays in one process here: benchmarks/bench_corpus.py measures the
  parallel path on a large synthetic corpus.
* run_mlm.py-style: the same documents already in memory, ``map(tokenize, return_special_tokens_mask=True)``
  then ``map(group_texts, batch_size=1000)`` exactly as transformers' examples/pytorch/language-modeling/
  run_mlm.py (no reading, no saving: this favours it).
* femlm cached: a second `prepare_blocks` call (loads the saved blocks).

Throughput is tokens of the corpus (with special tokens) per second; best of ``--repeats`` runs, since
the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from itertools import chain
from pathlib import Path

from _common import config  # noqa: E402,I001 (puts the repository on sys.path)
from datasets import Dataset, disable_progress_bars

from femlm.data.config import DownloadConfig  # noqa: E402
from femlm.data.corpus import blocks_meta, load_documents, prepare_blocks  # noqa: E402
from femlm.models.load import load_tokenizer  # noqa: E402


def run_mlm_style(docs: list[str], tokenizer, block_size: int, num_proc: int) -> int:  # noqa: ANN001
    """run_mlm.py's non-line-by-line preprocessing; returns the number of blocks."""
    def tokenize_function(examples: dict) -> dict:
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples: dict) -> dict:
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = (len(concatenated[next(iter(examples))]) // block_size) * block_size
        return {k: [t[i:i + block_size] for i in range(0, total, block_size)] for k, t in concatenated.items()}

    ds = Dataset.from_dict({"text": docs})
    tokenized = ds.map(tokenize_function, batched=True, num_proc=num_proc, remove_columns=["text"])
    grouped = tokenized.map(group_texts, batched=True, num_proc=num_proc)  # batch_size defaults to 1000
    return len(grouped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="cs")
    parser.add_argument("--tokenizer", default="bert-base-uncased")
    parser.add_argument("--block-size", type=int, default=512)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one repeat, one process: checks it runs")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.num_proc = 1, 1
    mirror = os.environ.get("FEMLM_MIRROR") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
    disable_progress_bars()
    with tempfile.TemporaryDirectory() as tmp:
        download = DownloadConfig(mirror=mirror, cache_dir=tmp, offline=True)
        domain = config("continual-pretrain", "preset=tiny", f"domain={args.domain}").domain  # the offline stand-in
        tokenizer = load_tokenizer(args.tokenizer, download)
        docs = load_documents(domain, download)

        cold, cached = [], []
        meta = {}
        for r in range(args.repeats):
            cache = Path(tmp) / f"run{r}"
            start = time.perf_counter()
            dd = prepare_blocks(domain, tokenizer, args.block_size, download, cache, num_proc=args.num_proc)
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            prepare_blocks(domain, tokenizer, args.block_size, download, cache, num_proc=args.num_proc)
            cached.append(time.perf_counter() - start)
            meta = blocks_meta(dd.path)
        tokens = meta["train"]["tokens"] + meta["validation"]["tokens"]
        blocks = meta["train"]["blocks"] + meta["validation"]["blocks"]

        hf = []
        hf_blocks = 0
        for _ in range(args.repeats):
            start = time.perf_counter()
            hf_blocks = run_mlm_style(docs, tokenizer, args.block_size, args.num_proc)
            hf.append(time.perf_counter() - start)

    print(f"domain {args.domain}: {len(docs):,} documents, {tokens:,} tokens ({args.tokenizer}), block "
          f"{args.block_size}, num_proc {args.num_proc}, best of {args.repeats}")
    print(f"{'path':<34} {'seconds':>8} {'tokens/s':>12} {'blocks':>7}")
    print(f"{'femlm prepare_blocks (cold)':<34} {min(cold):>8.3f} {tokens / min(cold):>12,.0f} {blocks:>7}")
    print(f"{'run_mlm.py-style map+group_texts':<34} {min(hf):>8.3f} {tokens / min(hf):>12,.0f} {hf_blocks:>7}")
    print(f"{'femlm prepare_blocks (cached)':<34} {min(cached):>8.3f} {tokens / min(cached):>12,.0f} {blocks:>7}")
    print(f"speed-up cold vs run_mlm.py-style: {min(hf) / min(cold):.2f}x; cached: {min(hf) / min(cached):.0f}x")


if __name__ == "__main__":
    main()
