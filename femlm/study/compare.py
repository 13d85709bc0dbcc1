"""The study's statistics over collected runs: pre-training curves per equal-compute mode, downstream scores."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from femlm.study import stats as st
from femlm.study.collect import arm_runs


def analyse_pretraining(plan: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    p = plan["pretrain"]
    level = plan.get("stats", {}).get("level", st.LEVEL)
    fractions = plan.get("stats", {}).get("target_fractions", [0.5, 0.75])
    out: dict[str, Any] = {}
    for mode in p["modes"]:
        arms: dict[str, st.ArmCurves] = {}
        for arm in p["arms"]:
            rs = arm_runs(data, arm, mode, p["reference"])
            if rs:
                arms[arm] = st.ArmCurves(arm, [r["seed"] for r in rs],
                                         [([c["train_flops"] for c in r["curve"]], [c["eval_loss"] for c in r["curve"]])
                                          for r in rs])
        if p["reference"] not in arms or len(arms) < 2:
            out[mode] = {"skipped": "too few finished runs for a comparison"}
            continue
        res = st.compare_pretraining(arms, p["reference"], fractions, level)
        res["falling"] = still_falling(arms[p["reference"]], res["range"], level)
        res["differences"] = difference_bands(arms, p["reference"], np.asarray(res["grid"]), level)
        res["fe_vs_control"] = fe_vs_control(res["per_run"], p.get("fe_arm", "fe_subword"),
                                             p.get("control", "iid_subword"), level)
        out[mode] = res
    return out


def fe_vs_control(per_run: list[dict[str, Any]], fe: str, control: str, level: float) -> dict[str, Any] | None:
    """FE-MLM against the i.i.d. K-mask control, paired by seed: the same K copies per sequence and the same compute,
    only the non-overlap differs, so this isolates what the paper's covariance argument is about."""
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for row in per_run:
        by_arm.setdefault(row["arm"], {})[row["seed"]] = row
    if fe not in by_arm or control not in by_arm:
        return None
    seeds = sorted(set(by_arm[fe]) & set(by_arm[control]))
    out: dict[str, Any] = {"fe": fe, "control": control, "paired_seeds": seeds}
    for metric in ("final_loss", "mean_loss"):
        ci = st.paired([by_arm[fe][s][metric] for s in seeds], [by_arm[control][s][metric] for s in seeds], level)
        out[metric] = ci.as_dict()
    return out


def still_falling(arm: st.ArmCurves, rng: list[float], level: float) -> dict[str, Any]:
    """Loss drop over the last quarter of the budget (value at 75% minus value at the end), per seed, with its
    t-interval: the curves are "still clearly falling" when the interval is above 0."""
    lo, hi = rng
    drops = [st.value_at(c, lo + 0.75 * (hi - lo)) - st.value_at(c, hi) for c in arm.curves]
    ci = st.t_interval(drops, level)
    return {"last_quarter_drop": ci.as_dict(), "falling": bool(ci.low is not None and math.isfinite(ci.low)
                                                               and ci.low > 0)}


def difference_bands(arms: dict[str, st.ArmCurves], reference: str, grid: np.ndarray,
                     level: float) -> dict[str, Any]:
    """Per non-reference arm: the paired (same seed) difference arm - reference along the grid, mean and band."""
    ref = {s: st.interpolate(c, grid) for s, c in zip(arms[reference].seeds, arms[reference].curves, strict=True)}
    out = {}
    for name, arm in arms.items():
        if name == reference:
            continue
        diffs = [st.interpolate(c, grid) - ref[s] for s, c in zip(arm.seeds, arm.curves, strict=True) if s in ref]
        if not diffs:
            continue
        d = np.stack(diffs)
        cis = [st.t_interval(d[:, j].tolist(), level) for j in range(len(grid))]
        out[name] = {"flops": grid.tolist(), "mean": [c.estimate for c in cis],
                     "low": [c.low for c in cis], "high": [c.high for c in cis], "n": len(diffs)}
    return out


def main_metric(results: dict[str, Any]) -> str:
    return results.get("main_metric", "macro_f1")


def analyse_downstream(plan: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    level = plan.get("stats", {}).get("level", st.LEVEL)
    reference = plan["pretrain"]["reference"]
    out: dict[str, Any] = {}
    for task in plan.get("finetune", {}).get("tasks", []):
        rows = [r for r in data["finetune"] if r["task"] == task and r["results"]]
        if not rows:
            continue
        scores, dev, majority, metric = {}, {}, None, None
        for r in rows:
            res = r["results"]
            metric = main_metric(res)
            scores[r["row"]] = [s["test"].get(metric) for s in res["seeds"] if s.get("test")]
            dev[r["row"]] = [s["dev"].get(metric) for s in res["seeds"] if s.get("dev")]
            maj = (res.get("majority_baseline") or {}).get("test", {}).get(metric)
            majority = maj if maj is not None else majority
        comp = st.compare_scores(scores, reference, level)
        vs_base = st.compare_scores(scores, "no_continual", level) if "no_continual" in scores else None
        out[task] = {"metric": metric, "majority": majority, "scores": scores, "dev_scores": dev,
                     "summary": comp["rows"], "vs_mlm": comp["comparisons"],
                     "vs_no_continual": vs_base["comparisons"] if vs_base else {},
                     "above_majority": {k: st.t_interval(v, level).low > majority
                                        if majority is not None and len(v) > 1 else None for k, v in scores.items()},
                     "scale": rows[0]["results"].get("scale")}
    return out
