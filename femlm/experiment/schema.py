"""The one `experiment:` schema: every file in femlm/conf/experiment/ is read into `Experiment`.

An experiment file declares what to run, not how: the preset, the pre-training stages and their masking arms,
the tasks and seeds, the analyses, the report's scale phrase, the expected cost. Which blocks a file sets decides
which steps the runner plans (femlm.experiment.tables for the paper's tables and the tiny pipeline; the study
pipeline, femlm.study.plan, for a file with an ``encoder:`` block). A key the schema does not know, or a value of
the wrong type, is refused with one line naming the file and the key (exit 2).

Two blocks are merged over the rest on request (mappings key by key, lists and scalars replaced), and the merged
plan is validated like the rest: ``smoke:`` (``--smoke``: the same pipeline at toy scale) and ``extras:``
(``--extras``: optional steps, e.g. the tiny pipeline's no-continual row and efficiency sweep).
"""

from __future__ import annotations

import copy
import datetime
import difflib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from femlm.errors import UserError
from femlm.experiment.gpu_schema import GpuStudy, check


@dataclass
class Stage:
    """Pre-training of each arm: `scratch` (pretrain-scratch) or `continual` (continual-pretrain)."""

    model: str
    domain: str
    arms: list[str]
    overrides: list[str] = field(default_factory=list)
    start: str = "model"  # continual only: "model" (the model config's weights) or "scratch" (this arm's scratch run)


@dataclass
class Baseline:
    """The released model fine-tuned as it is (run finetune_released_<task>)."""

    model: str
    tasks: list[str]


@dataclass
class Finetune:
    tasks: list[str]
    seeds: list[int]
    overrides: list[str] = field(default_factory=list)
    model: str | None = None  # the model config (tables)
    scratch_arms: list[str] = field(default_factory=list)  # tables: also fine-tune these scratch checkpoints
    # The study's rows: one equal-compute mode and pre-training seed per arm, the raw encoder, the warm-up.
    mode: str | None = None
    pretrain_seed: int | None = None
    baseline: bool = False
    warmup_row: bool = False


@dataclass
class Analysis:
    """`femlm analyze KIND` before and after: run references (`<run>` or `<experiment>/<run>`), null = the model's
    released weights."""

    kind: str
    model: str
    domain: str
    after: str
    before: str | None = None
    masking: str | None = None
    overrides: list[str] = field(default_factory=list)


@dataclass
class Efficiency:
    """`femlm evaluate evaluate.sweep=true` over every saved checkpoint of continual runs (Figure 4 left)."""

    arms: list[str]
    task: str
    from_experiment: str | None = None  # whose continual_<arm> runs (null: this experiment's)
    model: str | None = None  # null: that experiment's finetune.model
    seeds: list[int] | None = None  # null: that experiment's finetune.seeds
    overrides: list[str] | None = None  # null: that experiment's finetune.overrides


@dataclass
class Ablation:
    """Continual pre-training with each K of `num_masks`, fine-tuned on `tasks` (Figure 4 right)."""

    model: str
    domain: str
    masking: str
    num_masks: list[int]
    ratio: float
    tasks: list[str]
    seeds: list[int]
    overrides: list[str] = field(default_factory=list)


@dataclass
class Encoder:
    """The study's encoder: a pip package, a split zip over packages, or (smoke) a tiny random one to build."""

    label: str
    subdir: str | None = None
    package: str | None = None
    module: str | None = None
    sha256: str | None = None
    split_zip: dict[str, Any] | None = None
    build: dict[str, Any] | None = None
    tokenizer: str | None = None


@dataclass
class Warmup:
    masking: str | None = None
    seed: int = 0
    overrides: list[str] = field(default_factory=list)


@dataclass
class Arms:
    """The study's pre-training arms x equal-compute modes x seeds."""

    reference: str
    arms: list[str]
    seeds: list[int]
    modes: list[str] = field(default_factory=list)
    num_masks: int = 4
    overrides: list[str] = field(default_factory=list)
    # The arm compared with the control, paired by seed (femlm/study/compare.py), and the control.
    fe_arm: str = "fe_subword"
    control: str = "iid_subword"


@dataclass
class Variant:
    name: str = ""
    label: str = ""
    unit: str | None = None
    null_model: str | None = None
    overrides: list[str] = field(default_factory=list)


