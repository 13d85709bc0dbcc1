"""Rewrite a finished study's readings from its committed files, without its run directories (issues 27, 47).

`python -m femlm.study --experiment study --from-json` re-applies today's verdict writer (gates, unit counts,
censored ratios as bounds) to results/<study>/: it reads ``study.json`` (terms, verdicts, null-model summaries,
pre-training comparisons, downstream scores) and the analysis' own ``decomposition_<run>.md`` copies beside it
(the first lines of each record the run's settings: pool, tau, rows, K, batches, null-model sequences and groups,
which study.json from before issue 27 lacks), and replaces in results/<study>/README.md the sections written from
verdicts -- "What the evidence supports", "What it does not support", the control's list, "1-2." (the
decomposition) and the tables of "3." -- and the study's block of docs/evidence.md. Everything else (scale,
sizing, downstream tables, figures) is kept as the full run wrote it. A run that still has its run directories
should use ``--results-only`` instead, which rewrites everything.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.outputs import CRLF, write_csv
from femlm.study import arms
from femlm.study.evidence import run_gates
from femlm.study.figures import bands_from_csv, null_figure, plot_curves, plot_downstream
from femlm.study.passes import passes_rows, with_readings
from femlm.study.ratios import ratio_section, write_ratio_csv
from femlm.study.ratios import with_readings as ratio_with_readings
from femlm.study.readings import rows as comparison_table
from femlm.study.readings import verdict_lines
from femlm.study.readme import INTRO, _files, across_section, drop_missing_figures, sizing_sentence
from femlm.study.sections import decomposition_section, downstream_section, pretrain_section
from femlm.study.tables import comparison_rows, downstream_rows
from femlm.study.text import MODE_LABEL
from femlm.study.verdicts import adjust, strip_readings, study_comparisons

POOL = re.compile(r"Pool of (\d+) validation blocks of (\d+) tokens, tau = (\d+) masked tokens per copy, R = (\d+) "
                  r"rows per step, K in \[([\d, ]+)\]; (\d+) reference masks and (\d+) draws .*?; (\d+) directly")
NULL = re.compile(r"^(\d+) sequences, tau = (\d+), (\d+) mask pairs .*?, (\d+) groups of (\d+) ", re.M)
TERMS_FILE = "`decomposition_terms.csv`: every decomposition run's terms and per-K verdicts in one table; "
TITLE = re.compile(r"^# Gradient variance decomposition: (.+)$", re.M)
BOOT = re.compile(r"(expanded )?percentile bootstrap[^(]*\((\d+) resamples")
NUMEL = re.compile(r"(?:parameters:|the gradient of) (\S.*?) \(([\d,]+) values")  # the old and the new wording


def recorded_settings(study: dict[str, Any], key: str, md: str) -> dict[str, Any]:
    """A decomposition run's settings: study.json's ``decomposition_settings`` (written by the study since issue
    37), else the first lines of the analysis' own decomposition_<key>.md (an older study.json lacks them)."""
    have = (study.get("decomposition_settings") or {}).get(key)
    if have:
        return have
    m, n = POOL.search(md), NULL.search(md)
    if m is None or n is None:
        raise UserError(f"decomposition_{key}.md: its first lines do not give the run's settings")
    title, boot = TITLE.search(md), BOOT.search(md)
    return {"title": title[1] if title else key, "pool": int(m[1]), "block_size": int(m[2]), "tau": int(m[3]),
            "batch_rows": int(m[4]), "num_masks": [int(k) for k in m[5].split(",")], "reference": int(m[6]),
            "draws": int(m[7]), "check_batches": int(m[8]), "bootstrap": int(boot[2]) if boot else None,
            "interval_method": f"{boot[1] or ''}percentile bootstrap" if boot else None,
            "null_model": {"sequences": int(n[1]), "tau": int(n[2]), "pairs": int(n[3]), "groups": int(n[4]),
                           "group_size": int(n[5])}}


def run_json(study: dict[str, Any], key: str, md: str, readme: str) -> dict[str, Any]:
    """The decomposition.json fields the verdict writer reads, from study.json (and the run's decomposition.md)."""
    s = recorded_settings(study, key, md)
    p = NUMEL.search(readme)
    return {
        "settings": {k: v for k, v in s.items() if k not in ("null_model", "title", "interval_method")},
        "parameters": {"patterns": p[1].split(", ") if p else ["?"],
                       "numel": int(p[2].replace(",", "")) if p else None},
        "terms": study["decomposition_terms"][key], "verdicts": study["decomposition"][key],
        "null_model": {"summary": study["null_model"][key], "settings": s["null_model"]},
    }


