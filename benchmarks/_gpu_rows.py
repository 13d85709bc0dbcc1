"""gpu_check.py's configurations and one benchmarked row: femlm's step against HF Trainer under its own defaults
and HF with femlm's attention kernels, each timed per-step synced and in blocks, with a profiled step each.

The GPU study's row reads its model, shape, arms and mode from its experiment file (`study_config`), so it follows
the file as the study changes it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import _gpu
import torch
from _timing import block_seconds, ops_text
from bench_train import SHAPES, GpuOptions, Shape, bench_shape, model_config

from femlm import CONF_DIR
from femlm.masking import MaskingConfig
from femlm.runtime.attention import attention_dropout, plan_kernels
from femlm.runtime.config import RuntimeConfig
from femlm.train.estimate import GIB, keeps_attention_probabilities, micro_batch_memory, model_shape

ARMS = {  # femlm's masking per arm; HF's collator is always Bernoulli MLM 15%
    "mlm": MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.15),
    "fe_k4": MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4, ratio=0.15),
    "fe_passes": MaskingConfig(name="fe_passes_subword", strategy="fully_explored_passes", num_masks=None,
                               ratio=0.15),
}
STUDY_FILE = CONF_DIR / "experiment" / "study_gpu.yaml"


@dataclass(frozen=True)
class Config:
    """One benchmarked configuration: `batch` rows (trainer.batch_size) of `seq` tokens, femlm's arm, its modes."""

    name: str
    batch: int
    seq: int
    modes: tuple[bool, ...] = (False, True)  # compiled?
    arm: str = "mlm"
    paper: bool = False  # the paper's shapes: never skipped by the budget
    masking: MaskingConfig | None = None  # the arm's masking when it is not one of ARMS (the study's arms)
    model: Shape | None = field(default=None)  # None: BERT-base (SHAPES["base"]; smoke: SHAPES["smoke"])
    runtime: tuple[tuple[str, Any], ...] = ()  # runtime keys over runtime=gpu's (the study's pinned sdpa_backend)

    def arm_masking(self) -> MaskingConfig:
        return self.masking or ARMS[self.arm]

    def runtime_keys(self) -> dict:
        """runtime=gpu's keys (gpu_runtime) with this row's own over them."""
        return {**gpu_runtime(), **dict(self.runtime)}


GPU_CONFIGS = [Config("continual", 48, 512, paper=True), Config("scratch", 256, 512, paper=True),
               Config("scratch", 256, 128, paper=True), Config("fe_k4", 48, 512, (True,), "fe_k4"),
               Config("fe_passes", 48, 512, (True,), "fe_passes"), Config("continuity", 64, 128)]
# --smoke: the same kinds of configuration at tiny shapes, each code path once (continuity is continual's path);
# "scratch" takes two micro-batches a side (the accumulation path)
SMOKE_CONFIGS = [Config("continual", 4, 64, paper=True), Config("scratch", 8, 64, paper=True),
                 Config("fe_k4", 4, 64, (True,), "fe_k4"), Config("fe_passes", 4, 64, (True,), "fe_passes")]


