"""The CSV tables `femlm analyze` writes (covariance, variance, decomposition, null model, passes), through the one
CSV writer (femlm.outputs), and the copy of a run's files to results_dir."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from femlm.outputs import CRLF, write_csv


def interval_columns(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each [low, high] value (an interval's bounds) as two columns, ``<key>_low`` and ``<key>_high``."""
    flat = []
    for row in rows:
        out: dict[str, Any] = {}
        for key, value in row.items():
            if isinstance(value, (list, tuple)):
                out[f"{key}_low"], out[f"{key}_high"] = value
            else:
                out[key] = value
        flat.append(out)
    return flat


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """An analysis table: intervals as two columns, the csv module's line ends (as these files have always had)."""
    return write_csv(path, interval_columns(rows), line_end=CRLF)


def publish(files: list[Path], results_dir: str | None, domain: str, model_info: dict[str, Any]) -> str | None:
    """Copy a run's output files to ``<results_dir>/analysis_<domain>_<model>_<panel>/``; its path, or None."""
    if not results_dir:
        return None
    dest = Path(results_dir).expanduser() / f"analysis_{domain}_{model_info['name']}_{model_info['slug']}"
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, dest / path.name)
    return str(dest)
