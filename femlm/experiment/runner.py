"""Run an experiment's steps in order, resumably (the rules of femlm.experiment.step), one log per step.

Every femlm command runs as a subprocess (``python -m femlm.cli``, this checkout first on PYTHONPATH), its output
in ``<runs>/logs/<step>.log``; the runner logs one line per step to ``<runs>/experiment.log`` and stderr with the
elapsed time and an estimate of what remains (the plan's per-step estimates, where it has them, scaled by how this
run's finished steps compared with theirs). Wall time per step accumulates in ``<runs>/timings.json`` (across
invocations). A finished step is skipped, so running an experiment twice does the work once; `--plan` lists
every step with its state and the exact command, and runs nothing. A file with unit costs per CPU class
(``estimate.classes``, tiny.yaml) has its steps planned for this machine's class (femlm.experiment.costs): `--plan`
then prints minutes per stage, or "unmeasured class".
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.experiment import costs
from femlm.experiment.schema import Experiment
from femlm.experiment.step import Step
from femlm.experiment.tables import Options

# Which code turns experiment files into steps (module:function(experiments, options) -> steps), by the blocks a
# file sets: an `encoder:` block makes a study (femlm.study sits above this package: named here, imported late).
PIPELINES = {"tables": "femlm.experiment.tables:build_steps", "study": "femlm.study.driver:pipeline",
             "gpu": "femlm.study.gpu:pipeline"}  # a `gpu:` block: all arms and seeds in this one process
REPO = Path(__file__).resolve().parents[2]


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()


def pipeline(exps: list[Experiment]) -> str:
    kinds = {"gpu" if e.gpu is not None else "study" if e.study else "tables" for e in exps}
    if len(kinds) > 1 or (kinds & {"study", "gpu"} and len(exps) > 1):
        raise UserError(f"experiments {', '.join(e.name for e in exps)}: a study runs alone")
    return PIPELINES[kinds.pop()]


class Runner:
    def __init__(self, exps: list[Experiment], opts: Options, python: str = sys.executable) -> None:
        self.exps, self.opts, self.python = exps, opts, python
        self.start = time.time()
        self.spent_actual = 0.0  # this invocation: wall of the steps that ran
        self.spent_planned = 0.0  # ... and their planned seconds
        self.skipped: list[str] = []  # optional steps left out for the time budget
        self.home: Path | None = None  # the first step's runs directory: experiment.log
        self.planned: list[Step] = []  # every step of the plan (what the timings file lists)
        self.sizing: costs.Sizing | None = None  # the CPU class and its unit costs (a file with estimate.classes)

    # ---------------------------------------------------------------------------------------------- steps
    def steps(self) -> list[Step]:
        module, name = pipeline(self.exps).split(":")
        steps: list[Step] = getattr(importlib.import_module(module), name)(self.exps, self.opts)
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise UserError(f"experiment {self.exps[0].name}: two steps share a name; check its lists for duplicates")
        self.home = steps[0].home or steps[0].run_dir
        self.sizing = costs.size(self.exps, steps)  # a file with estimate.classes: each step's planned seconds
        self.planned = steps
        return steps

    # ---------------------------------------------------------------------------------------------- logging
    def log(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        print(line, file=sys.stderr, flush=True)
        if not self.opts.dry_run and self.home is not None:
            self.home.mkdir(parents=True, exist_ok=True)
            with (self.home / "experiment.log").open("a") as fh:
                fh.write(line + "\n")

    @staticmethod
    def timings_path(step: Step) -> Path:
        return (step.home or step.run_dir) / "timings.json"

    def timings(self, home: Path | None = None) -> dict[str, Any]:
        path = (home or self.home or Path(".")) / "timings.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def record(self, step: Step, wall: float, status: str) -> None:
        path = self.timings_path(step)
        data = self.timings(path.parent)
        entry = data.get(step.name, {"wall_s": 0.0, "runs": 0})
        entry.update(part=step.part, planned_s=round(step.estimate_s, 1), status=status,
                     wall_s=round(entry["wall_s"] + wall, 1), runs=entry["runs"] + 1,
                     finished=time.strftime("%Y-%m-%d %H:%M:%S"))
        data[step.name] = entry
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)

    def remaining(self, steps: list[Step]) -> float:
        left = sum(s.estimate_s for s in steps if s.kind in ("once", "pretrain") and not s.done())
        scale = self.spent_actual / self.spent_planned if self.spent_planned > 60 else 1.0
        return left * min(max(scale, 0.5), 3.0)

    def over_budget(self, step: Step, steps: list[Step]) -> bool:
        """An optional step is skipped when the wall so far (all invocations) plus what it and the steps after it
        would take, at this run's pace, passes estimate.budget_minutes."""
        budget = float(self.exps[0].estimate.budget_minutes or 0) * 60
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

    # ---------------------------------------------------------------------------------------------- running
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if any(e.offline for e in self.exps):  # nothing may reach the network
            env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
            env.setdefault("WANDB_MODE", "offline")
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def femlm(self, step: Step, args: list[str]) -> None:
        logs = (step.home or step.run_dir.parent) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = logs / f"{slug(step.name)}.log"
        with log_file.open("a") as fh:
            fh.write(f"\n$ femlm {shlex.join(args)}\n")
            fh.flush()
            proc = subprocess.run([self.python, "-m", "femlm.cli", *args], stdout=fh, stderr=subprocess.STDOUT,
                                  env=self.env(), check=False)
        if proc.returncode != 0:
            tail = log_file.read_text().splitlines()[-15:]
            raise UserError(f"step '{step.name}' failed (exit {proc.returncode}); its log {log_file} ends:\n  "
                            + "\n  ".join(tail) + "\nfix the cause and run it again: finished steps are kept")

    def execute(self, step: Step) -> None:
        if step.kind == "pretrain" and step.started():
            self.log(f"resume {step.name} in {step.run_dir}")
        elif step.run_dir.exists():
            aside = step.run_dir.with_name(f"{step.run_dir.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
            self.log(f"moving the incomplete run {step.run_dir} aside to {aside}")
            step.run_dir.rename(aside)
        args = step.args()
        step.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.femlm(step, args)
        if step.kind == "pretrain" and step.drop_states:
            drop_states(step.run_dir)

    def check_machine(self) -> None:
        for exp in self.exps:
            mirror = os.environ.get("FEMLM_MIRROR", "")
            if exp.offline and not (mirror and Path(mirror).is_dir()):
                raise UserError(f"set FEMLM_MIRROR to a local data mirror (the layout of shared/data): experiment "
                                f"{exp.name} runs offline")
            if exp.needs_gpu and shutil.which("nvidia-smi") is None and os.environ.get("FEMLM_ALLOW_CPU") != "1":
                raise UserError(f"experiment {exp.name}: no GPU found (nvidia-smi): the paper scale needs one; "
                                "FEMLM_ALLOW_CPU=1 starts anyway")

    def header(self, steps: list[Step]) -> None:
        planned = sum(s.estimate_s for s in steps) / 60
        for exp in self.exps:
            e = exp.estimate
            if e.gpu_hours is not None:
                cost = f"~{e.gpu_hours:g} GPU hours on {e.gpu}; peak GPU memory ~{e.gpu_memory_gb:g} GB"
            elif self.sizing is not None:
                cost = self.sizing.line(f"femlm/conf/experiment/{exp.name}.yaml")
                if self.sizing.measured:
                    cost = f"planned {planned:.0f} min (quiet); {cost}"
            else:
                minutes = planned if planned and len(self.exps) == 1 else (e.minutes or 0)
                cost = f"planned {minutes:.0f} min on {e.hardware or 'this machine'} (quiet)"
            self.log(f"experiment {exp.name}: {cost}")
            for line in (e.breakdown, e.memory):
                if line:
                    self.log(f"  {line}")
        hours = [e.estimate.gpu_hours for e in self.exps if e.estimate.gpu_hours is not None]
        if len(hours) > 1:
            self.log(f"total: ~{sum(hours):g} GPU hours before what earlier runs already finished (skipped)")
        self.log(f"{len(steps)} steps; runs in {', '.join(dict.fromkeys(str(s.home) for s in steps if s.home))}")

    def plan(self, steps: list[Step]) -> int:
        for i, step in enumerate(steps, 1):
            est = f"{fmt_s(step.estimate_s):>8}  " if step.estimate_s else ""
            print(f"{i:3d}. [{step.state():>11}] {est}{step.name}"
                  + (f"\n       femlm {shlex.join(step.args())}" if step.command else ""))
        if any(s.estimate_s for s in steps):
            stages = costs.by_part(steps, {s.name: s.estimate_s for s in steps})
            print("planned minutes per stage" + (f" ({self.sizing.cls}, quiet)" if self.sizing else "") + ": "
                  + ", ".join(f"{part} {sec / 60:.1f}" for part, sec in stages.items() if sec))
            print(f"planned total: {sum(s.estimate_s for s in steps) / 60:.1f} min")
        elif self.sizing is not None:
            print(self.sizing.line(f"femlm/conf/experiment/{self.exps[0].name}.yaml"))
        return 0

    def run(self, results_only: bool = False) -> int:
        if not self.opts.dry_run and not results_only:
            self.check_machine()
        steps = self.steps()
        if results_only:
            steps = [s for s in steps if s.part in ("results", "report")]
        self.header(steps)
        if self.opts.dry_run:
            return self.plan(steps)
        for i, step in enumerate(steps, 1):
            head = f"{i}/{len(steps)} {step.name}"
            if step.kind == "inprocess":
                t0 = time.time()
                message = step.action(self) if step.action else ""
                self.log(f"{head}: {message} ({time.time() - t0:.0f} s)")
                continue
            if step.kind != "always" and step.done():
                self.log(f"{head}: done already, skipped")
                continue
            if step.optional and self.over_budget(step, steps):
                continue
            missing = [str(p) for p in step.needs if not p.exists()]
            if missing:
                raise UserError(f"step '{step.name}' needs {', '.join(missing)}, which an earlier step should have "
                                "written; run the experiment again from the start (finished steps are kept)")
            sized = any(s.estimate_s for s in steps)  # a plan without unit costs (the paper's; a CPU class tiny has none for) says no times
            self.log(f"{head}: start ({f'planned {fmt_s(step.estimate_s)}; ' if sized else ''}"
                     f"{fmt_s(time.time() - self.start)} elapsed"
                     + (f", ~{fmt_s(self.remaining(steps))} to go)" if sized else ")"))
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
            self.log(f"{head}: done in {fmt_s(wall)}"
                     + (f" (planned {fmt_s(step.estimate_s)}); ~{fmt_s(self.remaining(steps))} to go" if sized else ""))
        self.log(f"finished in {fmt_s(time.time() - self.start)} (this invocation)")
        return 0


def drop_states(run_dir: Path) -> None:
    """A finished pre-training run keeps its final model (and milestones), not its resumable states (optimizer
    moments: 3x the model per state), which nothing reads any more."""
    for path in (run_dir / "checkpoints").glob("state_*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


__all__ = ["Runner", "Options", "fmt_s", "slug"]
