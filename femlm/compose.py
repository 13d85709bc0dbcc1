"""Composing a command's config from the package's own ``conf/`` directory, and Hydra's errors in one line.

The configs ship inside the package (femlm/conf, package data), found through the package itself, so a
wheel installed anywhere composes exactly what the source tree does.
"""

from __future__ import annotations

import re
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
                bad = foreign_override(command, list(job))
                if bad:
                    raise UserError(bad)
                out.append(hydra_compose(config_name=config_name(command), overrides=list(job),
                                         return_hydra_config=with_hydra))
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise UserError(hydra_message(err, command)) from None
    finally:
        GlobalHydra.instance().clear()
    return out


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job a `-m` command line describes, as Hydra's basic sweeper would run them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def hydra_message(err: Exception, command: str) -> str:
    """Hydra's messages span lines (a sentence, then the options); fold them into one, and say the common ones
    (an unknown group option, an unknown key, a wrong type) in femlm's `key=value: problem; allowed` form."""
    from omegaconf.errors import OmegaConfBaseException

    from femlm.config import one_line, unknown_key_message

    causes: list[BaseException] = []
    cause: BaseException | None = err
    while cause is not None:
        causes.append(cause)
        cause = cause.__cause__
    typed = next((c for c in causes if isinstance(c, OmegaConfBaseException) and getattr(c, "full_key", None)), None)
    text = " ".join(line.strip() for c in causes[:1] for line in str(c).splitlines() if line.strip())
    if not text and len(causes) > 1:  # Hydra sometimes wraps the useful message as the cause of an empty one
        text = " ".join(line.strip() for line in str(causes[1]).splitlines() if line.strip())
    missing = re.search(r"Could not find '([^']+)/([^'/]+)'\s*Available options in '[^']+':\s*(.*?)\s*"
                        r"(Config search path|$)", text)
    if missing:
        group, option = missing.group(1), missing.group(2)
        options = [o for o in missing.group(3).split() if not o.startswith("_")]
        return f"{group}={option}: no such option in femlm/conf/{group}/; allowed {', '.join(options) or '(none)'}"
    override = re.match(r"Could not override '([^']+)'", text)
    if override and "No match in the defaults list" in text:
        groups = config_groups(command)
        return (f"{override.group(1)}=...: {command} has no config group {override.group(1)!r}; its groups are "
                f"{', '.join(groups)} (set a key with key=value)")
    if typed is not None:
        return one_line(typed, command)
    in_file = re.search(r"In '([^']+)': \w+ raised while composing config: (.*?) full_key: (\S+)", text)
    if in_file:  # a bad key or value inside a group file (e.g. one the user added with hydra.searchpath)
        where, message, key = in_file.groups()
        if re.match(r"Key '[^']*' (is )?not in", message):
            return f"{where}.yaml: {unknown_key_message(command, key)}"
        return f"{where}.yaml: {key}: {message}"
    if override and any("not in struct" in str(c) or "Key '" in str(c) for c in causes):
        return unknown_key_message(command, override.group(1))
    text = re.sub(r"\s*Config search path:.*$", "", text)
    return text.replace("To append to your config use +", "to add a new key use +") or type(err).__name__


__all__ = ["CONF_DIR", "COMMANDS", "compose", "compose_jobs", "config_groups", "hydra_message", "sweep_jobs"]
