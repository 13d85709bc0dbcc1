"""Aggregation over seeds and the JSON files other tools read (docs/architecture.md).

``results.json`` (fine-tuning)::

    {"kind": "finetune", "task", "metric", "main_metric", "eval_split", "checkpoint", "pretrain",
     "seeds": [{"seed", "dev": {metric: value}, "test": {...}, "best_epoch", "epochs_run"}],
     "aggregate": {"dev": {metric: {"mean", "std", "n"}}, "test": {...}},
     "majority_baseline": {"prediction", "dev": {...}, "test": {...}},
     "notes": [...], "hardware", "git_commit", "scale": {"train_examples", "epochs", "max_length", ...},
     "recipe": {...}}

A split the task does not have (GLUE's unlabeled test) is ``{}`` in "seeds" and "aggregate".
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def mean_std(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean and sample standard deviation (ddof=1, as the continual table's "mean ± std" over seeds); n=1 -> std 0."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(arr.size)
    if n == 0:
        return {"mean": None, "std": None, "n": 0}  # JSON has no NaN
    std = float(np.std(arr, ddof=1)) if n > 1 else 0.0
    return {"mean": float(np.mean(arr)), "std": std, "n": n}


def aggregate(per_seed: Iterable[dict[str, float]]) -> dict[str, dict[str, float | int | None]]:
    """{metric: {mean, std, n}} over the seeds' score dicts (metrics in first-seen order)."""
    rows = [r for r in per_seed if r]
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    return {k: mean_std([row[k] for row in rows if k in row]) for k in keys}


def aggregate_seeds(seeds: list[dict[str, Any]], splits: Iterable[str] = ("dev", "test")) -> dict[str, Any]:
    return {split: aggregate(s.get(split) or {} for s in seeds) for split in splits}


def format_score(stats: dict[str, Any], scale: float = 100.0) -> str:
    """``84.21 ± 0.53`` (n=5): the paper's form, for logs."""
    if not stats or stats.get("n", 0) == 0:
        return "n/a"
    return f"{stats['mean'] * scale:.2f} ± {stats['std'] * scale:.2f} (n={stats['n']})"


def write_predictions(path: Path, labels: Sequence[Any], predictions: Sequence[Any],
                      names: dict[int, str] | None) -> None:
    """One line per eval example in file order: index, gold label, prediction (label names when the
    task has them, floats for regression)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for i, (gold, pred) in enumerate(zip(labels, predictions, strict=True)):
            if names is not None:
                gold, pred = names[int(gold)], names[int(pred)]
            else:
                gold, pred = float(gold), float(pred)
            handle.write(json.dumps({"index": i, "label": gold, "prediction": pred}) + "\n")


def efficiency_point(step: int | None, masking: str | None, results: dict[str, Any]) -> dict[str, Any]:
    """One point of the training-efficiency figure: main metric on the eval split at a pre-training step."""
    stats = results["aggregate"].get(results["eval_split"], {}).get(results["main_metric"], {})
    return {"step": step, "masking": masking, "mean": stats.get("mean"), "std": stats.get("std"),
            "n": stats.get("n", 0), "checkpoint": results["checkpoint"]}
