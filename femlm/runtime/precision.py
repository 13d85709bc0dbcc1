"""`runtime.precision=auto` on a CPU: measure whether bf16 autocast is faster than fp32 here, once per machine.

A list of CPU features cannot answer this: Intel AMX makes bf16 ~1.4x faster than fp32 for a BERT step, an
AMD EPYC with AVX512-BF16 but no AMX ran the tiny step 1.84x faster in bf16 (0.514 vs 0.947 s), and CPUs
without native bf16 emulate it and run slower. So `auto` times a transformer feed-forward block (forward and
backward, the shapes that dominate a step) under both dtypes, interleaved, and picks bf16 only when it is
clearly faster (by `MARGIN`). The answer is cached per (CPU model, torch version, threads) in
``$FEMLM_CACHE/runtime/precision.json``, so the ~0.5 s measurement runs once per machine, and every run
records which dtype it used (summary.json, results.json).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from femlm.runs import cpu_model

MARGIN = 1.10  # bf16 must be this much faster: near-ties keep fp32 (exact numerics, no autocast overhead)
ROWS, HIDDEN, FFN = 512, 256, 1024  # a tiny-BERT feed-forward block at 4 x 128 tokens
REPEATS = 5



def _cache_file() -> Path:
    root = Path(os.environ.get("FEMLM_CACHE", "~/.cache/femlm")).expanduser()
    return root / "runtime" / "precision.json"


def measure(rows: int = ROWS, repeats: int = REPEATS) -> dict[str, float]:
    """Median seconds of one forward+backward of a feed-forward block in fp32 and under bf16 autocast."""
    gen = torch.Generator().manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(HIDDEN, FFN), torch.nn.GELU(), torch.nn.Linear(FFN, HIDDEN))
    x = torch.randn(rows, HIDDEN, generator=gen)

    def step(dtype: torch.dtype | None) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = block(x)
        out.float().square().mean().backward()
        block.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for i in range(repeats + 2):  # two warm-up rounds, then interleaved timings
        for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
            elapsed = step(dtype)
            if i >= 2:
                times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def decide(seconds: dict[str, float]) -> str:
    return "bf16" if seconds["fp32"] > MARGIN * seconds["bf16"] else "fp32"


@functools.cache
def cpu_choice() -> dict[str, Any]:
    """{"dtype": "bf16"|"fp32", "fp32_s", "bf16_s", "cpu", ...}: cached on disk, measured when absent."""
    key = f"{cpu_model()} | torch {torch.__version__} | threads {torch.get_num_threads()}"
    path = _cache_file()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if key not in cached:
        seconds = measure()
        cached[key] = {"dtype": decide(seconds), "fp32_s": round(seconds["fp32"], 5),
                       "bf16_s": round(seconds["bf16"], 5), "measured": time.strftime("%Y-%m-%d")}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(cached, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache only costs a re-measurement next time
    return {**cached[key], "key": key}


def faster_cpu_dtype() -> torch.dtype | None:
    return torch.bfloat16 if cpu_choice()["dtype"] == "bf16" else None
