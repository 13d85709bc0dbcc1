"""What each step of the tables pipeline costs on this machine's CPU class, from committed unit costs.

An experiment file may carry unit costs per CPU class (``estimate.classes``; tiny.yaml does). A class is the CPU's
widest matrix instructions (`femlm.runs.cpu_isa`: avx2, avx512f, avx512_bf16, amx_bf16) and the precision the
plan's commands compute in (their ``runtime.precision``; ``auto`` resolved as a run resolves it,
femlm.runtime.precision), e.g. ``avx2 fp32``. A step's planned seconds are its work, read from the config its
command composes (steps, evaluations, saves, fine-tuning examples x epochs, examples scored, gradient rows), times
the class's unit costs. A class without committed costs is an *unmeasured class*: nothing is planned, and the
runner says so; a run's timings file (``<out_dir>/timings.json``, `timings_file`) is what to measure them from.

Unit costs, seconds (every femlm command is one subprocess):
  start             one femlm process: interpreter, imports, config (outside a run's own wall_s)
  download          the mirror check (femlm download, offline), its start included
  prepare_<domain>  a corpus prepared on first use, with an empty cache (tokenizer trained, tokens written)
  pretrain_setup    a pre-training run's own set-up: model built, corpus opened, held-out set built
  train_row         one 128-token block of a pre-training step (an MLM row and a K-copy row cost alike)
  eval_block        one held-out block scored
  save              one checkpoint written (a milestone or the final model)
  ft_setup          a fine-tuning run's set-up: the task read and tokenized, the model loaded, and the first epoch's
                    extra time (each new batch shape's kernels are built once per process)
  ft_seed           one fine-tuning seed's fixed cost: a fresh model loaded
  ft_train_example  one training example, one epoch
  ft_score_example  one example scored (dev after every epoch and once more at the end; test once)
                    (each ft_* unit may be given per task, ft_setup_aclarc: sentence lengths differ)
  analysis_setup    an analysis's set-up
  gradient_row      one per-row gradient of `femlm analyze` (a forward and a backward pass)
  report            femlm report over the runs, its start included
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.experiment.schema import Experiment
from femlm.experiment.step import Step

# Parts of the tables pipeline whose steps are femlm commands with a config to read (the rest: a unit each).
COMMANDED = frozenset({"scratch", "continual", "ablation", "finetune", "analysis"})
FT_UNITS = ("ft_setup", "ft_seed", "ft_train_example", "ft_score_example")
UNITS = ("start", "download", "pretrain_setup", "train_row", "eval_block", "save", *FT_UNITS, "analysis_setup",
         "gradient_row", "report")


def known_unit(key: str) -> bool:
    return key in (*UNITS, "source") or key.startswith("prepare_") or \
        any(key.startswith(f"{u}_") for u in FT_UNITS)


@dataclass
class Sizing:
    """The CPU class a plan was sized for, and whether committed unit costs for it exist."""

    cls: str  # e.g. "avx2 fp32"
    cpu: str  # femlm.runs.cpu_model(), e.g. "AMD EPYC [avx2]"
    measured: bool
    known: list[str] = field(default_factory=list)  # the classes with committed unit costs
    source: str = ""  # where this class's costs were measured (the file's `source` entry)
    unsized: list[str] = field(default_factory=list)  # steps no unit cost covers (e.g. --extras' efficiency sweep)

    def line(self, where: str) -> str:
        if self.measured:
            return (f"CPU class {self.cls} ({self.cpu}): planned from {where} estimate.classes[{self.cls!r}]"
                    + (f" ({self.source})" if self.source else "")
                    + (f"; not sized: {', '.join(self.unsized)}" if self.unsized else ""))
        return (f"unmeasured class: {self.cls} ({self.cpu}); {where} has unit costs for "
                f"{', '.join(self.known) or 'no class'}: no minutes planned (a finished run's timings.json "
                "gives this class's)")


def cpu_class(precision: str) -> str:
    from femlm.runs import cpu_isa

    return f"{cpu_isa() or 'unknown'} {precision}"


def resolved_precision(value: str) -> str:
    """``runtime.precision`` as a CPU run computes in: ``auto`` is measured (once per machine, cached)."""
    if value != "auto":
        return value
    from femlm.runtime.precision import cpu_choice

    return str(cpu_choice()["dtype"])


# Overrides that change no cost (which checkpoint, which arm: an MLM row and a K-copy row cost alike): left out of
# the composition, so steps that differ only in them share one composed config.
NO_COST = ("masking=", "model.name_or_path=", "hydra.run.dir=", "resume=")


def configs(steps: list[Step]) -> dict[str, Any]:
    """Each commanded step's composed config, by step name (one composition per distinct sizing)."""
    from femlm.compose import compose_jobs

    jobs: dict[str, dict[tuple[str, ...], list[Step]]] = {}
    for s in steps:
        if s.part in COMMANDED and s.command:
            command, args = s.command[0], s.command[1:]
            if command == "analyze":  # `analyze KIND`: the bare kind is analysis.kind
                args = [f"analysis.kind={args[0]}", *args[1:]]
            key = tuple(a for a in args if not a.startswith(NO_COST))
            jobs.setdefault(command, {}).setdefault(key, []).append(s)
    out: dict[str, Any] = {}
    for command, groups in jobs.items():
        for (_, group), cfg in zip(groups.items(), compose_jobs(command, [list(k) for k in groups]), strict=True):
            out.update({s.name: cfg for s in group})
    return out


