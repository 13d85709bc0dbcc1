"""report: the paper's tables (Markdown, LaTeX, CSV) and figures (PNG) from the JSON results runs leave.

`run_report(cfg, run)` is the entry point of `femlm report`; `collect` finds the result files, `build` turns
them into tables in the paper's layout, `paper` holds the paper's reported numbers, `tables` and `figures`
write the files.
"""

from femlm.report.config import ReportConfig
from femlm.report.report import run_report

__all__ = ["ReportConfig", "run_report"]
