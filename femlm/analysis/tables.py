"""The CSV tables `femlm analyze` writes (covariance, variance, decomposition, null model)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    flat = []
    for row in rows:  # [low, high] lists become two columns
        out: dict[str, Any] = {}
        for key, value in row.items():
            if isinstance(value, (list, tuple)):
                out[f"{key}_low"], out[f"{key}_high"] = value
            else:
                out[key] = value
        flat.append(out)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(flat[0]))
        writer.writeheader()
        writer.writerows(flat)
    return path


def publish(files: list[Path], results_dir: str | None, domain: str, model_info: dict[str, Any]) -> str | None:
    """Copy a run's output files to ``<results_dir>/analysis_<domain>_<model>_<panel>/``; its path, or None."""
    if not results_dir:
        return None
    dest = Path(results_dir).expanduser() / f"analysis_{domain}_{model_info['name']}_{model_info['slug']}"
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, dest / path.name)
    return str(dest)
