"""fp32 vs bf16 autocast for one femlm pre-training step on this CPU, beside what `runtime.precision=auto` picks.

`auto` times a transformer feed-forward block under both dtypes once per machine (femlm.runtime.precision) and
picks bf16 only where it is clearly faster. This prints that choice and its measurement, then the step time of
PretrainCore in each precision, one after the other, for the tiny and the BERT-base shapes: the check that the
small measurement predicts the real step.

Usage: python benchmarks/bench_precision.py [--threads 2] [--steps 4] [--shapes tiny,base] [--smoke]
"""

from __future__ import annotations

import argparse
import os
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
from femlm.runtime.precision import cpu_choice  # noqa: E402
from femlm.train.config import TrainerConfig  # noqa: E402
from femlm.train.core import PretrainCore  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--shapes", default="tiny,base")
    parser.add_argument("--smoke", action="store_true", help="a 1-layer model, 1 step: checks it runs")
    args = parser.parse_args()
    if args.smoke:
        args.shapes, args.steps = "smoke", 1
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    choice = cpu_choice()
    print(f"threads={args.threads} torch={torch.__version__} precision=auto picks {choice['dtype']} "
          f"(feed-forward block: fp32 {choice['fp32_s']:.4f} s, bf16 {choice['bf16_s']:.4f} s; {choice['key']})")
    for name in args.shapes.split(","):
        shape = SHAPES[name]
        blocks = synthetic_blocks(shape.batch * (args.steps + 1), shape.seq, shape.vocab, seed=0)
        masker = build_masker(MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.15), 4, shape.vocab,
                              [0, 1, 2, 3, 4])
        cores = {p: PretrainCore(build_model(shape), masker, blocks,
                                 TrainerConfig(batch_size=shape.batch, max_steps=args.steps + 1),
                                 RuntimeConfig(precision=p), seed=0) for p in ("fp32", "bf16")}
        # One precision after the other, not interleaved: AMX work lowers the core clock for a while, which
        # would slow interleaved fp32 steps and flatter bf16.
        times: dict[str, list[float]] = {p: [] for p in cores}
        for precision, core in cores.items():
            for step in range(1, args.steps + 2):  # step 1 is warm-up
                start = time.perf_counter()
                loss = core.step(step).loss
                if step > 1:
                    times[precision].append(time.perf_counter() - start)
            print(f"[{shape.name}] {precision} loss after {args.steps + 1} steps {loss:.4f}", flush=True)
        fp32, bf16 = (sum(times[p]) / len(times[p]) for p in ("fp32", "bf16"))
        print(f"[{shape.name} b={shape.batch} L={shape.seq}] step s fp32={fp32:.3f} bf16={bf16:.3f} "
              f"speed-up={fp32 / bf16:.2f}", flush=True)


if __name__ == "__main__":
    main()
