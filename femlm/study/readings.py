"""How a comparison's reading is printed (issue 47): the p-value cells, the notes, the README's tables and sections,
the short form docs/evidence.md carries, and comparisons.csv (written and read back), all from the records
femlm.study.verdicts reads. A table prints ``says(c)``, never a reading of its own.

    verdict_lines(comps, plan)    # a study README's "What the evidence says"
    summary_lines(comps, plan)    # docs/evidence.md's block of the study
    rows(comps) / from_row(row)   # comparisons.csv, and a record read back from it (README.md's block)
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from femlm.study.comparisons import AGAINST, FAVOURS, UNDECIDED, Comparison
from femlm.study.verdicts import FAMILY_NAME, declared_text, family_name, fmt_p, fmt_value, is_declared, says


def p_cell(c: Comparison, adjusted: bool) -> str:
    """A p-value cell: nothing for a gated comparison (its p is never printed), "no p" for a bootstrap without
    replicates, "bound" for a censored ratio."""
    if c.gated:
        return "—"
    if c.bound:
        return "bound"
    if c.p is None:
        return "no p"
    return fmt_p(c.p_adjusted if adjusted else c.p)


def notes(c: Comparison, others: list[Comparison] | None = None) -> str:
    """Why it reads as it does, its caveats (and those of the ``others`` it shares a row with) and, where declared
    and not decided, the seeds that would decide it."""
    out = [c.why] if c.why else []
    if c.delta is not None and c.p_equivalence is not None and not c.reading.startswith("equivalent"):
        out.append(f"TOST within ±{c.delta:g}: p {fmt_p(c.p_equivalence)}, adjusted "
                   f"{fmt_p(c.p_equivalence_adjusted)}")
    out += list(dict.fromkeys(x for g in [c, *(others or [])] for x in g.caveats))
    if c.seeds_needed:
        out.append(f"about {c.seeds_needed} seeds per arm would decide it ({c.seeds_basis})")
    return "; ".join(out)


def name_cell(c: Comparison) -> str:
    return c.contrast + (f", {c.short}" if c.first and c.short else "")


def row_cells(group: list[Comparison]) -> tuple[str, str]:
    """(name, estimate) of one table row: one comparison, or several that share one estimate (printed once, with
    the K each value serves)."""
    c = group[0]
    if len(group) == 1:
        return name_cell(c), fmt_value(c)
    ks = ", ".join(g.key.rsplit("/K", 1)[-1] for g in group)
    return (f"FE / MLM gradient variance per unit compute, {c.key.split('/')[1]}, K = {ks} (predicted)",
            f"one estimate, {c.group_text.split(' (')[0]}; then "
            + "; ".join(f"K={g.key.rsplit('/K', 1)[-1]}: {fmt_value(g)}" for g in group))


def table(comps: list[Comparison], raw_p: bool = True, adjusted: str = "adjusted p",
          note: Any = None) -> list[str]:
    """One row per comparison; comparisons sharing one estimate (``group``) and one reading in one row.
    ``adjusted``: the adjusted p column's header; ``note``: the notes cell of a group (default `notes`)."""
    head = "| comparison | estimate [95% CI] |" + (" p |" if raw_p else "") + f" {adjusted} | reading | notes |"
    lines = [head, "|---|---|" + ("---|" if raw_p else "") + "---|---|---|"]
    for group in grouped(comps):
        c = group[0]
        name, value = row_cells(group)
        ps, qs = (", ".join(dict.fromkeys(p_cell(g, adj) for g in group)) for adj in (False, True))
        lines.append(f"| {name} | {value} |" + (f" {ps} |" if raw_p else "") + f" {qs} | {says(c)} | "
                     f"{note(group) if note else notes(c, group[1:])} |")
    return lines