def rewrite_markdown(study: dict[str, Any], key: str, j: dict[str, Any], out: Path,
                     readings: dict[str, Any] | None = None) -> Path | None:
    """decomposition_<key>.md rewritten by today's analysis writer (femlm.analysis.decomposition_text) from
    study.json and the run's own CSV tables beside it: the headings, gates and unit rules of today, and the study's
    reading of each K (``readings``: femlm.study.verdicts' comparisons by key)."""
    from femlm.study.results import decomposition_page

    s = study["decomposition_settings"][key]
    summary = {**j, "gates": run_gates(j), "settings": {**j["settings"]},
               "null_model": {**j["null_model"], "settings": {**j["null_model"]["settings"],
                                                              "bootstrap": s.get("bootstrap")}}}
    return decomposition_page(summary, key, out, readings, s.get("title", key), s.get("interval_method"))


def _replace(text: str, start: str, stop: str, new: list[str]) -> str:
    """``text`` with everything from the line ``start`` up to (not including) ``stop`` replaced by ``new``."""
    i = text.find(start)
    j = text.find(stop, i + 1)
    if i < 0 or j < 0:
        raise UserError(f"README: section {start!r} (up to {stop!r}) not found")
    return text[:i] + "\n".join(new) + "\n" + text[j:]


def _section(text: str, starts: tuple[str, ...], new: list[str]) -> str:
    """``text`` with the first section whose heading starts with one of ``starts`` (up to the next ``## ``
    heading) replaced by ``new``; unchanged when it has none."""
    i = min((k for k in (text.find("\n" + s) for s in starts) if k >= 0), default=-1)
    if i < 0:
        return text
    j = text.find("\n## ", i + 1)
    return text[:i + 1] + "\n".join(new) + "\n" + (text[j + 1:] if j >= 0 else "")


def passes_runs(study: dict[str, Any], out: Path) -> dict[str, Any]:
    """The passes runs as femlm.study.passes reads them, from study.json's rows and the ``passes_<run>.csv``
    beside it (the analysis' own table: the variances and the directly measured sigma_m2 the gates read)."""
    runs: dict[str, Any] = {}
    for row in study.get("passes") or []:
        key = row["run"]
        path = out / f"passes_{key}.csv"
        if key in runs or not path.is_file():
            continue
        with path.open() as fh:
            table = list(csv.DictReader(fh))

        def num(x: str) -> Any:
            try:
                return int(x) if x.isdigit() else float(x)
            except ValueError:
                return None

        rows = []
        for r in table:
            v = {k: num(x) for k, x in r.items() if k not in ("gates", "prediction_gates")}
            for name in ("measured_ratio", "predicted_ratio", "measured_over_predicted"):
                v[f"{name}_ci"] = [v.pop(f"{name}_ci_low"), v.pop(f"{name}_ci_high")]
            rows.append(v)
        first = table[0] if table else {}
        runs[key] = {"label": row.get("label", ""), "json": {
            "settings": {"tau": row["tau"], "block_size": row["block_size"], "pool": row["sequences"],
                         "draws": row["cycles_per_sequence"]},
            "rows": rows,
            "stats": {"interval": {"method": "expanded percentile bootstrap", "count": first and row["sequences"],
                                   "unit": "sequences", "resamples": _resamples(study)}}}}
    return runs


def _resamples(study: dict[str, Any]) -> Any:
    for item in ((study.get("plan") or {}).get("passes") or {}).get("overrides") or []:
        if str(item).startswith("analysis.bootstrap="):
            return int(str(item).split("=", 1)[1])
    return "?"


def redraw(plan: dict[str, Any], out: Path, study: dict[str, Any]) -> list[dict[str, Any]]:
    """The study's loss and downstream figures drawn again from its committed CSV and study.json (one colour per
    arm, femlm.outputs.arm_colors), where the study has them."""
    drawn = []
    if (out / "pretrain_bands.csv").is_file():
        for mode, res in bands_from_csv(out / "pretrain_bands.csv", study.get("pretraining") or {}).items():
            drawn.append(plot_curves(mode, res, out / f"loss_vs_flops_{mode}.png",
                                     f"held-out MLM loss vs training compute, {MODE_LABEL[mode]}"))
    down = study.get("downstream") or {}
    if down:
        order = arms.order(plan)
        drawn.append(plot_downstream(down, out / "downstream.png", order))
    return drawn


