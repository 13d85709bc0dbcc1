"""`make gpu-check`: what users run, measured on one GPU in about 8 minutes (one H100). Four parts:

1. tests  `pytest -m cuda tests/test_cuda.py` in a subprocess that sees every GPU (placement, bf16 autocast, fp16
   with a GradScaler, fused AdamW, torch.compile, DDP over NCCL with 2+ GPUs); skips printed with their reasons.
2. agree  5 steps of a 2-layer BERT on CUDA (bf16 autocast) and on the CPU (fp32) from the same state, seed and
   batches; the losses must agree within bf16 tolerance (_gpu.BF16_REL_TOL).
3. bench  femlm's pre-training step (PretrainCore, as `femlm pretrain-scratch` / `continual-pretrain` run it)
   against HF Trainer at its best (bf16, sdpa, `torch_compile`, DataLoader workers, no length grouping) + its MLM
   collator,
   interleaved step by step (benchmarks/bench_train.py's bench_shape), BERT-base, bf16, eager and compiled:
     the paper's shapes first, never skipped: 48 x 512 (continual recipe), 256 x 512 and 256 x 128 (from scratch);
     micro-batches (gradient accumulation) where femlm's memory estimate says one pass would not fit;
     then, while the budget lasts: FE-MLM K=4 and FE across passes at 48 x 512 (compiled), and 64 x 128 (both
     modes, continuity with the first record).
   Per configuration: steady-state tokens/s (the measured steps that compiled nothing) and MFU against the card's
   published dense bf16 peak; a line `[name mode] graphs=G recompiles=R compile_s=S` for each side (dynamo's
   counters read before and after every step); femlm's host syncs per step that reads no device value
   (torch.cuda.set_sync_debug_mode; the core's read_at set as the training loop sets it); femlm's peak GPU memory
   beside femlm/train/estimate.py's estimate for that micro-batch.
4. write  results/gpu/<card>-<date>/ (results.json with the commit and the step_version it measured, results.md),
   ready to commit; `femlm ... --dry-run` prices runs with its MFU (femlm/train/estimate.py: measured_mfu).
The plan (seconds per part, from the first H100 run's figures: PLAN_S) is printed first; a configuration past the
plan's budget is skipped only if it is an extra one, and says so. The benchmark uses the first visible GPU only.
Exit status 1 when a test fails, the losses disagree or a configuration raises (the others still run; the results
are written first).

`--smoke` runs the same code paths, lines and files on the CPU at tiny shapes (under a minute eager; --smoke
--compile adds the compiled rows, minutes on 2 cores): MFU against a measured CPU matmul peak, host syncs as reads
of a tensor's value on the stepping thread (eager rows), results under a fresh temporary directory.

Usage: python benchmarks/gpu_check.py [--smoke] [--out DIR] [--steps 50] [--warmup 10] [--[no-]compile]
                                      [--budget-s 480] [--commit SHA] [--only continual,scratch,...]
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
import traceback
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _gpu  # noqa: E402 (puts the repository and tests/ on sys.path)
import torch  # noqa: E402
from bench_train import SHAPES, GpuOptions, Shape, bench_shape  # noqa: E402

from femlm.masking import MaskingConfig  # noqa: E402
from femlm.runs import git_commit  # noqa: E402
from femlm.runtime.config import RuntimeConfig  # noqa: E402
from femlm.train.estimate import GIB, keeps_attention_probabilities, micro_batch_memory, model_shape  # noqa: E402
from femlm.train.estimate import step_version as current_step_version  # noqa: E402
from femlm.train.flops import measured_matmul_flops  # noqa: E402

ARMS = {  # femlm's masking per arm; HF's collator is always Bernoulli MLM 15%
    "mlm": MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.15),
    "fe_k4": MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4, ratio=0.15),
    "fe_passes": MaskingConfig(name="fe_passes_subword", strategy="fully_explored_passes", num_masks=None,
                               ratio=0.15),
}


@dataclass(frozen=True)
class Config:
    """One benchmarked configuration: `batch` rows (trainer.batch_size) of `seq` tokens, femlm's arm, its modes."""

    name: str
    batch: int
    seq: int
    modes: tuple[bool, ...] = (False, True)  # compiled?
    arm: str = "mlm"
    paper: bool = False  # the paper's shapes: never skipped by the budget


