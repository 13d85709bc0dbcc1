"""`python -m femlm.experiment NAME [NAME...]`: run experiment files end to end, resumably.

    python -m femlm.experiment tiny                        # make reproduce-tiny
    python -m femlm.experiment continual_cs continual_news # make reproduce-continual: both halves, one report
    python -m femlm.experiment study_base --plan           # list the steps, their state and commands; run nothing
    python -m femlm.experiment --list

Several names run one after the other and share one `femlm report` (its tables: the union of theirs; its scale
phrase: theirs joined). Relative paths of the files (runs_dir, out_dir) are taken from the current directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from femlm.errors import UserError
from femlm.experiment.runner import Runner
from femlm.experiment.schema import load, names
from femlm.experiment.tables import Options


def parser(prog: str = "python -m femlm.experiment") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Run experiment files (femlm/conf/experiment/NAME.yaml) "
                                 "end to end: every step once, a cut pre-training resumed, one log per step.")
    ap.add_argument("names", nargs="*", metavar="NAME", help="experiment files to run (several: one shared report)")
    ap.add_argument("--plan", "--dry-run", dest="plan", action="store_true",
                    help="print the steps, their state and exact femlm commands; run nothing")
    ap.add_argument("--smoke", action="store_true", help="merge the file's smoke block (toy scale)")
    ap.add_argument("--extras", action="store_true", help="merge the file's extras block (optional steps)")
    ap.add_argument("--runs", type=Path, default=None, help="run directories (one experiment; default its runs_dir)")
    ap.add_argument("--out", type=Path, default=None, help="report / results folder (default the first's out_dir)")
    ap.add_argument("--results-only", action="store_true", help="only rewrite the report / results from the runs")
    ap.add_argument("--readme", type=Path, default=None,
                    help="study: a README with <!-- NAME:begin --> / <!-- NAME:end --> markers to refresh (default: "
                         "the repository's docs/evidence.md for a full study, none for a smoke run)")
    ap.add_argument("--budget-minutes", type=float, default=None, metavar="MIN",
                    help="the time budget instead of the file's estimate.budget_minutes (a shorter GPU window: "
                         "study_gpu fits its seeds to it, other experiments skip optional steps past it)")
    ap.add_argument("--list", action="store_true", help="list the experiment files")
    return ap


def run(args: argparse.Namespace) -> int:
    try:
        if args.list:
            print("\n".join(names()))
            return 0
        if not args.names:
            raise UserError(f"name an experiment: {', '.join(names())}")
        if args.runs is not None and len(args.names) > 1:
            raise UserError("--runs names the run directories of one experiment; give one name with it")
        exps = [load(n, smoke=args.smoke, extras=args.extras, budget_minutes=args.budget_minutes)
                for n in args.names]
        opts = Options(runs=args.runs, out=args.out, smoke=args.smoke, extras=args.extras, dry_run=args.plan,
                       readme=args.readme, stamp=time.strftime("%Y%m%d-%H%M%S"), named=list(args.names))
        return Runner(exps, opts).run(results_only=args.results_only)
    except UserError as err:
        print(f"femlm: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: run it again to continue (finished steps are kept, a cut pre-training resumes)",
              file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))
