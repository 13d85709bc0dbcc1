"""results/study-gpu/: the GPU study's numbers from its complete seeds (all arms of a seed finished), through the
study pipeline's own statistics (femlm.study.compare.analyse_pretraining: curves against FLOPs, paired by seed)
and tables; a README whose every comparing sentence is chosen by an interval.

Confirmatory comparisons (the experiment file's `confirmatory:`) are Holm-adjusted over their number; a finding
is claimed only for one whose adjusted p stays below the family level. Every other reading is exploratory and
written as such. A null result is an interval: "differences outside [low, high] excluded at 95%".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from femlm.outputs import CRLF, finite, write_csv
from femlm.study.collect import pretrain_entry
from femlm.study.compare import analyse_pretraining
from femlm.study.figures import plot_curves
from femlm.study.gpu_plan import GpuPlan
from femlm.study.tables import band_rows, comparison_rows, run_rows

UNITS = {"final_loss": "nats per masked token", "mean_loss": "nats per masked token"}


def complete_seeds(runs: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in runs.glob("seed_*") if p.is_dir() and
                  p.name.split("_")[1].isdigit())


def collect(plan: dict[str, Any], runs: Path) -> dict[str, Any]:
    """The study's runs in femlm.study.collect's layout: the reference arm under mode "any" (compare.arm_runs)."""
    pre, data = plan["pretrain"], {"pretrain": [], "missing": []}
    for seed in complete_seeds(runs):
        for arm in pre["arms"]:
            entry = pretrain_entry(runs / f"seed_{seed}" / arm)
            mode = "any" if arm == pre["reference"] else pre["modes"][0]
            if entry is not None:
                data["pretrain"].append({"arm": arm, "mode": mode, "seed": seed, **entry})
    return data


def holm(rows: list[dict[str, Any]], names: list[str], alpha: float) -> str | None:
    """Holm-adjusted p of the confirmatory rows (statsmodels), in place as `p_holm`; None, or why not."""
    named = [r for r in rows if f"{r['arm']} {r['quantity']}" in names]
    if len(named) < len(names):
        found = {f"{r['arm']} {r['quantity']}" for r in named}
        return f"no comparison is named {', '.join(n for n in names if n not in found)} (the experiment's confirmatory:)"
    chosen = [r for r in named if r.get("p") is not None]
    if len(chosen) < len(names):
        return "a confirmatory comparison has no p-value (too few complete seeds)"
    try:
        from statsmodels.stats.multitest import multipletests
    except ImportError:
        return "statsmodels is not installed: raw p only, no finding claimed"
    reject, adjusted, _, _ = multipletests([r["p"] for r in chosen], alpha=alpha, method="holm")
    for r, a, rej in zip(chosen, adjusted, reject, strict=True):
        r["p_holm"], r["survives_holm"] = float(a), bool(rej)
    return None


def reading(row: dict[str, Any], level: float) -> str:
    lo, hi, est = row.get("low"), row.get("high"), row["estimate"]
    if lo is None or hi is None:
        return f"{est:.4g} (a bound: some runs did not reach the target)"
    base = f"{est:+.4f} [{lo:+.4f}, {hi:+.4f}]" if "difference" in row["quantity"] else f"{est:.3f} [{lo:.3f}, {hi:.3f}]"
    if "difference" in row["quantity"] and lo <= 0 <= hi:
        return f"{base}: no difference detected; differences outside [{lo:+.4f}, {hi:+.4f}] excluded at {level:.0%}"
    if "difference" not in row["quantity"] and lo <= 1 <= hi:
        return f"{base}: no difference detected; ratios outside [{lo:.3f}, {hi:.3f}] excluded at {level:.0%}"
    return f"{base}: {row['verdict']}"


def write_results(plan: dict[str, Any], gp: GpuPlan, runs: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    level = float(plan.get("stats", {}).get("level", 0.95))
    data = collect(plan, runs)
    seeds = sorted({r["seed"] for r in data["pretrain"]})
    pre = analyse_pretraining(plan, data) if len(seeds) >= 2 else {}
    rows = comparison_rows(pre) if pre else []
    alpha = float(plan["gpu"]["power"]["family_alpha"])
    confirmatory = list(plan.get("confirmatory") or [])
    why_not = holm(rows, confirmatory, alpha) if rows else "fewer than 2 complete seeds"
    for mode, res in pre.items():
        if "bands" in res:
            plot_curves(mode, res, out / f"loss_vs_flops_{mode}.png", "held-out MLM loss vs training compute")
    if pre:
        write_csv(out / "pretrain_bands.csv", band_rows(pre), line_end=CRLF)
        write_csv(out / "pretrain_runs.csv", run_rows(pre), line_end=CRLF)
        write_csv(out / "pretrain_comparisons.csv", rows, line_end=CRLF)
    summaries = [r["summary"] for r in data["pretrain"]]
    study = {"kind": "study", "name": plan["name"], "smoke": bool(plan.get("smoke")), "seeds_complete": seeds,
             "seeds_planned": gp.seeds, "plan": gp.text(), "confirmatory": confirmatory, "holm": why_not or "applied",
             "comparisons": rows, "runs": summaries,
             "pretraining": {m: {k: v for k, v in r.items() if k not in ("bands", "differences")} for m, r in pre.items()}}
    (out / "study.json").write_text(json.dumps(finite(study), indent=2, default=str) + "\n")
    return write_readme(plan, gp, out, seeds, rows, summaries, why_not, level)


def write_readme(plan: dict[str, Any], gp: GpuPlan, out: Path, seeds: list[int], rows: list[dict[str, Any]],
                 summaries: list[dict[str, Any]], why_not: str | None, level: float) -> Path:
    rep, pre = plan["report"], plan["pretrain"]
    lines = [f"# {rep['title']}", "", rep["intro"], "", "## Plan (printed before the run, from unit costs)", "", "```",
             gp.text(), "```", ""]
    missing = [s for s in gp.seeds if s not in seeds]
    lines += [f"Complete seeds (every arm finished): {len(seeds)} of {len(gp.seeds)} planned"
              + (f"; not run: {', '.join(map(str, missing))}" if missing else "") + ".", ""]
    if summaries:
        lines += ["| arm | seed | steps | rows/step | sequences/step | passes | final held-out loss | row tokens/s |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {s['masking']} | {s['seed']} | {s['steps']} | {s['rows_per_step']} | {s['sequences_per_step']} | "
                  f"{s['passes']:.1f} | {s['final_eval_loss']:.4f} | {s['row_tokens_per_s']:,.0f} |" for s in summaries]
        lines.append("")
    lines += ["## Comparisons with MLM (paired by seed)", "",
              f"Loss differences in {UNITS['final_loss']} (arm - MLM, below 0: the arm is better), {level:.0%} "
              "paired t-intervals over seeds; compute-to-target ratios are arm / MLM FLOPs (below 1: the arm is "
              f"cheaper). Confirmatory (Holm over {len(plan.get('confirmatory') or [])}): "
              + "; ".join(plan.get("confirmatory") or []) + "." + (f" Holm not applied: {why_not}." if why_not else ""),
              ""]
    for r in rows:
        if r["arm"] == pre["reference"] or ("difference" not in r["quantity"] and "target" not in r["quantity"]):
            continue
        name = f"{r['arm']} {r['quantity']}"
        tag = "confirmatory" if name in (plan.get("confirmatory") or []) else "exploratory"
        p = f"p {r['p']:.3g}" if r.get("p") is not None else "no p"
        if "p_holm" in r:
            p += f", Holm {r['p_holm']:.3g} ({'survives' if r['survives_holm'] else 'does not survive'})"
        lines.append(f"- {name} ({tag}, n = {r['n']}): {reading(r, level)}; {p}")
    if not rows:
        lines.append("- none yet: fewer than 2 complete seeds.")
    lines += ["", "## What this scale still lacks next to the paper's", "", rep["caveat"], "",
              "Files: pretrain_comparisons.csv, pretrain_runs.csv, pretrain_bands.csv, study.json, "
              "loss_vs_flops_same_rows.png.", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path
