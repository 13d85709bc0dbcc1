"""Read the experiment plans in conf/experiment/ (for scripts/reproduce_*.sh).

Each ``conf/experiment/<name>.yaml`` is a Hydra ``# @package _global_`` file whose ``experiment:`` block
declares one table end to end: preset, pre-training stages and their masking arms, domain, tasks, seeds,
the report's scale phrase and the expected cost. The scripts read it through this module so that the shell
never parses YAML itself:

    python -m femlm.report.experiment tiny scratch.arms      # one value per line
    python -m femlm.report.experiment tiny report.scale
    python -m femlm.report.experiment --list
    python -m femlm.report.experiment tiny --dump0           # every key: NUL-separated key, value pairs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from femlm.errors import UserError


def conf_dir() -> Path:
    from femlm import CONF_DIR

    return CONF_DIR


def names() -> list[str]:
    return sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))


def load_experiment(name: str) -> dict[str, Any]:
    path = conf_dir() / "experiment" / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"experiment={name!r}: no {path}; allowed {', '.join(names()) or '(none)'}")
    data = yaml.safe_load(path.read_text()) or {}
    plan = data.get("experiment") if isinstance(data, dict) else None
    if not isinstance(plan, dict):
        raise UserError(f"{path}: has no `experiment:` block")
    return plan


def lookup(plan: dict[str, Any], dotted: str) -> Any:
    node: Any = plan
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise UserError(f"experiment key {dotted!r} not found (at {part!r})")
        node = node[part]
    return node


def shell_words(value: Any) -> list[str]:
    """Lists one item per line (read with `mapfile -t`), scalars as one line, mappings as JSON."""
    if value is None:
        return []
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, list):
        return [w for item in value for w in shell_words(item)] if all(
            not isinstance(i, (list, dict)) for i in value) else [json.dumps(value)]
    if isinstance(value, dict):
        return [json.dumps(value)]
    return [str(value)]


def flatten(plan: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a.b": value} for every key path, mappings included (as well as their leaves)."""
    out: dict[str, Any] = {}
    for key, value in plan.items():
        path = f"{prefix}{key}"
        out[path] = value
        if isinstance(value, dict):
            out.update(flatten(value, f"{path}."))
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args == ["--list"]:
            print("\n".join(names()))
            return 0
        if len(args) == 2 and args[1] == "--dump0":
            # One read for the shell: key NUL value NUL ... (a value's items are newline-separated).
            for key, value in flatten(load_experiment(args[0])).items():
                sys.stdout.write(f"{key}\0{chr(10).join(shell_words(value))}\0")
            return 0
        if len(args) != 2:
            print("usage: python -m femlm.report.experiment NAME KEY.PATH | NAME --dump0 | --list",
                  file=sys.stderr)
            return 2
        for line in shell_words(lookup(load_experiment(args[0]), args[1])):
            print(line)
        return 0
    except UserError as err:
        print(f"femlm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