def grouped(comps: list[Comparison]) -> list[list[Comparison]]:
    """Comparisons in order, those of one ``group`` with one reading (and gate) together."""
    out: list[list[Comparison]] = []
    index: dict[tuple[str, str, str], int] = {}
    for c in comps:
        tag = (c.group, c.reading, c.why) if c.group else None
        if tag is not None and tag in index:
            out[index[tag]].append(c)
            continue
        if tag is not None:
            index[tag] = len(out)
        out.append([c])
    return out


def fe_vs_mlm(comps: list[Comparison]) -> str:
    """The one line that says what the declared family says about FE against MLM."""
    fe = [c for c in comps if is_declared(c) and c.about_fe]
    if not fe:
        return "FE vs MLM: no declared comparison of an FE arm with MLM."
    by = {r: [c for c in fe if c.reading == r] for r in (FAVOURS, AGAINST)}
    eq = [c for c in fe if c.reading.startswith("equivalent")]
    undecided = len(fe) - len(by[FAVOURS]) - len(by[AGAINST]) - len(eq)

    def some(cs: list[Comparison]) -> str:
        return f" ({'; '.join(name_cell(c) for c in cs)})" if cs else ""

    favour = (f"{len(by[FAVOURS])} favour FE{some(by[FAVOURS])}" if by[FAVOURS] else "no comparison favours FE")
    return (f"FE vs MLM: {favour}; {len(by[AGAINST])} against FE{some(by[AGAINST])}; "
            + (f"{len(eq)} equivalent within their margins{some(eq)}; " if eq else "")
            + f"{undecided} not decided (of {len(fe)} declared).")


def rule_sentence(plan: dict[str, Any], comps: list[Comparison]) -> str:
    m = sum(is_declared(c) for c in comps)
    fam = family_name(plan)
    what = ("confirmatory" if fam == "confirmatory" else "primary comparisons chosen after the data (Holm-adjusted, "
            "not confirmatory: a family chosen after the results has no family-wise error control)")
    return (f"One reading rule (femlm/study/verdicts.py). The declared family is the {m} comparisons that "
            f"`stats.confirmatory` of femlm/conf/experiment/{plan.get('name', 'study')}.yaml lists, "
            f"{declared_text(plan)}: {what}. Holm at a family-wise 0.05 over every hypothesis of the family, a member "
            "without a result, gated or without a p counted at p = 1; the other "
            f"{len(comps) - m} comparisons are exploratory (Benjamini-Hochberg) and are not findings. A reading needs "
            "its interval to exclude the null and its adjusted p below 0.05; *favours FE* / *against FE* only for an "
            "outcome of an FE arm against the reference arm, any other comparison is read by what it compares, and a "
            "mechanism reading (variance ratios, the passes measurement, context interactions) never reads for or "
            "against FE. A bootstrap interval without stored replicates has no p; it is read only where its level "
            "reaches the family's adjusted level. Raw and adjusted p-values are in `comparisons.csv`.")


def verdict_lines(comps: list[Comparison], plan: dict[str, Any], heading: str = "##") -> list[str]:
    """The README's verdict section: the FE-vs-MLM line, the rule, the declared family's table, the exploratory
    table."""
    conf = [c for c in comps if is_declared(c)]
    expl = [c for c in comps if not is_declared(c)]
    fam = FAMILY_NAME[family_name(plan)]
    return [f"{heading} What the evidence says", "", f"**{fe_vs_mlm(comps)}**", "",
            rule_sentence(plan, comps), "",
            f"{heading}# The declared family: {fam}", "", *(table(conf) if conf else ["(none declared)"]), "",
            f"{heading}# Exploratory (Benjamini-Hochberg; not findings)", "",
            *(table(expl) if expl else ["(none)"]), ""]