def study_config(smoke: bool = False, path: Path = STUDY_FILE) -> list[Config]:
    """The GPU study's rows: its model (`model=<name>`'s arch with the `model.arch.*` overrides, its layers by
    `model_type`; `model.vocab_size`), shape (`trainer.batch_size` x `data.block_size`), mode (`runtime.compile`)
    and arms (`pretrain.arms`, each its masking file with the common `masking.*` overrides), from the experiment
    file's `common` overrides (`smoke.common` for --smoke). Read without Hydra (the device machine has none)."""
    import yaml

    exp = yaml.safe_load(path.read_text())["experiment"]
    # `+key=value` adds a free-form key (model.arch's ModernBERT keys): the same key here
    common = dict(o.removeprefix("+").split("=", 1) for o in (exp["smoke"] if smoke else exp)["common"] if "=" in o)
    # the model file's arch (`model=<name>`: femlm/conf/model/<name>.yaml), then the model.arch.* overrides
    base = yaml.safe_load((CONF_DIR / "model" / f"{common['model']}.yaml").read_text()).get("arch") or {}
    arch = {**base, **{k.removeprefix("model.arch."): yaml.safe_load(v) for k, v in common.items()
                       if k.startswith("model.arch.")}}
    batch, seq = int(common["trainer.batch_size"]), int(common["data.block_size"])
    named = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
             "max_position_embeddings")
    model = Shape("study", int(arch["num_hidden_layers"]), int(arch["hidden_size"]), int(arch["num_attention_heads"]),
                  int(arch["intermediate_size"]), int(common["model.vocab_size"]), batch, seq,
                  model_type=str(arch.get("model_type", "bert")),
                  extra=tuple(sorted((k, v) for k, v in arch.items() if k not in named)))
    compiled = str(common.get("runtime.compile", "true")).lower() == "true"
    pinned = tuple((k.removeprefix("runtime."), yaml.safe_load(v)) for k, v in common.items()
                   if k == "runtime.sdpa_backend")
    known = {f.name for f in fields(MaskingConfig)}
    overrides = {k.removeprefix("masking."): yaml.safe_load(v) for k, v in common.items() if k.startswith("masking.")}
    rows = []
    for arm in exp["pretrain"]["arms"]:
        keys = yaml.safe_load((CONF_DIR / "masking" / f"{arm}.yaml").read_text()) or {}
        masking = MaskingConfig(**{k: v for k, v in {**keys, **overrides}.items() if k in known})
        rows.append(Config("study", batch, seq, (compiled,), arm, masking=masking, model=model, runtime=pinned))
    return rows


def steps_for(cfg: Config, args: argparse.Namespace) -> tuple[int, int]:
    """(measured steps, warm-up steps) of a configuration: about TOKENS_MEASURED tokens a side."""
    if args.smoke:
        return args.steps, args.warmup
    tokens = cfg.batch * cfg.seq
    steps = max(8, min(args.steps, math.ceil(TOKENS_MEASURED / tokens)))
    return steps, max(2, min(args.warmup, math.ceil(TOKENS_MEASURED / 5 / tokens)))


# The plan's seconds, from the first H100 run (results/gpu/nvidia-h100-80gb-hbm3-2026-11-26: start-up 16 s,
# tests 45 s, 30-35 s per compiled graph, eager ~130k tokens/s a side, femlm compiled 227k and HF compiled 179k
# in steady state); `setup`: model, tokenizer, data and Trainer per configuration.
PLAN_S = {"startup": 16, "tests": 50, "agree": 10, "setup": 10, "compile": 35}
PLAN_TOKENS_S = {(False, "femlm"): 1.3e5, (False, "hf"): 1.35e5, (True, "femlm"): 2.2e5, (True, "hf"): 1.8e5}
TOKENS_MEASURED = 6e5  # tokens per side measured per configuration (at least 8 steps, at most --steps)


def planned_s(cfg: Config, compiled: bool, args: argparse.Namespace) -> float:
    """Seconds of one row: femlm and (MLM arm) HF twice, each warm-up + synced + block steps, compiles, set-up.
    Another model than BERT-base is scaled by its FLOPs per token."""
    steps, warmup = steps_for(cfg, args)
    scale = 1.0
    if cfg.model is not None:
        scale = model_shape(model_config(cfg.model)).flops.per_step(1, cfg.seq, 0.15 * cfg.seq) / \
            model_shape(model_config(SHAPES["base"])).flops.per_step(1, cfg.seq, 0.15 * cfg.seq)
    tokens = (2 * steps + warmup + 1) * cfg.batch * cfg.seq * scale
    hf = 2 * (cfg.arm == "mlm")  # HF's defaults and HF with femlm's kernels; no HF side for other arms
    run = tokens * (1 / PLAN_TOKENS_S[compiled, "femlm"] + hf / PLAN_TOKENS_S[compiled, "hf"])
    return PLAN_S["setup"] * (1 + (hf > 0)) + (1 + hf) * PLAN_S["compile"] * compiled + run


