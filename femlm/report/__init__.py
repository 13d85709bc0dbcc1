"""`femlm report`: collect run results into the paper's tables and figures.

`run_report(cfg, run)` is the entry point; `collect` finds the result files, `build` turns them into tables in
the paper's layout, `paper` holds the paper's reported numbers, `tables` and `figures` write the files.

Imported lazily: `femlm.config` imports `femlm.report.config` on every CLI start, and that must not pull in
matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReportConfig", "run_report"]


def __getattr__(name: str) -> Any:
    if name == "run_report":
        from femlm.report.report import run_report

        return run_report
    if name == "ReportConfig":
        from femlm.report.config import ReportConfig

        return ReportConfig
    raise AttributeError(f"module 'femlm.report' has no attribute {name!r}")