@dataclass
class Decomposition:
    checkpoints: list[str] = field(default_factory=lambda: ["warmup"])
    optional: list[str] = field(default_factory=list)
    masking: str = "fe_subword"
    overrides: list[str] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)


@dataclass
class Declared:
    """When a study's family (``stats.confirmatory``) was declared: ``before`` or ``after`` the data were seen, with
    the date (YYYY-MM-DD) or the commit that fixed it. Only a family declared before its data is *confirmatory*;
    one chosen after is *primary, chosen after the data* (femlm.study.verdicts), and says so everywhere."""

    when: str
    date: str | None = None
    commit: str | None = None
    note: str = ""


@dataclass
class Stats:
    # When the family below was declared: required, no default (a family is not confirmatory by omission).
    declared: Declared
    level: float = 0.95
    target_fractions: list[float] = field(default_factory=list)
    # The study's declared family (femlm.study.verdicts: Holm at a family-wise 0.05 over every member, a member
    # without a result or gated counted at p = 1; every other comparison is exploratory, Benjamini-Hochberg):
    # comparison keys (femlm/experiment/keys.py), e.g. training_loss/same_rows/fe_subword/final_loss.
    confirmatory: list[str] = field(default_factory=list)
    # Equivalence margins, key -> delta in the comparison's units (a t-test of a difference): the comparison is
    # also tested for equivalence within +-delta (TOST), both hypotheses in the family; its seeds are planned from
    # delta and an upper confidence bound on the standard deviation.
    delta: dict[str, float] = field(default_factory=dict)


@dataclass
class Report:
    scale: str  # the phrase the tables' captions and READMEs state the scale with
    # A study's README: its title, introduction, caveat, and the runs the top-level README sets side by side.
    title: str | None = None
    intro: str | None = None
    caveat: str | None = None
    side_by_side: dict[str, Any] | None = None


@dataclass
class Estimate:
    breakdown: str
    hardware: str | None = None
    minutes: float | None = None
    budget_minutes: float | None = None  # optional steps are skipped when the run would pass it
    seconds: dict[str, Any] = field(default_factory=dict)  # unit costs the study's step estimates use
    # The tables pipeline's unit costs per CPU class ("avx2 fp32": {unit: seconds, source: where measured}):
    # femlm.experiment.costs plans each step from them; a class not listed is "unmeasured".
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu: str | None = None
    gpu_hours: float | None = None
    gpu_memory_gb: float | None = None
    memory: str | None = None


@dataclass
class Experiment:
    name: str
    preset: str
    runs_dir: str
    out_dir: str
    report: Report
    estimate: Estimate
    offline: bool = False  # needs FEMLM_MIRROR; femlm commands run with the Hugging Face libraries offline
    needs_gpu: bool = False  # refuse to start without nvidia-smi (FEMLM_ALLOW_CPU=1 starts anyway)
    tables: list[str] = field(default_factory=list)  # what `femlm report` writes (report.tables)
    download: list[str] = field(default_factory=list)  # registry names `femlm download` verifies first
    baseline: Baseline | None = None
    scratch: Stage | None = None
    continual: Stage | None = None
    finetune: Finetune | None = None
    analysis: Analysis | None = None
    efficiency: Efficiency | None = None
    ablation: Ablation | None = None
    # Overrides every femlm command of the plan starts with (femlm download and femlm report aside), e.g. tiny's
    # runtime.precision=fp32; a study's: its encoder's shape and data.
    common: list[str] = field(default_factory=list)
    # The study pipeline (femlm.study.plan).
    encoder: Encoder | None = None
    head_warmup: Warmup | None = None
    warmup: Warmup | None = None
    pretrain: Arms | None = None
    decomposition: Decomposition | None = None
    passes: Decomposition | None = None  # `femlm analyze passes` per variant (femlm.study.plan), same shape
    stats: Stats | None = None
    gpu: GpuStudy | None = None  # the in-process GPU study (femlm.experiment.gpu_schema; femlm.study.gpu)
    smoke: dict[str, Any] | None = None
    extras: dict[str, Any] | None = None

    # Not part of the schema: the plan as read (after smoke / extras), for code that reads it as a mapping.
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def study(self) -> bool:
        return self.encoder is not None


def conf_dir() -> Path:
    from femlm import CONF_DIR

    return CONF_DIR / "experiment"


