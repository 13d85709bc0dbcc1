"""Typed schema of the `report` section."""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError


@dataclass
class ReportConfig:
    inputs: list[str] = field(default_factory=lambda: ["runs"])  # run dirs, sweep dirs or result files
    out_dir: str = "results"
    tables: list[str] = field(default_factory=lambda: ["table1", "table2", "table3"])
    figures: bool = True
    scale: str = "unspecified"  # a phrase for table captions, e.g. "tiny (4L/256H, 600 steps)"

    def validate(self) -> None:
        if not self.inputs:
            raise UserError("report.inputs=[]: give run directories, sweep directories or result files")
