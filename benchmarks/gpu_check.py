"""`make gpu-check`: what users run, measured on one GPU in about 10 minutes (one H100). Four parts:

1. tests  `pytest -m cuda tests/test_cuda.py` in a subprocess that sees every GPU (placement, bf16 autocast, fp16
   with a GradScaler, fused AdamW, torch.compile, DDP over NCCL with 2+ GPUs); skips printed with their reasons.
2. agree  5 steps of a 2-layer BERT on CUDA (bf16 autocast) and on the CPU (fp32) from the same state, seed and
   batches; the losses must agree within bf16 tolerance (_gpu.BF16_REL_TOL).
3. bench  femlm's pre-training step (PretrainCore, as `femlm pretrain-scratch` / `continual-pretrain` run it, with
   runtime=gpu's keys: attention kernels, TF32 set for the process as the CLI sets it) against HF Trainer + its MLM
   collator twice: under HF's own defaults (bf16, sdpa, `torch_compile` in the compiled rows, DataLoader
   workers, no length grouping), interleaved with femlm, and with femlm's attention kernels (an attention
   function registered with transformers, benchmarks/_hf.py), alone. BERT-base, bf16, eager and compiled:
     the paper's shapes first, never skipped: 48 x 512 (continual recipe), 256 x 512 and 256 x 128 (from scratch);
     micro-batches (gradient accumulation) where femlm's memory estimate says one pass would not fit;
     then, while the budget lasts: FE-MLM K=4 and FE across passes at 48 x 512 (compiled), 64 x 128 (both modes,
     continuity with the first record) and the GPU study's model at its shape, one row per arm, as its experiment
     file says (femlm/conf/experiment/study_gpu.yaml: model, batch x length, compile, arms; femlm alone).
   Each side's steps are timed per step with a sync after each (the records' history), then as many again in blocks
   of --block steps with one sync per block (what the training loop does); one more step each runs under
   torch.profiler, and its attention operators are printed (fused kernels, `bmm`, fp32 GEMM kernels). Per
   configuration: steady-state tokens/s both ways, MFU against the card's data sheet and against its measured bf16
   matrix rate, `graphs= recompiles= compile_s=` per side, femlm's host syncs per step that reads no device
   value, the attention kernel torch dispatches for femlm at these shapes, femlm's peak GPU memory beside
   femlm/train/estimate.py's estimate for that micro-batch.
4. write  results/gpu/<card>-<date>/ (results.json with the commit and the step_version it measured, results.md),
   ready to commit; `femlm ... --dry-run` prices runs with its MFU (femlm/train/estimate.py: measured_mfu).
The plan (seconds per part, from the first H100 run's figures: _gpu_rows.PLAN_S) is printed first; a configuration
past the plan's budget is skipped only if it is an extra one, and says so. The benchmark uses the first visible GPU only.
Exit status 1 when a test fails, the losses disagree or a configuration raises (the others still run; the results
are written first).

`--smoke` runs the same code paths, lines and files on the CPU at tiny shapes (eager; --smoke --compile adds the
compiled rows, minutes on 2 cores): MFU only against a measured CPU matmul rate, host syncs as reads of a tensor's
value on the stepping thread (eager rows), results under a fresh temporary directory.

Usage: python benchmarks/gpu_check.py [--smoke] [--out DIR] [--steps 50] [--warmup 10] [--block 5] [--[no-]compile]
                                      [--compiled-only] [--skip-tests] [--skip-agree] [--budget-s 600]
                                      [--commit SHA] [--only continual,scratch,fe_k4,fe_passes,continuity,study]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _gpu  # noqa: E402 (puts the repository and tests/ on sys.path)
import _gpu_rows as rows_  # noqa: E402
import torch  # noqa: E402
from bench_train import SHAPES  # noqa: E402

from femlm.runs import git_commit  # noqa: E402
from femlm.runtime.config import RuntimeConfig  # noqa: E402
from femlm.runtime.device import configure_process  # noqa: E402
from femlm.train.estimate import step_version as current_step_version  # noqa: E402


def sheet_peak(cuda: bool) -> tuple[float | None, str]:
    """The card's published dense bf16 peak MFU is measured against, and its label (None on a CPU)."""
    if not cuda:
        return None, "no data-sheet peak on a CPU (MFU against the measured matmul rate only)"
    name = torch.cuda.get_device_name(0)
    key, peak = _gpu.card_peak(name)
    if peak is None:
        return None, f"{name}: not in femlm/train/estimate.py's GPU_PEAK_BF16, so no data-sheet MFU"
    return peak, f"published dense bf16 peak, {key}: {peak / 1e12:.0f} TFLOP/s (NVIDIA data sheet)"


