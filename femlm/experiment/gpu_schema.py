"""The `gpu:` block of an experiment file (femlm/conf/experiment/study_gpu.yaml): the GPU study's declarations,
typed like the rest of the schema (femlm.experiment.schema parses it; a misspelt key is one line, exit 2).

What the block holds, and what it does not: the runs themselves (model, corpora, steps, arms, tasks) are the
experiment's `common`, `warmup`, `pretrain` and `finetune` blocks, composed into femlm configs (their one home);
this block holds what only the GPU study has: the analysis declared before its data (the confirmatory endpoint,
delta, the testing procedure, the power rule and its one revision, the gates, how windows enter), the warm-up
policy, the window, what to fine-tune downstream, and each card's unit costs with their sources (every figure
says whether it was measured on that card or assumed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROCEDURES = ("holm",)  # femlm.study.verdicts: the one reading rule of every study
POLICIES = ("carried", "per_window")


@dataclass
class Figure:
    """One unit cost: its value, whether it was measured on this card (else assumed), and where it comes from."""

    value: float
    measured: bool
    source: str


@dataclass
class Reference:
    """A training speed measured on a card: the model and batch it was measured at, and how (eager or compiled).
    The plan scales it to the study's model by training FLOPs per row token (femlm.train.flops), which assumes the
    study's model reaches the same MFU: a figure it labels assumed unless the layers and shapes are the study's own;
    a step is never shorter than the card's `min_step_s` (small models are launch-bound, not FLOP-bound)."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    vocab_size: int
    seq: int
    rows: int
    mode: str  # eager | compiled
    row_tokens_per_s: float
    source: str
    measured: bool = True  # false: a figure assumed for the shape (the smoke run's)
    model_type: str = "bert"  # the layers it was measured with (femlm.study.gpu_plan.MODEL_TYPES)


@dataclass
class ArmSpeed:
    """An arm's training speed relative to MLM's at the study's shape (1: the same)."""

    arm: str
    factor: float
    measured: bool
    source: str


@dataclass
class Card:
    name: str  # as torch.cuda.get_device_name says it
    reference: Reference
    startup_s: Figure  # one process: imports, the prepared data, the device
    min_step_s: Figure  # the shortest a training step takes (a small model's eager step is launch-bound)
    run_setup_s: Figure  # per pre-training run: config, model, first evaluation, saving the final model
    compile_s: Figure  # per graph (runtime.compile=true); 0 when eager
    finetune_examples_per_s: Figure  # fine-tuning: training examples per second (every epoch), the study's model
    results_s: Figure  # results files and the archive at the end of a window
    arm_speed: list[ArmSpeed] = field(default_factory=list)


@dataclass
class Power:
    """N from the power rule for the equivalence test (TOST) at the true difference 0."""

    sd: float  # the paired standard deviation assumed (nats)
    df: int  # its degrees of freedom (the seeds it came from, minus one)
    source: str  # where it was measured
    power: float = 0.8
    family_alpha: float = 0.05


@dataclass
class Revision:
    """The internal pilot: N revised at most once, only upward, from the paired differences' standard deviation
    after the first window that ends with `min_seeds` complete seeds (the variance, never the effect)."""

    min_seeds: int = 5  # complete seeds the revision needs (fewer: N stays as declared)
    rule: str = ""


@dataclass
class Analysis:
    """The confirmatory analysis, declared before the data (the family's keys: `stats.confirmatory`)."""

    endpoint: str  # what is compared, and on which set (the estimand is conditional on it; delta: stats.delta)
    procedure: str  # holm (over the 2 m hypotheses): one procedure for difference and equivalence together
    reading: str  # how an interval that excludes 0 and lies inside +-delta reads
    power: Power
    revision: Revision
    windows: str  # how windows enter the analysis
    before_n: str  # what the README says before N complete seeds (and if the study is abandoned)


@dataclass
class Gates:
    """Study-level stops, checked in every window before anything after them runs."""

    warmup_margin: float  # the warm-up's held-out loss must lie this many nats below the context-free baseline
    on_warmup_fail: str
    on_arm_fail: str  # an arm whose ACL held-out loss does not fall below the warm-up checkpoint's


@dataclass
class WarmupPolicy:
    policy: str  # carried (one warm-up, committed with its sha256, carried to every window) | per_window
    reason: str  # why, from the plan's measured figures (the carried checkpoint: <out_dir>/warmup/checkpoint)


@dataclass
class Downstream:
    """Fine-tuning in process from each arm's checkpoint: `finetune.tasks`, `finetune.seeds` runs per checkpoint
    (averaged: the pre-training seed is the unit), for the first `pretrain_seeds` pre-training seeds."""

    pretrain_seeds: int
    collapse: str = "a run whose test predictions are all one class: counted per arm and task, never dropped"


@dataclass
class Window:
    """The window a command gets: its length is `estimate.budget_minutes` (`--budget-minutes` overrides it)."""

    margin_s: float = 30.0  # kept after the last seed for the results and the archive
    carry_mib: float = 64.0  # what travels to the device machine
    back_file_mib: float = 16.0  # the largest file that comes back


@dataclass
class Expected:
    """Block counts expected before the data is prepared (the prepared data's counts win once it is)."""

    warmup_train_blocks: int
    warmup_validation_blocks: int
    arms_train_blocks: int
    arms_validation_blocks: int
    tree_mib: float  # the repository as it travels (tracked files), measured by benchmarks/gpu_bundle.py


@dataclass
class GpuStudy:
    analysis: Analysis
    gates: Gates
    warmup: WarmupPolicy
    downstream: Downstream
    window: Window
    expected: Expected
    cards: list[Card] = field(default_factory=list)
    max_seeds: int | None = None  # a cap below N (the smoke run); None: N


def check(gpu: GpuStudy, where: str) -> GpuStudy:
    """The choices and ranges the types alone do not say; a one-line UserError naming the key."""
    from femlm.errors import UserError

    def bad(key: str, value: object, allowed: str) -> UserError:
        return UserError(f"{where}: experiment.gpu.{key}={value!r}: allowed {allowed}")

    a = gpu.analysis
    if a.procedure not in PROCEDURES:
        raise bad("analysis.procedure", a.procedure, ", ".join(PROCEDURES))
    if gpu.warmup.policy not in POLICIES:
        raise bad("warmup.policy", gpu.warmup.policy, ", ".join(POLICIES))
    for key, value in (("analysis.power.sd", a.power.sd),):
        if not value > 0:
            raise bad(key, value, "a positive number")
    for key, value in (("analysis.power.power", a.power.power), ("analysis.power.family_alpha", a.power.family_alpha)):
        if not 0 < value < 1:
            raise bad(key, value, "a number in (0, 1)")
    if a.power.df < 1:
        raise bad("analysis.power.df", a.power.df, "at least 1")
    for i, card in enumerate(gpu.cards):
        if card.reference.mode not in ("eager", "compiled"):
            raise bad(f"cards[{i}].reference.mode", card.reference.mode, "eager, compiled")
    if not gpu.cards:
        raise bad("cards", [], "at least one card's unit costs")
    return gpu
