"""The summaries of the studies that live outside their folders, written only from each folder's committed
``comparisons.csv`` and ``study.json`` (issues 37, 47):

* docs/evidence.md, between ``<!-- <study>:begin -->`` and ``<!-- <study>:end -->``: a study's FE-vs-MLM line and
  its declared family's table (`study_block`);
* README.md, between ``<!-- evidence:begin -->`` and ``<!-- evidence:end -->``: per study, its scale, the one-line
  "FE vs MLM:" summary and one row per comparison of its declared family (comparison, estimate [interval], adjusted
  p, reading, notes) (`write_headlines`).

No result writer calls these: the runner's last step does (`refresh`: femlm.study.driver's "summaries" step, and
``python -m femlm.study --from-json``), so a writer never edits a file outside its output folder. Every reading is
the one comparisons.csv holds (femlm.study.verdicts); a gated comparison's p is not in that file, so it cannot
reach a summary.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

from femlm.paper import CONTINUAL_CS_TOKENS_PER_ARM
from femlm.study import arms
from femlm.study.readings import fe_vs_mlm, from_row, summary_lines, table
from femlm.study.verdicts import FAMILY_NAME, Comparison, is_declared

BEGIN, END = "<!-- evidence:begin -->", "<!-- evidence:end -->"


def read_comparisons(folder: Path) -> list[Comparison]:
    with (folder / "comparisons.csv").open(newline="") as fh:
        return [from_row(r) for r in csv.DictReader(fh)]


def _study(folder: Path) -> dict[str, Any]:
    path = folder / "study.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def row_tokens(study: dict[str, Any]) -> int | None:
    """Row tokens one run of the reference arm processed (rows x block length), from study.json; None for a study
    without training runs."""
    plan = study.get("plan") if isinstance(study.get("plan"), dict) else {}
    reference = (plan.get("pretrain") or {}).get("reference")
    for mode in (study.get("arms_read") or {}).values():
        r = mode.get(reference) or next(iter(mode.values()), None)
        seen = ((study.get("warmup") or {}).get("seen") or {})
        if r and seen.get("sequences"):
            return int(r["rows"] * seen["source_tokens"] / seen["sequences"])
    runs = [r for r in study.get("runs") or [] if isinstance(r, dict) and r.get("seen")]
    ref = next((r for r in runs if arms.role(str(r.get("masking"))) == "mlm"), runs[0] if runs else None)
    if ref and ref["seen"].get("sequences"):
        s = ref["seen"]
        return int(s["rows"] * s["source_tokens"] / s["sequences"])
    return None


def scale(study: dict[str, Any]) -> str:
    """"each run 262,144 row tokens, 0.027% of the paper's 983M per arm" (or what a study without training did)."""
    tokens = row_tokens(study)
    if tokens:
        return (f"each training run {tokens:,} row tokens, {100 * tokens / CONTINUAL_CS_TOKENS_PER_ARM:.2g}% of the "
                f"paper's {CONTINUAL_CS_TOKENS_PER_ARM / 1e6:.0f}M per arm")
    warm = ((study.get("warmup") or {}).get("seen") or {}).get("source_tokens")
    return ("no training runs: measurements at one checkpoint" + (f" after a {warm:,}-token warm-up" if warm else ""))


def title_of(folder: Path) -> str:
    readme = folder / "README.md"
    return readme.read_text().splitlines()[0].lstrip("# ").strip() if readme.is_file() else folder.name


def notes_cell(group: list[Comparison]) -> str:
    """The block's short notes: the gate, what the reading is (its caveats in a few words), the seeds."""
    c = group[0]
    out = [f"gated: {c.gated[0].split(' (')[0].split(':')[0]}"] if c.gated else []
    out += [f for g in group for f in g.flags]
    if c.seeds_needed:
        basis = "at the observed effect" if "observed" in c.seeds_basis else "planned from delta"
        out.append(f"~{c.seeds_needed} seeds per arm {basis}")
    return "; ".join(dict.fromkeys(out))


def family_line(comps: list[Comparison]) -> str:
    conf = [c for c in comps if is_declared(c)]
    if not conf:
        return "no declared family"
    return (f"family: {len(conf)} of its {len(comps)} comparisons, {FAMILY_NAME[conf[0].family]}, Holm at a "
            "family-wise 0.05")


