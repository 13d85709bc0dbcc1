"""Checkpoints: milestone models (`checkpoints/step_<N>/`, `final/`) and resumable training states.

Layout under `<run>/checkpoints/`:
  step_<N>/   HF `save_pretrained` model + tokenizer + femlm.json; kept (the efficiency sweep fine-tunes them)
  final/      the same, at the end of training
  state_<N>/  state.pt (model, optimizer, scheduler, scaler, step, per-rank RNG states, counters) + meta.json;
              only the newest `trainer.keep_last` are kept

Every directory is written as `<name>.tmp-<pid>`, fsynced, then renamed with `os.replace`: a run killed at any
moment leaves either the complete old state or the complete new one, never a torn file. Leftover `.tmp-`
directories are removed when a run resumes.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from femlm import provenance
from femlm.errors import UserError

STATE_RE = re.compile(r"^state_(\d+)$")
STEP_RE = re.compile(r"^step_(\d+)$")


def _fsync_tree(path: Path) -> None:
    """Flush every file and directory under `path` to disk (so the rename publishes durable bytes)."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories; the rename is still atomic
        pass
    finally:
        os.close(fd)


def atomic_dir(final: Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_dir)`, then publish `tmp_dir` as `final` in one rename."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        write(tmp)
        _fsync_tree(tmp)
        if final.exists():  # e.g. final/ of an earlier, interrupted session: replace it whole
            old = final.with_name(f"{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    except Exception as err:
        full = _out_of_space(err, tmp)  # measured before the partial copy is removed
        shutil.rmtree(tmp, ignore_errors=True)
        if full and not isinstance(err, OSError):
            # safetensors and torch.save report a full disk in their own words (torch.save: "unexpected pos"):
            # say it as the OSError it is, so the CLI reports it in one line and the run can be resumed.
            raise OSError(errno.ENOSPC, "No space left on device", str(final)) from err
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# Less free space than this after a failed write: the disk filled up.
FULL_BELOW_BYTES = 1 << 20


def _out_of_space(err: BaseException, path: Path) -> bool:
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    if any(sign in text for sign in ("No space left on device", "os error 28", "Disk quota exceeded",
                                     "os error 122")):
        return True
    try:
        return shutil.disk_usage(path).free < FULL_BELOW_BYTES
    except OSError:
        return False


def remove_partial(ckpt_dir: Path) -> list[Path]:
    """Delete `.tmp-`/`.old-` leftovers of a killed writer; returns what was removed."""
    removed = []
    if ckpt_dir.is_dir():
        for path in ckpt_dir.iterdir():
            if ".tmp-" in path.name or ".old-" in path.name:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
                removed.append(path)
    return removed


# ----------------------------------------------------------------------------------------------- milestones
def save_model(path: Path, model: torch.nn.Module, tokenizer: Any, info: provenance.Provenance) -> Path:
    """A checkpoint plain transformers can load: `AutoModelForMaskedLM.from_pretrained(path)`, with its
    femlm.json (`info`: femlm.provenance.pretrain_record)."""
    def write(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        provenance.write(tmp, info)

    return atomic_dir(path, write)


# ----------------------------------------------------------------------------------------------- RNG
def rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors and plain data, so that `torch.load(weights_only=True)` reads them
    (numpy's Mersenne Twister key as an int64 tensor, as Hugging Face Trainer keeps its RNG state loadable)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {"torch": torch.get_rng_state(),
                             "numpy": {"bit_generator": str(kind), "key": torch.from_numpy(key.astype(np.int64)),
                                       "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
                             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    saved = state["numpy"]
    if isinstance(saved, dict):
        key = saved["key"].numpy().astype(np.uint32)
        np.random.set_state((saved["bit_generator"], key, saved["pos"], saved["has_gauss"], saved["cached_gaussian"]))
    else:  # a state written before the plain form: numpy's own tuple
        np.random.set_state(saved)
    random.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------------------------- states
def state_dirs(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete resumable states, oldest first (a `.tmp-` directory never matches)."""
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := STATE_RE.match(p.name)) and p.is_dir()
             and (p / "state.pt").is_file()]
    return sorted(found)


def save_state(ckpt_dir: Path, step: int, state: dict[str, Any], meta: dict[str, Any], keep_last: int) -> Path:
    """Write `state_<step>/` atomically, then drop all but the newest `keep_last` states."""
    def write(tmp: Path) -> None:
        torch.save(state, tmp / "state.pt")
        (tmp / "meta.json").write_text(json.dumps({**meta, "step": step}, indent=2, default=str) + "\n")

    path = atomic_dir(ckpt_dir / f"state_{step}", write)
    prune_states(ckpt_dir, keep_last)
    return path


def prune_states(ckpt_dir: Path, keep_last: int) -> list[Path]:
    states = state_dirs(ckpt_dir)
    doomed = [p for _, p in states[:-keep_last]] if keep_last > 0 else [p for _, p in states]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def latest_state(ckpt_dir: Path) -> tuple[int, Path] | None:
    states = state_dirs(ckpt_dir)
    return states[-1] if states else None


# What states written before the plain RNG form hold besides tensors and plain data: numpy's RNG key array.
OLD_STATE_GLOBALS = (np._core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)))


def load_state(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A resumable state, unpickled as data only (`weights_only=True`): `resume=<dir>` may name a directory someone
    else wrote, and unpickling arbitrary objects runs their code. A state from before the plain RNG form loads
    with numpy's array types allowed (a one-line warning); anything else (a pickled callable, a class) is
    refused in one line."""
    import pickle
    import warnings

    file = path / "state.pt"
    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        pass
    try:
        with torch.serialization.safe_globals(list(OLD_STATE_GLOBALS)):
            state = torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL (\S+) was not an allowed global", str(err))
        what = found.group(1) if found else "an object that is not a tensor or plain data"
        raise UserError(f"{file}: holds {what}, not only tensors and plain data; femlm does not unpickle it "
                        "(it could run code): resume from a state femlm wrote") from None
    warnings.warn(f"{file}: written by an older femlm (numpy RNG state as a numpy array); loaded with numpy's "
                  "array types allowed; the next state is saved in the plain form", stacklevel=2)
    return state


# ----------------------------------------------------------------------------------------------- metrics
def truncate_metrics(metrics_path: Path, last_step: int) -> int:
    """Drop records with step > last_step (written after the state we resume from); returns how many."""
    if not metrics_path.is_file():
        return 0
    kept, dropped = [], 0
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line torn by the kill
            dropped += 1
            continue
        if isinstance(record.get("step"), int) and record["step"] > last_step:
            dropped += 1
            continue
        kept.append(line)
    tmp = metrics_path.with_name(metrics_path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, metrics_path)
    return dropped