def evaluations(steps: int, every: int) -> int:
    """Held-out evaluations of a pre-training run: step 0, every `every` steps, and the last step."""
    return 1 + -(-steps // every)


def train_examples(cfg: Any) -> int:
    """A fine-tuning run's training examples per epoch: the task's train split, capped by finetune.max_train_examples."""
    from femlm.data.registry import get_entry

    full = int(get_entry(str(cfg.task.dataset)).sizes.get("train", 0))
    cap = cfg.finetune.max_train_examples
    return min(full, int(cap)) if cap is not None else full


class Costs:
    """Planned seconds of one step from a class's unit costs and the step's composed config."""

    def __init__(self, units: dict[str, Any]) -> None:
        self.u = units
        self.prepared: set[str] = set()  # corpora a step before this one prepares

    def get(self, key: str, task: str = "") -> float:
        """A unit cost; `task`: its per-task value where the class has one (ft_setup_aclarc), else the common one."""
        return float(self.u.get(f"{key}_{task}", self.u.get(key, 0.0)) if task else self.u.get(key, 0.0))

    def of(self, step: Step, cfg: Any) -> float:
        if step.part == "download":
            return self.get("download")
        if step.part == "report":
            return self.get("report") if step.kind == "always" else 0.0
        if cfg is None:
            return 0.0
        if step.part in ("scratch", "continual", "ablation"):
            return self.pretrain(cfg)
        if step.part == "finetune":
            return self.finetune(cfg)
        if step.part == "analysis":
            return self.analysis(cfg)
        return 0.0

    def pretrain(self, cfg: Any) -> float:
        steps, rt = int(cfg.trainer.max_steps), cfg.runtime
        evals = evaluations(steps, int(rt.eval_every))
        saves = 1 + -(-steps // int(rt.save_every))  # milestones, the last step's state, the final model
        rows = steps * int(cfg.trainer.batch_size) * int(cfg.data.block_size) / 128
        domain = str(cfg.domain.name)
        first = domain not in self.prepared
        self.prepared.add(domain)
        return (self.get("start") + self.get("pretrain_setup") + (self.get(f"prepare_{domain}") if first else 0.0)
                + rows * self.get("train_row") + evals * int(cfg.data.eval_blocks) * self.get("eval_block")
                + saves * self.get("save"))

    def finetune(self, cfg: Any) -> float:
        from femlm.data.registry import get_entry

        ft, task = cfg.finetune, cfg.task
        sizes = get_entry(str(task.dataset)).sizes
        epochs = float(ft.epochs if ft.epochs is not None else task.epochs)
        train = train_examples(cfg)
        dev, test = int(sizes.get("dev", 0)), int(sizes.get("test", 0))
        scored = (epochs + 1) * dev + test  # dev after every epoch and for the kept model; test once
        name = str(task.name)
        per_seed = (self.get("ft_seed", name) + epochs * train * self.get("ft_train_example", name)
                    + scored * self.get("ft_score_example", name))
        return self.get("start") + self.get("ft_setup", name) + len(ft.seeds) * per_seed

    def analysis(self, cfg: Any) -> float:
        """femlm.analysis.run's planned gradient rows: covariance S (J + 2 budget), variance S (J + 2 budget
        max(K)), the J reference masks shared when both studies use one tau (the variance tau: analysis.variance_tau,
        else min(tau, n // max(K)), n the maskable tokens: block_size less [CLS] and [SEP])."""
        a = cfg.analysis
        s, j, budget, kmax, kind = int(a.sequences), int(a.reference), int(a.budget), max(a.num_masks), str(a.kind)
        cov, var = kind in ("covariance", "both"), kind in ("variance", "both")
        var_tau = a.variance_tau or min(int(a.tau), (int(cfg.data.block_size) - 2) // kmax)
        shared = cov and var and var_tau == int(a.tau)
        rows = (s * (j + 2 * budget) if cov else 0) + (s * ((0 if shared else j) + 2 * budget * kmax) if var else 0)
        return self.get("start") + self.get("analysis_setup") + rows * self.get("gradient_row")


def check_classes(classes: dict[str, Any], where: str) -> None:
    """Every class's unit costs (not only this machine's): known names, numbers of seconds."""
    for name, given in classes.items():
        if not isinstance(given, dict):
            raise UserError(f"{where}: estimate.classes[{name!r}] must map unit names to seconds")
        bad = sorted(k for k, v in given.items() if not known_unit(k) or
                     (k != "source" and (isinstance(v, bool) or not isinstance(v, int | float))))
        if bad:
            raise UserError(f"{where}: estimate.classes[{name!r}]: {', '.join(bad)}: not a unit cost in seconds; "
                            f"allowed {', '.join(UNITS)}, prepare_<domain>, ft_*_<task>, source (text)")


def size(exps: list[Experiment], steps: list[Step]) -> Sizing | None:
    """Set each step's `estimate_s` from the first experiment's unit costs for this CPU class; None when the file
    has no per-class costs (its steps keep the estimates their pipeline gave them)."""
    classes = exps[0].estimate.classes
    if not classes:
        return None
    check_classes(classes, f"femlm/conf/experiment/{exps[0].name}.yaml")
    cfgs = configs(steps)
    first = next((c for s in steps if (c := cfgs.get(s.name)) is not None), None)
    precision = resolved_precision(str(first.runtime.precision)) if first is not None else "fp32"
    from femlm.runs import cpu_model

    cls = cpu_class(precision)
    units = classes.get(cls)
    sizing = Sizing(cls, cpu_model(), units is not None, sorted(classes))
    if units is None:
        return sizing
    sizing.source = str(units.get("source", ""))
    costs = Costs(units)
    for step in steps:
        step.estimate_s = round(costs.of(step, cfgs.get(step.name)), 1)
        if not step.estimate_s and step.kind != "inprocess":
            sizing.unsized.append(step.name)
    return sizing


def by_part(steps: list[Step], seconds: dict[str, float]) -> dict[str, float]:
    """Seconds per part (stage), in the order the parts first run."""
    out: dict[str, float] = {}
    for s in steps:
        out[s.part] = out.get(s.part, 0.0) + seconds.get(s.name, 0.0)
    return out


def timings_file(runner: Any, steps: list[Step], out_dir: Path, sizing: Sizing | None) -> str:
    """Write ``<out_dir>/timings.json``: the wall seconds of every step of this plan (summed over the invocations
    that ran it, from the runs directory's timings.json), per stage, beside what was planned, with the CPU class."""
    from femlm.runs import cpu_model

    recorded = runner.timings()
    wall = {s.name: float(recorded.get(s.name, {}).get("wall_s", 0.0)) for s in steps}
    planned = {s.name: s.estimate_s for s in steps}
    rows = [{"step": s.name, "part": s.part, "wall_s": round(wall[s.name], 1), "planned_s": s.estimate_s or None,
             "runs": int(recorded.get(s.name, {}).get("runs", 0)), "status": recorded.get(s.name, {}).get("status")}
            for s in steps if s.kind != "inprocess"]
    walls, plans = by_part(steps, wall), by_part(steps, planned)
    payload = {
        "what": "wall seconds of each step of this experiment (each one femlm process, summed over the invocations "
                "that ran it), per stage, and what the committed unit costs planned for this CPU class; the install "
                "is not in it",
        "cpu": cpu_model(), "class": sizing.cls if sizing else None,
        "unit_costs": ("committed" if sizing and sizing.measured else "unmeasured class") if sizing else None,
        "cpus": os.cpu_count(), "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        "stages": {p: {"wall_s": round(walls[p], 1), "planned_s": round(plans[p], 1) or None} for p in walls},
        "total_wall_s": round(sum(r["wall_s"] for r in rows), 1),
        "total_planned_s": round(sum(planned.values()), 1) or None,
        "steps": rows,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "timings.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)
    return f"wrote {path}: {payload['total_wall_s'] / 60:.1f} min of steps"