GPU_CONFIGS = [Config("continual", 48, 512, paper=True), Config("scratch", 256, 512, paper=True),
               Config("scratch", 256, 128, paper=True), Config("fe_k4", 48, 512, (True,), "fe_k4"),
               Config("fe_passes", 48, 512, (True,), "fe_passes"), Config("continuity", 64, 128)]
# --smoke: the same kinds of configuration at tiny shapes, each code path once (continuity is continual's path);
# "scratch" takes two micro-batches a side (the accumulation path)
SMOKE_CONFIGS = [Config("continual", 4, 64, paper=True), Config("scratch", 8, 64, paper=True),
                 Config("fe_k4", 4, 64, (True,), "fe_k4"), Config("fe_passes", 4, 64, (True,), "fe_passes")]
# The plan's seconds, from the first H100 run (results/gpu/nvidia-h100-80gb-hbm3-2026-11-26: start-up 16 s,
# tests 45 s, 30-35 s per compiled graph, eager ~130k tokens/s a side, femlm compiled 227k and HF compiled 179k
# in steady state); `setup`: model, tokenizer, data and Trainer per configuration.
PLAN_S = {"startup": 16, "tests": 50, "agree": 10, "setup": 10, "compile": 35}
PLAN_TOKENS_S = {(False, "femlm"): 1.3e5, (False, "hf"): 1.35e5, (True, "femlm"): 2.2e5, (True, "hf"): 1.8e5}
TOKENS_MEASURED = 6e5  # tokens per side measured per configuration (at least 8 steps, at most --steps)


def steps_for(cfg: Config, args: argparse.Namespace) -> tuple[int, int]:
    """(measured steps, warm-up steps) of a configuration: about TOKENS_MEASURED tokens a side."""
    if args.smoke:
        return args.steps, args.warmup
    tokens = cfg.batch * cfg.seq
    steps = max(8, min(args.steps, math.ceil(TOKENS_MEASURED / tokens)))
    return steps, max(2, min(args.warmup, math.ceil(TOKENS_MEASURED / 5 / tokens)))


def planned_s(cfg: Config, compiled: bool, args: argparse.Namespace) -> float:
    steps, warmup = steps_for(cfg, args)
    tokens = (steps + warmup) * cfg.batch * cfg.seq
    hf = cfg.arm == "mlm"  # the FE rows run femlm alone (HF has no FE arm)
    run = tokens * (1 / PLAN_TOKENS_S[compiled, "femlm"] + hf / PLAN_TOKENS_S[compiled, "hf"])
    return PLAN_S["setup"] + (1 + hf) * PLAN_S["compile"] * compiled + run


