"""results/<study>/ (results/study/, results/study-base/): the study's numbers, figures, CSV, study.json and a
README written from them.

Nothing here states a conclusion that the numbers do not carry: every sentence of the README that compares
arms is chosen by an interval (`femlm.study.stats.verdict`, `ratio_verdict`, the decomposition's own verdicts),
and a missing or partial part is reported as such. Runs still missing (a study cut short) are listed, and the
statistics use the runs that finished.
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
from femlm.study.collect import arms_read, collect, part_walls
from femlm.study.compare import analyse_downstream, analyse_pretraining
from femlm.study.evidence import null_sequences, pool_size, run_gates
from femlm.study.figures import plot_curves, plot_downstream
from femlm.study.headlines import write_headlines
from femlm.study.passes import passes_rows
from femlm.study.plan import Step, final, pretrain_dir
from femlm.study.ratios import plot_pairs, ratio_rows, write_ratio_csv
from femlm.study.readme import summary_block, update_readme, write_readme
from femlm.study.tables import band_rows, comparison_rows, curve_rows, downstream_rows, run_rows
from femlm.study.text import MODE_LABEL
from femlm.study.verdicts import adjust, study_comparisons
from femlm.study.verdicts import rows as comparison_table


def write_results(plan: dict[str, Any], steps: list[Step], runs: Path, out: Path, timings: dict[str, Any],
                  readme: Path | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    data = collect(plan, steps, runs)
    gates = {k: run_gates(v["json"]) for k, v in data["decomposition"].items() if v.get("json")}  # issue 27
    pre = analyse_pretraining(plan, data) if plan.get("pretrain") else {}
    down = analyse_downstream(plan, data) if plan.get("finetune") else {}
    pass_rows = passes_rows(data["passes"])
    reads = arms_read(plan, data)
    comps = adjust(study_comparisons(plan, data["decomposition"], pre, down, pass_rows, reads), plan)
    write_csv(out / "comparisons.csv", comparison_table(comps), line_end=CRLF)
    order = ["no_continual", "warmup_only", *(plan.get("pretrain") or {}).get("arms", [])]
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
        write_csv(out / "pretrain_comparisons.csv", comparison_rows(pre, {c.key: c for c in comps}), line_end=CRLF)
    if plan.get("finetune"):
        per_seed, summary = downstream_rows(down)
        write_csv(out / "downstream_scores.csv", per_seed, line_end=CRLF)
        write_csv(out / "downstream_summary.csv", summary, line_end=CRLF)
    for where, d in data["decomposition"].items():
        src = Path(d["dir"])
        for name in ("decomposition.csv", "null_model.csv", "decomposition.png", "null_model.png", "decomposition.md"):
            if (src / name).is_file():
                stem, ext = name.rsplit(".", 1)
                shutil.copy2(src / name, out / f"{stem}_{where}.{ext}")
        if d.get("json"):
            plot_pairs(src, d["json"], out / f"covariance_distribution_{where}.png",
                       f"Figure 2: {where}")
    for where, d in data["passes"].items():
        for name in ("passes.csv", "passes.md"):
            if (Path(d["dir"]) / name).is_file():
                stem, ext = name.rsplit(".", 1)
                shutil.copy2(Path(d["dir"]) / name, out / f"{stem}_{where}.{ext}")
    if pass_rows:
        write_ratio_csv(out / "passes_ratios.csv", pass_rows)
    dec_rows = ratio_rows(data["decomposition"])
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
             "gates": gates, "passes": pass_rows, "arms_read": reads,
             "decomposition_settings": {k: recorded(v) for k, v in data["decomposition"].items() if v.get("json")},
             "pool_sequences": {k: pool_size(v["json"]) for k, v in data["decomposition"].items() if v.get("json")},
             "null_sequences": {k: null_sequences(v["json"]) for k, v in data["decomposition"].items()
                                if v.get("json")},
             "pretraining": {m: {k: v for k, v in r.items() if k not in ("bands", "differences")} for m, r in pre.items()},
             "downstream": down, "timings": timings, "wall_s_by_part": part_walls(timings),
             "hardware": {"cpu": cpu_model(), "platform": platform.platform()},
             # what made the runs (femlm.runs.environment_of); its README line: femlm.runs.environment_line
             "environment": environment_under(plan.get("runs_dir") or "runs")}
    (out / "study.json").write_text(json.dumps(finite(study), indent=2, default=_json_default) + "\n")
    path = write_readme(plan, data, pre, down, timings, out, order, steps, dec_rows, comps)
    if readme is not None and not plan.get("smoke"):
        update_readme(readme, summary_block(plan, data, timings, comps, out), plan)
        if (readme.parent.parent / "results").is_dir():  # docs/evidence.md of a checkout: README.md beside docs/
            write_headlines(readme.parent.parent / "README.md", readme.parent.parent)
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
