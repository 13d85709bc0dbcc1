"""The pipeline of the paper's tables and figures and of the tiny reproduction: experiment files -> steps.

In order: verify the data mirror (femlm download), fine-tune the released model (``baseline``), pre-train each
arm from scratch and/or continue it (``scratch``, ``continual``), fine-tune the last stage's checkpoints on every
task (``finetune``), sweep saved checkpoints (``efficiency``), the split ablation (``ablation``), the gradient
analysis before / after (``analysis``), and one `femlm report` over every experiment named. A step that reads
another experiment's run (figures reads table2_cs's continual runs) brings that run's step along, first; a run
named twice is planned once. Run directories: ``<runs_dir>/<stage>_<arm>``, ``finetune_<arm>_<task>``, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from femlm.errors import UserError
from femlm.experiment.schema import Experiment, load
from femlm.experiment.step import Step, final, hydra_list, hydra_quote


@dataclass
class Options:
    """What the command line says about where and how (the experiment files say what)."""

    root: Path = Path(".")  # relative runs_dir / out_dir resolve against it (as given: commands keep them relative)
    runs: Path | None = None  # the (single) named experiment's run directories, instead of its runs_dir
    out: Path | None = None  # the report / results folder, instead of the first experiment's out_dir
    smoke: bool = False
    extras: bool = False
    dry_run: bool = False
    readme: Path | None = None  # study: a README with markers to refresh
    stamp: str = ""  # time stamp of this invocation (the report's run directory)
    named: list[str] = field(default_factory=list)


class Plans:
    """The experiments named and those they reference, each loaded once, with its runs directory."""

    def __init__(self, exps: list[Experiment], opts: Options) -> None:
        self.opts = opts
        self.loaded = {e.name: e for e in exps}
        self.named = [e.name for e in exps]

        self.building: set[str] = set()  # experiments whose steps are being listed (a reference loop stops here)

    def get(self, name: str) -> Experiment:
        if name not in self.loaded:
            self.loaded[name] = load(name)
            check_configs(self.loaded[name])
        return self.loaded[name]

    def runs(self, name: str) -> Path:
        if self.opts.runs is not None and self.named == [name]:
            return self.opts.runs
        return self.opts.root / self.get(name).runs_dir


class Builder:
    def __init__(self, plans: Plans) -> None:
        self.plans = plans
        self.steps: list[Step] = []
        self.referenced: list[str] = []  # other experiments whose runs this plan reads (report inputs)

    def add(self, step: Step) -> None:
        if all(s.run_dir != step.run_dir for s in self.steps):
            self.steps.append(step)

    def pull(self, experiment: str, run: str) -> Path:
        """The run directory `run` of `experiment`; its step joins the plan first (once)."""
        runs = self.plans.runs(experiment)
        if experiment not in self.plans.named and experiment not in self.referenced:
            self.referenced.append(experiment)
        wanted = runs / run
        if any(s.run_dir == wanted for s in self.steps):
            return wanted
        if experiment not in self.plans.building:
            for step in experiment_steps(self.plans.get(experiment), self.plans, Builder(self.plans)):
                if step.run_dir == wanted:
                    self.add(step)
                    return wanted
        raise UserError(f"experiment {experiment}: no step writes {run} (a reference in experiment "
                        f"{', '.join(self.plans.named)})")

    def ref(self, exp: Experiment, reference: str) -> Path:
        """`<run>` (of `exp`) or `<experiment>/<run>`: its run directory, its step planned first."""
        other, _, run = reference.rpartition("/")
        return self.pull(other or exp.name, run)


def check_configs(exp: Experiment) -> None:
    """Fail before any training when a config the plan names does not exist (one line)."""
    from femlm import CONF_DIR

    where = f"femlm/conf/experiment/{exp.name}.yaml"
    named: list[tuple[str, str | None]] = [("preset", exp.preset)]
    for s in (exp.scratch, exp.continual):
        if s is not None:
            named += [("model", s.model), ("domain", s.domain), *[("masking", a) for a in s.arms]]
    if exp.baseline is not None:
        named += [("model", exp.baseline.model), *[("task", t) for t in exp.baseline.tasks]]
    if exp.finetune is not None:
        named += [("model", exp.finetune.model), *[("task", t) for t in exp.finetune.tasks]]
        if not exp.study and not exp.finetune.model:
            raise UserError(f"{where}: finetune.model is missing (the model config the fine-tuning runs load)")
        extra = [a for a in exp.finetune.scratch_arms if exp.scratch is None or a not in exp.scratch.arms]
        if extra:
            raise UserError(f"{where}: finetune.scratch_arms={extra} are not among scratch.arms (no run makes them)")
    if exp.analysis is not None:
        named += [("model", exp.analysis.model), ("domain", exp.analysis.domain), ("masking", exp.analysis.masking)]
    if exp.efficiency is not None:
        named += [("model", exp.efficiency.model), ("task", exp.efficiency.task)]
    if exp.ablation is not None:
        a = exp.ablation
        named += [("model", a.model), ("domain", a.domain), ("masking", a.masking), *[("task", t) for t in a.tasks]]
    for group, name in named:
        if name and not (CONF_DIR / group / f"{name}.yaml").is_file():
            raise UserError(f"{where}: names {group}={name}, but femlm/conf/{group}/{name}.yaml does not exist")


def pretrain_stages(exp: Experiment) -> list[tuple[str, str]]:
    return [(stage, cmd) for stage, cmd in (("scratch", "pretrain-scratch"), ("continual", "continual-pretrain"))
            if getattr(exp, stage) is not None]


def experiment_steps(exp: Experiment, plans: Plans, b: Builder) -> list[Step]:
    """Every femlm step of one experiment (its report aside), in the order they run."""
    plans.building.add(exp.name)
    try:
        return _experiment_steps(exp, plans, b)
    finally:
        plans.building.discard(exp.name)


def _experiment_steps(exp: Experiment, plans: Plans, b: Builder) -> list[Step]:
    runs = plans.runs(exp.name)
    offline = ["download.offline=true"] if exp.offline else []
    common = [f"preset={exp.preset}", *offline]

    def once(name: str, part: str, run: str, command: list[str], output: str, needs: list[Path] | None = None,
             **meta: object) -> None:
        b.add(Step(f"{exp.name} {name}", part, runs / run, command, output=output, needs=needs or [],
                   meta=dict(meta), home=runs))

    if exp.download:
        once("download", "download", "download", ["download", *exp.download, *offline], "download.json")
    ft = exp.finetune
    if exp.baseline is not None:
        seeds = hydra_list(ft.seeds if ft else [])
        for task in exp.baseline.tasks:
            once(f"finetune released {task}", "finetune", f"finetune_released_{task}",
                 ["finetune", *common, f"model={exp.baseline.model}", f"task={task}", f"finetune.seeds={seeds}"],
                 "results.json", row="released", task=task)
    for stage, command in pretrain_stages(exp):
        s = getattr(exp, stage)
        for arm in s.arms:
            start: list[str] = []
            needs: list[Path] = []
            if stage == "continual" and s.start == "scratch":
                needs = [final(runs / f"scratch_{arm}")]
                start = [f"model.name_or_path={needs[0]}"]
            b.add(Step(f"{exp.name} {command} {arm}", stage, runs / f"{stage}_{arm}",
                       [command, *common, f"model={s.model}", *start, f"domain={s.domain}", f"masking={arm}",
                        *s.overrides], kind="pretrain", needs=needs, meta={"arm": arm}, home=runs))
    if ft is not None and ft.model:
        stage = "continual" if exp.continual is not None else "scratch"
        rows = [(arm, f"{stage}_{arm}", arm) for arm in getattr(exp, stage).arms] if pretrain_stages(exp) else []
        rows += [(arm, f"scratch_{arm}", f"scratch_{arm}") for arm in ft.scratch_arms]
        for arm, run, row in rows:
            for task in ft.tasks:
                ckpt = final(runs / run)
                once(f"finetune {row} {task}", "finetune", f"finetune_{row}_{task}",
                     ["finetune", *common, f"model={ft.model}", f"model.name_or_path={ckpt}", f"task={task}",
                      f"finetune.seeds={hydra_list(ft.seeds)}", *ft.overrides], "results.json", [ckpt],
                     arm=arm, task=task)
    if exp.efficiency is not None:
        e = exp.efficiency
        src = plans.get(e.from_experiment or exp.name)
        sft = src.finetune
        if sft is None and (e.model is None or e.seeds is None or e.overrides is None):
            raise UserError(f"femlm/conf/experiment/{exp.name}.yaml: efficiency needs model, seeds and overrides "
                            f"(experiment {src.name} has no finetune block to take them from)")
        model = e.model or sft.model  # type: ignore[union-attr]
        seeds = e.seeds if e.seeds is not None else sft.seeds  # type: ignore[union-attr]
        over = e.overrides if e.overrides is not None else sft.overrides  # type: ignore[union-attr]
        swept = [b.pull(src.name, f"continual_{arm}") for arm in e.arms]
        for arm, run in zip(e.arms, swept, strict=True):
            once(f"efficiency {arm}", "efficiency", f"efficiency_{arm}",
                 ["evaluate", *common, f"model={model}", f"task={e.task}", f"evaluate.checkpoints={run}",
                  "evaluate.sweep=true", f"finetune.seeds={hydra_list(seeds)}", *over], "efficiency.json",
                 [final(run)], arm=arm)
    if exp.ablation is not None:
        a = exp.ablation
        for k in a.num_masks:
            run = runs / f"ablation_k{k}"
            b.add(Step(f"{exp.name} ablation K={k}", "ablation", run,
                       ["continual-pretrain", *common, f"model={a.model}", f"domain={a.domain}", f"masking={a.masking}",
                        f"masking.num_masks={k}", f"masking.ratio={a.ratio}", *a.overrides], kind="pretrain",
                       meta={"num_masks": k}, home=runs))
            for task in a.tasks:
                once(f"finetune ablation K={k} {task}", "finetune", f"finetune_ablation_k{k}_{task}",
                     ["finetune", *common, f"model={a.model}", f"model.name_or_path={final(run)}", f"task={task}",
                      f"finetune.seeds={hydra_list(a.seeds)}"], "results.json", [final(run)], num_masks=k, task=task)
    if exp.analysis is not None:
        an = exp.analysis
        where = {w: (b.ref(exp, r) if r else None) for w, r in (("before", an.before), ("after", an.after))}
        for when, run in where.items():
            ckpt = [final(run)] if run else []
            once(f"analyze {when}", "analysis", f"analyze_{when}",
                 ["analyze", an.kind, *common, f"model={an.model}", *[f"model.name_or_path={c}" for c in ckpt],
                  f"domain={an.domain}", *([f"masking={an.masking}"] if an.masking else []), *an.overrides],
                 "analysis.json", ckpt, checkpoint=when)
    return b.steps


def build_steps(exps: list[Experiment], opts: Options) -> list[Step]:
    """Every step of the named experiments, then one `femlm report` over all of them."""
    plans = Plans(exps, opts)
    b = Builder(plans)
    for exp in exps:
        check_configs(exp)
        experiment_steps(exp, plans, b)
    first = exps[0]
    home = plans.runs(first.name)
    inputs = [plans.runs(n) for n in [*plans.named, *b.referenced]]
    out = opts.out or opts.root / first.out_dir
    tables = list(dict.fromkeys(t for e in exps for t in e.tables))
    scale = " | ".join(e.report.scale for e in exps)
    # The report only reads runs; it is rewritten every time, from its own fresh run directory.
    b.steps.append(Step("report", "report", home / "report" / opts.stamp,
                        ["report", f"report.inputs={hydra_list(inputs)}", f"report.out_dir={out}",
                         f"report.tables={hydra_list(tables)}", f"report.scale={hydra_quote(scale)}"],
                        kind="always", home=home))
    return b.steps