def micro_batches(cfg: Config, compiled: bool, device_bytes: float | None, smoke: bool) -> tuple[int, int]:
    """(femlm's micro-batch in model rows, HF's in sequences): the largest halving of the batch whose estimated
    peak (femlm/train/estimate.py; HF: every token through the vocabulary head) stays under 50% of the card's
    memory, both models and their optimizer states being resident (the estimate was 0.88-0.98x the measured
    peaks). --smoke: half the batch for "scratch"."""
    rows = cfg.batch  # model rows: trainer.equal_compute=same_rows (the default), FE K=4 too (batch / K sequences)
    if device_bytes is None:
        return (rows // 2, cfg.batch // 2) if smoke and cfg.name == "scratch" else (rows, cfg.batch)
    shape = model_shape(bert_config(SHAPES["base"]))
    fused = not keeps_attention_probabilities(RuntimeConfig(compile=compiled, **gpu_runtime()))

    def fit(n: int, dense: bool) -> int:
        while n > 1 and n % 2 == 0 and micro_batch_memory(
                shape, n, cfg.seq, n * cfg.seq if dense else round(0.15 * n * cfg.seq), value_bytes=2,
                fused_attention=fused, sparse_prediction=not dense)["total"] > 0.5 * device_bytes:
            n //= 2
        return n

    return fit(rows, False), fit(cfg.batch, True)


def gpu_runtime() -> dict:
    """The runtime keys `runtime=gpu` sets (femlm/conf/runtime/gpu.yaml) beyond what each row sets itself (device,
    precision, compile, micro-batch): what users run, e.g. an attention kernel, read without Hydra."""
    import yaml

    from femlm import CONF_DIR

    keys = yaml.safe_load((Path(CONF_DIR) / "runtime" / "gpu.yaml").read_text()) or {}
    own = {"device", "precision", "compile", "micro_batch_size"}
    return {k: v for k, v in keys.items() if k in RuntimeConfig.__dataclass_fields__ and k not in own}


def bert_config(shape: Shape) -> object:
    """The config bench_train.build_model builds its model from (no weights)."""
    from transformers import AutoConfig

    return AutoConfig.for_model("bert", vocab_size=shape.vocab, hidden_size=shape.hidden,
                                num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                                intermediate_size=shape.intermediate, max_position_embeddings=512)


def peak_flops(cuda: bool) -> tuple[float | None, str]:
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


def bench(cfg: Config, compiled: bool, args: argparse.Namespace, peak: float | None, device: str,
          device_bytes: float | None, workdir: Path, done: list[dict]) -> dict:
    """One configuration, both sides interleaved (an FE row: femlm alone, HF's MLM figures taken from the row of
    the same shape and mode in `done`); prints its lines and returns its row of results.json."""
    cuda = device != "cpu"
    steps, warmup = steps_for(cfg, args)
    micro, hf_micro = micro_batches(cfg, compiled, device_bytes, args.smoke)
    shape = replace(SHAPES["smoke" if args.smoke else "base"], name=f"{cfg.name}_L{cfg.seq}", batch=cfg.batch,
                    seq=cfg.seq)
    probe = _gpu.StepProbe(cuda, warmup, count_syncs=cuda or not compiled)
    workers = 4 if cuda else int(cfg.name == "continual")  # --smoke: HF's worker path once, in the first row
    options = GpuOptions(masking=ARMS[cfg.arm], femlm_micro=micro, hf_micro=hf_micro, hf_workers=workers,
                         probe=probe, hf=cfg.arm == "mlm", runtime=gpu_runtime())
    out = bench_shape(shape, steps, warmup, peak or math.nan, workdir, "bf16", compile_femlm=compiled,
                      device=device, compile_hf=compiled, gpu=options)
    rows = probe.rows or cfg.batch
    fem_s, fem_compile = probe.steady(out["femlm_times"], probe.femlm_compiled)
    hf_s, hf_compile = probe.steady(out["hf_times"], probe.hf_compiled)
    mshape = model_shape(bert_config(shape))
    model_flops = mshape.flops.per_step(rows, cfg.seq, out["predicted"])
    runtime = RuntimeConfig(compile=compiled, **gpu_runtime())
    estimate = micro_batch_memory(mshape, micro, cfg.seq, round(out["predicted"] * micro / rows), value_bytes=2,
                                  fused_attention=cuda and not keeps_attention_probabilities(runtime))["total"]
    hf_flops = mshape.flops.per_step(cfg.batch, cfg.seq, out["predicted"] * cfg.batch / rows)
    row = {"name": cfg.name, "arm": cfg.arm, "batch": cfg.batch, "seq": cfg.seq, "rows": rows, "compile": compiled,
           "micro": micro, "hf_micro": hf_micro, "steps": steps, "warmup": warmup,
           "femlm": rows * cfg.seq / fem_s, "hf": cfg.batch * cfg.seq / hf_s,
           "mfu": model_flops / fem_s / peak if peak else None, "hf_mfu": hf_flops / hf_s / peak if peak else None,
           "graphs": probe.graphs["femlm"], "recompiles": probe.recompiles["femlm"], "compile_s": fem_compile,
           "hf_graphs": probe.graphs["hf"], "hf_recompiles": probe.recompiles["hf"], "hf_compile_s": hf_compile,
           "syncs_per_step": probe.syncs / probe.sync_steps if probe.sync_steps else None,
           "sync_steps": probe.sync_steps, "reads_every_step": probe.reads_every_step,
           "predicted": out["predicted"], "peak_gib": out["femlm_peak_bytes"] / GIB if cuda else None,
           "estimate_gib": estimate / GIB}
    if cfg.arm != "mlm":
        key = (cfg.batch, cfg.seq, compiled)
        same = [r for r in done if r["arm"] == "mlm" and (r["batch"], r["seq"], r["compile"]) == key]
        row.update({"hf": same[0]["hf"] if same else math.nan, "hf_mfu": same[0]["hf_mfu"] if same else None,
                    "hf_from": f"{same[0]['name']} row (HF has no FE arm)" if same else "no HF row of this shape"})
    row["ratio"] = row["femlm"] / row["hf"]
    tag = f"[{_gpu.label(row)} {'compiled' if compiled else 'eager'}]"
    mfu = f"{row['mfu']:.3f}" if peak else "n/a"
    hf_mfu = f"{row['hf_mfu']:.3f}" if row["hf_mfu"] is not None else "n/a"
    print(f"{tag} graphs={row['graphs']} recompiles={row['recompiles']} compile_s={fem_compile:.1f}", flush=True)
    if cfg.arm == "mlm":
        print(f"{tag} hf graphs={row['hf_graphs']} recompiles={row['hf_recompiles']} compile_s={hf_compile:.1f}")
    else:
        print(f"{tag} hf: not run; HF's figures from the {row['hf_from']}")
    if row["syncs_per_step"] is None:
        syncs = "not counted (CPU compiled: a dispatch mode would change the graph)"
    else:
        which = ("every step reads (this core has no read_at)" if probe.reads_every_step
                 else "steps that do not log")
        syncs = f"{row['syncs_per_step']:.2f} per step over {probe.sync_steps} {which}"
    print(f"{tag} host syncs: {syncs}")
    print(f"{tag} tokens/s femlm={row['femlm']:.0f} hf={row['hf']:.0f} ratio={row['ratio']:.2f} mfu={mfu} "
          f"hf_mfu={hf_mfu} (steady state: steps that compiled nothing)", flush=True)
    measured = f"{row['peak_gib']:.3g} GiB" if row["peak_gib"] is not None else "not measured on the CPU"
    print(f"{tag} femlm peak GPU memory: {measured}; estimate (femlm/train/estimate.py, bf16, micro-batch of "
          f"{micro} rows): {row['estimate_gib']:.3g} GiB", flush=True)
    return row


def write(out: Path, record: dict) -> None:
    """results.json and results.md of `record`, each replaced whole (a temporary file renamed over it)."""
    texts = {"results.json": json.dumps(record, indent=1) + "\n", "results.md": _gpu.markdown(record)}
    for name, text in texts.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the same code paths on the CPU at tiny shapes")
    parser.add_argument("--out", type=Path, help="where <card>-<date>/ is written (default: results/gpu; "
                        "--smoke: a fresh temporary directory)")
    parser.add_argument("--steps", type=int, help="most measured steps per configuration (default 50; smoke 2)")
    parser.add_argument("--warmup", type=int, help="most unmeasured steps first (default 10; smoke 1)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also the compiled rows (default: yes on a GPU, no under --smoke)")
    parser.add_argument("--budget-s", type=float, default=480, help="the whole run's planned seconds; only extra "
                        "configurations are skipped past it")
    parser.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD of this checkout; "
                        "a copy without .git, as a device machine receives, needs it given)")
    parser.add_argument("--only", help="comma list of configuration names to run (continual, scratch, fe_k4, "
                        "fe_passes, continuity; default: all)")
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
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    device = "cuda:0" if cuda else "cpu"
    card = torch.cuda.get_device_name(0) if cuda else "cpu-smoke"
    device_bytes = float(torch.cuda.get_device_properties(0).total_memory) if cuda else None
    commit = args.commit or git_commit()
    step_version = current_step_version()
    skipped: list[str] = []
    if args.smoke:
        skipped.append("the GPU itself: --smoke runs every part on the CPU (tiny shapes; figures mean nothing)")
    peak, peak_label = peak_flops(cuda)
    if peak is None:
        skipped.append(f"MFU: {peak_label}")
    print(f"gpu-check on {card}: torch {torch.__version__}, CUDA {torch.version.cuda}, transformers "
          f"{transformers.__version__}; commit {commit}, step_version {step_version}; {peak_label}; "
          f"femlm runtime: runtime=gpu's keys {gpu_runtime()}", flush=True)

    # without --compile (--smoke's default) every configuration runs eager once, the compiled-only FE rows too
    wanted = set(args.only.split(",")) if args.only else None
    configs = [(c, m) for c in (SMOKE_CONFIGS if args.smoke else GPU_CONFIGS) for m in (c.modes if args.compile
                                                                                        else (False,))
               if wanted is None or c.name in wanted]
    plan = [{"config": f"{c.name} b={c.batch} L={c.seq}{'' if c.arm == 'mlm' else ' ' + c.arm}",
             "compile": m, "paper": c.paper, "planned_s": round(planned_s(c, m, args))} for c, m in configs]
    fixed = PLAN_S["startup"] + PLAN_S["tests"] + PLAN_S["agree"]
    print(f"plan (H100 seconds from the first run; budget {args.budget_s:.0f} s): start-up {PLAN_S['startup']}, "
          f"tests {PLAN_S['tests']}, agreement {PLAN_S['agree']}")
    for item in plan:
        kind = "paper shape: always run" if item["paper"] else "extra: skipped past the budget"
        print(f"  plan: [{item['config']} {'compiled' if item['compile'] else 'eager'}] ~{item['planned_s']} s "
              f"({kind})")
    print(f"  plan: ~{fixed + sum(p['planned_s'] for p in plan)} s in all", flush=True)
    if not args.compile:
        skipped.append("bench compiled: " + ("--smoke compiles nothing unless --compile is given (compiling takes "
                                             "minutes on a 2-core CPU)" if args.smoke else "--no-compile"))

    # 1. the tests marked cuda
    tests = _gpu.run_cuda_tests(180, base_env)
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
    out = _gpu.fresh_dir(parent / f"{_gpu.slug(card)}-{date}")
    record = {"card": card, "date": date, "commit": commit, "step_version": step_version,
              "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__, "smoke": args.smoke,
              "peak_flops": peak, "peak_label": peak_label, "precision": "bf16", "tests": tests, "bench": [],
              "agreement": None, "skipped": skipped, "budget_s": args.budget_s, "plan": plan,
              "femlm_runtime": {"precision": "bf16", **gpu_runtime()},
              "configs": [asdict(c) for c in (SMOKE_CONFIGS if args.smoke else GPU_CONFIGS)],
              "model": asdict(SHAPES["smoke" if args.smoke else "base"])}

    # 2. the same steps on the device (bf16) and on the CPU (fp32): before the benchmark (10 s), so a run cut by
    # its window still says whether the step is right
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
            elapsed = time.perf_counter() - start + (PLAN_S["startup"] if cuda else 0)
            if not cfg.paper and not args.smoke and elapsed + item["planned_s"] + PLAN_S["agree"] > args.budget_s:
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
                rows.append(bench(cfg, compiled, args, peak, device, device_bytes, Path(tmp), rows))
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
    failed = tests["status"] not in ("ok", "skipped") or not agreement["agree"] or bool(failures)
    print(f"skipped: {len(skipped)} item(s){': ' + '; '.join(skipped) if skipped else ''}")
    print(f"gpu-check {'FAILED' if failed else 'ok'} in {record['wall_s']:.0f} s; wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
