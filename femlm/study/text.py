"""Labels and number formatting shared by the study's tables, sections and figures (an arm's label and role:
femlm.study.arms, from its masking YAML)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from femlm.study import stats as st

MODE_LABEL = {"same_rows": "same rows per step", "same_sequences": "same sequences per step"}


def fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    return f"{x:.{digits}f}"


def fmt_ci(ci: dict[str, Any] | st.Interval, digits: int = 3) -> str:
    d = ci.as_dict() if isinstance(ci, st.Interval) else ci
    if d.get("low") is None or d.get("high") is None:
        return f"{fmt(d.get('estimate'), digits)} (no interval)"
    return f"{fmt(d['estimate'], digits)} [{fmt(d['low'], digits)}, {fmt(d['high'], digits)}]"


def fmt_sig(ci: dict[str, Any], digits: int = 3) -> str:
    """Estimate [low, high] to `digits` significant digits: for terms of any scale (squared gradient norms)."""
    def g(x: Any) -> str:
        return "n/a" if finite_or_none(x) is None else f"{x:.{digits}g}"

    lo, hi = finite_or_none(ci.get("low")), finite_or_none(ci.get("high"))
    return g(ci.get("estimate")) + ("" if lo is None or hi is None else f" [{g(lo)}, {g(hi)}]")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def finite_or_none(x: Any) -> float | None:
    return float(x) if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None


def as_interval(value: Any, ci: Any) -> dict[str, Any]:
    ci = ci or [None, None]
    return {"estimate": finite_or_none(value), "low": finite_or_none(ci[0]), "high": finite_or_none(ci[1])}


def term_interval(t: dict[str, Any]) -> dict[str, Any]:
    ci = t.get("ci") or [None, None]
    return {"estimate": t.get("estimate"), "low": finite_or_none(ci[0]), "high": finite_or_none(ci[1])}


def x100(x: Any) -> float | None:
    return None if x is None else 100 * x



def package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"
