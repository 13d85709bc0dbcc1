"""femlm.json: what made a checkpoint, written and read here and nowhere else.

Two kinds, one file name, one type (`Provenance`, the record as a dict, so the files and the copies that
results.json embeds are the same JSON):

- a pre-training checkpoint (`checkpoints/step_<N>/`, `checkpoints/final/`): `pretrain_record`
  `{"kind": "pretrain", "command", "masking", "strategy", "granularity", "num_masks", "domain", "model", "step",
  "max_steps", "equal_compute", "precision", "tf32", "run_dir", "init_from", "attn_implementation", "prediction"}`
  (`tf32`: fp32 matmuls on TF32 tensor cores, runtime.tf32; null off CUDA and in records older than issue 46);
- a fine-tuned classifier (`finetune.save_model=true`: `seed_<s>/model/`): `finetune_record`
  `{"kind": "finetune", "task", "seed", "checkpoint", "best_epoch", "max_length", "pretrain": <its checkpoint's
  record or null>}`.

`weights_sha256` is the other half of what a result records about its encoder (`ResolvedModel.describe`, under
`encoder` in summary.json, results.json, analysis.json): which weights file of a local checkpoint was run, by sha256.

Older files are read here too, and only here: a record is kept as written (results.json copies it verbatim), and
the properties below answer for every version (`num_masks` was once `splits`; a record without `command` was
continual when it names `init_from`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from femlm.errors import UserError

FILE = "femlm.json"


class Provenance(dict):
    """A femlm.json record; the properties read it whatever version wrote it."""

    @classmethod
    def of(cls, record: Any) -> Provenance | None:
        """A record (a dict read from femlm.json or embedded in results.json) as a Provenance; None otherwise."""
        if isinstance(record, Provenance):
            return record
        return cls(record) if isinstance(record, dict) else None

    @property
    def kind(self) -> str:
        return str(self.get("kind") or "pretrain")

    @property
    def stage(self) -> str:
        """How the checkpoint was pre-trained: "continual" (from another checkpoint) or "scratch"."""
        command = str(self.get("command") or "")
        continual = "continual" in command or (not command and bool(self.get("init_from")))
        return "continual" if continual else "scratch"

    @property
    def masking(self) -> str | None:
        value = self.get("masking")
        return str(value) if value else None

    @property
    def num_masks(self) -> int | None:
        """K of the masking arm (written as "splits" before the rename)."""
        return _int(self.get("num_masks", self.get("splits")))

    @property
    def step(self) -> int | None:
        return _int(self.get("step"))

    @property
    def pretrain(self) -> Provenance | None:
        """A fine-tuned classifier's pre-training record (None for a pre-training record)."""
        return Provenance.of(self.get("pretrain"))


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def pretrain_record(*, command: str, masking: Any, domain: str, model: str, step: int, max_steps: int,
                    equal_compute: str, precision: str, run_dir: Path, **origin: Any) -> Provenance:
    """The record of a pre-training checkpoint; `masking` is the run's MaskingConfig; `origin`: init_from, the
    attention implementation and the prediction path."""
    return Provenance({"kind": "pretrain", "command": command, "masking": masking.name, "strategy": masking.strategy,
                       "granularity": masking.granularity, "num_masks": masking.num_copies, "domain": domain,
                       "model": model, "step": step, "max_steps": max_steps, "equal_compute": equal_compute,
                       "precision": precision, "run_dir": str(run_dir), **origin})


def finetune_record(*, task: str, seed: int, checkpoint: str, best_epoch: int, max_length: int,
                    pretrain: dict[str, Any] | None) -> Provenance:
    """The record of a saved fine-tuned classifier: its task and seed, the checkpoint it was fine-tuned from and
    that checkpoint's own record, and the input length it was trained with (`femlm evaluate` uses it)."""
    return Provenance({"kind": "finetune", "task": task, "seed": seed, "checkpoint": checkpoint,
                       "best_epoch": best_epoch, "max_length": max_length, "pretrain": pretrain})


def write(directory: Path, record: dict[str, Any]) -> Path:
    """`directory`/femlm.json (the caller writes the directory atomically where it must be)."""
    path = Path(directory) / FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def read(directory: Path) -> Provenance | None:
    """The femlm.json in `directory` (None when there is none); a file that is not JSON is refused in one line."""
    path = Path(directory) / FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise UserError(f"{path}: not valid JSON ({getattr(err, 'msg', err)})") from None
    return Provenance.of(data) if isinstance(data, dict) else None


SINGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def weights_sha256(directory: Path) -> dict[str, Any]:
    """`{"weights": file, "sha256": hex}` of a local checkpoint's weights file (what transformers loads first);
    a sharded checkpoint: `{"weights": [shards], "sha256": hex of the shards' sha256s joined in name order}`;
    `{"weights": None, "sha256": None}` when the directory holds none. Hashed once per file version."""
    directory = Path(directory)
    for index in SHARD_INDEXES:
        if (directory / index).is_file():
            try:
                shards = sorted(set(json.loads((directory / index).read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError):
                break
            digests = [_file_sha256(directory / shard) for shard in shards]
            if None in digests:
                break
            return {"weights": shards, "sha256": hashlib.sha256("\n".join(digests).encode()).hexdigest()}
    for name in SINGLE_WEIGHTS:
        digest = _file_sha256(directory / name)
        if digest is not None:
            return {"weights": name, "sha256": digest}
    return {"weights": None, "sha256": None}


def _file_sha256(path: Path) -> str | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return _cached_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _cached_sha256(path: str, _size: int, _mtime_ns: int) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None
