"""Corpus preparation at scale, and training start on a prepared corpus: femlm vs a run_mlm.py-style pipeline.

    .venv/bin/python benchmarks/bench_corpus.py [--size-gb 1.0] [--procs 2] [--work-dir /tmp/femlm-bench-corpus]
        [--smoke]  (a 1 MB corpus, one process, in a temporary directory: checks every part runs)

1. Generates a synthetic corpus of ``--size-gb`` GB of text (Zipf-distributed words of the bert-base-uncased
   vocabulary, documents of log-normal length) as 20 jsonl shards; reused when already there.
2. Prepares it two ways, each in a fresh process with ``--procs`` processes, from the raw jsonl files to
   512-token blocks on disk, same tokenizer (bert-base-uncased from the mirror), same tokens:
   * femlm: `femlm.data.prepare.prepare_corpus` (worker processes, uint16 token files);
   * run_mlm.py-style: ``load_dataset("json")``, ``map(tokenize, return_special_tokens_mask=True)``,
     ``map(group_texts)`` exactly as transformers' examples/pytorch/language-modeling/run_mlm.py, with
     ``num_proc=--procs`` (its Arrow caches in a fresh directory).
   Reported: seconds, tokens/s (tokens produced, special tokens included) and their ratio (goal: femlm at
   least 1.5x), and the peak memory of each side summed over its processes (PSS, so pages that forked
   workers share are not counted twice). TOKENIZERS_PARALLELISM=false on both sides: N processes, N cores.
3. Prepares a 10x smaller corpus (2 of the 20 shards), then starts training on each prepared corpus in a
   fresh process (a small BERT, batch 8 x 512, so the model does not dominate): resident memory after the
   first optimizer step (goal: the big corpus within 100 MB of the small one) and the time from process
   start to the end of that step (goal: under 10 s).

Disk: the corpus, femlm's token files (2 bytes a token) and the run_mlm.py side's Arrow caches (several int64
columns, about 16x the text for the 1 GB corpus: have 20 GB free). Caches are deleted after each side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("FEMLM_MIRROR") or REPO.parent / "shared" / "data")
VOCAB = MIRROR / "tokenizers" / "bert-base-uncased" / "vocab.txt"
SHARDS = 20
BLOCK = 512


# ------------------------------------------------------------------------------------------- the corpus
def generate(out: Path, size_gb: float, seed: int = 0) -> dict:
    """`SHARDS` jsonl files of synthetic documents, about `size_gb` GB of text in all (reused if present)."""
    import numpy as np

    stamp = out / "corpus.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("size_gb") == size_gb:
        return json.loads(stamp.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    words = [w for w in VOCAB.read_text(encoding="utf-8").split("\n") if w.isalpha() and w.isascii() and len(w) > 1]
    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(len(words)) + 2.7)
    p /= p.sum()
    vocab = np.array(words, dtype=object)
    start, target, docs, written = time.perf_counter(), int(size_gb * 1e9), 0, 0
    per_shard = target // SHARDS
    for shard in range(SHARDS):
        with open(out / f"part-{shard:02d}.jsonl", "w", encoding="utf-8") as handle:
            size = 0
            while size < per_shard:
                n = int(min(max(rng.lognormal(6.2, 0.8), 30), 8000))  # words: median ~500
                picked = vocab[rng.choice(len(words), n, p=p)]
                sentences = [" ".join(picked[i:i + 18]).capitalize() + "." for i in range(0, n, 18)]
                line = json.dumps({"text": " ".join(sentences)}) + "\n"
                handle.write(line)
                size += len(line)
                docs += 1
        written += size
    info = {"size_gb": size_gb, "bytes": written, "documents": docs, "shards": SHARDS,
            "seconds": round(time.perf_counter() - start, 1)}
    stamp.write_text(json.dumps(info))
    return info


# ------------------------------------------------------------------------------------------- children
def _tokenizer():  # noqa: ANN202 - a transformers class
    from femlm.data.config import DownloadConfig
    from femlm.models.load import load_tokenizer

    return load_tokenizer(str(VOCAB.parent) if (VOCAB.parent / "tokenizer.json").is_file() else "bert-base-uncased",
                          DownloadConfig(mirror=str(MIRROR), offline=True))


def child_femlm(files: list[str], cache: Path, procs: int) -> dict:
    from femlm.data.config import DomainConfig, DownloadConfig
    from femlm.data.prepare import prepare_corpus

    tokenizer = _tokenizer()
    domain = DomainConfig("bench", [f"file:{f}" for f in files], None, None, None)
    start = time.perf_counter()
    corpus = prepare_corpus(domain, tokenizer, BLOCK, DownloadConfig(cache_dir=str(cache), offline=True), cache,
                            num_proc=procs, progress=False)
    seconds = time.perf_counter() - start
    meta = corpus.meta
    return {"seconds": seconds, "tokens": meta["train"]["tokens"] + meta["validation"]["tokens"],
            "blocks": meta["train"]["blocks"] + meta["validation"]["blocks"], "workers": meta["workers"],
            "path": str(corpus.path)}


def child_runmlm(files: list[str], cache: Path, procs: int) -> dict:
    from itertools import chain

    import datasets

    datasets.disable_progress_bars()
    tokenizer = _tokenizer()
    start = time.perf_counter()
    raw = datasets.load_dataset("json", data_files=files, split="train", cache_dir=str(cache))

    def tokenize_function(examples: dict) -> dict:
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples: dict) -> dict:
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = (len(concatenated[next(iter(examples))]) // BLOCK) * BLOCK
        return {k: [t[i:i + BLOCK] for i in range(0, total, BLOCK)] for k, t in concatenated.items()}

    tokenized = raw.map(tokenize_function, batched=True, num_proc=procs, remove_columns=["text"])
    mapped = time.perf_counter()
    tokens = sum(len(ids) for batch in tokenized.select_columns("input_ids").iter(batch_size=10_000)
                 for ids in batch["input_ids"])  # counting is not part of the pipeline: not timed
    regroup = time.perf_counter()
    grouped = tokenized.map(group_texts, batched=True, num_proc=procs)
    seconds = (mapped - start) + (time.perf_counter() - regroup)
    return {"seconds": seconds, "tokens": tokens, "blocks": len(grouped), "workers": procs}


def child_train(files: list[str], cache: Path) -> dict:
    """Start training on a prepared corpus the way a run does (cache key, then the cached corpus: no reading,
    no tokenizing), build a small BERT and its optimizer, take one step; time each part."""
    started = float(os.environ["BENCH_T0"])
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    from femlm.data.config import DomainConfig, DownloadConfig
    from femlm.data.prepare import prepare_corpus
    from femlm.masking import MaskingConfig, build_masker
    from femlm.runtime.config import RuntimeConfig
    from femlm.train.config import TrainerConfig
    from femlm.train.core import PretrainCore

    imported = time.time()
    tokenizer = _tokenizer()
    domain = DomainConfig("bench", [f"file:{f}" for f in files], None, None, None)
    corpus = prepare_corpus(domain, tokenizer, BLOCK, DownloadConfig(cache_dir=str(cache), offline=True), cache,
                            num_proc=1, progress=False)
    opened = time.time()
    torch.manual_seed(0)
    config = AutoConfig.for_model("bert", vocab_size=30522, hidden_size=128, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=512, max_position_embeddings=BLOCK)
    masker = build_masker(MaskingConfig(), 103, 30522, [0, 100, 101, 102, 103])
    tcfg = TrainerConfig(batch_size=8, max_steps=10)
    core = PretrainCore(AutoModelForMaskedLM.from_config(config), masker, corpus.train, tcfg,
                        RuntimeConfig(precision="fp32"), seed=0)
    built = time.time()
    core.step(1)
    done = time.time()
    rss = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmRSS:")) / 1024
    return {"first_step_s": done - started, "imports_s": imported - started, "open_s": opened - imported,
            "model_s": built - opened, "step_s": done - built, "rss_mb": rss, "train_blocks": int(len(corpus.train)),
            "file_mb": corpus.train.path.stat().st_size / 2**20, "memmap": isinstance(corpus.train.array, np.memmap)}


# ------------------------------------------------------------------------------------------- measuring
def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _pss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def run_child(args: list[str], env: dict[str, str] | None = None) -> tuple[dict, float]:
    """Run this script as a child (``--child ...``); its JSON result and its process tree's peak PSS (MB)."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "BENCH_T0": str(time.time()),
           **(env or {})}
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, env=env)
    peak = [0.0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _pss_mb(_tree(proc.pid)))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"child {args[:2]} failed with status {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1]), peak[0]


