"""The package layers of docs/architecture.md: no module imports from a package above its own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "femlm"
# package -> the femlm packages it may import from ("femlm" is the package root: CONF_DIR, __version__).
ALLOWED = {
    "errors": set(),
    "stop": set(),
    "runs": {"errors", "outputs"},
    "runtime": {"errors", "runs"},
    "masking": set(),
    "paper": set(),
    "provenance": {"errors"},
    "outputs": set(),
    "data": {"femlm", "errors", "stop"},
    "models": {"data", "errors", "provenance"},
    "train": {"data", "errors", "masking", "models", "outputs", "provenance", "runs", "runtime", "stop"},
    "eval": {"data", "errors", "models", "outputs", "paper", "provenance", "runs", "runtime", "stop"},
    "analysis": {"data", "errors", "masking", "models", "outputs", "provenance", "runs", "runtime", "stop"},
    "report": {"errors", "femlm", "outputs", "paper", "provenance", "runs"},
    "commands": {"train"},
    "config": {"analysis", "commands", "data", "errors", "eval", "masking", "models", "report", "runtime", "train"},
    "compose": {"femlm", "commands", "config", "errors"},
    "cli": {"autoresume", "commands", "compose", "config", "errors", "experiment", "launch", "runs", "runtime", "stop"},
    "autoresume": set(),
    "launch": set(),
    # The experiment runner: schema, steps, resumption, subprocesses (a study's steps come from study/, by name).
    # costs.py plans a step from its composed config (compose), the CPU class (runs, runtime) and a task's split
    # sizes (data's registry).
    "experiment": {"compose", "data", "femlm", "errors", "masking", "runs", "runtime"},
    # study/gpu*.py (issue 45) runs a GPU window in its one process: every run's config composed as the CLI composes
    # it (compose, config), through femlm's one training loop (train) and `femlm finetune`'s own entry (eval).
    "study": {"analysis", "compose", "config", "data", "errors", "eval", "experiment", "femlm", "masking", "models",
              "outputs", "paper",
              "provenance", "report", "runs", "runtime", "train"},
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
                if "." in node.module:
                    targets = {node.module.split(".")[1]}
                else:  # `from femlm import provenance` imports the module; `from femlm import CONF_DIR`, the root
                    targets = {a.name if (ROOT / a.name).is_dir() or (ROOT / f"{a.name}.py").is_file() else "femlm"
                               for a in node.names}
                for target in targets - {package}:
                    found.setdefault(package, set()).add(target)
    return found


def test_every_package_imports_only_from_the_layers_below() -> None:
    found = imports()
    assert set(found) <= set(ALLOWED), f"packages missing from the layer table: {set(found) - set(ALLOWED)}"
    wrong = {pkg: sorted(targets - ALLOWED[pkg]) for pkg, targets in found.items() if targets - ALLOWED[pkg]}
    assert not wrong, f"imports that go up a layer: {wrong}"
