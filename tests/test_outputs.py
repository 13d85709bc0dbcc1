"""The one CSV writer (femlm.outputs) writes what each package's own writer wrote before it replaced them (issue
30): the same bytes, line ends included. The former writers are kept here, verbatim, as the reference."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from femlm.analysis.tables import write_rows
from femlm.outputs import CRLF, csv_text, write_csv
from femlm.study.ratios import write_ratio_csv

ROWS: list[dict[str, Any]] = [
    {"mode": "same_rows", "arm": "fe_subword", "estimate": 0.1 + 0.2, "low": None, "n": 3, "ok": True},
    {"mode": "same_rows", "arm": 'a "quoted", arm', "p": 1e-300, "n": 0, "method": "t\nover seeds"},
    {"arm": "mlm", "estimate": float("nan"), "extra": [1, 2]},
]


def old_study_csv(path: Path, rows: list[dict[str, Any]]) -> Path:  # femlm/study/tables.py
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return path


def old_analysis_csv(path: Path, rows: list[dict[str, Any]]) -> Path:  # femlm/analysis/tables.py
    flat = []
    for row in rows:
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


def old_ratio_csv(path: Path, rows: list[dict[str, Any]]) -> Path:  # femlm/study/ratios.py
    flat = [{k: (json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()} for r in rows]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(flat[0]) if flat else ["run"])
        writer.writeheader()
        writer.writerows(flat)
    return path


def test_the_study_tables_bytes_are_unchanged(tmp_path: Path) -> None:
    for rows in (ROWS, ROWS[:1], []):
        old = old_study_csv(tmp_path / "old.csv", rows).read_bytes()
        assert write_csv(tmp_path / "new.csv", rows, line_end=CRLF).read_bytes() == old, rows


def test_the_analysis_tables_bytes_are_unchanged(tmp_path: Path) -> None:
    rows = [{"K": 2, "ratio": 0.5, "ratio_ci": [0.25, float("nan")], "h": (1, 2.5), "note": None},
            {"K": 4, "ratio": 1 / 3, "ratio_ci": [0.1, 0.9], "h": (3, 4), "note": "a, b"}]
    old = old_analysis_csv(tmp_path / "old.csv", rows).read_bytes()
    assert write_rows(tmp_path / "new.csv", rows).read_bytes() == old
    assert old.startswith(b"K,ratio,ratio_ci_low,ratio_ci_high,h_low,h_high,note\r\n")


def test_the_decomposition_terms_bytes_are_unchanged(tmp_path: Path) -> None:
    rows = [{"run": "warmup_r15", "K": 2, "c_fe_ci": [-1.5, 0.25], "not_measured": ["too few units"], "v": None},
            {"run": "warmup_r30", "K": 3, "c_fe_ci": [0.1, 0.2], "not_measured": [], "v": 2.0}]
    for case in (rows, []):
        old = old_ratio_csv(tmp_path / "old.csv", case).read_bytes()
        assert write_ratio_csv(tmp_path / "new.csv", case).read_bytes() == old, case


def test_report_tables_keep_their_line_ends() -> None:
    text = csv_text([["measured", "FE-MLM + Subword", 74.0, None], ["reported", "x, y", "", 3]], ["a", "b", "c", "d"])
    assert text == 'a,b,c,d\nmeasured,FE-MLM + Subword,74.0,\nreported,"x, y",,3\n'


def test_one_nan_to_null_for_json() -> None:
    """femlm.outputs.finite is what the study's own clean() (femlm/study/results.py) did to study.json."""
    import math

    import numpy as np

    from femlm.outputs import finite

    def old_clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: old_clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [old_clean(v) for v in value]
        if isinstance(value, (float, np.floating)):
            return float(value) if math.isfinite(value) else None
        return value

    data = {"a": [1.5, float("nan"), np.float32(0.25), np.float64("inf"), (np.int64(3), True, None)],
            "b": {"c": "text", "d": -float("inf"), "e": [np.nan, 2]}, "f": 7}
    assert json.dumps(finite(data), default=int) == json.dumps(old_clean(data), default=int)
