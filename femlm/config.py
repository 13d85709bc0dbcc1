"""Per-command config schemas and start-up validation.

Hydra composes ``conf/<command>.yaml`` with its groups; `validate` then merges the result into the
command's dataclass schema (so unknown keys and wrong types are caught with the key's full name) and runs
each section's own ``validate()`` for the rules a type cannot express (``masking.splits * masking.ratio <= 1``,
positive sizes, known choices). Every failure is a `UserError`: one line, exit status 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from femlm.analysis.config import AnalysisConfig
from femlm.data.config import DomainConfig, DownloadConfig, TaskConfig
from femlm.errors import UserError
from femlm.eval.config import EvaluateConfig, FinetuneConfig
from femlm.masking import MaskingConfig, MaskingConfigError
from femlm.report.config import ReportConfig
from femlm.train.config import DataConfig, LoggerConfig, ModelConfig, TrainerConfig


@dataclass
class CommonConfig:
    command: str = "?"
    seed: int = 0
    dry_run: bool = False
    download: DownloadConfig = field(default_factory=DownloadConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    # The plan of an `experiment=<name>` config (conf/experiment/), recorded with the run.
    experiment: dict[str, Any] = field(default_factory=dict)


@dataclass
class DownloadCommandConfig(CommonConfig):
    pass


@dataclass
class PretrainConfig(CommonConfig):
    # scratch: build `model` from its architecture; checkpoint: load `model.name_or_path` and continue.
    init: str = "scratch"
    model: ModelConfig = field(default_factory=ModelConfig)
    domain: DomainConfig = field(default_factory=DomainConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)


@dataclass
class FinetuneCommandConfig(CommonConfig):
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)


@dataclass
class EvaluateCommandConfig(FinetuneCommandConfig):
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)


@dataclass
class AnalyzeCommandConfig(CommonConfig):
    model: ModelConfig = field(default_factory=ModelConfig)
    domain: DomainConfig = field(default_factory=DomainConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    # Where covariance/variance tables and figures go besides the run directory (None: run dir only).
    results_dir: str | None = None


@dataclass
class ReportCommandConfig(CommonConfig):
    report: ReportConfig = field(default_factory=ReportConfig)


SCHEMAS: dict[str, type] = {
    "download": DownloadCommandConfig,
    "pretrain-scratch": PretrainConfig,
    "continual-pretrain": PretrainConfig,
    "finetune": FinetuneCommandConfig,
    "evaluate": EvaluateCommandConfig,
    "analyze": AnalyzeCommandConfig,
    "report": ReportCommandConfig,
}

ALL_SECTIONS = {f.name for schema in SCHEMAS.values() for f in fields(schema)}


def _one_line(err: OmegaConfBaseException) -> str:
    """OmegaConf messages span lines (message, full_key, object_type); keep the key and the message."""
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    key = getattr(err, "full_key", None)
    if key:
        return f"{key}: {message}"
    return message


def _run_validators(node: Any, seen: set[int] | None = None) -> None:
    """Call ``validate()`` on every section dataclass, depth first."""
    seen = seen if seen is not None else set()
    if not is_dataclass(node) or id(node) in seen:
        return
    seen.add(id(node))
    for f in fields(node):
        _run_validators(getattr(node, f.name), seen)
    check = getattr(node, "validate", None)
    if callable(check):
        try:
            check()
        except MaskingConfigError as err:
            raise UserError(f"masking: {err}") from None


def validate(cfg: DictConfig, command: str) -> Any:
    """Check a composed config against its command's schema; return the typed object."""
    schema = SCHEMAS[command]
    own = {f.name for f in fields(schema)}
    # Presets and experiments are shared by all commands, so they may set sections another command owns
    # (the tiny preset sets `trainer` and `finetune`); drop those. Any other unknown key is an error.
    keep = [k for k in cfg if k != "hydra" and (k in own or k not in ALL_SECTIONS)]
    plain = OmegaConf.masked_copy(cfg, keep)
    try:
        container = OmegaConf.to_container(plain, resolve=True)
        merged = OmegaConf.merge(OmegaConf.structured(schema), container)
        typed = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise UserError(_one_line(err)) from None
    if command == "continual-pretrain" and typed.init == "checkpoint" and not typed.model.name_or_path:
        raise UserError("model.name_or_path is not set: continual-pretrain starts from a checkpoint; give a "
                        "local checkpoint directory (e.g. a pretrain-scratch run's checkpoints/final) or a Hub id")
    if isinstance(typed, PretrainConfig) and typed.init not in ("scratch", "checkpoint"):
        raise UserError(f"init={typed.init!r}: allowed scratch, checkpoint")
    _run_validators(typed)
    return typed
