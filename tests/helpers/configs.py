"""The package's configs as the CLI composes them, for tests that need a task, a domain or a whole config."""

from __future__ import annotations

import copy
import functools
from typing import Any

from femlm.compose import CONF_DIR, compose
from femlm.config import validate


@functools.cache
def _typed(command: str, overrides: tuple[str, ...]) -> Any:
    return validate(compose(command, list(overrides)), command)


def composed(command: str, *overrides: str) -> Any:
    """The validated FemlmConfig of `femlm <command> <overrides>` (a fresh copy: tests may change it)."""
    return copy.deepcopy(_typed(command, tuple(overrides)))


def options(group: str) -> list[str]:
    """Every option of a config group (shared blocks, files starting with _, excluded)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if not p.stem.startswith("_"))


def task(name: str) -> Any:
    return composed("finetune", f"task={name}").task


def domain(name: str) -> Any:
    """The domain as its file states it: the offline stand-in sources (preset=paper swaps in paper_sources)."""
    return composed("continual-pretrain", "preset=tiny", f"domain={name}").domain


TASK_NAMES = options("task")
DOMAIN_NAMES = options("domain")
STUDY_DOMAINS = ("wikipedia", "acl")  # the GPU study's corpora (issue 45): millions of tokens, not mirror samples


def experiment_file(tmp_path: Any, monkeypatch: Any, name: str, text: str) -> None:
    """Make `femlm.experiment.schema.load(name)` read `text` as femlm/conf/experiment/<name>.yaml (in `tmp_path`)."""
    folder = tmp_path / "experiment"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    monkeypatch.setattr("femlm.experiment.schema.conf_dir", lambda: folder)
