"""results/<study>/ (results/study/, results/study-base/): the study's numbers, figures, CSV, study.json and a
README written from them.

Nothing here states a conclusion that the numbers do not carry: every reading in the README, the CSV files and
study.json is femlm.study.verdicts' (one rule), and a missing or partial part is reported as such. Runs still
missing (a study cut short) are listed, and the statistics use the runs that finished. Everything is written inside
``out``: the summaries outside it (docs/evidence.md, README.md) are the runner's last step
(femlm.study.headlines.refresh).
"""

from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from femlm.outputs import CRLF, finite, write_csv
from femlm.runs import cpu_model, environment_under
from femlm.study import arms
from femlm.study.collect import arms_read, collect, part_walls
from femlm.study.compare import analyse_downstream, analyse_pretraining
from femlm.study.evidence import null_sequences, pool_size, run_gates
from femlm.study.figures import null_figure, plot_curves, plot_downstream
from femlm.study.passes import passes_rows, with_readings
from femlm.study.plan import Step, final, pretrain_dir
from femlm.study.ratios import plot_pairs, ratio_rows, write_ratio_csv
from femlm.study.readings import rows as comparison_table
from femlm.study.readme import write_readme
from femlm.study.tables import band_rows, comparison_rows, curve_rows, downstream_rows, run_rows
from femlm.study.text import MODE_LABEL
from femlm.study.verdicts import adjust, strip_readings, study_comparisons


