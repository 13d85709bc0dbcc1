"""The table model and its three writers: Markdown, LaTeX (booktabs) and CSV (+ a sibling .meta.json).

Measured rows (this code's runs) and reported rows (numbers printed in the paper) are two separate lists of
a `Table`, and every writer keeps them apart: two Markdown tables under their own headings, two LaTeX
blocks under their own \\multicolumn labels, and a ``source`` column (measured | reported) in the CSV.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from femlm.outputs import csv_text
from femlm.paper import CITATION, REFERENCE, Column

MISSING = "—"  # a cell with no number, in Markdown and LaTeX (the CSV leaves it empty)


@dataclass
class Cell:
    mean: float | None = None
    std: float | None = None
    n: int = 0  # seeds behind the number (0: unknown, as for reported numbers)
    decimals: int = 2

    def text(self, pm: str = "±") -> str:
        if self.mean is None:
            return MISSING
        body = f"{self.mean:.{self.decimals}f}"
        # A single seed has no spread: print the number alone rather than a misleading "± 0.00".
        if self.std is not None and self.n != 1:
            body += f" {pm} {self.std:.{self.decimals}f}"
        return body


@dataclass
class Row:
    label: str
    source: str  # measured | reported
    cells: dict[str, Cell] = field(default_factory=dict)  # task key -> cell
    citation: str = ""
    detail: dict[str, Any] = field(default_factory=dict)  # arm, steps, runs pooled (goes to .meta.json)


@dataclass
class Table:
    key: str  # continual | glue | glue_average (the output file stem)
    title: str
    columns: tuple[Column, ...]
    measured: list[Row]
    reported: list[Row]
    value: str  # what a measured cell is, e.g. "mean ± std over fine-tuning seeds of ... x 100"
    scale_text: str
    scale: dict[str, Any]
    paper_scale: str
    notes: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> list[str]:
        return [t for c in self.columns for t in c.tasks]


def _cells_text(row: Row, column: Column, pm: str = "±") -> str:
    texts = [row.cells.get(t, Cell()).text(pm) for t in column.tasks]
    if all(t == MISSING for t in texts):
        return MISSING
    return " / ".join(texts)


def _note_n(row: Row, typical: int | None) -> str:
    """Flag measured cells resting on fewer (or more) seeds than the rest of the table."""
    odd = sorted({c.n for c in row.cells.values() if c.mean is not None and c.n and c.n != typical})
    return f" (n={', '.join(map(str, odd))})" if odd and typical else ""


def typical_n(table: Table) -> int | None:
    counts = [c.n for r in table.measured for c in r.cells.values() if c.mean is not None and c.n]
    return max(set(counts), key=counts.count) if counts else None


def _md_table(rows: list[Row], columns: tuple[Column, ...], typical: int | None, source: bool) -> list[str]:
    headers = ["Model", *[c.header for c in columns], *(["Source"] if source else [])]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + [":---:"] * (len(headers) - 1)) + "|"]
    for row in rows:
        label = row.label.replace("|", "\\|") + ("" if source else _note_n(row, typical))
        cells = [_cells_text(row, c) for c in columns] + ([row.citation] if source else [])
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return lines


def to_markdown(table: Table, heading: str = "##") -> str:
    typical = typical_n(table)
    out = [f"{heading} {table.title}", "", f"**Scale.** {table.scale_text}", ""]
    out += [f"**Measured with this code** — {table.value}"
            + (f"; n = {typical} seeds per cell unless marked" if typical else "") + ".", ""]
    out += _md_table(table.measured, table.columns, typical, source=False) if table.measured else \
        ["_No measured results for this table._"]
    out += ["", f"**Reported, {CITATION}** (copied from the paper for comparison, not produced by this code; "
                f"the paper's setting: {table.paper_scale}).", ""]
    out += _md_table(table.reported, table.columns, None, source=True)
    if table.notes:
        out += ["", "Notes:", *[f"- {n}" for n in table.notes]]
    return "\n".join(out) + "\n"


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"$\sim$", "^": r"\textasciicircum{}", "±": r"$\pm$", "—": "---",
        "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$", "–": "--"}


def tex_escape(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def to_latex(table: Table) -> str:
    width = len(table.columns) + 1
    lines = [f"% {table.title} -- written by `femlm report`; needs \\usepackage{{booktabs}}.",
             "\\begin{table*}[t]", "\\centering", "\\small",
             "\\begin{tabular}{l" + "c" * len(table.columns) + "}", "\\toprule",
             " & ".join(["Model", *[tex_escape(c.header) for c in table.columns]]) + " \\\\", "\\midrule",
             f"\\multicolumn{{{width}}}{{l}}{{\\emph{{Measured (this code)}}}} \\\\"]
    for row in table.measured or [Row("no measured results", "measured")]:
        lines.append(" & ".join([tex_escape(row.label), *[tex_escape(_cells_text(row, c)) for c in table.columns]])
                     + " \\\\")
    lines += ["\\midrule", f"\\multicolumn{{{width}}}{{l}}{{\\emph{{Reported ({tex_escape(CITATION)})}}}} \\\\"]
    for row in table.reported:
        lines.append(" & ".join([tex_escape(row.label), *[tex_escape(_cells_text(row, c)) for c in table.columns]])
                     + " \\\\")
    caption = (f"{table.title}. Measured: {table.value}. Reported: copied from {CITATION} "
               f"({table.paper_scale}). Scale of the measured rows: {table.scale_text}")
    lines += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{tex_escape(caption)}}}",
              f"\\label{{tab:femlm-{table.key}}}", "\\end{table*}"]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.4f}".rstrip("0").rstrip(".")


def csv_header(table: Table) -> list[str]:
    from femlm.paper import TASK_HEADERS

    header = ["source", "model"]
    for task in table.tasks:
        name = TASK_HEADERS.get(task, table.columns[0].header if len(table.tasks) == 1 else task)
        header += [name, f"{name} std", f"{name} n"]
    return [*header, "citation"]


def to_csv(table: Table) -> str:
    """A clean rectangular table: one row per model, mean / std / n per task; missing cells are empty."""
    rows = []
    for row in [*table.measured, *table.reported]:
        values: list[str] = [row.source, row.label]
        for task in table.tasks:
            cell = row.cells.get(task, Cell())
            values += [_num(cell.mean), _num(cell.std) if cell.mean is not None else "",
                       str(cell.n) if cell.mean is not None and cell.n else ""]
        rows.append([*values, row.citation])
    return csv_text(rows, csv_header(table))


def meta(table: Table) -> dict[str, Any]:
    return {"table": table.key, "title": table.title, "value": table.value, "scale_text": table.scale_text,
            "scale": table.scale, "paper_scale": table.paper_scale, "reference": REFERENCE,
            "columns": [{"header": c.header, "tasks": list(c.tasks)} for c in table.columns],
            "rows": [{"label": r.label, "source": r.source, "citation": r.citation, "detail": r.detail,
                      "cells": {t: asdict(c) for t, c in r.cells.items()}}
                     for r in [*table.measured, *table.reported]],
            "notes": table.notes}


def write_table(table: Table, out_dir: Path, environment: dict[str, Any] | None = None) -> dict[str, str]:
    """Write <key>.md, <key>.tex, <key>.csv and <key>.meta.json (with `environment`, femlm.runs.environment_of's
    record of the runs behind it, when given); return their paths by format."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / f"{table.key}.md", "tex": out_dir / f"{table.key}.tex",
             "csv": out_dir / f"{table.key}.csv", "meta": out_dir / f"{table.key}.meta.json"}
    paths["md"].write_text(to_markdown(table))
    paths["tex"].write_text(to_latex(table))
    paths["csv"].write_text(to_csv(table))
    record = meta(table) if environment is None else {**meta(table), "environment": environment}
    paths["meta"].write_text(json.dumps(record, indent=2, default=str) + "\n")
    return {k: str(v) for k, v in paths.items()}