def names() -> list[str]:
    return sorted(p.stem for p in conf_dir().glob("*.yaml"))


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`: mappings key by key, everything else replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_raw(name: str) -> tuple[Path, dict[str, Any]]:
    path = conf_dir() / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"experiment {name!r}: no {path}; allowed {', '.join(names()) or '(none)'}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or list(data) != ["experiment"] or not isinstance(data["experiment"], dict):
        raise UserError(f"{path}: must hold one mapping, `experiment:` (the plan), and nothing else")
    return path, data["experiment"]


def load(name: str, smoke: bool = False, extras: bool = False, budget_minutes: float | None = None) -> Experiment:
    """The experiment file `name`, validated (with its smoke / extras block merged over it when asked, and
    `budget_minutes` over its estimate.budget_minutes: a shorter window than the file plans for)."""
    path, plan = read_raw(name)
    where = f"femlm/conf/experiment/{name}.yaml"
    parse(Experiment, plan, where, "experiment")  # the file as written
    check_stats(plan, where)
    if plan["name"] != name:
        raise UserError(f"{where}: experiment.name={plan['name']!r} must be the file's name, {name!r}")
    for flag, block in ((smoke, "smoke"), (extras, "extras")):
        if plan.get(block) is not None:
            parse(Experiment, merge(plan, plan[block]), f"{where} (with its {block} block)", "experiment")
        if flag:
            if plan.get(block) is None:
                raise UserError(f"{where}: --{block} asks for the experiment's `{block}:` block, which it has not")
            plan = merge(plan, plan[block])
    if budget_minutes is not None:
        if not budget_minutes > 0:
            raise UserError(f"--budget-minutes {budget_minutes:g}: must be a positive number of minutes")
        plan = merge(plan, {"estimate": {"budget_minutes": float(budget_minutes)}})
    exp = parse(Experiment, plan, where, "experiment")
    if exp.gpu is not None:
        check(exp.gpu, where)
    exp.raw = plan
    return exp


WHEN = ("before", "after")


def check_stats(plan: dict[str, Any], where: str) -> None:
    """``stats.declared`` says when (before / after the data, with a date or commit), and every key of the family
    and of ``stats.delta`` is a comparison the plan makes (femlm.experiment.keys)."""
    import re

    from femlm.experiment import keys

    stats = plan.get("stats")
    if not stats:
        return
    d = stats["declared"]
    if d.get("when") not in WHEN:
        raise UserError(f"{where}: stats.declared.when={d.get('when')!r}: allowed {' | '.join(WHEN)} (the data "
                        "were seen)")
    if not d.get("date") and not d.get("commit"):
        raise UserError(f"{where}: stats.declared needs a date (YYYY-MM-DD) or a commit: when the family was fixed")
    if d.get("date") and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(d["date"])):
        raise UserError(f"{where}: stats.declared.date={d['date']!r}: expected YYYY-MM-DD")
    keys.check_plan(plan, where)


# ---------------------------------------------------------------------------------------------------- parsing
def parse(cls: type, data: Any, where: str, path: str) -> Any:
    """`data` as an instance of the dataclass `cls`; a one-line UserError for an unknown key or a wrong type."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: {path} must be a mapping of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in fields(cls) if f.name != "raw"]
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {path}.{close[0]}? " if close else ""
            raise UserError(f"{where}: {path}.{key}: no such key; {hint}{path} keys: {', '.join(known)}")
    values = {}
    for f in fields(cls):
        if f.name == "raw":
            continue
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise UserError(f"{where}: {path}.{f.name} is missing (required)")
            continue
        values[f.name] = convert(hints[f.name], data[f.name], where, f"{path}.{f.name}")
    return cls(**values)


def convert(tp: Any, value: Any, where: str, path: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return convert(inner, value, where, path)
    if is_dataclass(tp):
        return parse(tp, value, where, path)
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{where}: {path} must be a list, e.g. [a, b]; got {value!r}")
        return [convert(args[0], v, where, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: {path} must be a mapping; got {value!r}")
        return value
    if tp is str and isinstance(value, datetime.date):  # YAML reads an unquoted 2026-11-27 as a date
        return value.isoformat()
    ok = {str: (str,), bool: (bool,), int: (int,), float: (int, float)}.get(tp)
    if ok is not None and (not isinstance(value, ok) or (tp is not bool and isinstance(value, bool))):
        raise UserError(f"{where}: {path}={value!r}: expected {tp.__name__}")
    return value