def study_lines(folder: Path, root: Path) -> list[str]:
    """One study: title and link, scale and family, the FE-vs-MLM line, the declared family's table."""
    comps = read_comparisons(folder)
    rel = folder.relative_to(root)
    lines = [f"**[{title_of(folder)}]({rel}/README.md)**: {scale(_study(folder))}; {family_line(comps)}.", "",
             f"_{fe_vs_mlm(comps)}_", ""]
    declared = [c for c in comps if is_declared(c)]
    return lines + table(declared, raw_p=False, adjusted="Holm p", note=notes_cell) + [""]


def write_headlines(readme: Path, root: Path) -> bool:
    """Rewrite README.md's evidence block from results/*/comparisons.csv; False where it has no markers."""
    if not readme.is_file():
        return False
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    block = [BEGIN, "", "_Generated from each study's `comparisons.csv` and `study.json` by femlm/study/headlines.py: "
             "per study its scale, one line on FE against MLM, and its declared family (\"primary, chosen after the "
             "data\" or \"confirmatory\", declared before), Holm-adjusted. A reading that is not decided is its "
             "interval, never 'no effect'; a gated comparison has no p (—); \"no p\": a bootstrap whose replicates were "
             "not stored, read only where its 95% interval is at the family's adjusted level; *favours/against FE* "
             "only for an FE arm against MLM on an outcome. Notes, caveats and the exploratory comparisons: each "
             "study's README._", ""]
    for folder in study_folders(root):
        block += study_lines(folder, root)
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + "\n".join(block) + END + tail)
    return True


# ------------------------------------------------------------------------------------------ docs/evidence.md
def markers(plan: dict[str, Any]) -> tuple[str, str]:
    name = str(plan.get("name", "study")).replace("_", "-")
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def study_block(plan: dict[str, Any], out: Path, old: str = "") -> str:
    """docs/evidence.md's block of one study, from its folder's files; the first "_Generated from" line of the old
    block (when it had one) is kept: it dates the run, not this rewrite."""
    from femlm.study.ratios import side_by_side

    begin, end = markers(plan)
    where = plan.get("out_dir", "results/study")
    first = next((line for line in old.splitlines() if line.startswith("_Generated from")), "") or (
        f"_Generated from `{where}/` ({time.strftime('%Y-%m-%d')}). Details, intervals and caveats: "
        f"[{where}/README.md](../{where}/README.md)._")
    lines = [begin, "", first, ""]
    study = _study(out)
    if not plan.get("pretrain") and study:  # a study without training arms sets its scale beside the MiniLM study's
        labels = {f"warmup_{v['name']}": v.get("label") for v in (plan.get("decomposition") or {}).get("variants") or []}
        lines += side_by_side({**study, "labels": labels}, out.parent / "study" / "study.json",
                              (plan.get("report") or {}).get("side_by_side", {}))
    lines += [f"_Written by femlm/study/headlines.py from `{where}/comparisons.csv` ({time.strftime('%Y-%m-%d')}); "
              "the numbers are the run's._", "", *summary_lines(read_comparisons(out), plan)]
    if study.get("missing"):
        lines += ["", f"(The study was incomplete: {len(study['missing'])} steps missing.)"]
    return "\n".join([*lines, "", end])


def update_block(path: Path, plan: dict[str, Any], out: Path) -> bool:
    """Replace the study's block of ``path`` (docs/evidence.md); False where it has no markers."""
    begin, end = markers(plan)
    text = path.read_text()
    if begin not in text or end not in text:
        return False
    head, rest = text.split(begin, 1)
    old, tail = rest.split(end, 1)
    path.write_text(head + study_block(plan, out, old) + tail)
    return True


def study_folders(root: Path, history: bool = False) -> list[Path]:
    """The study result folders under `root`/results (those with a comparisons.csv), smoke runs' folders left out
    (`<name>-smoke`: git-ignored, made by `make study-*-smoke`), and those whose study.json marks them as history
    (a study kept for the record, e.g. one that did not learn) unless `history`."""
    found = sorted(p.parent for p in (root / "results").glob("*/comparisons.csv") if not p.parent.name.endswith("-smoke"))
    return [f for f in found if history or not _study(f).get("history")]


def refresh(plan: dict[str, Any], out: Path, evidence: Path | None, top: Path | None) -> list[Path]:
    """The runner's last step: the study's block of docs/evidence.md and README.md's evidence block, from the
    study's folder (a smoke run refreshes neither)."""
    done = []
    if plan.get("smoke") or not (out / "comparisons.csv").is_file():
        return done
    if evidence is not None and evidence.is_file() and update_block(evidence, plan, out):
        done.append(evidence)
    if top is not None and write_headlines(top, top.parent):
        done.append(top)
    return done
