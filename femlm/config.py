"""The typed schema every command composes onto, and start-up validation.

`FemlmConfig` holds every section any command reads, each a dataclass of its package (femlm/<pkg>/config.py),
so the dataclasses are the one home of every default and type. Hydra composes ``femlm/conf/<command>.yaml``
onto this schema (registered in its ConfigStore as ``femlm_schema``): a group file holds only what its option
changes, a misspelled key or a wrong type fails during composition, and presets (tiny, paper) may set any
section. A command uses only its own sections (femlm.commands); `validate` checks those, runs each section's
``validate()`` for the rules a type cannot express, and returns the typed object. Every failure is a
`UserError`: one line, exit status 2.
"""

# ruff: noqa: UP045 - Optional[...]: OmegaConf structured configs read these annotations at run time
from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from typing import Any, Optional, get_type_hints

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from femlm.analysis.config import AnalysisConfig
from femlm.data.config import DataConfig, DomainConfig, DownloadConfig, TaskConfig
from femlm.errors import UserError
from femlm.eval.config import EvaluateConfig, FinetuneConfig
from femlm.masking import MaskingConfig, MaskingConfigError
from femlm.models.config import ModelConfig
from femlm.report.config import ReportConfig
from femlm.runtime.config import RuntimeConfig
from femlm.train.config import LoggerConfig, TrainerConfig

SCHEMA_NAME = "femlm_schema"


# Every section: its key and its schema, a dataclass of the package that reads it.
SECTION_SCHEMAS: dict[str, type] = {
    "download": DownloadConfig, "logger": LoggerConfig, "runtime": RuntimeConfig, "model": ModelConfig,
    "domain": DomainConfig, "data": DataConfig, "masking": MaskingConfig, "trainer": TrainerConfig,
    "task": TaskConfig, "finetune": FinetuneConfig, "evaluate": EvaluateConfig, "analysis": AnalysisConfig,
    "report": ReportConfig,
}


@dataclass
class TopLevel:
    command: str = "?"
    seed: int = 0
    dry_run: bool = False
    # Pre-training only. None: a fresh run; true: continue this command's newest run; a run directory: that run.
    resume: Optional[str] = None


# The schema: the top-level keys, then one field per section (cfg.trainer is a TrainerConfig, ...).
FemlmConfig = make_dataclass("FemlmConfig", [(name, schema, field(default_factory=schema))
                                             for name, schema in SECTION_SCHEMAS.items()], bases=(TopLevel,))
FemlmConfig.__module__ = __name__

TOP_LEVEL = tuple(f.name for f in fields(TopLevel))
SECTIONS = tuple(SECTION_SCHEMAS)


def register_schema() -> None:
    """Put the schema in Hydra's ConfigStore (idempotent): the primary configs list it first."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=FemlmConfig)


def command_keys(command: str) -> tuple[str, ...]:
    """The top-level keys a command's config holds: its sections and the shared scalars."""
    from femlm.commands import COMMANDS

    top = TOP_LEVEL if COMMANDS[command].resumable else tuple(k for k in TOP_LEVEL if k != "resume")
    return (*top, *COMMANDS[command].sections)


def unknown_key_message(command: str, full_key: str) -> str:
    """`trainer.mx_steps: no such key; did you mean trainer.max_steps? trainer keys: ...` from the schema."""
    node: Any = FemlmConfig
    path: list[str] = []
    for part in full_key.split("."):
        if node is None or not is_dataclass(node):
            break
        names = [f.name for f in fields(node)] if path else list(command_keys(command))
        if part not in names:
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"did you mean {'.'.join([*path, close[0]])}? " if close else ""
            scope = f"{'.'.join(path)} keys" if path else f"{command} keys"
            return f"{full_key}: no such key; {hint}{scope}: {', '.join(names)}"
        try:
            node = get_type_hints(node).get(part)
        except (NameError, TypeError):
            break
        path.append(part)
    # Below a free-form mapping (model.arch): any key may be added, with a +.
    return f"{full_key}: not in the composed config; add a free-form key with +{full_key}=<value>"


def foreign_override(command: str, overrides: list[str]) -> str | None:
    """A one-line error for a command-line key of a section this command does not read (None: all fine).

    Presets may set every section (the schema has them all), so without this check `femlm finetune
    trainer.max_steps=5` would compose and then be silently ignored."""
    from femlm.commands import COMMANDS

    own = set(command_keys(command))
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        top = key.split(".", 1)[0]
        if "=" in override and "/" not in key and top in SECTIONS and top not in own and not key.startswith("hydra"):
            theirs = [n for n, c in COMMANDS.items() if top in c.sections]
            return (f"{key}: {command} has no {top} section (its sections are "
                    f"{', '.join(COMMANDS[command].sections)}); {top} belongs to {', '.join(theirs)}")
    return None


def one_line(err: OmegaConfBaseException, command: str) -> str:
    """OmegaConf messages span lines (message, full_key, object_type); keep the key and the message."""
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    key = getattr(err, "full_key", None)
    if key and (isinstance(err, ConfigKeyError) or re.match(r"Key '[^']*' (is )?not in", message)):
        return unknown_key_message(command, key)
    wrong = re.match(r"Value '(.*?)' (?:of type '\w+' )?could not be converted to (\w+)", message)
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


def _run_validators(node: Any) -> None:
    """Call ``validate()`` on a section dataclass and every dataclass inside it, depth first."""
    if not is_dataclass(node):
        return
    for f in fields(node):
        _run_validators(getattr(node, f.name))
    check = getattr(node, "validate", None)
    if callable(check):
        try:
            check()
        except MaskingConfigError as err:
            raise UserError(f"masking: {err}") from None


@functools.cache
def _schema() -> DictConfig:
    """The schema as an OmegaConf node, built once per process (half of a validation's time otherwise; merge
    copies it and never changes it)."""
    return OmegaConf.structured(FemlmConfig)


def to_typed(cfg: DictConfig, command: str) -> Any:
    """The composed config as the schema's dataclass objects, interpolations resolved."""
    plain = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    try:
        merged = OmegaConf.merge(_schema(), OmegaConf.to_container(plain, resolve=True))
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise UserError(one_line(err, command)) from None


def validate(cfg: DictConfig, command: str) -> Any:
    """Check a composed config's own sections; return the typed object (other sections keep their defaults)."""
    from femlm.commands import COMMANDS

    typed = to_typed(cfg, command)
    for section in COMMANDS[command].sections:
        _run_validators(getattr(typed, section))
    if typed.resume is not None and not COMMANDS[command].resumable:
        raise UserError(f"resume={typed.resume}: only pre-training runs resume ({', '.join(n for n, c in COMMANDS.items() if c.resumable)})")
    return typed


def command_config(cfg: Any, command: str) -> dict[str, Any]:
    """The part of a config (typed or DictConfig) that a command reads, as plain data (config.yaml, plans)."""
    keys = command_keys(command)
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in keys if k in cfg]), resolve=True)
    container = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    return {k: container[k] for k in keys}
