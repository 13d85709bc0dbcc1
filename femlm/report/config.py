"""Typed schema of the `report` section (`femlm report`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError

# The tables `femlm report` can write (their LaTeX labels and printed numbers: femlm/paper.py), in the order
# the README lists them.
TABLES = ("glue", "continual", "glue_average")
# What report.inputs (femlm report's bare arguments) may name.
INPUTS = ("run directories, sweep directories or result files (results.json, efficiency.json, summary.json, "
          "analysis.json)")


@dataclass
class ReportConfig:
    inputs: list[str] = field(default_factory=lambda: ["runs"])  # run dirs, sweep dirs or result files
    out_dir: str = "results"
    tables: list[str] = field(default_factory=lambda: list(TABLES))
    figures: bool = True
    scale: str = "unspecified"  # a phrase for table captions, e.g. "tiny (4L/256H, 600 steps)"
    decimals: int = 2  # decimals of measured cells (the paper prints 2 in its continual and GLUE tables)

    def validate(self) -> None:
        if not self.inputs:
            raise UserError(f"report.inputs=[]: give {INPUTS}")
        unknown = [t for t in self.tables if t not in TABLES]
        if unknown:
            raise UserError(f"report.tables={list(self.tables)}: unknown {unknown}; allowed {', '.join(TABLES)}")
        if not 0 <= self.decimals <= 6:
            raise UserError(f"report.decimals={self.decimals}: must be in [0, 6]")
        if not self.out_dir:
            raise UserError("report.out_dir is empty: give a directory for the tables and figures")
