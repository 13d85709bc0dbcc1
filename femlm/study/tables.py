"""The rows of the study's CSV files (one per evaluation, band point, comparison, run and fine-tuning seed),
written by the one CSV writer, femlm.outputs.write_csv."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from femlm.study.comparisons import majority_seeds

CURVE_FIELDS = ("step", "train_flops", "eval_loss", "eval_accuracy", "sequences_seen", "rows_seen",
                "masked_targets_seen")


def curve_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per evaluation of every pre-training run, the shared warm-ups' as arms "head_warmup" (the fresh
    head alone, where a study has one) and "warmup"."""
    runs = [({"arm": r["arm"], "mode": r["mode"], "seed": r["seed"]}, r["curve"]) for r in data["pretrain"]]
    if data.get("head_warmup"):
        runs.append(({"arm": "head_warmup", "mode": "any", "seed": 0}, data["head_warmup"]["curve"]))
    if data.get("warmup"):
        runs.append(({"arm": "warmup", "mode": "any", "seed": 0}, data["warmup"]["curve"]))
    return [{**ident, **{k: c.get(k) for k in CURVE_FIELDS}} for ident, curve in runs for c in curve]


def band_rows(pre: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for mode, res in pre.items():
        if "bands" not in res:
            continue
        for arm, b in res["bands"].items():
            for j, x in enumerate(b["flops"]):
                rows.append({"mode": mode, "series": arm, "kind": "loss", "train_flops": x, "mean": b["mean"][j],
                             "low": b["low"][j], "high": b["high"][j], "n": b["n"][j]})
        for arm, d in res["differences"].items():
            for j, x in enumerate(d["flops"]):
                rows.append({"mode": mode, "series": f"{arm}-mlm", "kind": "paired difference", "train_flops": x,
                             "mean": d["mean"][j], "low": d["low"][j], "high": d["high"][j], "n": d["n"]})
    return rows


def comparison_rows(pre: dict[str, Any], adjusted: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """pretrain_comparisons.csv: every arm, every comparison (FE against its control too), with the family, the
    adjusted p and the reading of femlm.study.verdicts where the row is one of the study's comparisons
    (``adjusted``: key -> Comparison); the Welch rows are shown beside the paired test, not tested, and read by
    nothing."""
    adjusted = adjusted or {}
    rows = []
    for mode, res in pre.items():
        if "arms" not in res:
            continue
        for arm, a in res["arms"].items():
            for metric in ("final_loss", "mean_loss"):
                m = a[metric]
                rows.append({"mode": mode, "arm": arm, "quantity": metric, "estimate": m["estimate"], "low": m["low"],
                             "high": m["high"], "n": m["n"], "std": m["std"], "method": "t over seeds"})
        for arm, comp in res["comparisons"].items():
            for metric in ("final_loss", "mean_loss"):
                for how in ("paired", "welch"):
                    m = comp[metric][how]
                    c = adjusted.get(f"training_loss/{mode}/{arm}/{metric}") if how == "paired" else None
                    rows.append({**_adjusted(c), "mode": mode, "arm": arm,
                                 "quantity": f"{metric} difference to MLM ({how})",
                                 "estimate": m["estimate"], "low": m["low"], "high": m["high"], "n": m["n"],
                                 "p": m["p"], "method": m["method"]})
            for key in res["targets"]:
                m = comp[f"ratio_to_{key}"]
                cut = bool(m["bound"])  # a censored ratio is a bound: no interval and no p-value (issue 27)
                rows.append({**_adjusted(adjusted.get(f"compute_ratio/{mode}/{arm}/{key}")), "mode": mode, "arm": arm,
                             "quantity": f"compute to target {key} / MLM's",
                             "estimate": m["estimate"], "low": None if cut else m["low"],
                             "high": None if cut else m["high"], "n": m["n"], "p": None if cut else m["p"],
                             "method": m["method"], "bound": m["bound"],
                             "not_reached_arm": m["not_reached"]["arm"],
                             "not_reached_mlm": m["not_reached"]["reference"]})
        vs = res.get("fe_vs_control")
        for metric in ("final_loss", "mean_loss") if vs else ():
            m = vs[metric]
            rows.append({**_adjusted(adjusted.get(f"fe_vs_control/{mode}/{metric}")), "mode": mode, "arm": vs["fe"],
                         "quantity": f"{metric} difference to {vs['control']} (paired)", "estimate": m["estimate"],
                         "low": m["low"], "high": m["high"], "n": m["n"], "p": m["p"], "method": m["method"]})
    return rows


def _adjusted(c: Any) -> dict[str, Any]:
    """The columns every row has first: its family, adjusted p and reading (empty: not one of the tests)."""
    from femlm.study.verdicts import says

    if c is None:
        return {"family": "", "p_adjusted": None, "reading": ""}
    return {"family": c.family, "p_adjusted": c.p_adjusted, "reading": says(c)}


def run_rows(pre: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"mode": mode, **r} for mode, res in pre.items() for r in res.get("per_run", [])]


def downstream_rows(down: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    per_seed, summary = [], []
    for task, d in down.items():
        for row, vals in d["scores"].items():
            for i, v in enumerate(vals):
                per_seed.append({"task": task, "row": row, "seed_index": i + 1, f"test_{d['metric']}": v,
                                 f"dev_{d['metric']}": (d["dev_scores"].get(row) or [None] * len(vals))[i]})
            s = d["summary"][row]
            c = d["vs_mlm"].get(row, {})
            b = d["vs_no_continual"].get(row, {})
            collapsed = majority_seeds(vals, d["majority"])
            summary.append({"task": task, "row": row, "metric": d["metric"], "mean": s["estimate"], "std": s["std"],
                            "low": s["low"], "high": s["high"], "n": s["n"], "majority": d["majority"],
                            "diff_to_mlm": c.get("estimate"), "diff_low": c.get("low"), "diff_high": c.get("high"),
                            "welch_p": c.get("p"), "diff_to_no_continual": b.get("estimate"),
                            "diff_nc_low": b.get("low"), "diff_nc_high": b.get("high"),
                            "seeds_at_majority": collapsed})
    return per_seed, summary


def csv_table(path: Path) -> list[dict[str, Any]]:
    """A CSV of the analysis with its ``<name>_ci_low`` / ``<name>_ci_high`` pairs as ``<name>_ci`` lists."""
    out = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            v: dict[str, Any] = {k: _number(x) for k, x in r.items()}
            for k in [k for k in v if k.endswith(("_ci_low", "_ci_seq_low"))]:
                v[k[:-4]] = [v.pop(k), v.pop(k[:-4] + "_high")]
            out.append(v)
    return out


def _number(x: str) -> Any:
    try:
        return int(x) if x.lstrip("-").isdigit() else float(x)
    except ValueError:
        return x
