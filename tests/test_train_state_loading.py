"""Loading only data (issue 29, item 3): a resumable state is read with torch.load(weights_only=True); a state
from before the plain RNG form loads with a one-line warning; one carrying a pickled callable is refused in one
line and the callable never runs."""

from __future__ import annotations

import pickle
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from femlm.errors import UserError
from femlm.train import checkpoint as ckpt
from helpers.tiny import tiny_core

torch.set_num_threads(1)


def write_state(tmp_path: Path, rng: dict) -> Path:
    core = tiny_core()
    core.step(1)
    state = {"core": core.state_dict(), "rng": [rng], "progress": {"step": 1}, "world_size": 1,
             "eval_pending": False}
    return ckpt.save_state(tmp_path / "checkpoints", 1, state, {"kind": "pretrain"}, keep_last=2)


def test_a_saved_state_is_plain_data_and_restores_every_rng(tmp_path: Path) -> None:
    np.random.seed(3)
    random.seed(3)
    torch.manual_seed(3)
    rng = ckpt.rng_state()
    expected = (np.random.rand(3), random.random(), torch.rand(3))
    path = write_state(tmp_path, rng)
    state = torch.load(path / "state.pt", weights_only=True)  # plain torch, no allowlist: tensors and data only
    assert set(state["core"]) == {"model", "optimizer", "scheduler", "scaler"}
    np.random.seed(99)
    random.seed(99)
    ckpt.set_rng_state(ckpt.load_state(path)["rng"][0])
    got = (np.random.rand(3), random.random(), torch.rand(3))
    assert np.array_equal(got[0], expected[0]) and got[1] == expected[1] and torch.equal(got[2], expected[2])


def test_an_older_state_loads_with_a_one_line_warning(tmp_path: Path) -> None:
    np.random.seed(5)
    old_rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    expected = np.random.rand(2)
    path = write_state(tmp_path, old_rng)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path / "state.pt", weights_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = ckpt.load_state(path)
    (warning,) = [w for w in caught if "older femlm" in str(w.message)]
    assert "\n" not in str(warning.message)
    ckpt.set_rng_state(state["rng"][0])
    assert np.array_equal(np.random.rand(2), expected)


class _Payload:
    """What a hostile state.pt could carry: unpickling it calls Path.touch(marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_state_carrying_a_pickled_callable_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    path = tmp_path / "checkpoints" / "state_1"
    path.mkdir(parents=True)
    torch.save({"core": {}, "rng": [_Payload(marker)], "progress": {"step": 1}}, path / "state.pt")
    with pytest.raises(UserError) as err:
        ckpt.load_state(path)
    message = str(err.value)
    assert "\n" not in message and "state.pt" in message and "does not unpickle" in message, message
    assert not marker.exists()  # the callable never ran