def write_results(plan: dict[str, Any], steps: list[Step], runs: Path, out: Path, timings: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    data = collect(plan, steps, runs)
    gates = {k: run_gates(v["json"]) for k, v in data["decomposition"].items() if v.get("json")}  # issue 27
    pre = analyse_pretraining(plan, data) if plan.get("pretrain") else {}
    down = analyse_downstream(plan, data) if plan.get("finetune") else {}
    pass_rows = passes_rows(data["passes"])
    reads = arms_read(plan, data)
    params = (data.get("encoder") or {}).get("parameters")
    comps = adjust(study_comparisons(plan, data["decomposition"], pre, down, pass_rows, reads, params), plan)
    readings = {c.key: c for c in comps}
    write_csv(out / "comparisons.csv", comparison_table(comps), line_end=CRLF)
    order = arms.order(plan)
    for mode, res in pre.items():
        if "bands" in res:
            plot_curves(mode, res, out / f"loss_vs_flops_{mode}.png",
                        f"held-out MLM loss vs training compute, {MODE_LABEL[mode]}")
    if down:
        plot_downstream(down, out / "downstream.png", order)
    # The study's CSV files have the csv module's line ends (CRLF), as they always had.
    write_csv(out / "pretrain_curves.csv", curve_rows(data), line_end=CRLF)  # the warm-ups' curves too
    if plan.get("pretrain"):
        write_csv(out / "pretrain_bands.csv", band_rows(pre), line_end=CRLF)
        write_csv(out / "pretrain_runs.csv", run_rows(pre), line_end=CRLF)
        write_csv(out / "pretrain_comparisons.csv", comparison_rows(pre, readings), line_end=CRLF)
    if plan.get("finetune"):
        per_seed, summary = downstream_rows(down)
        write_csv(out / "downstream_scores.csv", per_seed, line_end=CRLF)
        write_csv(out / "downstream_summary.csv", summary, line_end=CRLF)
    for where, d in data["decomposition"].items():
        src = Path(d["dir"])
        for name in ("decomposition.csv", "null_model.csv", "decomposition.png"):
            if (src / name).is_file():
                stem, ext = name.rsplit(".", 1)
                shutil.copy2(src / name, out / f"{stem}_{where}.{ext}")
        if d.get("json"):
            study_markdown(d["json"], where, out, readings, d.get("label") or where)
            null_figure(d["json"], where, out, d.get("label") or where)
            plot_pairs(src, d["json"], out / f"covariance_distribution_{where}.png",
                       f"Figure 2: {where}")
    for where, d in data["passes"].items():
        for name in ("passes.csv", "passes.md"):
            if (Path(d["dir"]) / name).is_file():
                stem, ext = name.rsplit(".", 1)
                shutil.copy2(Path(d["dir"]) / name, out / f"{stem}_{where}.{ext}")
    pass_read = with_readings(pass_rows, comps)
    if pass_rows:
        write_ratio_csv(out / "passes_ratios.csv", pass_read)
    dec_rows = ratio_rows(data["decomposition"], comps)
    if dec_rows:
        write_ratio_csv(out / "decomposition_terms.csv", dec_rows)
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    study = {"kind": "study", "smoke": bool(plan.get("smoke")), "plan": plan, "missing": data["missing"],
             "optional_not_run": data["optional_missing"],
             "encoder": data.get("encoder"), "warmup": (data.get("warmup") or {}).get("summary"),
             "head_warmup": (data.get("head_warmup") or {}).get("summary"), "decomposition_rows": dec_rows,
             "decomposition": {k: (v.get("json") or {}).get("verdicts") for k, v in data["decomposition"].items()},
             "decomposition_terms": {k: (v.get("json") or {}).get("terms") for k, v in data["decomposition"].items()},
             "null_model": {k: (v.get("json") or {}).get("null_model", {}).get("summary")
                            for k, v in data["decomposition"].items()},
             "gates": gates, "passes": pass_read, "arms_read": reads,
             "decomposition_settings": {k: recorded(v) for k, v in data["decomposition"].items() if v.get("json")},
             "pool_sequences": {k: pool_size(v["json"]) for k, v in data["decomposition"].items() if v.get("json")},
             "null_sequences": {k: null_sequences(v["json"]) for k, v in data["decomposition"].items()
                                if v.get("json")},
             "pretraining": {m: {k: v for k, v in r.items() if k not in ("bands", "differences")} for m, r in pre.items()},
             "downstream": down, "timings": timings, "wall_s_by_part": part_walls(timings),
             "hardware": {"cpu": cpu_model(), "platform": platform.platform()},
             # what made the runs (femlm.runs.environment_of); its README line: femlm.runs.environment_line
             "environment": environment_under(plan.get("runs_dir") or "runs")}
    (out / "study.json").write_text(json.dumps(finite(strip_readings(study)), indent=2, default=_json_default) + "\n")
    return write_readme(plan, data, pre, down, timings, out, order, steps, dec_rows, comps)


def study_markdown(j: dict[str, Any], where: str, out: Path, readings: dict[str, Any], title: str) -> Path | None:
    """decomposition_<where>.md: the analysis' own page, from its CSV tables beside it, with the study's reading of
    each K (femlm.study.verdicts) in place of the run's description of its interval."""
    return decomposition_page({**j, "gates": run_gates(j)}, where, out, readings, title)


def decomposition_page(summary: dict[str, Any], where: str, out: Path, readings: dict[str, Any] | None, title: str,
                       interval_method: str | None = None) -> Path | None:
    """Write decomposition_<where>.md (femlm.analysis.decomposition_text) from `summary` (the analysis' JSON with
    its gates) and the CSV tables beside it, each K read as the study reads it; None when the tables are missing.
    `interval_method`: what the run computed, when not today's expanded percentile bootstrap."""
    from femlm.analysis.decomposition_text import decomposition_markdown
    from femlm.study.tables import csv_table
    from femlm.study.verdicts import says

    table, null = out / f"decomposition_{where}.csv", out / f"null_model_{where}.csv"
    if not table.is_file() or not null.is_file():
        return None
    per_k = {str(k): says(readings[key]) for k in summary["verdicts"]
             if (key := f"variance_ratio/{where}/K{k}") in (readings or {})}
    text = decomposition_markdown(summary, csv_table(table), csv_table(null), title, per_k)
    if interval_method and interval_method != "expanded percentile bootstrap":
        text = text.replace("expanded percentile bootstrap", interval_method)
    path = out / f"decomposition_{where}.md"
    path.write_text(text)
    return path


def recorded(d: dict[str, Any]) -> dict[str, Any]:
    """A decomposition run's settings as study.json keeps them, so --from-json needs no other file (issue 37)."""
    j = d["json"]
    md = Path(d["dir"]) / "decomposition.md"
    first = md.read_text().splitlines()[0] if md.is_file() else ""
    return {**j["settings"], "null_model": (j.get("null_model") or {}).get("settings"),
            "title": first.split(": ", 1)[1] if ": " in first else "", "interval_method": "expanded percentile bootstrap"}


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


__all__ = ["write_results", "final", "pretrain_dir"]