def _cpu() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/femlm-bench-corpus"))
    parser.add_argument("--child", choices=["femlm", "runmlm", "train"])
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--repeats", type=int, default=1, help="preparations per side; the fastest is reported")
    parser.add_argument("--smoke", action="store_true", help="a 1 MB corpus, one process, in a temporary directory")
    args = parser.parse_args()
    if args.smoke:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="femlm-bench-corpus-") as tmp:
            args.size_gb, args.procs, args.repeats, args.work_dir = 0.001, 1, 1, Path(tmp)
            measure(args)
        return
    if args.child == "femlm":
        print(json.dumps(child_femlm(args.files, args.cache, args.procs)))
        return
    if args.child == "runmlm":
        print(json.dumps(child_runmlm(args.files, args.cache, args.procs)))
        return
    if args.child == "train":
        print(json.dumps(child_train(args.files, args.cache)))
        return
    measure(args)


def measure(args: argparse.Namespace) -> None:
    corpus_dir = args.work_dir / f"corpus-{args.size_gb:g}gb"
    info = generate(corpus_dir, args.size_gb)
    files = sorted(str(p) for p in corpus_dir.glob("part-*.jsonl"))
    print(f"corpus: {info['bytes'] / 1e9:.2f} GB synthetic text, {info['documents']:,} documents in {SHARDS} jsonl "
          f"shards (generated in {info['seconds']} s); tokenizer bert-base-uncased, blocks of {BLOCK}")
    print(f"machine: {_cpu()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; --procs {args.procs}; "
          f"TOKENIZERS_PARALLELISM=false; best of {args.repeats}")
    results: dict[str, tuple[dict, float]] = {}
    for _ in range(args.repeats):
        for side in ("femlm", "runmlm"):  # interleaved: load changes on a shared machine hit both sides alike
            cache = args.work_dir / f"cache-{side}"
            shutil.rmtree(cache, ignore_errors=True)
            got = run_child(["--child", side, "--files", *files, "--cache", str(cache), "--procs", str(args.procs)])
            if side not in results or got[0]["seconds"] < results[side][0]["seconds"]:
                results[side] = got
            if side == "runmlm":
                shutil.rmtree(cache, ignore_errors=True)
    (femlm, femlm_pss), (hf, hf_pss) = results["femlm"], results["runmlm"]
    print(f"{'preparation':<34} {'seconds':>8} {'tokens':>14} {'tokens/s':>11} {'blocks':>9} {'peak PSS MB':>12}")
    for name, (r, pss) in (("femlm prepare_corpus", results["femlm"]),
                           ("run_mlm.py map + group_texts", results["runmlm"])):
        print(f"{name:<34} {r['seconds']:>8.1f} {r['tokens']:>14,} {r['tokens'] / r['seconds']:>11,.0f} "
              f"{r['blocks']:>9,} {pss:>12,.0f}")
    ratio = (femlm["tokens"] / femlm["seconds"]) / (hf["tokens"] / hf["seconds"])
    print(f"femlm / run_mlm.py tokens/s: {ratio:.2f}x (goal >= 1.5x); peak memory {femlm_pss:,.0f} vs "
          f"{hf_pss:,.0f} MB")

    small_cache = args.work_dir / "cache-femlm-small"
    shutil.rmtree(small_cache, ignore_errors=True)
    small, _ = run_child(["--child", "femlm", "--files", *files[:SHARDS // 10], "--cache", str(small_cache),
                          "--procs", str(args.procs)])
    starts = {}
    for name, shard_files, cache in (("big", files, args.work_dir / "cache-femlm"),
                                     ("small (1/10)", files[:SHARDS // 10], small_cache)):
        starts[name], _ = run_child(["--child", "train", "--files", *shard_files, "--cache", str(cache)])
    print(f"{'training start':<14} {'train blocks':>12} {'file MB':>8} {'RSS step 1 MB':>14} {'to step 1 s':>12} "
          f"{'= imports':>10} {'+ open corpus':>14} {'+ model':>8} {'+ step':>7}")
    for name, r in starts.items():
        print(f"{name:<14} {r['train_blocks']:>12,} {r['file_mb']:>8,.0f} {r['rss_mb']:>14,.0f} "
              f"{r['first_step_s']:>12.1f} {r['imports_s']:>10.1f} {r['open_s']:>14.2f} {r['model_s']:>8.1f} "
              f"{r['step_s']:>7.1f}")
    big, little = starts["big"], starts["small (1/10)"]
    print(f"RSS big - small: {big['rss_mb'] - little['rss_mb']:+.0f} MB for {big['file_mb'] - little['file_mb']:,.0f} MB "
          f"more tokens (goal: within 100 MB); time to first step {big['first_step_s']:.1f} s (goal < 10 s); "
          f"blocks memory-mapped: {big['memmap']}")
    for cache in (args.work_dir / "cache-femlm", small_cache):
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
