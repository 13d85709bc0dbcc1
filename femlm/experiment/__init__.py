"""The experiment runner: one front door for every experiment file in femlm/conf/experiment/.

``python -m femlm.experiment NAME [NAME...] [--plan]`` (the Makefile's reproduce-* and study targets call it):
`schema` reads a file into the one validated `experiment:` schema; a pipeline turns it into steps (`tables` for
the paper's tables, figures and the tiny pipeline; femlm.study.plan for the evidence studies); `step` holds the
rules that say what is done (skip), cut (resume) or incomplete (moved aside and run again); `runner` runs the
steps, one femlm command each, with a log per step; `costs` plans each step's seconds from a file's unit costs
per CPU class and writes the results folder's timings.json.
"""
