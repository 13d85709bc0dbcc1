"""Composing a command's config from the package's own ``conf/`` directory, and Hydra's errors in one line.

Only Hydra's public API: `hydra.compose` under `initialize_config_dir`, the override parser for `-m` sweeps, and
its exceptions' types and attributes for the one-line errors (Hydra's message text is never parsed: an error
without a known type is Hydra's own message, folded into one line).

The configs ship inside the package (femlm/conf, package data), found through the package itself, so a
wheel installed anywhere composes exactly what the source tree does.
"""

from __future__ import annotations

import itertools
from typing import Any

import yaml

from femlm import CONF_DIR
from femlm.commands import COMMANDS, config_name
from femlm.errors import UserError


def config_groups(command: str) -> dict[str, list[str]]:
    """The groups a command's primary config composes, with their options (files starting with _ are shared
    blocks that options compose, not options)."""
    primary = yaml.safe_load((CONF_DIR / f"{config_name(command)}.yaml").read_text()) or {}
    groups: dict[str, list[str]] = {}
    for entry in primary.get("defaults", []):
        if isinstance(entry, dict):
            group = next(iter(entry)).replace("optional ", "").strip()
            folder = CONF_DIR / group
            if group != "hydra" and folder.is_dir():
                groups[group] = sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("_"))
    return groups


def compose(command: str, overrides: list[str], with_hydra: bool = False) -> Any:
    """The composed DictConfig of `femlm <command> <overrides>` (Hydra errors become one-line UserErrors)."""
    return compose_jobs(command, [list(overrides)], with_hydra)[0]


def compose_jobs(command: str, jobs: list[list[str]], with_hydra: bool = False) -> list[Any]:
    """Each job's composed DictConfig, through Hydra's public compose API; a job that cannot compose raises a
    one-line UserError (`hydra_message`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from femlm.config import foreign_override, register_schema

    register_schema()
    out = []
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            for job in jobs:
                bad = foreign_override(command, list(job)) or _foreign_group(command, list(job))
                if bad:
                    raise UserError(bad)
                try:
                    out.append(hydra_compose(config_name=config_name(command), overrides=list(job),
                                             return_hydra_config=with_hydra))
                except (HydraException, OmegaConfBaseException, ValueError) as err:
                    raise UserError(hydra_message(err, command, list(job))) from None
    finally:
        GlobalHydra.instance().clear()
    return out


def _parse(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides)


def _foreign_group(command: str, overrides: list[str]) -> str | None:
    """`group=option` for a femlm config group this command does not compose (Hydra would say "No match in the
    defaults list"): one line naming the command's groups."""
    from hydra.errors import HydraException

    try:
        parsed = _parse(overrides)
    except HydraException:
        return None  # Hydra's own parse error, said by hydra_message
    groups = config_groups(command)
    for override in parsed:
        group = override.key_or_group
        if (override.package is None and not override.is_add() and not override.is_delete() and "." not in group
                and "/" not in group and (CONF_DIR / group).is_dir() and group != "hydra" and group not in groups):
            theirs = f"its groups are {', '.join(groups)}" if groups else "it has none"
            return f"{group}=...: {command} has no config group {group!r}; {theirs} (set a key with key=value)"
    return None


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job a `-m` command line describes, as Hydra's basic sweeper runs them: the product of each key's
    comma-separated values, in the order the keys first appear (a later value of a key replaces an earlier)."""
    from hydra.errors import HydraException

    try:
        parsed = _parse(overrides)
    except HydraException as err:
        raise UserError(hydra_message(err, "", overrides)) from None
    choices: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise UserError(f"{override.input_line}: a range or interval sweep; the basic sweeper takes a "
                                "list of values (key=a,b,c)")
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


def _chain(err: BaseException) -> list[BaseException]:
    """The exception and what it was raised from (explicitly, else implicitly), outermost first."""
    out: list[BaseException] = []
    node: BaseException | None = err
    while node is not None and node not in out:
        out.append(node)
        node = node.__cause__ or node.__context__
    return out


def hydra_message(err: Exception, command: str, overrides: list[str] | None = None) -> str:
    """Hydra's errors in femlm's one-line `key=value: problem; allowed` form, read from the exceptions'
    types and attributes (a missing group option, a wrong key or type on the command line or in a group file);
    anything else is Hydra's own message folded into one line."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from femlm.config import one_line

    chain = _chain(err)
    missing = next((c for c in chain if isinstance(c, MissingConfigException)), None)
    if missing is not None and missing.missing_cfg_file and "/" in missing.missing_cfg_file:
        group, option = missing.missing_cfg_file.rsplit("/", 1)
        options = [o for o in (missing.options or []) if not o.startswith("_")]
        return f"{group}={option}: no such option in femlm/conf/{group}/; allowed {', '.join(options) or '(none)'}"
    typed = next((c for c in chain if isinstance(c, OmegaConfBaseException) and getattr(c, "full_key", None)), None)
    if typed is not None:
        message = one_line(typed, command)
        if typed is not err and typed is not err.__cause__:  # raised merging a group file, not by an override
            group = str(typed.full_key).split(".", 1)[0]
            option = next((str(o.value()) for o in _safe_parse(overrides or []) if o.key_or_group == group), None)
            return f"{group}/{option}.yaml: {message}" if option else f"femlm/conf/{group}: {message}"
        return message
    said = next((c for c in chain[:2] if str(c).strip()), err)  # Hydra may wrap the message in an empty one
    lines = [line.strip() for line in str(said).splitlines() if line.strip()]
    lines = lines[:next((i for i, line in enumerate(lines) if line.startswith("Config search path")), len(lines))]
    return " ".join(lines) or type(err).__name__


def _safe_parse(overrides: list[str]) -> list[Any]:
    try:
        return _parse(overrides)
    except Exception:  # noqa: BLE001 - only used to name a group file in a message
        return []


__all__ = ["CONF_DIR", "COMMANDS", "compose", "compose_jobs", "config_groups", "hydra_message", "sweep_jobs"]
