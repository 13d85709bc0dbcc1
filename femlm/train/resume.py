"""A resumed run is the same run: the config it was started with, except what only changes speed or records.

`pretrain_config.json` holds the run's config; a resume may change the `runtime` section (speed and cadence:
device, threads, precision, micro-batches, log/eval/save), `logger` (what is recorded, the variance probe),
`download` (where files are read from; their checksums do not change), `dry_run`, `resume` itself, and
`trainer.max_steps` (to extend a run: the schedule stretches from the current step) with its guard
`trainer.max_passes`. Anything else differing
is refused with the first differing key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.train.config import PRETRAIN_SECTIONS

CONFIG_FILE = "pretrain_config.json"
# "experiment": runs saved before issue 30 recorded the experiment plan in their config; it never changed results.
# "masking.label": how tables name the arm (issue 47), display only.
MAY_CHANGE = ("runtime", "logger", "download", "dry_run", "resume", "trainer.max_steps", "trainer.max_passes",
              "experiment", "masking.label")
# Keys added to the schema after runs were saved, with the value that means what those runs did: a run saved
# without them resumes when they hold that value.
ADDED_LATER = {"masking.ratio_schedule": "constant", "masking.ratio_final": None}


def config_dict(cfg: Any) -> dict[str, Any]:
    """The typed config as JSON-ready data: the top-level keys and the sections a pre-training run reads."""
    keep = [f.name for f in dataclasses.fields(cfg)
            if f.name in PRETRAIN_SECTIONS or not dataclasses.is_dataclass(getattr(cfg, f.name))]
    data = json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
    return {k: data[k] for k in keep}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _may_change(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in MAY_CHANGE)


def first_difference(saved: dict[str, Any], current: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first key (in config order) whose value differs, ignoring what a resume may change."""
    old, new = {**ADDED_LATER, **_flatten(saved)}, _flatten(current)
    for key in list(new) + [k for k in old if k not in new]:
        if not _may_change(key) and old.get(key, "<absent>") != new.get(key, "<absent>"):
            return key, old.get(key, "<absent>"), new.get(key, "<absent>")
    return None


def check_resume(run_dir: Path, current: dict[str, Any], writer: bool = True) -> dict[str, Any] | None:
    """Refuse to continue a run with a different config; returns the saved config (None: nothing saved)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    diff = first_difference(saved, current)
    if diff is not None:
        key, old, new = diff
        if writer:  # the CLI already rewrote config.yaml with the refused config: put the run's own back
            import yaml

            (run_dir / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
        raise UserError(f"resume: {key}={new!r} differs from the run being resumed ({key}={old!r} in {path}); "
                        "resume with the original run's overrides (its config.yaml) or start a new run")
    if saved.get("trainer", {}).get("max_steps") != current["trainer"]["max_steps"]:
        warnings.warn("trainer.max_steps changed on resume: the learning-rate schedule (and a linear "
                      "masking.ratio_schedule) is stretched to the new length from the current step on", stacklevel=2)
    return saved


def write_config(run_dir: Path, current: dict[str, Any]) -> None:
    path = run_dir / CONFIG_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(current, indent=2) + "\n")
    os.replace(tmp, path)
