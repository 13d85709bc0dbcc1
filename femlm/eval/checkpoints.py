"""Which checkpoints `femlm evaluate` would read, found without torch or transformers.

`check_evaluate` is the command's `check` entry (femlm.commands): the CLI calls it before it imports the scoring
code, so a missing or wrong `evaluate.checkpoints` is one line in about a second; the run calls `find_finetuned` /
`pretraining_checkpoints` again and keeps what they return.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from femlm import provenance
from femlm.errors import UserError
from femlm.models.checkpoints import Checkpoint, locate

STEP_DIR = re.compile(r"^step_(\d+)$")


def finetuned(directory: Path) -> Checkpoint | None:
    """The directory located as a checkpoint when it holds a fine-tuned classifier (its config says
    *ForSequenceClassification), else None."""
    try:
        checkpoint = locate(str(directory), hub_check=False)
    except UserError:
        return None
    info = checkpoint.info
    return checkpoint if info is not None and any(a.endswith("ForSequenceClassification")
                                                  for a in info.architectures) else None


def find_finetuned(root: Path) -> list[tuple[Path, Checkpoint]]:
    """``root`` itself when it is a fine-tuned classifier, else every one below it (sorted), each located once."""
    if not root.exists():
        raise UserError(f"evaluate.checkpoints={root}: no such file or directory; give a fine-tuned checkpoint "
                        "(finetune.save_model=true keeps seed_<s>/model), a directory of them, or a pre-training run "
                        "directory with evaluate.sweep=true")
    itself = finetuned(root)
    if itself is not None:
        return [(root, itself)]
    below = sorted(q.parent for q in root.rglob("config.json") if q.parent != root)  # root: not a classifier
    found = [(p, c) for p in below if (c := finetuned(p)) is not None]
    if found:
        return found
    if (root / "config.json").is_file():
        raise UserError(f"evaluate.checkpoints={root}: a pre-training checkpoint (no classifier head); "
                        "fine-tune it first (femlm finetune) or pass evaluate.sweep=true with its run directory")
    raise UserError(f"evaluate.checkpoints={root}: no fine-tuned checkpoints in it (save them with "
                    "finetune.save_model=true)")


def pretraining_checkpoints(root: Path) -> list[tuple[str, Path, int | None, dict[str, Any] | None]]:
    """(name, path, step, femlm.json) of every ``step_<N>`` in a pre-training run, by step, then ``final``
    unless it repeats the last step's weights."""
    folder = root / "checkpoints" if (root / "checkpoints").is_dir() else root
    if not folder.is_dir():
        raise UserError(f"evaluate.checkpoints={root}: no such directory; give a pre-training run directory")
    found = []
    for path in folder.iterdir():
        match = STEP_DIR.match(path.name)
        if match and (path / "config.json").is_file():
            found.append((path.name, path, int(match.group(1)), provenance.read(path)))
    found.sort(key=lambda item: item[2])
    final = folder / "final"
    if (final / "config.json").is_file():
        info = provenance.read(final)
        step = (info or {}).get("step")
        if step is None or step not in {item[2] for item in found}:
            found.append(("final", final, step, info))
    if not found:
        raise UserError(f"evaluate.checkpoints={root}: no checkpoints/step_<N> or checkpoints/final with a "
                        "config.json; give a pre-training run directory")
    return found


def check_evaluate(cfg: Any) -> None:
    """`evaluate.checkpoints` holds what the run would score: fine-tuned classifiers, or with evaluate.sweep a
    pre-training run's checkpoints. Not set: the config's own validation says so first."""
    if not cfg.evaluate.checkpoints:
        return
    root = Path(cfg.evaluate.checkpoints).expanduser()
    if cfg.evaluate.sweep:
        pretraining_checkpoints(root)
    else:
        find_finetuned(root)
