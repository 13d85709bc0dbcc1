"""README.md's "What the evidence says": a block generated from every study's ``comparisons.csv`` (issue 37), so
the top-level summary carries exactly the readings the studies' writer chose (femlm.study.verdicts), between
``<!-- evidence:begin -->`` and ``<!-- evidence:end -->``. Hand-written context stays around the markers."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from femlm.study.verdicts import Comparison, order, sentence

BEGIN, END = "<!-- evidence:begin -->", "<!-- evidence:end -->"


def _num(x: str) -> Any:
    if x in ("", None):
        return None
    try:
        return int(x) if x.lstrip("-").isdigit() else float(x)
    except ValueError:
        return None


def from_row(r: dict[str, str]) -> Comparison:
    """A comparison as comparisons.csv records it."""
    c = Comparison(r["key"], r["kind"], r["text"], _num(r["estimate"]), _num(r["low"]), _num(r["high"]), r["unit"],
                   better=r["better"], p=_num(r["p"]), p_method=r["p_method"], n=_num(r["n"]))
    c.family, c.p_adjusted, c.reading, c.why = r["family"], _num(r["p_adjusted"]), r["reading"], r["why"]
    c.seeds_needed = _num(r.get("seeds_needed", ""))
    c.about_fe = r["reading"] in ("favours FE", "against FE", "not decided")
    return c


def study_lines(folder: Path, root: Path) -> list[str]:
    """One study's confirmatory comparisons, findings first, each with its reading."""
    with (folder / "comparisons.csv").open() as fh:
        comps = [from_row(r) for r in csv.DictReader(fh)]
    conf = sorted([c for c in comps if c.family == "confirmatory"], key=order)
    title = (folder / "README.md").read_text().splitlines()[0].lstrip("# ") if (folder / "README.md").is_file() else ""
    rel = folder.relative_to(root)
    lines = [f"**{title}** ([{rel}/README.md]({rel}/README.md)): {len(conf)} confirmatory comparisons of "
             f"{len(comps)}, Holm at a family-wise 0.05:", ""]
    lines += [f"- {sentence(c).replace('{m}', str(len(conf)))}" for c in conf] or ["- (none declared)"]
    return lines + [""]


def write_headlines(readme: Path, root: Path) -> bool:
    """Rewrite README.md's evidence block from results/*/comparisons.csv; False where it has no markers."""
    if not readme.is_file():
        return False
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    block = [BEGIN, "", "_Generated from each study's `comparisons.csv` by femlm/study/headlines.py: the "
             "confirmatory comparisons (declared in the study's experiment file; when, its README says), each "
             "with its interval, raw and Holm-adjusted p, and its reading. A reading that is not decided is "
             "written as its interval, never as 'no effect'._", ""]
    for folder in sorted(p.parent for p in (root / "results").glob("*/comparisons.csv")):
        block += study_lines(folder, root)
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + "\n".join(block) + END + tail)
    return True
