"""runtime.compile=true against eager: the same pre-training step, timed interleaved in one process.

Two PretrainCores start from the same weights and take the same steps, one eager, one `torch.compile`d
(inductor), alternating step by step so load from other processes slows both alike. The first compiled steps
pay for compilation (reported apart, with how many graphs were built); the ratio is the median over steps of
compiled / eager time within the same step (below 1: compiled is faster), which cancels load that drifts from
step to step. fp32, exact masking by default (one shape). The model keeps BERT's dropout, and inductor draws its
own dropout masks, so the two sides' losses differ by dropout noise (tests/test_train_compile.py compares them
without dropout).

Usage: python benchmarks/bench_compile.py [--shape tiny] [--steps 10] [--warmup 2] [--threads 2]
       [--masking fe_subword|mlm_subword|mlm_bernoulli] [--smoke]
The last line is `step s eager=<a> compiled=<b> ratio=<compiled/eager>`.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402,F401,I001 (puts the repository and tests/ on sys.path)
from bench_train import SHAPES, build_model  # noqa: E402
from helpers.tiny import synthetic_blocks  # noqa: E402

from femlm.masking import MaskingConfig, build_masker  # noqa: E402
from femlm.runtime.config import RuntimeConfig  # noqa: E402
from femlm.train.config import TrainerConfig  # noqa: E402
from femlm.train.core import PretrainCore  # noqa: E402

MASKINGS = {"fe_subword": MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4),
            "mlm_subword": MaskingConfig(), "mlm_bernoulli": MaskingConfig(name="mlm_bernoulli", count="bernoulli")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (the compilation)")
    parser.add_argument("--masking", choices=sorted(MASKINGS), default="fe_subword")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("FEMLM_BENCH_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--smoke", action="store_true", help="a 1-layer model, 1 + 1 steps: checks it runs")
    args = parser.parse_args()
    if args.smoke:
        args.shape, args.steps, args.warmup = "smoke", 1, 1
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from torch._dynamo.utils import counters

    shape, total = SHAPES[args.shape], args.steps + args.warmup
    masker = build_masker(MASKINGS[args.masking], mask_token_id=4, vocab_size=shape.vocab,
                          special_ids=[0, 1, 2, 3, 4])
    blocks = synthetic_blocks(shape.batch * total, shape.seq, shape.vocab)
    tcfg = TrainerConfig(batch_size=shape.batch, max_steps=total, lr=5e-4, warmup_ratio=0.1)
    model = build_model(shape)
    cores = {name: PretrainCore(copy.deepcopy(model), masker, blocks, tcfg,
                                RuntimeConfig(device="cpu", precision="fp32", compile=name == "compiled"), seed=0)
             for name in ("eager", "compiled")}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"shape={shape.name} layers={shape.layers} hidden={shape.hidden} batch={shape.batch} seq={shape.seq} "
          f"masking={args.masking} threads={args.threads} cpus={os.cpu_count()} load1={load:.2f} "
          f"torch={torch.__version__}", flush=True)
    times: dict[str, list[float]] = {name: [] for name in cores}
    for step in range(1, total + 1):
        losses = {}
        for name, core in cores.items():
            start = time.perf_counter()
            losses[name] = core.step(step).loss
            times[name].append(time.perf_counter() - start)
        print(f"step {step}: " + " ".join(f"{n}={times[n][-1]:.3f}s loss={losses[n]:.5f}" for n in cores),
              flush=True)
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    compile_s = sum(times["compiled"][:args.warmup]) - sum(times["eager"][:args.warmup])
    timed = {n: times[n][args.warmup:] for n in cores}
    eager, compiled = (statistics.median(timed[n]) for n in ("eager", "compiled"))
    paired = statistics.median(c / e for c, e in zip(timed["compiled"], timed["eager"], strict=True))
    print(f"compilation: {graphs} graph(s), {breaks} graph break(s), ~{compile_s:.0f} s over the warm-up steps; "
          f"load1 now {os.getloadavg()[0]:.2f}")
    print(f"fastest step s eager={min(timed['eager']):.3f} compiled={min(timed['compiled']):.3f}")
    print(f"step s eager={eager:.3f} compiled={compiled:.3f} ratio={paired:.2f} (median of {args.steps} "
          "interleaved steps; ratio: median of compiled/eager within each step)")

if __name__ == "__main__":
    main()
