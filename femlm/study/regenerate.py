"""Rewrite a finished study's verdicts from its committed files, without its run directories (issue 27).

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

import json
import re
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.outputs import CRLF, write_csv
from femlm.study.readme import INTRO, drop_missing_figures, markers, sizing_sentence
from femlm.study.sections import conclusions, decomposition_section, pretrain_section
from femlm.study.tables import comparison_rows

POOL = re.compile(r"Pool of (\d+) validation blocks of (\d+) tokens, tau = (\d+) masked tokens per copy, R = (\d+) "
                  r"rows per step, K in \[([\d, ]+)\]; (\d+) reference masks and (\d+) draws .*?; (\d+) directly")
NULL = re.compile(r"^(\d+) sequences, tau = (\d+), (\d+) mask pairs .*?, (\d+) groups of (\d+) ", re.M)
NUMEL = re.compile(r"(?:parameters:|the gradient of) (\S.*?) \(([\d,]+) values")  # the old and the new wording


def run_json(study: dict[str, Any], key: str, md: str, readme: str) -> dict[str, Any]:
    """The decomposition.json fields the verdict writer reads, from study.json and the run's decomposition.md."""
    m, n = POOL.search(md), NULL.search(md)
    if m is None or n is None:
        raise UserError(f"decomposition_{key}.md: its first lines do not give the run's settings")
    p = NUMEL.search(readme)
    return {
        "settings": {"pool": int(m[1]), "block_size": int(m[2]), "tau": int(m[3]), "batch_rows": int(m[4]),
                     "num_masks": [int(k) for k in m[5].split(",")], "reference": int(m[6]), "draws": int(m[7]),
                     "check_batches": int(m[8])},
        "parameters": {"patterns": p[1].split(", ") if p else ["?"],
                       "numel": int(p[2].replace(",", "")) if p else None},
        "terms": study["decomposition_terms"][key], "verdicts": study["decomposition"][key],
        "null_model": {"summary": study["null_model"][key],
                       "settings": {"sequences": int(n[1]), "tau": int(n[2]), "pairs": int(n[3]), "groups": int(n[4]),
                                    "group_size": int(n[5])}},
    }


def _replace(text: str, start: str, stop: str, new: list[str]) -> str:
    """``text`` with everything from the line ``start`` up to (not including) ``stop`` replaced by ``new``."""
    i = text.find(start)
    j = text.find(stop, i + 1)
    if i < 0 or j < 0:
        raise UserError(f"README: section {start!r} (up to {stop!r}) not found")
    return text[:i] + "\n".join(new) + "\n" + text[j:]


def regenerate(plan: dict[str, Any], out: Path, readme: Path | None) -> Path:
    study_path = out / "study.json"
    if not study_path.is_file():
        raise UserError(f"{study_path}: no study.json to regenerate from (run the study, or --results-only)")
    study = json.loads(study_path.read_text())
    text = (out / "README.md").read_text()
    dec = {}
    for key in study.get("decomposition") or {}:
        md = out / f"decomposition_{key}.md"
        if md.is_file() and study["decomposition"][key]:
            dec[key] = {"json": run_json(study, key, md.read_text(), text), "checkpoint": key}
    pre = {m: r for m, r in (study.get("pretraining") or {}).items()}
    if any("arms" in r for r in pre.values()):  # censored ratios as bounds: no interval, no p-value
        write_csv(out / "pretrain_comparisons.csv", comparison_rows(pre), line_end=CRLF)
    down = study.get("downstream") or {}
    supports, not_supported, controls = conclusions(plan, dec, pre, down)
    note = (f"_The verdicts below were regenerated from `study.json` with the issue-27 gates "
            f"({time.strftime('%Y-%m-%d')}; `python -m femlm.study --experiment {plan.get('name')} --from-json`)._")
    tail = next((line for line in text.splitlines() if line.startswith("Each interval is")), "")
    lists = ["## What the evidence supports", "", note, "", *([f"- {s}" for s in supports] or ["- (none)"]), "",
             "## What it does not support", "", *([f"- {s}" for s in not_supported] or ["- (none)"]), ""]
    if controls:
        lists += ["## The i.i.d. K-mask control (K copies without the non-overlap)", "",
                  *[f"- {s}" for s in controls], ""]
    lists += [tail, ""] if tail else []
    text = _replace(text, "## What the evidence supports", "## 1-2.", lists)
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
    params = (study.get("encoder") or {}).get("parameters")
    text = _replace(text, "## 1-2.", "## 3.", ["## 1-2. Variance of the training gradient; context interactions "
                                                "against the additive null model", "",
                                                *decomposition_section(dec, params)])
    if pre:
        i = text.find("## 3.")
        intro_end = text.find("\n### ", i)
        text = text[:intro_end + 1] + _replace(text[intro_end + 1:], "### ", "## 4.", pretrain_section(plan, pre))
    path = out / "README.md"
    path.write_text(drop_missing_figures(text, out))
    if readme is not None and readme.is_file():
        begin, end = markers(plan)
        top = readme.read_text()
        if begin in top and end in top:
            head, rest = top.split(begin, 1)
            old, after = rest.split(end, 1)
            gen = next((line for line in old.splitlines() if line.startswith("_Generated from")), "")
            block = [begin, "", gen, "", note, "", "Supported by the evidence:",
                     *([f"- {s}" for s in supports] or ["- nothing beyond noise."]), "", "Not supported at this scale:",
                     *([f"- {s}" for s in not_supported] or ["- (none)"]), "", end]
            readme.write_text(head + "\n".join(block) + after)
    return path
