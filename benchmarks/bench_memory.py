"""Memory over a long run: does a tiny pre-training hold its resident memory flat for 2,000 steps?

    .venv/bin/python benchmarks/bench_memory.py [--steps 2000] [--batch 8] [--block 64] [--warmup 200] [--smoke]

Runs the real CLI (`femlm pretrain-scratch preset=tiny ...`) in a subprocess on a synthetic local corpus with a
128-token WordPiece vocabulary (no mirror, no network), and samples the training process's resident set size
every `--interval` seconds (psutil when installed, else VmRSS from /proc/<pid>/status). Each sample is paired
with the newest step in the run's metrics.jsonl, so memory can be read against training progress:

* warm-up RSS: the first sample at or after step `--warmup` (allocator pools, optimizer state, autograd
  buffers and the first held-out evaluation are in place by then);
* max RSS, and final RSS (the last sample taken while steps were still being logged: the final checkpoint,
  summary and loss-curve plot after the last step are not training-loop growth);
* slope: least-squares fit of RSS against step over the samples after warm-up, in MB per 1,000 steps.

Verdict ``memory flat: yes`` when both the growth after warm-up (final - warm-up) and the slope extrapolated
over the post-warm-up steps stay under max(25 MB, 5% of the warm-up RSS). Everything is printed and, with
``--json``, written as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 (puts the repository and tests/ on sys.path)

REPO = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def rss_bytes(pid: int) -> int | None:
    """Resident set size of `pid` in bytes (None once the process is gone)."""
    try:
        import psutil

        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None
    except ImportError:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def latest_step(runs: Path) -> int | None:
    """The newest `step` logged in the (single) run under `runs`."""
    found = list(runs.glob("pretrain-scratch/*/metrics.jsonl"))
    if not found:
        return None
    step = None
    try:
        for line in found[0].read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            if isinstance(record.get("step"), int):
                step = record["step"]
    except OSError:
        return None
    return step


def write_inputs(root: Path, documents: int = 400, seed: int = 0) -> tuple[Path, Path]:
    """A 128-token WordPiece vocabulary and a corpus of `documents` random documents over it."""
    from helpers.tiny import tiny_tokenizer

    tiny_tokenizer(root / "tokenizer")
    rng = random.Random(seed)
    docs = ["\n".join(" ".join(f"w{rng.randrange(123)}" for _ in range(40)) for _ in range(4))
            for _ in range(documents)]
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(docs) + "\n")
    return root / "tokenizer", corpus


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of MB against step, times 1,000."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(s for s, _ in points) / n
    my = sum(m for _, m in points) / n
    var = sum((s - mx) ** 2 for s, _ in points)
    if var == 0:
        return 0.0
    return 1000 * sum((s - mx) * (m - my) for s, m in points) / var


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=8, help="rows per optimizer step")
    parser.add_argument("--block", type=int, default=64, help="data.block_size")
    parser.add_argument("--warmup", type=int, default=200, help="steps before the warm-up RSS is taken")
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between RSS samples")
    parser.add_argument("--masking", default="fe_subword")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--smoke", action="store_true", help="a 30-step run: checks it runs (no verdict worth reading)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the run")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.warmup, args.eval_every, args.log_every, args.interval = 30, 5, 30, 5, 0.1

    with tempfile.TemporaryDirectory(prefix="femlm-bench-memory-") as tmp:
        root = Path(tmp)
        tokenizer, corpus = write_inputs(root)
        env = {**os.environ, "FEMLM_RUNS": str(root / "runs"), "FEMLM_CACHE": str(root / "cache"),
               "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        command = [sys.executable, "-m", "femlm.cli", "pretrain-scratch", "preset=tiny", f"masking={args.masking}",
                   f"model.tokenizer={tokenizer}", f"domain.sources=[file:{corpus}]",
                   f"data.block_size={args.block}", "data.eval_blocks=16", "runtime.data_workers=1",
                   f"trainer.batch_size={args.batch}", f"trainer.max_steps={args.steps}",
                   f"runtime.eval_every={args.eval_every}", f"runtime.save_every={args.steps}",
                   f"runtime.log_every={args.log_every}", "runtime.threads=1", "runtime.device=cpu",
                   "logger.wandb.mode=disabled", "logger.progress=false", *args.overrides]
        print("running:", " ".join(command[2:]), flush=True)
        start = time.time()
        child = subprocess.Popen(command, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
        samples: list[tuple[float, int | None, float]] = []  # (seconds, step, MB)
        while child.poll() is None:
            rss = rss_bytes(child.pid)
            if rss is not None:
                samples.append((time.time() - start, latest_step(root / "runs"), rss / MB))
            time.sleep(args.interval)
        stderr = child.stderr.read() if child.stderr else ""
        wall = time.time() - start
        if child.returncode != 0:
            print(stderr[-3000:], file=sys.stderr)
            print(f"the run failed with exit status {child.returncode}", file=sys.stderr)
            return 1

    training = [(s, mb) for _, s, mb in samples if s is not None and s < args.steps]
    after = [(s, mb) for s, mb in training if s >= args.warmup]
    if not after:
        print(f"no samples after step {args.warmup}: raise --steps or lower --warmup", file=sys.stderr)
        return 1
    warm = after[0][1]
    final = after[-1][1]
    peak = max(mb for _, _, mb in samples)
    peak_training = max(mb for _, mb in training)
    slope = slope_per_1000(after)
    growth = final - warm
    span = after[-1][0] - after[0][0]
    limit = max(25.0, 0.05 * warm)
    flat = abs(growth) < limit and abs(slope * span / 1000) < limit
    result = {"steps": args.steps, "batch_rows": args.batch, "block_size": args.block, "masking": args.masking,
              "warmup_step": args.warmup, "samples": len(samples), "wall_s": round(wall, 1),
              "rss_after_warmup_mb": round(warm, 1), "rss_max_mb": round(peak, 1),
              "rss_max_training_mb": round(peak_training, 1), "rss_final_mb": round(final, 1),
              "slope_mb_per_1000_steps": round(slope, 2), "growth_after_warmup_mb": round(growth, 1),
              "flat_limit_mb": round(limit, 1), "flat": flat,
              "rss_by_step": [(s, round(mb, 1)) for s, mb in after[:: max(1, len(after) // 20)]]}
    print(f"steps {args.steps}, {args.batch} rows x {args.block} tokens, {args.masking}, {len(samples)} samples "
          f"over {wall:.0f} s")
    print(f"RSS after warm-up (step {after[0][0]}): {warm:.1f} MB")
    print(f"RSS max: {peak:.1f} MB (during training steps: {peak_training:.1f} MB)")
    print(f"RSS final (step {after[-1][0]}): {final:.1f} MB")
    print(f"slope: {slope:+.2f} MB per 1000 steps")
    print(f"memory flat: {'yes' if flat else 'no'} (growth {growth:+.1f} MB after warm-up)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
