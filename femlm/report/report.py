"""`femlm report`: collect results, write the tables and figures, and a README that stitches them together."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.outputs import write_csv
from femlm.paper import CITATION, REFERENCE
from femlm.report.build import arm_label, continual_table, glue_average_table, glue_table
from femlm.report.collect import Collection, collect
from femlm.report.config import TABLES
from femlm.report.figures import Figure, write_figures
from femlm.report.scale import hardware_text
from femlm.report.tables import Table, to_markdown, write_table
from femlm.runs import environment_line, environment_of

# Outputs of an earlier report in the same folder that this one would rewrite: removed first so that a
# figure the new inputs cannot support is not left behind looking current.
STALE = ("figures/figure4_efficiency.png", "figures/figure4_efficiency.csv", "figures/ablation_splits.png",
         "figures/ablation_splits.csv", "figures/pretrain_loss.png", "figures/pretrain_loss.csv",
         "pretrain_runs.csv")


def _report_commit() -> str:
    from femlm.runs import git_commit

    return git_commit()


def pretrain_rows(collection: Collection, full: bool = False) -> list[list[str]]:
    """One row per pre-training run; ``full``: held-out losses at full precision (``repr``: pretrain_runs.csv, which
    `femlm report --compare` holds equal on the same device), else to 4 decimals (the README's table)."""
    rows = []
    loss = "r" if full else ".4f"
    for run in sorted(collection.pretrain, key=lambda r: (str(r.summary.get("command")), str(r.dir))):
        s = run.summary

        def num(key: str, fmt: str, summary: dict[str, Any] = s) -> str:
            value = summary.get(key)
            if not isinstance(value, (int, float)):
                return "—"
            return repr(float(value)) if fmt == "r" else format(value, fmt)

        seen = s.get("seen") if isinstance(s.get("seen"), dict) else {}
        rows.append([str(run.dir), str(s.get("command") or "—"), arm_label(s.get("masking")),
                     str(run.num_masks or "—"), str(s.get("domain") or "—"), str(s.get("model") or "—"), str(s.get("equal_compute") or "—"),
                     num("steps", "d"), num("sequences", ",d", seen), num("source_tokens", ",d", seen),
                     num("rows", ",d", seen), num("masked_targets", ",d", seen), num("train_flops", ".3g", seen),
                     num("first_eval_loss", loss), num("final_eval_loss", loss), num("row_tokens_per_s", ",.0f"),
                     num("wall_s", ",.0f"), hardware_text(s.get("hardware") or run.info.get("hardware")) or "—",
                     str(run.info.get("git_commit") or "—")])
    return rows


# What a run processed, counted separately (a K-copy arm reads fewer sequences per row than MLM at same_rows):
# source sequences and their tokens, model rows (a sequence counts once per masked copy), masked targets, FLOPs.
PRETRAIN_HEADER = ["run", "command", "arm", "K", "domain", "model", "equal compute", "steps", "sequences seen",
                   "source tokens seen", "rows processed", "masked targets", "train FLOPs", "first eval loss",
                   "final eval loss", "row tokens/s", "wall s", "hardware", "git commit"]


# analysis.json keys worth a line in the README, first: the test of the assumption (Spearman rho between
# covariance and Hamming distance) and Theorem 1 (variance ratios FE / i.i.d. per K). settings.tau is the covariance
# analysis' masked tokens, settings.variance_tau the variance analysis' (variance.csv's tau column).
ANALYSIS_FIRST = ("covariance.spearman.", "variance.ratios.", "model.name", "model.panel", "domain",
                  "settings.tau", "settings.variance_tau", "settings.sequences", "settings.budget", "wall_s")


def _flat_scalars(data: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """The numbers and short strings of analysis.json, most telling first (for a short summary list)."""
    out: list[tuple[str, Any]] = []
    if isinstance(data, dict) and depth < 5:
        for key, value in data.items():
            if key != "kind":
                out += _flat_scalars(value, f"{prefix}{key}.", depth + 1)
    elif (isinstance(data, (int, float)) and not isinstance(data, bool) and prefix) or \
            (isinstance(data, str) and prefix and len(data) < 60):
        out.append((prefix[:-1], data))
    if depth == 0:
        def rank(item: tuple[str, Any]) -> int:
            return next((i for i, p in enumerate(ANALYSIS_FIRST) if item[0].startswith(p)), len(ANALYSIS_FIRST))

        out = [item for item in sorted(out, key=rank) if rank(item) < len(ANALYSIS_FIRST)][:30]
    return out


def _figure_md(figure: Figure, collection: Collection) -> list[str]:
    lines = [f"### {figure.title}", ""]
    if figure.status != "written":
        return [*lines, f"_Not drawn: {figure.note}._", ""]
    folder = None
    for path in figure.files:
        parent = str(Path(path).parent)
        if figure.key == "analysis" and parent != folder:
            # One sub-section per analysis run (e.g. before / after continual pre-training), with its numbers.
            folder = parent
            lines += ["", f"#### {Path(parent).name}", ""]
            source = figure.sources.get(Path(parent).name)
            run = next((r for r in collection.analysis if str(r.path) == source), None)
            # Spearman's p-value over mask pairs is left out: pairs of one sequence are not independent (issue 27).
            scalars = [(k, v) for k, v in (_flat_scalars(run.data) if run is not None else [])
                       if not k.endswith("p_value_pairs")]
            n = dict(scalars).get("settings.sequences")
            if n is not None:
                lines += [f"_Point estimates over {n} sequences, without intervals: no verdict is drawn from them "
                          "(femlm's intervals need more units, femlm/analysis/intervals.py; femlm's studies give "
                          "them)._", ""]
            lines += [f"- {k}: {v}" for k, v in scalars] + ([""] if scalars else [])
        lines.append(f"![{Path(path).stem}]({path})" if path.endswith(".png") else f"- data: [{path}]({path})")
    return [*lines, ""]


def run_dirs(collection: Collection) -> list[Path]:
    """The run directories behind a collection (their run.json and summary.json say what made them)."""
    return sorted({p.dir for p in collection.pretrain} | {f.path.parent for f in collection.finetune}
                  | {path.parent for path, _ in collection.efficiency} | {a.path.parent for a in collection.analysis})


def readme(tables: list[Table], figures: list[Figure], collection: Collection, phrase: str, commit: str,
           inputs: list[str], environment: dict[str, Any] | None = None) -> str:
    out = [f"# femlm results — {phrase}", "",
           f"Written by `femlm report` on {time.strftime('%Y-%m-%d %H:%M')} from {', '.join(map(str, inputs))} "
           f"(report code at git {commit}).", "",
           *([environment_line(environment) + " Full record: report.json's environment; `femlm report --compare "
              "<this folder> <another>` says what differs.", ""] if environment else []),
           f"Paper: {REFERENCE}.", "",
           f"> **Read the scale first.** Measured rows come from this code at the scale stated under each table "
           f"(model, corpus, steps, seeds, hardware, commit). Rows marked *reported* are copied from {CITATION} "
           "for comparison and were not produced here; the two are never mixed in one table block.", "",
           "## Tables", ""]
    for table in tables:
        out.append(f"- {table.title}: [{table.key}.md]({table.key}.md), [{table.key}.tex]({table.key}.tex) "
                   f"(LaTeX, booktabs), [{table.key}.csv]({table.key}.csv), "
                   f"[{table.key}.meta.json]({table.key}.meta.json) (scale)")
    out.append("")
    for table in tables:
        out += [to_markdown(table, heading="###"), ""]
    out += ["## Pre-training runs", ""]
    rows = pretrain_rows(collection)
    if rows:
        out += ["| " + " | ".join(PRETRAIN_HEADER) + " |", "|" + "---|" * len(PRETRAIN_HEADER)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        out.append("_No pre-training summary.json among the inputs._")
    out += ["", "## Figures", "", "The paper shows Figures 2-4 and the split ablation as images only, so no "
            "reported numbers are printed beside these.", ""]
    for figure in figures:
        out += _figure_md(figure, collection)
    if collection.skipped:
        out += ["## Skipped inputs", ""] + [f"- {s}" for s in collection.skipped] + [""]
    return "\n".join(out) + "\n"


def _collect(rc: Any) -> Collection:
    """The result files under report.inputs (none found is an error)."""
    collection = collect(list(rc.inputs), exclude=Path(rc.out_dir).expanduser())
    if len(collection) == 0:
        raise UserError(f"report.inputs={list(rc.inputs)}: found no results.json, efficiency.json, summary.json "
                        "or analysis.json under them; point it at run or sweep directories")
    return collection


def plan_report(cfg: Any, run: Any) -> dict[str, Any]:
    """What a report would read."""
    rc = cfg.report
    collection = _collect(rc)
    return {"results": len(collection), "skipped": list(collection.skipped), "out_dir": rc.out_dir,
            "tables": list(rc.tables)}


def run_report(cfg: Any, run: Any = None) -> dict[str, Any]:
    """Entry point of `femlm report` (cfg: FemlmConfig, or anything with a `.report` ReportConfig)."""
    rc = cfg.report
    out_dir = Path(rc.out_dir).expanduser()
    collection = _collect(rc)
    for line in collection.skipped:
        print(f"femlm report: skipped {line}", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = _report_commit()
    phrase = str(rc.scale).strip().rstrip(".") or "unspecified"
    tables: dict[str, Table] = {}
    if "glue" in rc.tables or "glue_average" in rc.tables:
        tables["glue"] = glue_table(collection, phrase, commit, rc.decimals)
    if "continual" in rc.tables:
        tables["continual"] = continual_table(collection, phrase, commit, rc.decimals)
    if "glue_average" in rc.tables:
        tables["glue_average"] = glue_average_table(tables["glue"], collection, phrase, commit, rc.decimals)
    chosen = [tables[k] for k in TABLES if k in rc.tables]
    environment = environment_of(run_dirs(collection))
    written = {t.key: write_table(t, out_dir, environment) for t in chosen}
    for stale in STALE:
        (out_dir / stale).unlink(missing_ok=True)
    shutil.rmtree(out_dir / "figures" / "analysis", ignore_errors=True)
    figures = write_figures(collection, out_dir) if rc.figures else []
    rows = pretrain_rows(collection, full=True)
    if rows:
        write_csv(out_dir / "pretrain_runs.csv", rows, PRETRAIN_HEADER)
    (out_dir / "README.md").write_text(readme(chosen, figures, collection, phrase, commit, list(rc.inputs),
                                                  environment))
    manifest = {"out_dir": str(out_dir), "readme": str(out_dir / "README.md"), "tables": written,
                "figures": [vars(f) for f in figures], "inputs": list(rc.inputs), "report_git_commit": commit,
                "counts": {"finetune": len(collection.finetune), "efficiency": len(collection.efficiency),
                           "pretrain": len(collection.pretrain), "analysis": len(collection.analysis)},
                "skipped": collection.skipped, "environment": environment}
    (out_dir / "report.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if run is not None:
        run.write_json("report.json", manifest)
    drawn = sum(f.status == "written" for f in figures)
    print(f"femlm report: {len(chosen)} tables, {drawn}/{len(figures)} figures from "
          f"{manifest['counts']} -> {out_dir / 'README.md'}")
    return manifest
