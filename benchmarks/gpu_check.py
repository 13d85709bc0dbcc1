"""`make gpu-check`: the first ten minutes on a GPU machine. Four parts, each with its budget on one H100 (the
bench times are a guess: this script has not yet run on a GPU):

1. tests   (up to 180 s): `pytest -m cuda tests/test_cuda.py` in a subprocess that sees every GPU: device
   placement, bf16 autocast, fp16 with a GradScaler, fused AdamW, torch.compile, and DDP over NCCL (eager and
   compiled) when more than one GPU is visible. Their skips are printed with their reasons.
2. bench   (up to 330 s: ~30 s per eager configuration, 50 + 10 steps a side plus building the model, tokenizer
   and data; ~120 s per compiled one): femlm's pre-training step against HF Trainer +
   DataCollatorForLanguageModeling at the BERT-base shape (seq 128 batch 64, seq 512 batch 16: 8,192 tokens a
   step), bf16, eager and compiled (both sides), interleaved step by step (benchmarks/bench_train.py's
   bench_shape). Prints tokens/s, the ratio, MFU against the card's published dense bf16 peak
   (femlm/train/estimate.py's GPU_PEAK_BF16; a card it lacks gets no MFU), and femlm's peak GPU memory beside
   femlm's own estimate for that shape (femlm/train/estimate.py: micro_batch_memory). A configuration that
   would start past the part's budget is skipped, and says so.
3. agree   (up to 30 s): 5 steps of a 2-layer BERT on CUDA (bf16 autocast) and on the CPU (fp32) from the same
   state, seed and batches; the losses must agree within bf16 tolerance (_gpu.BF16_REL_TOL).
4. write: results/gpu/<card>-<date>/ (results.json, results.md) that can be committed as they are.
The benchmark runs on the first visible GPU only (HF's Trainer would otherwise wrap the model in DataParallel).
Exit status 1 when a test fails or the losses disagree (the results are written first).

`--smoke` runs the same code paths on the CPU at tiny shapes (seq 32 and 64) in under a minute: the tests (all
skip), both sides' steps (eager only; --smoke --compile adds compiled, ~4 minutes on 2 cores), MFU against a
measured CPU matmul peak (a short probe, the faster of fp32 and bf16), and the bf16-vs-fp32 agreement on the
CPU. It writes <card>-<date>/ under --out, by default under a fresh temporary directory.

Usage: python benchmarks/gpu_check.py [--smoke] [--out DIR] [--steps 50] [--warmup 10] [--[no-]compile]
                                      [--budget-s 600]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _gpu  # noqa: E402 (puts the repository and tests/ on sys.path)
import torch  # noqa: E402
from bench_train import SHAPES, Shape, bench_shape, build_model  # noqa: E402

from femlm.train.estimate import GIB, micro_batch_memory, model_shape  # noqa: E402
from femlm.train.flops import measured_matmul_flops  # noqa: E402

GPU_SHAPES = [replace(SHAPES["base"], name="bert_base_L128", batch=64, seq=128),
              replace(SHAPES["base"], name="bert_base_L512", batch=16, seq=512)]
SMOKE_SHAPES = [SHAPES["smoke"], replace(SHAPES["smoke"], name="smoke_L64", seq=64)]
BUDGET = {"tests": 180, "bench": 330, "agree": 30}  # seconds on one H100; the rest is start-up and slack
SMOKE_BUDGET = {"tests": 120, "bench": 120, "agree": 30}


def peak_flops(cuda: bool, smoke: bool) -> tuple[float | None, str]:
    """The FLOP/s MFU is measured against, and its label."""
    if not cuda:  # the faster of fp32 and bf16: a CPU without bf16 units runs the bf16 step's matmuls in fp32
        flops = max(measured_matmul_flops("cpu", dtype, n=512, seconds=0.3) for dtype in (torch.float32,
                                                                                         torch.bfloat16))
        return flops, f"measured CPU matmul peak (best of fp32 and bf16, 512^3 probe): {flops / 1e9:.1f} GFLOP/s"
    name = torch.cuda.get_device_name(0)
    key, peak = _gpu.card_peak(name)
    if peak is None:
        return None, f"{name}: not in femlm/train/estimate.py's GPU_PEAK_BF16, so no MFU"
    return peak, f"published dense bf16 peak, {key}: {peak / 1e12:.0f} TFLOP/s (NVIDIA data sheet)"


def bench(shape: Shape, compiled: bool, args: argparse.Namespace, peak: float | None, device: str,
          workdir: Path) -> dict:
    out = bench_shape(shape, args.steps, args.warmup, peak or math.nan, workdir, "bf16", compile_femlm=compiled,
                      device=device, compile_hf=compiled)
    config = build_model(shape).config
    estimate = micro_batch_memory(model_shape(config), shape.batch, shape.seq, round(out["predicted"]),
                                  value_bytes=2, fused_attention=device != "cpu")["total"]
    row = {"shape": shape.name, "batch": shape.batch, "seq": shape.seq, "compile": compiled,
           "femlm": out["femlm"], "hf": out["hf"], "ratio": out["ratio"],
           "mfu": out["mfu"] if peak else None, "hf_mfu": out["hf_mfu"] if peak else None,
           "peak_gib": out["femlm_peak_bytes"] / GIB if device != "cpu" else None, "estimate_gib": estimate / GIB}
    mode = "compiled" if compiled else "eager"
    mfu = f"{row['mfu']:.3f}" if peak else "n/a"
    print(f"[{shape.name} {mode}] tokens/s femlm={row['femlm']:.0f} hf={row['hf']:.0f} ratio={row['ratio']:.2f} "
          f"mfu={mfu}", flush=True)
    measured = f"{row['peak_gib']:.3g} GiB" if row["peak_gib"] is not None else "not measured on the CPU"
    print(f"[{shape.name} {mode}] femlm peak GPU memory: {measured}; femlm's estimate for this shape "
          f"(femlm/train/estimate.py, bf16): {row['estimate_gib']:.3g} GiB", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the same code paths on the CPU at a tiny shape")
    parser.add_argument("--out", type=Path, help="where <card>-<date>/ is written (default: results/gpu; "
                        "--smoke: a fresh temporary directory)")
    parser.add_argument("--steps", type=int, help="measured steps per configuration (default 50; smoke 2)")
    parser.add_argument("--warmup", type=int, help="unmeasured steps first (default 10; smoke 1)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also benchmark both sides compiled (default: yes on a GPU, no under --smoke, where "
                        "compiling takes minutes on a 2-core CPU)")
    parser.add_argument("--budget-s", type=float, default=600, help="whole-run time budget in seconds")
    args = parser.parse_args()
    args.steps = args.steps or (2 if args.smoke else 50)
    args.warmup = args.warmup or (1 if args.smoke else 10)
    args.compile = not args.smoke if args.compile is None else args.compile
    start = time.perf_counter()
    base_env = dict(os.environ)  # the tests see every GPU; this process benchmarks the first one
    if not args.smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = base_env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    cuda = torch.cuda.is_available() and not args.smoke
    if not args.smoke and not cuda:
        print("gpu-check: no CUDA device is visible, so there is nothing to check here; "
              "`python benchmarks/gpu_check.py --smoke` runs the same code paths on the CPU", file=sys.stderr)
        return 2
    os.environ.setdefault("WANDB_MODE", "disabled")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    budget = {k: v * args.budget_s / 600 for k, v in (SMOKE_BUDGET if args.smoke else BUDGET).items()}
    device = "cuda:0" if cuda else "cpu"
    card = torch.cuda.get_device_name(0) if cuda else "cpu-smoke"
    skipped: list[str] = []
    if args.smoke:
        skipped.append("the GPU itself: --smoke runs every part on the CPU (tiny shapes; figures mean nothing)")
    peak, peak_label = peak_flops(cuda, args.smoke)
    if peak is None:
        skipped.append(f"MFU: {peak_label}")
    print(f"gpu-check on {card}: torch {torch.__version__}, CUDA {torch.version.cuda}; {peak_label}", flush=True)

    # 1. the tests marked cuda
    tests = _gpu.run_cuda_tests(int(budget["tests"]), base_env)
    print(f"cuda tests: {tests.get('summary') or tests['status']}", flush=True)
    for line in tests["skips"]:
        print(f"  skipped: {line}")
    for line in tests["failures"]:
        print(f"  FAILED: {line}")
    skipped += [f"test {line}" for line in tests["skips"]]
    if not args.compile:
        skipped.append("bench compiled: " + ("--smoke compiles nothing unless --compile is given (compiling both "
                                             "sides takes minutes on a 2-core CPU)" if args.smoke else "--no-compile"))

    # 2. femlm vs HF Trainer, interleaved, eager and compiled
    rows = []
    bench_end = time.perf_counter() + budget["bench"]
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SMOKE_SHAPES if args.smoke else GPU_SHAPES:
            for compiled in (False, True) if args.compile else (False,):
                if time.perf_counter() > bench_end:
                    skipped.append(f"bench {shape.name} compile={compiled}: past the bench budget "
                                   f"({budget['bench']:.0f} s)")
                    print(f"  skipped: {skipped[-1]}", flush=True)
                    continue
                gc.collect()  # the last configuration's models and optimizers
                if cuda:
                    torch.cuda.empty_cache()
                rows.append(bench(shape, compiled, args, peak, device, Path(tmp)))

    # 3. the same steps on the device (bf16) and on the CPU (fp32)
    agreement = _gpu.loss_agreement(device, steps=5)
    print(f"losses {device} bf16 vs cpu fp32 over {agreement['steps']} steps: max relative difference "
          f"{agreement['max_rel_diff']:.2e} (tolerance {agreement['tolerance']}): "
          f"agree: {'yes' if agreement['agree'] else 'no'}", flush=True)

    # 4. results
    date = datetime.date.today().isoformat()
    parent = args.out or (Path(tempfile.mkdtemp(prefix="gpu-check-")) if args.smoke else _gpu.ROOT / "results" / "gpu")
    out = _gpu.fresh_dir(parent / f"{_gpu.slug(card)}-{date}")
    record = {"card": card, "date": date, "torch": torch.__version__, "cuda": torch.version.cuda,
              "smoke": args.smoke, "peak_flops": peak, "peak_label": peak_label, "steps": args.steps,
              "warmup": args.warmup, "precision": "bf16", "tests": tests, "bench": rows, "agreement": agreement,
              "skipped": skipped, "budget_s": budget, "wall_s": round(time.perf_counter() - start, 1),
              "shapes": [asdict(s) for s in (SMOKE_SHAPES if args.smoke else GPU_SHAPES)]}
    (out / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / "results.md").write_text(_gpu.markdown(record))
    failed = tests["status"] != "ok" or not agreement["agree"]
    print(f"skipped: {len(skipped)} item(s){': ' + '; '.join(skipped) if skipped else ''}")
    print(f"gpu-check {'FAILED' if failed else 'ok'} in {record['wall_s']:.0f} s; wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
