"""The package layers of docs/architecture.md: no module imports from a package above its own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "femlm"
# package -> the femlm packages it may import from ("femlm" is the package root: CONF_DIR, __version__).
ALLOWED = {
    "errors": set(),
    "stop": set(),
    "runs": {"errors"},
    "runtime": {"errors", "runs"},
    "masking": set(),
    "paper": set(),
    "data": {"femlm", "errors", "stop"},
    "models": {"data", "errors"},
    "train": {"data", "errors", "masking", "models", "runs", "runtime", "stop"},
    "eval": {"data", "errors", "models", "paper", "runs", "runtime", "stop"},
    "analysis": {"data", "errors", "masking", "models", "runs", "runtime", "stop"},
    "report": {"femlm", "errors", "paper", "runs"},
    "commands": {"train"},
    "config": {"analysis", "commands", "data", "errors", "eval", "masking", "models", "report", "runtime", "train"},
    "compose": {"femlm", "commands", "config", "errors"},
    "cli": {"autoresume", "commands", "compose", "config", "errors", "launch", "runs", "runtime", "stop"},
    "autoresume": set(),
    "launch": set(),
    "study": {"analysis", "data", "errors", "models", "report", "runs"},
}


def imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        package = parts[0].removesuffix(".py")
        if package == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "femlm":
                target = node.module.split(".")[1] if "." in node.module else "femlm"
                if target != package:
                    found.setdefault(package, set()).add(target)
    return found


def test_every_package_imports_only_from_the_layers_below() -> None:
    found = imports()
    assert set(found) <= set(ALLOWED), f"packages missing from the layer table: {set(found) - set(ALLOWED)}"
    wrong = {pkg: sorted(targets - ALLOWED[pkg]) for pkg, targets in found.items() if targets - ALLOWED[pkg]}
    assert not wrong, f"imports that go up a layer: {wrong}"
