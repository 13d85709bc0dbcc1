"""Helpers of benchmarks/gpu_check.py: which card this is and its published peak, the probe around each step
(graphs, recompiles, compile seconds, host syncs: counted from outside the core), the CUDA tests in a
subprocess, the CUDA-vs-CPU loss agreement, and where the results go."""

from __future__ import annotations

import copy
import math
import os
import re
import statistics
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import _common  # noqa: F401 (puts the repository and tests/ on sys.path)
import torch
from _timing import ops_text

from femlm.train.estimate import GPU_PEAK_BF16, gpu_key

ROOT = Path(__file__).resolve().parents[1]


def card_peak(name: str) -> tuple[str | None, float | None]:
    """(key of GPU_PEAK_BF16, its published dense bf16 peak) for a CUDA device name such as "NVIDIA H100 80GB
    HBM3"; (None, None) for a card the table does not hold (MFU is then not reported)."""
    key = gpu_key(name)
    return key, GPU_PEAK_BF16.get(key) if key else None


def dynamo_counts() -> tuple[int, int]:
    """(graphs compiled, recompiles) so far in this process: dynamo's unique_graphs counter and its guard
    failures (each failed guard set is one recompile)."""
    from torch._dynamo.utils import counters, guard_failures

    return int(counters["stats"]["unique_graphs"]), sum(len(v) for v in guard_failures.values())


