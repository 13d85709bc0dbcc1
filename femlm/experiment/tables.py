"""The pipeline of the paper's tables and figures and of the tiny reproduction: experiment files -> steps.

In order: verify the data mirror (femlm download), fine-tune the released model (``baseline``), pre-train each
arm from scratch and/or continue it (``scratch``, ``continual``), fine-tune the last stage's checkpoints on every
task (``finetune``), sweep saved checkpoints (``efficiency``), the split ablation (``ablation``), the gradient
analysis before / after (``analysis``), and one `femlm report` over every experiment named. A step that reads
another experiment's run (figures reads continual_cs's continual runs) brings that run's step along, first; a run
named twice is planned once. Run directories: ``<runs_dir>/<stage>_<arm>``, ``finetune_<arm>_<task>``, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from femlm.errors import UserError
from femlm.experiment import costs
from femlm.experiment.schema import Experiment, Finetune, load
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
    if exp.continual is not None and exp.continual.start not in ("model", "scratch"):
        raise UserError(f"{where}: continual.start={exp.continual.start!r}; allowed model (the model config's "
                        "weights), scratch (each arm's scratch run)")
    if exp.continual is not None and exp.continual.start == "scratch" and (
            exp.scratch is None or set(exp.continual.arms) - set(exp.scratch.arms)):
        raise UserError(f"{where}: continual.start=scratch needs every continual arm among scratch.arms")
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
        one = OneExperiment(exp, plans, b)
        for part in (one.download, one.baseline, one.pretraining, one.finetuning, one.efficiency, one.ablation,
                     one.analysis):
            part()
        return b.steps
    finally:
        plans.building.discard(exp.name)


class OneExperiment:
    """The steps of one experiment file, block by block (each method adds its block's steps, if it has one)."""

    def __init__(self, exp: Experiment, plans: Plans, b: Builder) -> None:
        self.exp, self.plans, self.b = exp, plans, b
        self.runs = plans.runs(exp.name)
        self.offline = ["download.offline=true"] if exp.offline else []
        # every command but download gets these first (the file's `common`: e.g. tiny's pinned precision)
        self.common = [f"preset={exp.preset}", *self.offline, *exp.common]

    def once(self, name: str, part: str, run: str, command: list[str], output: str, needs: list[Path] | None = None,
             **meta: object) -> None:
        self.b.add(Step(f"{self.exp.name} {name}", part, self.runs / run, command, output=output, needs=needs or [],
                        meta=dict(meta), home=self.runs))

    def pretrain(self, name: str, part: str, run: str, command: list[str], needs: list[Path],
                 **meta: object) -> None:
        self.b.add(Step(f"{self.exp.name} {name}", part, self.runs / run, command, kind="pretrain", needs=needs,
                        meta=dict(meta), home=self.runs))

    def finetune(self, name: str, run: str, model: str, ckpt: Path | None, task: str, seeds: list[int],
                 overrides: list[str], **meta: object) -> None:
        init = [f"model.name_or_path={ckpt}"] if ckpt else []
        self.once(name, "finetune", run, ["finetune", *self.common, f"model={model}", *init, f"task={task}",
                                          f"finetune.seeds={hydra_list(seeds)}", *overrides],
                  "results.json", [ckpt] if ckpt else [], task=task, **meta)

    def download(self) -> None:
        if self.exp.download:
            self.once("download", "download", "download", ["download", *self.exp.download, *self.offline],
                      "download.json")

    def baseline(self) -> None:
        """The released model fine-tuned as it is (no finetune.overrides: the paper's recipe)."""
        if self.exp.baseline is None:
            return
        seeds = self.exp.finetune.seeds if self.exp.finetune else []
        for task in self.exp.baseline.tasks:
            self.finetune(f"finetune released {task}", f"finetune_released_{task}", self.exp.baseline.model, None,
                          task, seeds, [], row="released")

    def pretraining(self) -> None:
        for stage, command in pretrain_stages(self.exp):
            s = getattr(self.exp, stage)
            for arm in s.arms:
                needs = [final(self.runs / f"scratch_{arm}")] if stage == "continual" and s.start == "scratch" else []
                self.pretrain(f"{command} {arm}", stage, f"{stage}_{arm}",
                              [command, *self.common, f"model={s.model}",
                               *[f"model.name_or_path={n}" for n in needs], f"domain={s.domain}", f"masking={arm}",
                               *s.overrides], needs, arm=arm)

    def finetuning(self) -> None:
        """The last pre-training stage's checkpoint of each arm (and finetune.scratch_arms' scratch ones)."""
        ft = self.exp.finetune
        if ft is None or not ft.model:
            return
        stages = pretrain_stages(self.exp)
        stage = stages[-1][0] if stages else ""
        rows = [(arm, f"{stage}_{arm}", arm) for arm in getattr(self.exp, stage).arms] if stage else []
        rows += [(arm, f"scratch_{arm}", f"scratch_{arm}") for arm in ft.scratch_arms]
        for arm, run, row in rows:
            for task in ft.tasks:
                self.finetune(f"finetune {row} {task}", f"finetune_{row}_{task}", ft.model, final(self.runs / run),
                              task, ft.seeds, ft.overrides, arm=arm)

    def efficiency(self) -> None:
        e = self.exp.efficiency
        if e is None:
            return
        src = self.plans.get(e.from_experiment or self.exp.name)
        if src.finetune is None and (e.model is None or e.seeds is None or e.overrides is None):
            raise UserError(f"femlm/conf/experiment/{self.exp.name}.yaml: efficiency needs model, seeds and "
                            f"overrides (experiment {src.name} has no finetune block to take them from)")
        sft = src.finetune or Finetune(tasks=[], seeds=[])
        model = e.model or sft.model
        seeds = e.seeds if e.seeds is not None else sft.seeds
        over = e.overrides if e.overrides is not None else sft.overrides
        swept = [self.b.pull(src.name, f"continual_{arm}") for arm in e.arms]  # planned first where missing
        for arm, run in zip(e.arms, swept, strict=True):
            self.once(f"efficiency {arm}", "efficiency", f"efficiency_{arm}",
                      ["evaluate", *self.common, f"model={model}", f"task={e.task}", f"evaluate.checkpoints={run}",
                       "evaluate.sweep=true", f"finetune.seeds={hydra_list(seeds)}", *over], "efficiency.json",
                      [final(run)], arm=arm)

    def ablation(self) -> None:
        a = self.exp.ablation
        if a is None:
            return
        for k in a.num_masks:
            self.pretrain(f"ablation K={k}", "ablation", f"ablation_k{k}",
                          ["continual-pretrain", *self.common, f"model={a.model}", f"domain={a.domain}",
                           f"masking={a.masking}", f"masking.num_masks={k}", f"masking.ratio={a.ratio}",
                           *a.overrides], [], num_masks=k)
            for task in a.tasks:
                self.finetune(f"finetune ablation K={k} {task}", f"finetune_ablation_k{k}_{task}", a.model,
                              final(self.runs / f"ablation_k{k}"), task, a.seeds, [], num_masks=k)

    def analysis(self) -> None:
        an = self.exp.analysis
        if an is None:
            return
        where = {w: (self.b.ref(self.exp, r) if r else None) for w, r in (("before", an.before), ("after", an.after))}
        for when, run in where.items():
            ckpt = [final(run)] if run else []
            self.once(f"analyze {when}", "analysis", f"analyze_{when}",
                      ["analyze", an.kind, *self.common, f"model={an.model}",
                       *[f"model.name_or_path={c}" for c in ckpt], f"domain={an.domain}",
                       *([f"masking={an.masking}"] if an.masking else []), *an.overrides],
                      "analysis.json", ckpt, checkpoint=when)


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
    # Then the wall seconds of every step, per stage, with the CPU class, beside the report (femlm.experiment.costs).
    b.steps.append(Step("timings", "report", out, kind="inprocess", home=home,
                        action=lambda runner: costs.timings_file(runner, runner.planned, out, runner.sizing)))
    return b.steps
