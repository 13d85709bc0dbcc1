"""One step of an experiment, and the rules that say whether it is done (the one place they live).

Every step is one femlm command with a fixed run directory (or an in-process action), so a re-run can tell what
is done by looking at files:

* pre-training (kind ``pretrain``): done when ``summary.json`` and ``checkpoints/final`` exist; a directory with
  ``run.json`` but no final checkpoint was cut and continues with ``resume=<dir>`` (femlm's exact resume);
* any other femlm command (kind ``once``): done when its output file exists (a fine-tuning ``results.json`` or a
  sweep's ``efficiency.json`` only when it says ``complete``: each is rewritten after every seed or checkpoint, and a
  stopped command leaves it incomplete); a directory left without it is moved aside to
  ``<dir>.incomplete-<time>`` and the step runs again (those commands have no resume, and femlm refuses to reuse
  a directory that holds a run);
* kind ``always`` (femlm report) runs every time in a fresh directory; kind ``inprocess`` calls its action.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Step:
    name: str  # unique and readable: "pretrain fe_subword same_rows seed 2"
    part: str  # what it belongs to: download, scratch, continual, finetune, warmup, decomposition, report, ...
    run_dir: Path
    command: list[str] = field(default_factory=list)  # femlm subcommand and its overrides (no hydra.run.dir)
    kind: str = "once"  # pretrain | once | always | inprocess
    output: str = ""  # file in run_dir whose presence means done (kind once)
    estimate_s: float = 0.0
    needs: list[Path] = field(default_factory=list)  # checkpoints it reads (made by earlier steps)
    meta: dict[str, Any] = field(default_factory=dict)  # arm, mode, seed, task, row: what results code reads
    optional: bool = False  # run only if the time budget (estimate.budget_minutes) still allows it
    action: Callable[[Any], str] | None = None  # inprocess: called with the runner, returns a line for the log
    home: Path | None = None  # the experiment's runs directory: logs/ and timings.json (None: run_dir)
    drop_states: bool = False  # pretrain: delete the resumable states (optimizer moments) once it finished

    def done(self) -> bool:
        if self.kind == "pretrain":
            return (self.run_dir / "summary.json").is_file() and (self.run_dir / "checkpoints" / "final").is_dir()
        path = self.run_dir / self.output
        if self.kind != "once" or not self.output or not path.is_file():
            return False
        if self.output in ("results.json", "efficiency.json"):  # rewritten after every seed / checkpoint: a run
            return bool(json.loads(path.read_text()).get("complete", True))  # stopped in between is not done
        return True

    def started(self) -> bool:
        return (self.run_dir / "run.json").is_file()

    def state(self) -> str:
        if self.kind in ("always", "inprocess"):
            return "runs"
        if self.done():
            return "done"
        if self.kind == "pretrain" and self.started():
            return "cut: resume"
        return "set aside" if self.run_dir.exists() else "to run"

    def args(self) -> list[str]:
        """The femlm arguments this step runs with now: a cut pre-training resumes in place."""
        if self.kind == "pretrain" and self.started():
            return [*self.command, f"resume={self.run_dir}"]
        return [*self.command, f"hydra.run.dir={self.run_dir}"]


def final(run_dir: Path) -> Path:
    """The final checkpoint of a pre-training run (what fine-tuning and continual pre-training load)."""
    return run_dir / "checkpoints" / "final"


def override_value(overrides: list[str], key: str, default: Any = None) -> Any:
    """The value a list of Hydra overrides gives `key` (the last one wins), parsed as YAML."""
    value = default
    for item in overrides:
        k, _, v = item.partition("=")
        if k.lstrip("+~") == key:
            value = yaml.safe_load(v)
    return value


def hydra_list(items: list[Any]) -> str:
    return f"[{','.join(str(i) for i in items)}]"


def hydra_quote(text: str) -> str:
    """A Hydra override value quoted so spaces, commas and quotes survive."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
