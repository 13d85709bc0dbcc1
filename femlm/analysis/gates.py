"""Sanity gates: the checks an estimate must pass before any verdict is drawn from it (issue 27, item 2).

Each gate is a one-line reason; a study with a reason prints its numbers beside "not measured: <reason>"
instead of a verdict. The gates read the JSON-level summaries (`decomposition.json`'s ``terms`` and its null
model's ``summary``), so the study layer applies the same gates to runs written before they existed.

* too few units: fewer than `intervals.MIN_UNITS` independent units (pool sequences, sequences) behind an
  interval (the threshold's simulation is in `intervals`).
* out of range: a variance (sigma_d2, sigma_m2, Var(g(m))) below zero; the null model's D2, a sum of squares,
  below zero; the additive share of Var(g(m)) outside [0, 1]. Unbiased estimators can leave their range when
  the noise is larger than the quantity; the number is then noise, not a finding.
* disagreement: sigma_m2 and ``sigma_m2_from_fe_masks`` are two unbiased estimates of one quantity (the FE masks
  are marginally uniform, Lemma 2). A ratio beyond ``AGREE_FACTOR`` between them means the per-sequence terms
  are heavy-tailed (a few sequences carry most of the mask variance), so means over the pool, and their
  percentile intervals, do not yet describe the population.
* the same disagreement in `femlm analyze passes`: its prediction uses the decomposition's sigma_m2, and its
  independent visits measure sigma_m2 directly (``sigma_m2_measured``); beyond ``AGREE_FACTOR`` the prediction
  is "not measured", as the decomposition's verdicts are.
* heavy tails: with the per-unit arrays (``units.npz``), the mean of the per-sequence mask variance and its
  median of means differ by more than ``AGREE_FACTOR``.
"""

from __future__ import annotations

import math
from typing import Any

from .intervals import MIN_UNITS

AGREE_FACTOR = 2.0


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and x is not None else float("nan")


def _factor(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0 or b <= 0:
        return float("inf")
    return max(a, b) / min(a, b)


def too_few(count: Any, unit: str) -> list[str]:
    if not isinstance(count, int):
        return [f"unit count unknown ({unit})"]
    if count < MIN_UNITS:
        return [f"too few units: {count} {unit} (intervals need >= {MIN_UNITS})"]
    return []


def decomposition_gates(terms: dict[str, Any], pool: Any, robust: dict[str, Any] | None = None) -> list[str]:
    """Reasons the decomposition's verdicts cannot be drawn (empty: none). ``terms`` as in decomposition.json."""
    reasons = too_few(pool, "pool sequences")
    d2, m2 = _num(terms["sigma_d2"]["estimate"]), _num(terms["sigma_m2"]["estimate"])
    if d2 < 0:
        reasons.append(f"sigma_d2 = {d2:.3g} < 0 (a variance): the data term is below its noise")
    if m2 < 0:
        reasons.append(f"sigma_m2 = {m2:.3g} < 0 (a variance)")
    fe = terms.get("sigma_m2_from_fe_masks")
    if fe is not None:
        alt = _num(fe["estimate"])
        if _factor(m2, alt) > AGREE_FACTOR:
            reasons.append(f"two unbiased estimates of sigma_m2 disagree: {m2:.3g} (i.i.d. masks) vs {alt:.3g} "
                           f"(FE masks), beyond a factor {AGREE_FACTOR:g}: heavy-tailed per-sequence terms")
    mom = _num((robust or {}).get("sigma_m2", {}).get("median_of_means"))
    if math.isfinite(mom) and _factor(m2, mom) > AGREE_FACTOR:
        reasons.append(f"sigma_m2's mean {m2:.3g} and median of means {mom:.3g} differ beyond a factor "
                       f"{AGREE_FACTOR:g}: heavy tails")
    return reasons


def null_model_gates(summary: dict[str, Any], sequences: Any) -> list[str]:
    """Reasons the null model's statements cannot be drawn (empty: none). ``summary`` as in decomposition.json."""
    reasons = too_few(sequences, "sequences")
    d2 = _num(summary.get("d2_mean"))
    share = _num(summary.get("additive_share_of_var"))
    var = _num(summary.get("var_single"))
    if d2 < 0:
        reasons.append(f"D2 = {d2:.3g} < 0 (a sum of squares): the additive estimate is below its noise")
    if math.isfinite(share) and not 0 <= share <= 1:
        reasons.append(f"additive share of Var(g(m)) = {share:.3g}, outside [0, 1]")
    if math.isfinite(var) and var <= 0:
        reasons.append(f"Var(g(m)) = {var:.3g} <= 0 (a variance)")
    return reasons


def passes_gates(row: dict[str, Any], sequences: Any) -> tuple[list[str], list[str]]:
    """(reasons against the measured ratio, reasons against the predicted one) of one K of `femlm analyze passes`
    (``row`` as in passes.json's ``rows``)."""
    reasons = too_few(sequences, "sequences")
    ind, dis = _num(row.get("var_independent")), _num(row.get("var_disjoint"))
    if not ind > 0 or not dis >= 0:
        reasons.append(f"Var(independent) = {ind:.3g}, Var(disjoint) = {dis:.3g}: a variance must be > 0")
    mom = _num(row.get("measured_ratio_median_of_means"))
    if math.isfinite(mom) and _factor(_num(row.get("measured_ratio")), mom) > AGREE_FACTOR:
        reasons.append(f"the measured ratio {_num(row.get('measured_ratio')):.3g} and its median-of-means "
                       f"estimate {mom:.3g} differ beyond a factor {AGREE_FACTOR:g}: heavy tails")
    predicted = too_few(sequences, "sequences")
    m2 = _num(row.get("sigma_m2"))
    if not m2 > 0:
        predicted.append(f"sigma_m2 = {m2:.3g} <= 0 (a variance)")
    direct = _num(row.get("sigma_m2_measured"))
    if math.isfinite(direct) and m2 > 0 and _factor(m2, direct) > AGREE_FACTOR:
        predicted.append(f"two estimates of sigma_m2 disagree: {m2:.3g} (the decomposition's) vs {direct:.3g} "
                         f"(the independent visits'), beyond a factor {AGREE_FACTOR:g}: heavy-tailed per-sequence "
                         "terms")
    return reasons, predicted


def not_measured(reasons: list[str]) -> str:
    """The verdict cell of a gated estimate."""
    return "not measured: " + "; ".join(reasons)


def apply_gates(verdicts: dict[str, Any], reasons: list[str]) -> dict[str, Any]:
    """Per-K verdicts with the gates applied (in place, and returned): each arm's interval reading is kept as
    ``interval_reading``, and its ``verdict`` becomes "not measured: <reasons>" when there is any reason.
    Idempotent, so a study may apply it again to a run that already did."""
    for by_arm in verdicts.values():
        for arm in ("fe", "iid"):
            v = by_arm.get(arm)
            if v is None:
                continue
            v.setdefault("interval_reading", v.get("verdict", ""))
            v["verdict"] = not_measured(reasons) if reasons else v["interval_reading"]
    return verdicts
