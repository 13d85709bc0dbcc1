"""Per-command config schemas and start-up validation.

Hydra composes ``conf/<command>.yaml`` with its groups; `validate` then merges the result into the
command's dataclass schema (so unknown keys and wrong types are caught with the key's full name) and runs
each section's own ``validate()`` for the rules a type cannot express (``masking.splits * masking.ratio <= 1``,
positive sizes, known choices). Every failure is a `UserError`: one line, exit status 2.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

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


def unknown_key_message(command: str, full_key: str) -> str:
    """`trainer.mx_steps: no such key; did you mean trainer.max_steps? trainer keys: ...` from the schema."""
    node: Any = SCHEMAS.get(command)
    path: list[str] = []
    for part in full_key.split("."):
        if node is None or not is_dataclass(node):
            break
        names = [f.name for f in fields(node)]
        if part not in names:
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"did you mean {'.'.join([*path, close[0]])}? " if close else ""
            scope = f"{'.'.join(path)} keys" if path else "top-level keys"
            return f"{full_key}: no such key; {hint}{scope}: {', '.join(names)}"
        try:
            node = get_type_hints(node).get(part)
        except (NameError, TypeError):
            break
        path.append(part)
    # Below a free-form mapping (model.arch, experiment, task.paper): any key may be added, with a +.
    return f"{full_key}: not in the composed config; add a free-form key with +{full_key}=<value>"


def _one_line(err: OmegaConfBaseException, command: str) -> str:
    """OmegaConf messages span lines (message, full_key, object_type); keep the key and the message."""
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    key = getattr(err, "full_key", None)
    if key and isinstance(err, ConfigKeyError):
        return unknown_key_message(command, key)
    wrong = re.match(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", message)
    if key and wrong:
        expected = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}.get(
            wrong.group(2), wrong.group(2))
        return f"{key}={wrong.group(1)!r}: expected {expected}"
    not_bool = re.match(r"Value '(.*)' is not a valid bool", message)
    if key and not_bool:
        return f"{key}={not_bool.group(1)!r}: expected true or false"
    if key and "is not a ListConfig, list or tuple" in message:
        return f"{key}: expected a list, e.g. {key}=[a,b]"
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
        raise UserError(_one_line(err, command)) from None
    if isinstance(typed, PretrainConfig) and typed.init not in ("scratch", "checkpoint"):
        raise UserError(f"init={typed.init!r}: allowed scratch, checkpoint")
    # The values given first (they are what the user typed), then what is missing.
    _run_validators(typed)
    if command == "continual-pretrain" and typed.init == "checkpoint" and not typed.model.name_or_path:
        raise UserError("model.name_or_path is not set: continual-pretrain starts from a checkpoint; give a "
                        "local checkpoint directory (e.g. a pretrain-scratch run's checkpoints/final) or a Hub id")
    _check_block_size(typed)
    _check_pretrain_checkpoint(typed)
    return typed


_HEAD_ONLY_ARCHS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                    "ForMultipleChoice")


def _looks_local(name: str) -> bool:
    """A path rather than a Hub id (`roberta-base`, `org/model`)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def _check_pretrain_checkpoint(typed: Any) -> None:
    """Local paths a command reads, checked before a run directory is made or torch imported: that they exist
    and, for the masked-LM checkpoint of pre-training or analysis, that it has a config.json which is not a
    classifier's. femlm.train / femlm.eval repeat the checks (and check the weights) when they load."""
    if isinstance(typed, EvaluateCommandConfig):
        value = typed.evaluate.checkpoints
        if value and not Path(value).expanduser().exists():
            raise UserError(f"evaluate.checkpoints={value}: no such file or directory; give a fine-tuned "
                            "checkpoint (finetune.save_model=true keeps seed_<s>/model), a directory of them, or a "
                            "pre-training run directory with evaluate.sweep=true")
        return
    model = getattr(typed, "model", None)
    if isinstance(typed, FinetuneCommandConfig):
        name = model.name_or_path
        if name and _looks_local(str(name)) and not Path(name).expanduser().exists():
            raise UserError(f"model.name_or_path={name}: no such checkpoint directory; give a directory holding "
                            "config.json and weights (e.g. a pre-training run's checkpoints/final) or a Hub id")
        return
    uses_checkpoint = (isinstance(typed, PretrainConfig) and typed.init == "checkpoint") or isinstance(
        typed, AnalyzeCommandConfig)
    if model is None or not uses_checkpoint or not model.name_or_path:
        return
    name = str(model.name_or_path)
    path = Path(name).expanduser()
    key = f"model.name_or_path={name}"
    if not path.exists():
        if _looks_local(name):
            raise UserError(f"{key}: no such checkpoint directory; give a directory holding config.json and "
                            "weights (e.g. a pretrain-scratch run's checkpoints/final) or set init=scratch")
        return  # a Hub id (or a mirror name): checked when it is fetched
    if not path.is_dir():
        raise UserError(f"{key}: not a directory; give a checkpoint directory holding config.json and weights")
    config = path / "config.json"
    if not config.is_file():
        raise UserError(f"{key}: not a checkpoint directory (no config.json)")
    try:
        archs = json.loads(config.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return  # the loader reports an unreadable config.json with the parser's reason
    heads = [a for a in archs if isinstance(a, str) and a.endswith(_HEAD_ONLY_ARCHS)]
    if archs and len(heads) == len(archs):
        raise UserError(f"{key}: a {heads[0]} checkpoint; pre-training needs a masked-LM checkpoint (e.g. "
                        "checkpoints/final of a pre-training run), not a fine-tuned classifier")


# Models whose position ids start after the padding index (RoBERTa: 514 positions hold 512 tokens); the
# run-time check in femlm.train.model.max_tokens knows the exact offset, this start-up check assumes pad id 1.
_PADDING_OFFSET_TYPES = {"roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod",
                         "roberta-prelayernorm"}


def _check_block_size(typed: Any) -> None:
    """data.block_size against the position embeddings of a model built from `model.arch`, before any work.

    Models loaded from a checkpoint (or a mirror config.json) are checked when they are loaded, still before the
    first step; this catches the common case (a preset's architecture) without reading a corpus first.
    """
    data, model = getattr(typed, "data", None), getattr(typed, "model", None)
    if data is None or model is None or model.config_name:
        return
    from_arch = getattr(typed, "init", None) == "scratch" or (
        isinstance(typed, AnalyzeCommandConfig) and not model.name_or_path)
    positions = (model.arch or {}).get("max_position_embeddings")
    if not from_arch or not isinstance(positions, int):
        return
    offset = 2 if model.arch.get("model_type") in _PADDING_OFFSET_TYPES else 0
    limit = positions - offset
    if data.block_size > limit:
        raise UserError(f"data.block_size={data.block_size} is beyond what model={model.name} can hold ({limit} "
                        f"tokens, model.arch.max_position_embeddings={positions}); lower data.block_size or raise "
                        "model.arch.max_position_embeddings")