class _ScalarReads:
    """Counts aten._local_scalar_dense on this thread (what .item(), float(), int(), bool() of a tensor run):
    the CPU's stand-in for CUDA's sync debug mode."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
                if func is torch.ops.aten._local_scalar_dense.default:
                    outer.count += 1
                return func(*args, **(kwargs or {}))

        self.count, self.mode = 0, Mode()


class StepProbe:
    """bench_train.bench_shape's probe (GpuOptions.probe): which steps compiled (dynamo's counters before and after
    each step of either side), femlm's host syncs in the measured steps that read no device value (CUDA:
    torch.cuda.set_sync_debug_mode's warnings, from any thread; CPU, eager only: reads of a tensor's value on the
    stepping thread), and the core's `read_at` set as the training loop sets it (a read every `log_every` steps
    and at the last), where the core has one. Only public parts of the core are used: step(s), read_at."""

    def __init__(self, cuda: bool, warmup: int, log_every: int = 10, count_syncs: bool = True) -> None:
        self.cuda, self.warmup, self.log_every, self.count_syncs = cuda, warmup, log_every, count_syncs
        self.femlm_compiled: list[bool] = []
        self.hf_compiled: list[bool] = []
        self.graphs = {"femlm": 0, "hf": 0}
        self.recompiles = {"femlm": 0, "hf": 0}
        self.syncs, self.sync_steps, self.rows = 0, 0, None
        self.reads_every_step = True

    def start(self, core: Any, total: int) -> None:
        self.rows = getattr(core, "rank_model_rows", None)
        if hasattr(core, "read_at"):
            core.read_at = lambda s: s % self.log_every == 0 or s == total
            self.reads_every_step = False
        self.mark = dynamo_counts()

    def _delta(self, side: str) -> bool:
        now = dynamo_counts()
        graphs, recompiles = now[0] - self.mark[0], now[1] - self.mark[1]
        self.graphs[side] += graphs
        self.recompiles[side] += recompiles
        self.mark = now
        return graphs > 0 or recompiles > 0

    def hf_done(self, step: int) -> None:
        self.hf_compiled.append(self._delta("hf"))

    def femlm_step(self, core: Any, step: int, sync: Any) -> Any:
        if len(self.hf_compiled) < len(self.femlm_compiled) + 1:  # HF's step before this one
            self.hf_compiled.append(self._delta("hf"))
        reads = core.read_at(step) if hasattr(core, "read_at") else True
        counted = self.count_syncs and step > self.warmup and (self.reads_every_step or not reads)
        if not counted:
            stats = core.step(step)
        elif self.cuda:
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    stats = core.step(step)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            self.syncs += sum("synchroniz" in str(w.message) for w in caught)
        else:
            reads_here = _ScalarReads()
            with reads_here.mode:
                stats = core.step(step)
            self.syncs += reads_here.count
        self.sync_steps += counted
        sync()
        self.femlm_compiled.append(self._delta("femlm"))
        return stats

    def steady(self, times: list[float], compiled: list[bool]) -> tuple[float, float]:
        """(steady seconds per step: the mean of the measured steps that compiled nothing; compile seconds: what
        the steps that compiled took beyond that)."""
        if not times:  # a side that did not run
            return math.nan, 0.0
        flags = (compiled + [False] * len(times))[:len(times)]
        clean = [t for i, (t, c) in enumerate(zip(times, flags, strict=True)) if i >= self.warmup and not c]
        step_s = statistics.fmean(clean or times[self.warmup:] or times)
        return step_s, sum(max(t - step_s, 0.0) for t, c in zip(times, flags, strict=True) if c)


def write_texts(out: Path, texts: dict[str, str]) -> None:
    """Each file of `texts` ({name: text}) into `out`, replaced whole (a temporary file renamed over it)."""
    for name, text in texts.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def fresh_dir(base: Path, owner: str) -> Path:
    """`base`, or base-2, base-3... when an earlier run's `owner` file is there: a run never overwrites another's
    results (gpu_check.py's results.json and attention_probe.py's files share a <card>-<date> folder)."""
    out, n = base, 1
    while (out / owner).exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_cuda_tests(timeout: int, base_env: dict[str, str]) -> dict[str, Any]:
    """`pytest -m cuda tests/test_cuda.py` in a subprocess (environment `base_env`, so every GPU is visible to
    it): its counts, and each skip with its reason."""
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        return {"status": "skipped", "summary": "not run: pytest is not installed", "counts": {}, "skips": [],
                "failures": []}
    env = {**base_env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                                         base_env.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-m", "cuda", "-rs",
           "-W", "ignore::pytest.PytestUnknownMarkWarning",  # xdist_group, without xdist
           str(ROOT / "tests" / "test_cuda.py")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout} s", "counts": {}, "skips": [], "failures": []}
    out = proc.stdout
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)",
                                                      summary)}
    skips = re.findall(r"^SKIPPED \[\d+\] (.+)$", out, re.M)
    failures = re.findall(r"^(?:FAILED|ERROR) (.+)$", out, re.M)
    status = "ok" if proc.returncode == 0 else f"pytest exited {proc.returncode}"
    return {"status": status, "summary": summary, "counts": counts, "skips": skips, "failures": failures}


def tiny_model(vocab: int) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)  # no dropout: the two devices draw different random numbers
    config = AutoConfig.for_model("bert", vocab_size=vocab, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=128, max_position_embeddings=128,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")


def device_losses(device: str, precision: str, steps: int, vocab: int = 256) -> list[float]:
    """`steps` losses of PretrainCore from one seed and one initial state on `device` (the masks and batches
    are drawn on the CPU, so both devices see the same ones)."""
    from femlm.masking import MaskingConfig, build_masker
    from femlm.runtime.config import RuntimeConfig
    from femlm.train.config import TrainerConfig
    from femlm.train.core import PretrainCore
    from femlm.train.distributed import DistInfo
    from helpers.tiny import synthetic_blocks

    masker = build_masker(MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.15), 4, vocab, [0, 2, 3])
    core = PretrainCore(copy.deepcopy(tiny_model(vocab)), masker, synthetic_blocks(256, 64, vocab),
                        TrainerConfig(batch_size=16, max_steps=steps, lr=1e-3, warmup_ratio=0.0),
                        RuntimeConfig(precision=precision, keep_freed_memory=False), seed=0,
                        dist=DistInfo(device=torch.device(device)))
    return [core.step(s).loss for s in range(1, steps + 1)]


# bf16 keeps 8 significant bits (relative step 2^-8 = 0.4%); a few steps of rounding in every matmul stay within
# a few times that, while a wrong device path (another mask, a dropped term) moves the loss by far more.
BF16_REL_TOL = 0.02


def loss_agreement(device: str, steps: int) -> dict[str, Any]:
    """The same steps on `device` under bf16 autocast and on the CPU in fp32 (the reference): do they agree?"""
    test = device_losses(device, "bf16", steps)
    ref = device_losses("cpu", "fp32", steps)
    worst = max(abs(a - b) / abs(b) for a, b in zip(test, ref, strict=True))
    return {"device": device, "steps": steps, "bf16_losses": test, "cpu_fp32_losses": ref,
            "max_rel_diff": worst, "tolerance": BF16_REL_TOL, "agree": worst <= BF16_REL_TOL}


def _num(value: Any, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) and math.isfinite(value) else "—"


def markdown(record: dict[str, Any]) -> str:
    """The short tables committed beside results.json."""
    sheet = record.get("peak_label", "?")
    matmul = record.get("matmul_flops")
    lines = [f"# gpu-check: {record['card']} ({record['date']})", "",
             f"torch {record['torch']}, CUDA {record['cuda']}, transformers {record.get('transformers', '?')}; "
             f"commit {record.get('commit', '?')}, step_version {record.get('step_version', '?')}; TF32 "
             f"{record.get('tf32')}; femlm runtime {record.get('femlm_runtime')}; peak: {sheet}; measured bf16 matrix "
             f"rate: {f'{matmul / 1e12:.3g}' if matmul else '—'} TFLOP/s", "",
             f"CUDA tests: {record['tests'].get('summary') or record['tests']['status']}", "",
             f"Tokens/s are steady-state (steps that compiled nothing): timed in blocks of {record.get('block', '?')} "
             "steps with one sync per block (as the training loop runs), and per step with a sync after each "
             "(in brackets: the earlier records' method). HF: Trainer under its own defaults; HF + femlm attention: "
             "the same with femlm's attention kernels (benchmarks/_hf.py). MFU: model FLOPs against the data sheet "
             "and against the measured matrix rate. syncs: femlm's host syncs per step that reads no device value.", "",
             "| configuration | mode | femlm tok/s | HF tok/s | HF + femlm attention tok/s | femlm / HF | femlm / "
             "(HF + femlm attention) | MFU sheet | MFU measured rate | HF MFU sheet | femlm graphs / recompiles / "
             "compile s | HF compile s (+ femlm attention) | syncs/step | peak mem GiB | estimate GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in record["bench"]:
        mode = "compiled" if row["compile"] else "eager"
        syncs = f"{row['syncs_per_step']:.1f}" if row.get("syncs_per_step") is not None else "—"
        mem = f"{row['peak_gib']:.3g}" if row.get("peak_gib") else "—"
        lines.append(
            f"| {label(row)} | {mode} | {_num(row.get('femlm_block'))} ({_num(row['femlm'])}) | "
            f"{_num(row.get('hf_block'))} ({_num(row['hf'])}) | {_num(row.get('hf_fused_block'))} | "
            f"{_num(row.get('ratio_block'), 2)} ({_num(row['ratio'], 2)}) | {_num(row.get('ratio_fused_block'), 2)} | "
            f"{_num(row.get('mfu_block'), 3)} ({_num(row.get('mfu'), 3)}) | {_num(row.get('mfu_block_matmul'), 3)} | "
            f"{_num(row.get('hf_mfu_block'), 3)} | {row['graphs']} / {row['recompiles']} / {row['compile_s']:.1f} | "
            f"{row['hf_compile_s']:.1f} (+{row.get('hf_fused_compile_s', 0.0):.1f}) | {syncs} | {mem} | "
            f"{row['estimate_gib']:.3g} |")
    lines += best_lines(record["bench"])
    lines += ["", "Attention operators of one profiled step per side (torch.profiler; fused kernels, `bmm`, fp32 GEMM "
              "kernels), and the kernel torch dispatches for femlm at the row's shapes:", "",
              "| configuration | mode | femlm | HF | HF + femlm attention | femlm dispatch |", "|---|---|---|---|---|---|"]
    for row in record["bench"]:
        dispatch = (row.get("attention") or {}).get("dispatched")
        lines.append(f"| {label(row)} | {'compiled' if row['compile'] else 'eager'} | {ops_text(row.get('femlm_ops'))} "
                     f"| {ops_text(row.get('hf_ops'))} | {ops_text(row.get('hf_fused_ops'))} | {dispatch} |")
    if record.get("complete") is False:
        lines += ["", "INCOMPLETE: the run had not reached its end when this was written (rows so far)."]
    agree = record["agreement"]
    if agree:
        lines += ["", f"losses {agree['device']} bf16 vs CPU fp32 over {agree['steps']} steps: max relative "
                  f"difference {agree['max_rel_diff']:.2e} (tolerance {agree['tolerance']}): "
                  f"{'agree' if agree['agree'] else 'DISAGREE'}"]
    if record.get("failures"):
        lines += ["", "FAILED (raised; the other configurations ran):"] + [f"- {s}" for s in record["failures"]]
    if record["skipped"]:
        lines += ["", "Skipped:"] + [f"- {s}" for s in record["skipped"]]
    return "\n".join(lines) + "\n"


def _best(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return max(values) if values else math.nan


def best_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per BERT-base MLM shape: femlm's best mode against HF's best under its own defaults and HF's best with
    femlm's attention kernels (block timing; the modes this record measured)."""
    shapes = sorted({(r["batch"], r["seq"]) for r in rows if r.get("arm", "mlm") == "mlm"}, reverse=True)
    if not shapes:
        return []
    out = ["", "Best of the modes measured (block timing): femlm against HF under its own defaults and HF with "
           "femlm's attention kernels:", ""]
    for batch, seq in shapes:
        same = [r for r in rows if r.get("arm", "mlm") == "mlm" and (r["batch"], r["seq"]) == (batch, seq)]

        femlm, hf, fused = (_best(same, key) for key in ("femlm_block", "hf_block", "hf_fused_block"))
        modes = "/".join(sorted({"compiled" if r["compile"] else "eager" for r in same}))
        out.append(f"- {batch} x {seq} ({modes}): femlm {_num(femlm)} tok/s, {_num(femlm / hf, 2)}x HF's best "
                   f"({_num(hf)}), {_num(femlm / fused, 2)}x HF's best with femlm's attention ({_num(fused)})")
    return out


def label(row: dict[str, Any]) -> str:
    """`name b=48 L=512` (+ the arm and the micro-batches where they are not the plain MLM batch)."""
    text = f"{row['name']} b={row['batch']} L={row['seq']}"
    if row.get("arm", "mlm") != "mlm":
        text += f" {row['arm']}"
    micro = []
    if row.get("micro") and row["micro"] < row.get("rows", row["batch"]):
        micro.append(f"femlm micro {row['micro']}")
    if row.get("hf_micro") and row["hf_micro"] < row["batch"]:
        micro.append(f"HF micro {row['hf_micro']}")
    return text + (f" ({', '.join(micro)})" if micro else "")