def regenerate(plan: dict[str, Any], out: Path) -> Path:
    """Rewrite results/<study>/ from its committed files (see the module doc): comparisons.csv and every table and
    CSV that prints a reading, the README's readings and sections, study.json without words of its own, and the
    figures, all inside ``out``. The summaries outside it are femlm.study.headlines.refresh's (the CLI's next
    step)."""
    study_path = out / "study.json"
    if not study_path.is_file():
        raise UserError(f"{study_path}: no study.json to regenerate from (run the study, or --results-only)")
    study = json.loads(study_path.read_text())
    text = (out / "README.md").read_text()
    dec = {}
    labels = {v["name"]: v.get("label") for v in (plan.get("decomposition") or {}).get("variants") or []}
    settings = {key: recorded_settings(study, key, (out / f"decomposition_{key}.md").read_text())
                for key in study.get("decomposition") or {} if study["decomposition"][key]
                and ((study.get("decomposition_settings") or {}).get(key) or (out / f"decomposition_{key}.md").is_file())}
    if settings:  # moved into study.json once (issue 37)
        study["decomposition_settings"] = settings
    for key in settings:
        md = out / f"decomposition_{key}.md"
        if study["decomposition"][key]:
            name = key.split("_", 1)[1] if "_" in key else key
            dec[key] = {"json": run_json(study, key, md.read_text(), text),
                        "checkpoint": "warmup" if key.startswith("warmup") else key,
                        **({"label": labels[name]} if labels.get(name) else {})}
    pre = {m: r for m, r in (study.get("pretraining") or {}).items()}
    down = study.get("downstream") or {}
    runs = passes_runs(study, out)
    rows = passes_rows(runs) if runs else []
    params = (study.get("encoder") or {}).get("parameters")
    comps = adjust(study_comparisons(plan, dec, pre, down, rows, study.get("arms_read"), params), plan)
    readings = {c.key: c for c in comps}
    write_csv(out / "comparisons.csv", comparison_table(comps), line_end=CRLF)
    if any("arms" in r for r in pre.values()):
        write_csv(out / "pretrain_comparisons.csv", comparison_rows(pre, readings), line_end=CRLF)
    if rows:
        study["passes"] = with_readings(rows, comps)
        write_ratio_csv(out / "passes_ratios.csv", study["passes"])
    if study.get("decomposition_rows"):
        study["decomposition_rows"] = ratio_with_readings(study["decomposition_rows"], comps)
        write_ratio_csv(out / "decomposition_terms.csv", study["decomposition_rows"])
    if down:
        per_seed, summary = downstream_rows(down)
        write_csv(out / "downstream_scores.csv", per_seed, line_end=CRLF)
        write_csv(out / "downstream_summary.csv", summary, line_end=CRLF)
    study_path.write_text(json.dumps(strip_readings(study), indent=2) + "\n")
    note = (f"_Regenerated from `study.json` by the issue-47 writer ({time.strftime('%Y-%m-%d')}; `python -m "
            f"femlm.study --experiment {plan.get('name')} --from-json`); the numbers are the run's._")
    tail = next((line for line in text.splitlines() if line.startswith("Each interval is")), "")
    if tail:
        tail = "Each interval is a per-comparison 95% interval (the readings above adjust for multiplicity)." + (
            tail.split("alone.", 1)[1] if "alone." in tail else "")
    lines = verdict_lines(comps, plan)
    lists = [*lines[:2], note, "", *lines[2:], *([tail, ""] if tail else [])]
    start = "## What the evidence says" if "\n## What the evidence says" in text else "## What the evidence supports"
    stop = next(h for h in ("\n## 1-2.", "\n## Variance across passes", "\n## 3.") if h in text)
    text = _replace(text, start, stop.lstrip("\n"), lists)
    intro = (plan.get("report") or {}).get("intro")
    if not intro:  # the default intro, as today's writer words it
        text = "\n".join(INTRO if line.startswith("Three questions of issue 17") else line
                         for line in text.splitlines()) + "\n"
    else:  # the plan's own intro: the paragraph after the title's "_Generated by" line
        lines = text.splitlines()
        i = next((n for n, line in enumerate(lines) if line.startswith("_Generated by")), None)
        j = next((n for n in range(i + 1, len(lines)) if lines[n].strip()), None) if i is not None else None
        if j is not None and not lines[j].startswith("#"):
            lines[j] = intro
            text = "\n".join(lines) + "\n"
    sizing = sizing_sentence({**plan, "estimate": (study.get("plan") or plan).get("estimate", {})})
    text = "\n".join(sizing if line.startswith("Sized beforehand from unit costs measured on") else line
                     for line in text.splitlines()) + "\n"
    if dec:
        rows_table = ratio_section(study.get("decomposition_rows") or []) if labels else []
        text = _section(text, ("## 1-2.",), ["## 1-2. Variance of the training gradient; context interactions "
                                             "against the additive null model", "", *rows_table,
                                             *decomposition_section(dec, params, readings)])
    if runs:
        text = _section(text, ("## Variance across passes",), across_section(plan, {"passes": runs}, readings))
    if pre:
        i = text.find("## 3.")
        intro_end = text.find("\n### ", i)
        text = text[:intro_end + 1] + _replace(text[intro_end + 1:], "### ", "## 4.", pretrain_section(plan, pre,
                                                                                                       readings))
    if down:
        i = text.find("## 4.")
        intro_end = text.find("\n### ", i)
        order = arms.order(plan)
        text = text[:intro_end + 1] + _replace(text[intro_end + 1:], "### ", "## Files",
                                               downstream_section(down, order, readings))
    for key, d in dec.items():
        rewrite_markdown(study, key, d["json"], out, readings)
        null_figure(d["json"], key, out, d.get("label") or key)
    files = _files(plan)
    if not (out / "decomposition_terms.csv").is_file():  # a study from before the table existed (results/study)
        files = [line.replace(TERMS_FILE, "") for line in files]
    text = _section(text, ("## Files",), files)
    redraw(plan, out, study)
    path = out / "README.md"
    path.write_text(drop_missing_figures(text, out))
    return path