def gpu_runtime() -> dict:
    """The runtime keys `runtime=gpu` sets (femlm/conf/runtime/gpu.yaml) beyond what each row sets itself (device,
    precision, compile, micro-batch): what users run (the attention kernels, TF32), read without Hydra."""
    import yaml

    keys = yaml.safe_load((CONF_DIR / "runtime" / "gpu.yaml").read_text()) or {}
    own = {"device", "precision", "compile", "micro_batch_size"}
    return {k: v for k, v in keys.items() if k in RuntimeConfig.__dataclass_fields__ and k not in own}


def micro_batches(cfg: Config, compiled: bool, device_bytes: float | None, smoke: bool) -> tuple[int, int]:
    """(femlm's micro-batch in model rows, HF's in sequences): the largest halving of the batch whose estimated
    peak (femlm/train/estimate.py, with the attention probabilities kept only when runtime=gpu's kernels allow
    the math kernel under compile; HF: every token through the vocabulary head) stays under 50% of the card's
    memory, both models and their optimizer states being resident (the estimate was 0.88-1.01x the measured
    peaks). --smoke: half the batch for "scratch"."""
    rows = cfg.batch  # model rows: trainer.equal_compute=same_rows (the default), FE K=4 too (batch / K sequences)
    if device_bytes is None:
        return (rows // 2, cfg.batch // 2) if smoke and cfg.name == "scratch" else (rows, cfg.batch)
    shape = model_shape(model_config(cfg.model or SHAPES["base"]))
    fused = not keeps_attention_probabilities(RuntimeConfig(compile=compiled, **cfg.runtime_keys()))

    def fit(n: int, dense: bool) -> int:
        while n > 1 and n % 2 == 0 and micro_batch_memory(
                shape, n, cfg.seq, n * cfg.seq if dense else round(0.15 * n * cfg.seq), value_bytes=2,
                fused_attention=fused, sparse_prediction=not dense)["total"] > 0.5 * device_bytes:
            n //= 2
        return n

    return fit(rows, False), fit(cfg.batch, True)


def _side(times: list[float], blocks: list, compiled_flags: list[bool], probe: _gpu.StepProbe,
          tokens: int) -> dict[str, float]:
    """One side's figures: tokens/s from its synced steps (steady state) and from its timed blocks."""
    step_s, compile_s = probe.steady(times, compiled_flags)
    return {"tok_s": tokens / step_s, "tok_s_block": tokens / block_seconds(blocks, compiled_flags),
            "compile_s": compile_s}


def bench(cfg: Config, compiled: bool, args: argparse.Namespace, peaks: dict[str, float | None], device: str,
          device_bytes: float | None, workdir: Path, done: list[dict]) -> dict:
    """One configuration: femlm and HF under its own defaults interleaved (an FE or study row: femlm alone, HF's
    MLM figures taken from the row of the same shape and mode in `done`), then HF alone with femlm's attention
    kernels; prints its lines and returns its row of results.json. `peaks`: the data sheet's and the measured
    matrix rate (FLOP/s; None where unknown)."""
    cuda = device != "cpu"
    steps, warmup = steps_for(cfg, args)
    micro, hf_micro = micro_batches(cfg, compiled, device_bytes, args.smoke)
    model = cfg.model or SHAPES["smoke" if args.smoke else "base"]
    shape = replace(model, name=f"{cfg.name}_L{cfg.seq}", batch=cfg.batch, seq=cfg.seq)
    workers = 4 if cuda else int(cfg.name == "continual")  # --smoke: HF's worker path once, in the first row
    mlm = cfg.arm == "mlm"
    block = args.block

    def run(hf_attention: str | None = None) -> tuple[dict, _gpu.StepProbe]:
        probe = _gpu.StepProbe(cuda, warmup, count_syncs=cuda or not compiled)
        options = GpuOptions(masking=cfg.arm_masking(), femlm_micro=micro, hf_micro=hf_micro, hf_workers=workers,
                             probe=probe, hf=mlm, femlm=hf_attention is None, hf_attention=hf_attention,
                             block=block, profile=True, runtime=cfg.runtime_keys())
        out = bench_shape(shape, steps, warmup, math.nan, workdir, "bf16", compile_femlm=compiled, device=device,
                          compile_hf=compiled, gpu=options)
        return out, probe

    out, probe = run()
    rows = probe.rows or cfg.batch
    mshape = model_shape(model_config(shape))
    femlm = _side(out["femlm_times"][:warmup + steps], out["femlm_blocks"], probe.femlm_compiled, probe,
                  rows * cfg.seq)
    hf = _side(out["hf_times"], out["hf_blocks"], probe.hf_compiled, probe, cfg.batch * cfg.seq)
    fused: dict[str, Any] = {"tok_s": math.nan, "tok_s_block": math.nan, "compile_s": 0.0}
    fused_ops = None
    if mlm:  # HF with femlm's attention kernels (an attention function registered with transformers)
        from _hf import femlm_attention

        kernels = plan_kernels(cfg.runtime_keys().get("sdpa_backend", "auto"), "cuda" if cuda else "cpu",
                               attention_dropout(model_config(shape)))
        fused_out, fused_probe = run(femlm_attention(kernels))
        fused = _side(fused_out["hf_times"], fused_out["hf_blocks"], fused_probe.hf_compiled, fused_probe,
                      cfg.batch * cfg.seq)
        fused_ops = fused_out["hf_ops"].get("ops")
    model_flops = mshape.flops.per_step(rows, cfg.seq, out["predicted"])
    hf_flops = mshape.flops.per_step(cfg.batch, cfg.seq, out["predicted"] * cfg.batch / rows)
    runtime = RuntimeConfig(compile=compiled, **cfg.runtime_keys())
    estimate = micro_batch_memory(mshape, micro, cfg.seq, round(out["predicted"] * micro / rows), value_bytes=2,
                                  fused_attention=cuda and not keeps_attention_probabilities(runtime))["total"]

    def mfu(flops: float, tok_s: float, tokens: int, peak: float | None) -> float | None:
        return flops * tok_s / tokens / peak if peak and math.isfinite(tok_s) else None

    sheet, matmul = peaks["sheet"], peaks["matmul"]
    row = {"name": cfg.name, "arm": cfg.masking.name if cfg.masking else cfg.arm, "batch": cfg.batch,
           "seq": cfg.seq, "model": model.name, "rows": rows, "compile": compiled, "micro": micro,
           "hf_micro": hf_micro, "steps": steps, "warmup": warmup, "block": block,
           "femlm": femlm["tok_s"], "femlm_block": femlm["tok_s_block"], "hf": hf["tok_s"],
           "hf_block": hf["tok_s_block"], "hf_fused": fused["tok_s"], "hf_fused_block": fused["tok_s_block"],
           "mfu": mfu(model_flops, femlm["tok_s"], rows * cfg.seq, sheet),
           "mfu_block": mfu(model_flops, femlm["tok_s_block"], rows * cfg.seq, sheet),
           "mfu_block_matmul": mfu(model_flops, femlm["tok_s_block"], rows * cfg.seq, matmul),
           "hf_mfu": mfu(hf_flops, hf["tok_s"], cfg.batch * cfg.seq, sheet),
           "hf_mfu_block": mfu(hf_flops, hf["tok_s_block"], cfg.batch * cfg.seq, sheet),
           "hf_fused_mfu_block": mfu(hf_flops, fused["tok_s_block"], cfg.batch * cfg.seq, sheet),
           "graphs": probe.graphs["femlm"], "recompiles": probe.recompiles["femlm"], "compile_s": femlm["compile_s"],
           "hf_graphs": probe.graphs["hf"], "hf_recompiles": probe.recompiles["hf"], "hf_compile_s": hf["compile_s"],
           "hf_fused_compile_s": fused["compile_s"],
           "syncs_per_step": probe.syncs / probe.sync_steps if probe.sync_steps else None,
           "sync_steps": probe.sync_steps, "reads_every_step": probe.reads_every_step,
           "predicted": out["predicted"], "peak_gib": out["femlm_peak_bytes"] / GIB if cuda else None,
           "estimate_gib": estimate / GIB, "femlm_ops": out["femlm_ops"].get("ops"),
           "hf_ops": out["hf_ops"].get("ops"), "hf_fused_ops": fused_ops, "attention": out["attention"]}
    if not mlm:
        key = (cfg.batch, cfg.seq, compiled, model.name)
        same = [r for r in done if r["arm"] == "mlm" and (r["batch"], r["seq"], r["compile"], r["model"]) == key]
        for k in ("hf", "hf_block", "hf_fused", "hf_fused_block", "hf_mfu", "hf_mfu_block", "hf_fused_mfu_block"):
            row[k] = same[0][k] if same else (None if "mfu" in k else math.nan)
        row["hf_from"] = f"{same[0]['name']} row (HF has no FE arm)" if same else "no HF row of this shape"
    row["ratio"] = row["femlm"] / row["hf"]
    row["ratio_block"] = row["femlm_block"] / row["hf_block"]
    row["ratio_fused_block"] = row["femlm_block"] / row["hf_fused_block"]
    print_row(row, cfg, compiled, probe)
    return row


def _f(value: float | None, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if value is not None and math.isfinite(value) else "n/a"


def print_row(row: dict, cfg: Config, compiled: bool, probe: _gpu.StepProbe) -> None:
    tag = f"[{_gpu.label(row)} {'compiled' if compiled else 'eager'}]"
    print(f"{tag} graphs={row['graphs']} recompiles={row['recompiles']} compile_s={row['compile_s']:.1f}", flush=True)
    if cfg.arm == "mlm":
        print(f"{tag} hf graphs={row['hf_graphs']} recompiles={row['hf_recompiles']} "
              f"compile_s={row['hf_compile_s']:.1f}; hf with femlm's kernels compile_s={row['hf_fused_compile_s']:.1f}")
    else:
        print(f"{tag} hf: not run; HF's figures from the {row['hf_from']}")
    if row["syncs_per_step"] is None:
        syncs = "not counted (CPU compiled: a dispatch mode would change the graph)"
    else:
        which = "every step reads (this core has no read_at)" if probe.reads_every_step else "steps that do not log"
        syncs = f"{row['syncs_per_step']:.2f} per step over {probe.sync_steps} {which}"
    print(f"{tag} host syncs: {syncs}")
    print(f"{tag} tokens/s femlm={row['femlm']:.0f} hf={row['hf']:.0f} ratio={row['ratio']:.2f} mfu={_f(row['mfu'])} "
          f"hf_mfu={_f(row['hf_mfu'])} (per-step synced, steady state: steps that compiled nothing)", flush=True)
    print(f"{tag} block timing ({row['block']} steps per sync): tokens/s femlm={_f(row['femlm_block'], 0)} "
          f"hf={_f(row['hf_block'], 0)} hf_femlm_attention={_f(row['hf_fused_block'], 0)} "
          f"ratio={_f(row['ratio_block'], 2)} ratio_vs_hf_femlm_attention={_f(row['ratio_fused_block'], 2)} "
          f"mfu={_f(row['mfu_block'])} mfu_vs_measured_matmul={_f(row['mfu_block_matmul'])}", flush=True)
    attention = (row["attention"] or {}).get("dispatched")
    print(f"{tag} attention ops (profiled step): femlm: {ops_text(row['femlm_ops'])}; hf: {ops_text(row['hf_ops'])}; "
          f"hf with femlm's kernels: {ops_text(row['hf_fused_ops'])}; femlm dispatch at these shapes: {attention}")
    measured = f"{row['peak_gib']:.3g} GiB" if row["peak_gib"] is not None else "not measured on the CPU"
    print(f"{tag} femlm peak GPU memory: {measured}; estimate (femlm/train/estimate.py, bf16, micro-batch of "
          f"{row['micro']} rows): {row['estimate_gib']:.3g} GiB", flush=True)


def matmul_rate(cuda: bool) -> float:
    """The card's (or CPU's) measured bf16 matrix rate, FLOP/s: a large square matmul, best of repeated timings."""
    from femlm.train.flops import measured_matmul_flops

    if cuda:
        return measured_matmul_flops("cuda", torch.bfloat16, n=8192, seconds=1.0)
    return max(measured_matmul_flops("cpu", dtype, n=512, seconds=0.3) for dtype in (torch.float32, torch.bfloat16))
