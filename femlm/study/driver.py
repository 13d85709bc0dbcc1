"""The study pipeline for the experiment runner (femlm.experiment), and `python -m femlm.study`, its old name.

`pipeline` turns a study file (study.yaml, study_base.yaml: the ones with an ``encoder:`` block) into the steps of
femlm.study.plan and gives the two in-process ones their actions: the encoder (locate or fetch, smoke: build;
sha256 checked; written to <runs>/encoder_check/encoder.json) and the results (results/<study>/); for a full study
a last step, "summaries", refreshes what lives outside the study's folder from its files: the study's block of
docs/evidence.md and README.md's evidence block (femlm.study.headlines.refresh). No result writer edits a file
outside its output folder. The runner applies the resumption rules (femlm.experiment.step) and
keeps the logs, <runs>/experiment.log, <runs>/logs/<step>.log and <runs>/timings.json, which the README reports
per part. A study's commands name absolute paths (its runs record them, and resume compares them).

    python -m femlm.study [--experiment study|study_base] [--smoke] [--plan] ...
        = python -m femlm.experiment study|study_base [--smoke] [--plan] ...
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from femlm.experiment.cli import parser, run
from femlm.experiment.runner import REPO
from femlm.experiment.schema import Experiment
from femlm.experiment.step import Step
from femlm.experiment.tables import Options
from femlm.study import encoder as enc
from femlm.study.plan import EXPERIMENT, build_steps, check_plan, study_plan

# The page whose <!-- study:begin --> ... markers a full study rewrites (the top-level README links to it).
EVIDENCE = REPO / "docs" / "evidence.md"


def locate_encoder(plan: dict[str, Any], runs: Path) -> Path:
    spec = plan["encoder"]
    if spec.get("build"):  # smoke: a tiny random encoder, no download
        return enc.build_tiny(runs / "encoder", spec["build"], spec.get("tokenizer", "bert-base-uncased"))
    return enc.locate(spec)


def check_encoder(plan: dict[str, Any], runs: Path, encoder_dir: Path) -> str:
    info = enc.describe(encoder_dir)
    if (plan.get("finetune") or {}).get("baseline"):
        enc.without_pooler(encoder_dir, runs / "encoder_nopooler")
    (runs / "encoder_check").mkdir(parents=True, exist_ok=True)
    (runs / "encoder_check" / "encoder.json").write_text(json.dumps({**info, "spec": plan["encoder"]}, indent=2) + "\n")
    return f"{encoder_dir} ({info['parameters'] / 1e6:.1f}M parameters, sha256 {info['sha256'][:12]}...)"


def pipeline(exps: list[Experiment], opts: Options) -> list[Step]:
    (exp,) = exps
    plan = study_plan(exp, opts.smoke)
    runs = (opts.runs or opts.root / plan["runs_dir"]).resolve()
    out = (opts.out or opts.root / plan["out_dir"]).resolve()
    readme = opts.readme
    if readme is None and not opts.smoke and EVIDENCE.is_file():
        readme = EVIDENCE
    check_plan(plan)
    encoder_dir = runs / "encoder" if opts.dry_run else locate_encoder(plan, runs)
    steps = build_steps(plan, runs, encoder_dir)

    def results(runner: Any) -> str:
        from femlm.study.results import write_results

        return str(write_results(plan, steps, runs, out, runner.timings(runs)))

    for step in steps:
        if step.part == "encoder":
            step.action = lambda runner: check_encoder(plan, runs, encoder_dir)
        elif step.part == "results":
            step.action = results
    return steps + summaries_step(plan, out, readme, runs, opts)


def summaries_step(plan: dict[str, Any], out: Path, readme: Path | None, home: Path, opts: Options) -> list[Step]:
    """The runner's last step for a full study whose results land in this repository's results/: the study's
    block of ``readme`` (docs/evidence.md) and README.md's evidence block, from the study's folder
    (femlm.study.headlines.refresh). None for a smoke run; for a folder elsewhere (--out), only the README named by
    --readme."""
    top = REPO / "README.md" if out.parent == (REPO / "results").resolve() else None
    if plan.get("smoke") or (top is None and opts.readme is None):
        return []
    readme = readme if top is not None else opts.readme

    def summaries(runner: Any) -> str:
        from femlm.study.headlines import refresh

        done = refresh(plan, out, readme, top)
        return "refreshed " + (", ".join(str(p) for p in done) or "nothing (no markers)")

    return [Step("summaries", "summaries", home, kind="inprocess", action=summaries, home=home)]


def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m femlm.study")
    ap.add_argument("--experiment", default=None, metavar="NAME", help="the study: study (all-MiniLM-L6-v2, issue "
                    "17) or study_base (all-mpnet-base-v2, the paper's shape, issue 23); default study")
    ap.add_argument("--from-json", action="store_true",
                    help="rewrite the README's verdicts from the committed study.json, without the run directories "
                         "(femlm.study.regenerate)")
    args = ap.parse_args(argv)
    args.names = [*([args.experiment] if args.experiment else []), *args.names] or [EXPERIMENT]
    args.smoke = args.smoke or os.environ.get("FEMLM_STUDY_SMOKE", "") not in ("", "0")
    return from_json(args) if args.from_json else run(args)


def from_json(args: Any) -> int:
    """--from-json: today's verdict writer over a finished study's committed files (femlm.study.regenerate)."""
    from femlm.errors import UserError
    from femlm.experiment.schema import load
    from femlm.study.headlines import refresh
    from femlm.study.regenerate import regenerate

    try:
        if len(args.names) != 1:
            raise UserError("--from-json rewrites one study; name one")
        plan = study_plan(load(args.names[0], smoke=args.smoke), args.smoke)
        out = (args.out or REPO / plan["out_dir"]).resolve()
        print(regenerate(plan, out))
        if args.out is None or args.readme is not None:  # then, as the runner's last step: the summaries outside it
            readme = args.readme or (EVIDENCE if EVIDENCE.is_file() else None)
            for path in refresh(plan, out, readme, REPO / "README.md" if args.readme is None else None):
                print(path)
        return 0
    except UserError as err:
        print(f"femlm: error: {err}", file=sys.stderr)
        return 2
