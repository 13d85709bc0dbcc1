"""`femlm report`: collect run results into the paper's tables and figures.

`report.run_report(cfg, run)` is the entry point; `collect` finds the result files, `build` turns them into
tables in the paper's layout, `paper` holds the paper's reported numbers, `tables` and `figures` write files.
"""