def write(out: Path, record: dict) -> None:
    """results.json and results.md of `record`, each replaced whole (a temporary file renamed over it)."""
    _gpu.write_texts(out, {"results.json": json.dumps(record, indent=1) + "\n", "results.md": _gpu.markdown(record)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the same code paths on the CPU at tiny shapes")
    parser.add_argument("--out", type=Path, help="where <card>-<date>/ is written (default: results/gpu; "
                        "--smoke: a fresh temporary directory)")
    parser.add_argument("--steps", type=int, help="most measured steps per configuration and timing (default 50; "
                        "smoke 2)")
    parser.add_argument("--warmup", type=int, help="most unmeasured steps first (default 10; smoke 1)")
    parser.add_argument("--block", type=int, help="steps per timed block, one sync per block (default 5; smoke 2)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also the compiled rows (default: yes on a GPU, no under --smoke)")
    parser.add_argument("--compiled-only", action="store_true", help="only the compiled mode of configurations "
                        "that have one (the study's rows keep the study's own mode)")
    parser.add_argument("--skip-tests", action="store_true", help="not the CUDA tests (about 45 s)")
    parser.add_argument("--skip-agree", action="store_true", help="not the CUDA-vs-CPU loss agreement (about 10 s)")
    parser.add_argument("--budget-s", type=float, default=600, help="the whole run's planned seconds; only extra "
                        "configurations are skipped past it")
    parser.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD of this checkout; "
                        "a copy without .git, as a device machine receives, needs it given)")
    parser.add_argument("--only", help="comma list of configuration names to run, in their order (continual, "
                        "scratch, fe_k4, fe_passes, continuity, study; default: all)")
    args = parser.parse_args()
    args.steps = args.steps or (2 if args.smoke else 50)
    args.warmup = args.warmup or (1 if args.smoke else 10)
    args.block = args.block or (2 if args.smoke else 5)
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
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    runtime = RuntimeConfig(**rows_.gpu_runtime())
    configure_process(runtime)  # TF32 (and host memory) as `femlm ... runtime=gpu` sets them
    tf32 = bool(torch.backends.cuda.matmul.allow_tf32) if cuda else None
    device = "cuda:0" if cuda else "cpu"
    card = torch.cuda.get_device_name(0) if cuda else "cpu-smoke"
    device_bytes = float(torch.cuda.get_device_properties(0).total_memory) if cuda else None
    commit = args.commit or git_commit()
    step_version = current_step_version()
    skipped: list[str] = []
    if args.smoke:
        skipped.append("the GPU itself: --smoke runs every part on the CPU (tiny shapes; figures mean nothing)")
    sheet, sheet_label = sheet_peak(cuda)
    matmul = rows_.matmul_rate(cuda)
    if sheet is None:
        skipped.append(f"data-sheet MFU: {sheet_label}")
    print(f"gpu-check on {card}: torch {torch.__version__}, CUDA {torch.version.cuda}, transformers "
          f"{transformers.__version__}; commit {commit}, step_version {step_version}; {sheet_label}; measured bf16 "
          f"matrix rate {matmul / 1e12:.3g} TFLOP/s; femlm runtime: runtime=gpu's keys {rows_.gpu_runtime()}",
          flush=True)
    print(f"TF32: runtime.tf32={runtime.tf32} as runtime=gpu sets it; fp32 matmuls on TF32 in this process: "
          f"{tf32 if cuda else 'n/a (TF32 is CUDA only)'}", flush=True)

    # without --compile (--smoke's default) every configuration runs eager once, the compiled-only FE rows too
    wanted = args.only.split(",") if args.only else None
    every = (rows_.SMOKE_CONFIGS if args.smoke else rows_.GPU_CONFIGS) + rows_.study_config(args.smoke)
    chosen = [c for c in every if wanted is None or c.name in wanted]
    if wanted is not None:
        chosen.sort(key=lambda c: wanted.index(c.name))

    def modes(c) -> tuple[bool, ...]:  # noqa: ANN001
        own = c.modes if args.compile else (False,)
        return (True,) if args.compiled_only and True in own else own

    configs = [(c, m) for c in chosen for m in modes(c)]
    plan = [{"config": f"{c.name} b={c.batch} L={c.seq}{'' if c.arm == 'mlm' else ' ' + c.arm}",
             "compile": m, "paper": c.paper, "planned_s": round(rows_.planned_s(c, m, args))} for c, m in configs]
    plan_s = rows_.PLAN_S
    fixed = plan_s["startup"] + plan_s["tests"] * (not args.skip_tests) + plan_s["agree"] * (not args.skip_agree)
    print(f"plan (H100 seconds from the first run; budget {args.budget_s:.0f} s): start-up {rows_.PLAN_S['startup']}, "
          f"tests {rows_.PLAN_S['tests'] if not args.skip_tests else 0}, "
          f"agreement {rows_.PLAN_S['agree'] if not args.skip_agree else 0}")
    for item in plan:
        kind = "paper shape: always run" if item["paper"] else "extra: skipped past the budget"
        print(f"  plan: [{item['config']} {'compiled' if item['compile'] else 'eager'}] ~{item['planned_s']} s "
              f"({kind})")
    print(f"  plan: ~{fixed + sum(p['planned_s'] for p in plan)} s in all", flush=True)
    if not args.compile:
        skipped.append("bench compiled: " + ("--smoke compiles nothing unless --compile is given (compiling takes "
                                             "minutes on a 2-core CPU)" if args.smoke else "--no-compile"))

    # 1. the tests marked cuda
    tests = _gpu.run_cuda_tests(180, base_env) if not args.skip_tests else {
        "status": "skipped", "summary": "not run: --skip-tests", "counts": {}, "skips": [], "failures": []}
    print(f"cuda tests: {tests.get('summary') or tests['status']}", flush=True)
    for line in tests["skips"]:
        print(f"  skipped: {line}")
    for line in tests["failures"]:
        print(f"  FAILED: {line}")
    skipped += [f"test {line}" for line in tests["skips"]]

    # results.json is rewritten after every configuration (complete: false until the end), so a run cut by its
    # window still leaves what it measured
    date = datetime.date.today().isoformat()
    parent = args.out or (Path(tempfile.mkdtemp(prefix="gpu-check-")) if args.smoke else _gpu.ROOT / "results" / "gpu")
    out = _gpu.fresh_dir(parent / f"{_gpu.slug(card)}-{date}", owner="results.json")
    record = {"card": card, "date": date, "commit": commit, "step_version": step_version,
              "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
              "smoke": args.smoke, "peak_flops": sheet, "peak_label": sheet_label, "matmul_flops": matmul,
              "precision": "bf16", "tf32": tf32, "block": args.block, "tests": tests, "bench": [],
              "agreement": None, "skipped": skipped, "budget_s": args.budget_s, "plan": plan,
              "femlm_runtime": {"precision": "bf16", **rows_.gpu_runtime()}, "configs": [asdict(c) for c in chosen],
              "model": asdict(SHAPES["smoke" if args.smoke else "base"])}

    # 2. the same steps on the device (bf16) and on the CPU (fp32): before the benchmark (10 s), so a run cut by
    # its window still says whether the step is right
    agreement = None
    if not args.skip_agree:
        agreement = _gpu.loss_agreement(device, steps=5)
        print(f"losses {device} bf16 vs cpu fp32 over {agreement['steps']} steps: max relative difference "
              f"{agreement['max_rel_diff']:.2e} (tolerance {agreement['tolerance']}): "
              f"agree: {'yes' if agreement['agree'] else 'no'}", flush=True)
    record["agreement"] = agreement
    write(out, {**record, "complete": False, "wall_s": round(time.perf_counter() - start, 1)})

    # 3. femlm vs HF Trainer, interleaved: the paper's shapes, then the extras while the plan fits the budget
    rows: list[dict] = []
    failures: list[str] = []  # configurations that raised (not memory): the rest still run
    with tempfile.TemporaryDirectory() as tmp:
        for (cfg, compiled), item in zip(configs, plan, strict=True):
            elapsed = time.perf_counter() - start + (rows_.PLAN_S["startup"] if cuda else 0)
            if not cfg.paper and not args.smoke and elapsed + item["planned_s"] > args.budget_s:
                skipped.append(f"bench {item['config']} {'compiled' if compiled else 'eager'}: planned "
                               f"{item['planned_s']} s after {elapsed:.0f} s would pass the {args.budget_s:.0f} s "
                               "budget (an extra row; the paper's shapes always run)")
                print(f"  skipped: {skipped[-1]}", flush=True)
                continue
            gc.collect()  # the last configuration's models and optimizers
            torch._dynamo.reset()  # its compiled code too: a new core's first compile is not counted a recompile
            if cuda:
                torch.cuda.empty_cache()
            try:
                rows.append(rows_.bench(cfg, compiled, args, {"sheet": sheet, "matmul": matmul}, device, device_bytes,
                                  Path(tmp), rows))
                write(out, {**record, "bench": rows, "skipped": skipped, "complete": False,
                            "wall_s": round(time.perf_counter() - start, 1)})
            except torch.cuda.OutOfMemoryError as err:  # the estimate was short: say so, measure the rest
                skipped.append(f"bench {item['config']} {'compiled' if compiled else 'eager'}: out of GPU memory "
                               f"({str(err).splitlines()[0][:160]})")
                print(f"  FAILED: {skipped[-1]}", flush=True)
            except Exception as err:  # noqa: BLE001 -- one window per run: a failing configuration is recorded
                failures.append(f"bench {item['config']} {'compiled' if compiled else 'eager'}: "
                                f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}")
                print(f"  FAILED: {failures[-1]}", flush=True)
                traceback.print_exc()
                write(out, {**record, "bench": rows, "skipped": skipped, "failures": failures, "complete": False,
                            "wall_s": round(time.perf_counter() - start, 1)})

    # 4. results
    record.update(bench=rows, skipped=skipped, failures=failures, complete=True,
                  wall_s=round(time.perf_counter() - start, 1))
    write(out, record)
    failed = tests["status"] not in ("ok", "skipped") or (agreement is not None and not agreement["agree"]) \
        or bool(failures)
    print(f"skipped: {len(skipped)} item(s){': ' + '; '.join(skipped) if skipped else ''}")
    print(f"gpu-check {'FAILED' if failed else 'ok'} in {record['wall_s']:.0f} s; wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
