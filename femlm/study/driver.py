"""`python -m femlm.study` (`make study`, `make study-base`): run a study's steps in order, resumably, then the
results. ``--experiment NAME`` picks the plan femlm/conf/experiment/NAME.yaml (default: study).

Resumption (the same rules as scripts/_reproduce_lib.sh):
  * a step whose output exists is skipped (pre-training: summary.json and checkpoints/final; fine-tuning:
    results.json; analysis: decomposition.json; download: download.json);
  * a pre-training directory with run.json but no final checkpoint was cut: it continues with resume=<dir>
    from its last saved state (femlm's exact resume);
  * any other step left without its output is moved aside to <dir>.incomplete-<time> and runs again.
The results step always runs (it only reads runs). So `make study` run twice does the work once.

Every femlm command runs as a subprocess with HF_HUB_OFFLINE=1 (nothing reaches the network), its output in
<runs>/logs/<step>.log; the driver logs one line per step to <runs>/study.log and stderr with the elapsed time
and an estimate of what remains (the plan's per-step estimates scaled by how this run's finished steps compared
with theirs). Wall time per step accumulates in <runs>/timings.json (across invocations), which the README
reports per part.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.study import encoder as enc
from femlm.study.plan import EXPERIMENT, Step, build_steps, check_plan, load_plan, planned_minutes


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()


class Driver:
    def __init__(self, plan: dict[str, Any], runs: Path, out: Path, python: str = sys.executable,
                 dry_run: bool = False, readme: Path | None = None) -> None:
        self.plan, self.runs, self.out, self.python, self.dry_run = plan, runs, out, python, dry_run
        self.readme = readme  # top-level README with study markers (None: not updated)
        self.log_path = runs / "study.log"
        self.timings_path = runs / "timings.json"
        self.start = time.time()
        self.spent_actual = 0.0  # this invocation: wall of the steps that ran
        self.spent_planned = 0.0  # ... and their planned seconds
        self.skipped: list[str] = []  # optional steps left out for the time budget

    # ---------------------------------------------------------------------------------------------- logging
    def log(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        print(line, file=sys.stderr, flush=True)
        if not self.dry_run:
            self.runs.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("a") as fh:
                fh.write(line + "\n")

    def timings(self) -> dict[str, Any]:
        if self.timings_path.is_file():
            return json.loads(self.timings_path.read_text())
        return {}

    def record(self, step: Step, wall: float, status: str) -> None:
        data = self.timings()
        entry = data.get(step.name, {"wall_s": 0.0, "runs": 0})
        entry.update(part=step.part, planned_s=round(step.estimate_s, 1), status=status,
                     wall_s=round(entry["wall_s"] + wall, 1), runs=entry["runs"] + 1,
                     finished=time.strftime("%Y-%m-%d %H:%M:%S"))
        data[step.name] = entry
        tmp = self.timings_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.timings_path)

    def remaining(self, steps: list[Step]) -> float:
        left = sum(s.estimate_s for s in steps if s.kind != "inprocess" and not s.done())
        scale = self.spent_actual / self.spent_planned if self.spent_planned > 60 else 1.0
        return left * min(max(scale, 0.5), 3.0)

    def over_budget(self, step: Step, steps: list[Step]) -> bool:
        """An optional step is skipped when the study's wall so far (all invocations) plus what it and the
        steps after it would take, at this run's pace, passes estimate.budget_minutes."""
        budget = float(self.plan.get("estimate", {}).get("budget_minutes", 0) or 0) * 60
        if not budget:
            return False
        spent = sum(float(t.get("wall_s", 0)) for t in self.timings().values())
        left = self.remaining(steps[steps.index(step):])
        if spent + left <= budget:
            return False
        self.log(f"skip the optional step '{step.name}': {fmt_s(spent)} spent + ~{fmt_s(left)} for it and the rest "
                 f"would pass the {fmt_s(budget)} budget (estimate.budget_minutes)")
        self.skipped.append(step.name)
        return True

    # ---------------------------------------------------------------------------------------------- steps
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled",
                   PYTHONUNBUFFERED="1")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def femlm(self, step: Step, args: list[str]) -> None:
        logs = self.runs / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = logs / f"{slug(step.name)}.log"
        cmd = [self.python, "-m", "femlm.cli", *args]
        with log_file.open("a") as fh:
            fh.write(f"\n$ femlm {' '.join(args)}\n")
            fh.flush()
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env(), check=False)
        if proc.returncode != 0:
            tail = log_file.read_text().splitlines()[-15:]
            raise UserError(f"step '{step.name}' failed (exit {proc.returncode}); its log {log_file} ends:\n  "
                            + "\n  ".join(tail) + "\nfix the cause and run the study again: finished steps are kept")

    def execute(self, step: Step) -> None:
        if step.kind == "pretrain" and step.started():
            self.log(f"resume {step.name} in {step.run_dir}")
            args = [*step.command, f"resume={step.run_dir}"]
        else:
            if step.run_dir.exists():
                aside = step.run_dir.with_name(f"{step.run_dir.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
                self.log(f"moving the incomplete run {step.run_dir} aside to {aside}")
                step.run_dir.rename(aside)
            step.run_dir.parent.mkdir(parents=True, exist_ok=True)
            args = [*step.command, f"hydra.run.dir={step.run_dir}"]
        self.femlm(step, args)
        if step.kind == "pretrain":
            self.drop_states(step.run_dir)

    @staticmethod
    def drop_states(run_dir: Path) -> None:
        """A finished pre-training run keeps its final model (and milestones), not its resumable states
        (optimizer moments: 3x the model per state), which nothing reads any more."""
        for path in (run_dir / "checkpoints").glob("state_*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    # ---------------------------------------------------------------------------------------------- main
    def encoder(self) -> Path:
        spec = self.plan["encoder"]
        if spec.get("build"):  # smoke: a tiny random encoder, no download
            return enc.build_tiny(self.runs / "encoder", spec["build"], spec.get("tokenizer", "bert-base-uncased"))
        return enc.locate(spec)

    def run(self) -> int:
        check_plan(self.plan)
        if not self.dry_run and not os.environ.get("FEMLM_MIRROR"):
            raise UserError("set FEMLM_MIRROR to the local data mirror (the layout of shared/data): the study runs "
                            "offline")
        encoder_dir = self.encoder() if not self.dry_run else (self.runs / "encoder")
        steps = build_steps(self.plan, self.runs, encoder_dir)
        label = "smoke" if self.plan.get("smoke") else "study"
        self.log(f"{label}: {len(steps)} steps, runs in {self.runs}, results in {self.out}; planned "
                 f"{planned_minutes(steps):.0f} min on a quiet machine ({self.plan.get('estimate', {}).get('hardware', '')})")
        if self.dry_run:
            for i, step in enumerate(steps, 1):
                state = "done" if step.done() else ("cut: resume" if step.kind == "pretrain" and step.started() else "to run")
                print(f"{i:3d}. [{state:>11}] {fmt_s(step.estimate_s):>8}  {step.name}" +
                      (f"\n       femlm {' '.join(step.command)}" if step.command else ""))
            print(f"planned total: {planned_minutes(steps):.1f} min")
            return 0
        self.runs.mkdir(parents=True, exist_ok=True)
        for i, step in enumerate(steps, 1):
            head = f"{i}/{len(steps)} {step.name}"
            if step.part == "encoder":
                info = enc.describe(encoder_dir)
                if (self.plan.get("finetune") or {}).get("baseline"):
                    enc.without_pooler(encoder_dir, self.runs / "encoder_nopooler")
                (self.runs / "encoder_check").mkdir(parents=True, exist_ok=True)
                (self.runs / "encoder_check" / "encoder.json").write_text(json.dumps(
                    {**info, "spec": self.plan["encoder"]}, indent=2) + "\n")
                self.log(f"{head}: {encoder_dir} ({info['parameters'] / 1e6:.1f}M parameters, sha256 "
                         f"{info['sha256'][:12]}...)")
                continue
            if step.part == "results":
                t0 = time.time()
                from femlm.study.results import write_results

                readme = write_results(self.plan, steps, self.runs, self.out, self.timings(), self.readme)
                self.log(f"{head}: {readme} ({time.time() - t0:.0f} s)")
                continue
            if step.done():
                self.log(f"{head}: done already, skipped")
                continue
            if step.optional and self.over_budget(step, steps):
                continue
            missing = [str(p) for p in step.needs if not p.exists()]
            if missing:
                raise UserError(f"step '{step.name}' needs {', '.join(missing)}, which an earlier step should have "
                                "written; run the study again from the start (finished steps are kept)")
            self.log(f"{head}: start (planned {fmt_s(step.estimate_s)}; {fmt_s(time.time() - self.start)} elapsed, "
                     f"~{fmt_s(self.remaining(steps))} to go)")
            t0 = time.time()
            try:
                self.execute(step)
            except BaseException:
                self.record(step, time.time() - t0, "failed")
                raise
            wall = time.time() - t0
            self.record(step, wall, "done")
            self.spent_actual += wall
            self.spent_planned += step.estimate_s
            self.log(f"{head}: done in {fmt_s(wall)} (planned {fmt_s(step.estimate_s)}); "
                     f"~{fmt_s(self.remaining(steps))} to go")
        self.log(f"{label} finished in {fmt_s(time.time() - self.start)} (this invocation); results in {self.out}")
        return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m femlm.study", description="The FE-MLM evidence studies (make study, "
                                 "make study-base): warm-up, gradient-variance decomposition, pre-training arms, "
                                 "fine-tuning, statistics and results/<study>/, resumable.")
    ap.add_argument("--experiment", default=EXPERIMENT, metavar="NAME",
                    help="the plan femlm/conf/experiment/NAME.yaml: study (all-MiniLM-L6-v2, issue 17) or study_base "
                         "(all-mpnet-base-v2, the paper's shape, issue 23)")
    ap.add_argument("--smoke", action="store_true", help="the plan's smoke block: toy scale on a tiny random encoder "
                    "(also FEMLM_STUDY_SMOKE=1)")
    ap.add_argument("--runs", type=Path, default=None, help="run directories (default: the plan's runs_dir)")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: the plan's out_dir)")
    ap.add_argument("--plan", action="store_true", help="print the steps, their state and estimates; run nothing")
    ap.add_argument("--results-only", action="store_true", help="only rewrite the results from the runs there are")
    ap.add_argument("--from-json", action="store_true",
                    help="rewrite the README's verdicts from the committed study.json, without the run directories "
                         "(femlm.study.regenerate)")
    ap.add_argument("--readme", type=Path, default=None,
                    help="a README with <!-- NAME:begin --> / <!-- NAME:end --> markers to refresh (default: the "
                         "repository's README.md for a full study, none for a smoke run)")
    args = ap.parse_args(argv)
    smoke = args.smoke or os.environ.get("FEMLM_STUDY_SMOKE", "") not in ("", "0")
    try:
        plan = load_plan(smoke, args.experiment)
        runs = args.runs or Path(plan["runs_dir"])
        out = args.out or Path(plan["out_dir"])
        readme = args.readme
        if readme is None and not smoke:
            candidate = Path(__file__).resolve().parents[2] / "README.md"
            readme = candidate if candidate.is_file() else None
        if args.from_json:
            from femlm.study.regenerate import regenerate

            print(regenerate(plan, out.resolve(), readme))
            return 0
        driver = Driver(plan, runs.resolve(), out.resolve(), dry_run=args.plan, readme=readme)
        if args.results_only:
            from femlm.study.results import write_results

            steps = build_steps(plan, driver.runs, driver.encoder())
            print(write_results(plan, steps, driver.runs, driver.out, driver.timings(), readme))
            return 0
        return driver.run()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("study interrupted: run it again to continue (finished steps are kept, a cut pre-training resumes)",
              file=sys.stderr)
        return 130
