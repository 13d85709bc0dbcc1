"""The CSV tables `femlm analyze` writes (covariance, variance, decomposition, null model)."""

from __future__ import annotations

import csv
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
