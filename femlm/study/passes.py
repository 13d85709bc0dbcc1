"""`femlm analyze passes` runs in a study (issue 28, item 2): disjoint masks across K visits of a sequence against
independent ones, measured directly beside the decomposition's prediction; one table and one sentence per run.

A passes.json (``j``, femlm/analysis/passes_run.py) holds one row per K: the variance (trace) of a cycle's summed
gradient of one sequence with independent and with disjoint visits, their ratio with an interval over the
sequences, its median-of-means estimate, and the ratio the decomposition predicts from c_FE and sigma_m2. The
gates (`femlm.analysis.gates.passes_gates`) are applied again here, so a run written before them is read the same
way: a gated ratio is "not measured: <reason>". What a ratio is read as is femlm.study.verdicts' (key
``passes/<run>/K<k>``), printed here beside it. What the measurement leaves out (parameter drift
between the visits, the data term) is said beside every verdict.
"""

from __future__ import annotations

from typing import Any

from femlm.analysis.gates import not_measured, passes_gates
from femlm.study.text import as_interval, finite_or_none, fmt, fmt_ci

SCOPE = ("mask term only, all K visits at one checkpoint's weights (no parameter drift between passes), for the "
         "gradient of the studied parameters")


def sequences(j: dict[str, Any]) -> int | None:
    pool = (j.get("settings") or {}).get("pool")
    return int(pool) if isinstance(pool, int) else None


def row_gates(j: dict[str, Any], row: dict[str, Any]) -> tuple[list[str], list[str]]:
    return passes_gates(row, sequences(j))


def where(key: str, d: dict[str, Any]) -> str:
    j = d["json"]
    s = j["settings"]
    return (f"{d.get('label') or key} (tau {s['tau']} of {s['block_size']}-token blocks, {s['pool']} sequences, "
            f"{s['draws']} cycles per sequence and arm)")


def passes_section(runs: dict[str, Any], readings: dict[str, Any] | None = None) -> list[str]:
    """README lines: one table per run; ``readings``: the study's comparisons by key (femlm.study.verdicts)."""
    from femlm.study.verdicts import fmt_value, says

    lines: list[str] = []
    for key, d in runs.items():
        j = d.get("json")
        if not j:
            continue
        lines += [f"#### {where(key, d)}", "",
                  "| K | measured Var(disjoint) / Var(independent) [95% CI] | median of means | predicted "
                  "1 + (K-1) c_FE / sigma_m2 [95% CI] | measured / predicted [95% CI] | reading |",
                  "|---:|---|---|---|---|---|"]
        for r in j["rows"]:
            _, pred_reasons = row_gates(j, r)
            pred = fmt_ci(as_interval(r["predicted_ratio"], r.get("predicted_ratio_ci")))
            c = (readings or {}).get(f"passes/{key}/K{r['K']}")
            measured = fmt_value(c) if c is not None else fmt_ci(as_interval(r["measured_ratio"],
                                                                              r.get("measured_ratio_ci")))
            lines.append(f"| {r['K']} | {measured} | "
                         f"{fmt(finite_or_none(r.get('measured_ratio_median_of_means')))} | "
                         + (pred + (f" ({not_measured(pred_reasons)})" if pred_reasons else "")) + " | "
                         f"{fmt_ci(as_interval(r['measured_over_predicted'], r.get('measured_over_predicted_ci')))} | "
                         f"{says(c) if c is not None else ''} |")
        unit = (j.get("stats") or {}).get("interval") or {}
        lines += ["", f"Intervals: {unit.get('method', 'bootstrap')} over {unit.get('count', '?')} "
                  f"{unit.get('unit', 'sequences')} ({unit.get('resamples', '?')} resamples); the prediction is the "
                  "decomposition's (its own masks, the same sequences). Scope: " + SCOPE + ".", ""]
    return lines


def passes_rows(runs: dict[str, Any]) -> list[dict[str, Any]]:
    """passes.csv of the study: every run and K, with the reading."""
    out = []
    for key, d in runs.items():
        j = d.get("json")
        if not j:
            continue
        for r in j["rows"]:
            reasons, pred_reasons = row_gates(j, r)
            out.append({"run": key, "label": d.get("label", ""), "block_size": j["settings"]["block_size"],
                        "tau": r["tau"], "K": r["K"], "sequences": r["sequences"],
                        "cycles_per_sequence": r["cycles_per_sequence"],
                        "measured_ratio": r["measured_ratio"], "measured_ratio_ci": r.get("measured_ratio_ci"),
                        "measured_ratio_median_of_means": r.get("measured_ratio_median_of_means"),
                        "predicted_ratio": r["predicted_ratio"], "predicted_ratio_ci": r.get("predicted_ratio_ci"),
                        "measured_over_predicted": r["measured_over_predicted"],
                        "measured_over_predicted_ci": r.get("measured_over_predicted_ci"),
                        "sigma_m2": r["sigma_m2"], "sigma_m2_measured": r.get("sigma_m2_measured"), "c_fe": r["c_fe"],
                        "not_measured": reasons, "prediction_not_measured": pred_reasons})
    return out


def with_readings(rows: list[dict[str, Any]], comps: list[Any]) -> list[dict[str, Any]]:
    """passes_rows' rows with the study's reading of each (its ``passes/<run>/K<k>`` comparison)."""
    from femlm.study.readings import with_readings as read_rows

    return read_rows(rows, comps, "passes")