def summary_lines(comps: list[Comparison], plan: dict[str, Any]) -> list[str]:
    """The short form docs/evidence.md carries: the FE-vs-MLM line and the declared family's table."""
    conf = [c for c in comps if is_declared(c)]
    expl = [c for c in comps if not is_declared(c)]
    n = {r: sum(1 for c in expl if c.reading == r) for r in (FAVOURS, AGAINST, UNDECIDED)}
    return [f"**{fe_vs_mlm(comps)}** The declared family ({FAMILY_NAME[family_name(plan)]}, "
            f"{declared_text(plan)}), Holm at a family-wise 0.05:", "", *table(conf, raw_p=False), "",
            f"Exploratory (not findings; Benjamini-Hochberg): {n[FAVOURS]} favour FE, {n[AGAINST]} against it, "
            f"{len(expl) - sum(n.values())} read by what they compare (controls, mechanisms), {n[UNDECIDED]} not "
            "decided; each is in the study's README and comparisons.csv."]


CSV_COLUMNS = ("key", "kind", "nature", "about_fe", "family", "first", "second", "estimate", "low", "high", "level", "unit",
               "better", "p", "p_method", "p_adjusted", "delta", "p_equivalence", "p_equivalence_adjusted",
               "reading", "says", "why", "gated", "caveats", "flags", "n", "seeds_needed", "seeds_basis", "group",
               "group_text", "short", "text")


def rows(comps: list[Comparison]) -> list[dict[str, Any]]:
    """comparisons.csv: one row per comparison, raw and adjusted p side by side; a gated comparison's p is left
    out (its reading names the gate), so no reader can print it."""
    out = []
    for c in comps:
        d = asdict(c)
        d.update(says=says(c), gated="; ".join(c.gated), caveats=" | ".join(c.caveats), flags=" | ".join(c.flags))
        if c.gated:
            d.update(p=None, p_adjusted=None, p_equivalence=None, p_equivalence_adjusted=None)
        out.append({k: d.get(k) for k in CSV_COLUMNS})
    return out


def from_row(r: dict[str, str]) -> Comparison:
    """A comparison as comparisons.csv records it (the README block's source)."""
    def num(x: Any) -> Any:
        if x in ("", None):
            return None
        try:
            return int(x) if str(x).lstrip("-").isdigit() else float(x)
        except ValueError:
            return None

    c = Comparison(r["key"], r["kind"], r.get("text", ""), num(r["estimate"]), num(r["low"]), num(r["high"]),
                   r["unit"], better=r.get("better") or "lower", p=num(r["p"]), p_method=r.get("p_method", ""),
                   n=num(r.get("n")), first=r.get("first", ""), second=r.get("second", ""),
                   nature=r.get("nature") or "outcome", short=r.get("short", ""), level=num(r.get("level")) or 0.95,
                   group=r.get("group", ""), group_text=r.get("group_text", ""),
                   gated=[g for g in (r.get("gated") or "").split("; ") if g],
                   caveats=[x for x in (r.get("caveats") or "").split(" | ") if x],
                   flags=[x for x in (r.get("flags") or "").split(" | ") if x])
    c.family, c.p_adjusted, c.reading, c.why = r["family"], num(r["p_adjusted"]), r["reading"], r["why"]
    c.about_fe = str(r.get("about_fe")) == "True"
    c.delta, c.p_equivalence = num(r.get("delta")), num(r.get("p_equivalence"))
    c.p_equivalence_adjusted = num(r.get("p_equivalence_adjusted"))
    c.seeds_needed, c.seeds_basis = num(r.get("seeds_needed")), r.get("seeds_basis", "")
    return c


def with_readings(rows: list[dict[str, Any]], comps: list[Any], kind: str) -> list[dict[str, Any]]:
    """Rows (a ``run`` and a ``K`` each) with the study's reading of their key ``<kind>/<run>/K<k>`` ("" when the
    study has no such comparison) and no other verdict (an older study.json's rows carried the analysis' own)."""
    by_key = {c.key: c for c in comps}
    out = []
    for r in rows:
        c = by_key.get(f"{kind}/{r['run']}/K{r['K']}")
        out.append({**{k: v for k, v in r.items() if k not in ("verdict", "reading")},
                    "reading": says(c) if c is not None else ""})
    return out
