"""Helpers of benchmarks/gpu_check.py: which card this is and its published peak, the CUDA tests in a
subprocess, the CUDA-vs-CPU loss agreement, and where the results go."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import _common  # noqa: F401 (puts the repository and tests/ on sys.path)
import torch

from femlm.train.estimate import GPU_PEAK_BF16

ROOT = Path(__file__).resolve().parents[1]


def card_peak(name: str) -> tuple[str | None, float | None]:
    """(key of GPU_PEAK_BF16, its published dense bf16 peak) for a CUDA device name such as "NVIDIA H100 80GB
    HBM3"; (None, None) for a card the table does not hold (MFU is then not reported)."""
    if "H100" in name:
        key = "H100 PCIe" if "PCIe" in name else None if "NVL" in name else "H100 SXM"
    elif "H200" in name:
        key = "H200"
    elif "A100" in name:
        key = "A100"
    elif re.search(r"\bL4\b", name):
        key = "L4"
    elif re.search(r"\bA10\b", name):
        key = "A10"
    else:
        key = None
    return key, GPU_PEAK_BF16.get(key) if key else None


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def fresh_dir(base: Path) -> Path:
    """`base`, or base-2, base-3... when an earlier run holds it: a run never overwrites another's results."""
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    out.mkdir(parents=True)
    return out


def run_cuda_tests(timeout: int, base_env: dict[str, str]) -> dict[str, Any]:
    """`pytest -m cuda tests/test_cuda.py` in a subprocess (environment `base_env`, so every GPU is visible to
    it): its counts, and each skip with its reason."""
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


def markdown(record: dict[str, Any]) -> str:
    """The short table committed beside results.json."""
    lines = [f"# gpu-check: {record['card']} ({record['date']})", "",
             f"torch {record['torch']}, CUDA {record['cuda']}; peak: {record['peak_label']}", "",
             f"CUDA tests: {record['tests'].get('summary') or record['tests']['status']}", "",
             "| shape | mode | femlm tok/s | HF tok/s | ratio | MFU femlm | MFU HF | peak mem GiB | estimate GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in record["bench"]:
        mfu = [f"{row[k]:.3f}" if row.get(k) is not None else "—" for k in ("mfu", "hf_mfu")]
        mem = f"{row['peak_gib']:.3g}" if row.get("peak_gib") else "—"
        mode = "compiled" if row["compile"] else "eager"
        lines.append(f"| {row['shape']} b={row['batch']} L={row['seq']} | {mode} | {row['femlm']:.0f} | {row['hf']:.0f} | "
                     f"{row['ratio']:.2f} | {mfu[0]} | {mfu[1]} | {mem} | {row['estimate_gib']:.3g} |")
    agree = record["agreement"]
    if agree:
        lines += ["", f"losses {agree['device']} bf16 vs CPU fp32 over {agree['steps']} steps: max relative "
                  f"difference {agree['max_rel_diff']:.2e} (tolerance {agree['tolerance']}): "
                  f"{'agree' if agree['agree'] else 'DISAGREE'}"]
    if record["skipped"]:
        lines += ["", "Skipped:"] + [f"- {s}" for s in record["skipped"]]
    return "\n".join(lines) + "\n"
