"""Checkpoint files: atomic publication, keep-last-k, metrics truncation, data order, resume config check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from femlm.errors import UserError
from femlm.runs import read_metrics
from femlm.train import checkpoint as ckpt
from femlm.train.core import DataOrder
from femlm.train.resume import check_resume, config_dict, first_difference, write_config
from helpers.tiny import tiny_config

torch.set_num_threads(1)


def test_atomic_dir_publishes_whole_or_nothing(tmp_path: Path) -> None:
    def good(tmp: Path) -> None:
        (tmp / "a.txt").write_text("new")

    def crash(tmp: Path) -> None:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("killed mid-write")

    ckpt.atomic_dir(tmp_path / "final", good)
    with pytest.raises(RuntimeError):
        ckpt.atomic_dir(tmp_path / "final", crash)
    assert (tmp_path / "final" / "a.txt").read_text() == "new"  # the old complete copy survives
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]  # no temporary left behind
    ckpt.atomic_dir(tmp_path / "final", lambda tmp: (tmp / "b.txt").write_text("replaced"))
    assert sorted(p.name for p in (tmp_path / "final").iterdir()) == ["b.txt"]


def test_torn_state_is_ignored_and_cleaned(tmp_path: Path) -> None:
    ckpt.save_state(tmp_path, 4, {"x": torch.ones(2)}, {"note": "ok"}, keep_last=3)
    torn = tmp_path / f"state_8.tmp-{os.getpid() + 1}"  # what SIGKILL during a save leaves
    torn.mkdir()
    (torn / "state.pt").write_bytes(b"\x00garbage")
    (tmp_path / "state_9").mkdir()  # a directory without state.pt is not a state either
    assert ckpt.latest_state(tmp_path)[0] == 4
    assert torch.equal(ckpt.load_state(ckpt.latest_state(tmp_path)[1])["x"], torch.ones(2))
    assert ckpt.remove_partial(tmp_path) == [torn]
    assert json.loads((tmp_path / "state_4" / "meta.json").read_text())["step"] == 4


def test_keep_last_k(tmp_path: Path) -> None:
    for step in (2, 4, 6, 8, 10):
        ckpt.save_state(tmp_path, step, {"step": step}, {}, keep_last=2)
    assert [s for s, _ in ckpt.state_dirs(tmp_path)] == [8, 10]
    ckpt.prune_states(tmp_path, 1)
    assert [s for s, _ in ckpt.state_dirs(tmp_path)] == [10]


def test_rng_state_round_trip() -> None:
    import random

    import numpy as np

    state = ckpt.rng_state()
    draws = (torch.rand(3), np.random.rand(), random.random())
    ckpt.set_rng_state(state)
    again = (torch.rand(3), np.random.rand(), random.random())
    assert torch.equal(draws[0], again[0]) and draws[1:] == again[1:]


def test_truncate_metrics_drops_records_after_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 0, "eval_loss": 5.0}, {"step": 4, "loss": 4.0}, {"step": 4, "eval_loss": 4.1},
             {"note": "no step"}, {"step": 5, "loss": 3.9}, {"step": 6, "loss": 3.8}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 7, "lo')  # torn last line
    assert ckpt.truncate_metrics(path, 4) == 3
    kept = read_metrics(path)
    assert [r.get("step") for r in kept] == [0, 4, 4, None]
    assert ckpt.truncate_metrics(path, -1) == 3  # no state at all: every step record goes


def test_data_order_is_a_pure_function_of_seed_and_epoch() -> None:
    order = DataOrder(10, seed=3)
    stream = order.locate(0, 35)[0]
    for e in range(3):  # every epoch is a permutation
        assert sorted(stream[10 * e:10 * e + 10].tolist()) == list(range(10))
    assert not torch.equal(stream[:10], stream[10:20])
    fresh = DataOrder(10, seed=3)  # a resumed run starts mid-stream without any iterator state
    assert torch.equal(fresh.locate(17, 9)[0], stream[17:26])
    assert not torch.equal(DataOrder(10, seed=4).locate(0, 10)[0], stream[:10])


def test_resume_refuses_a_different_config(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path)
    write_config(tmp_path, config_dict(cfg))
    same = tiny_config(tmp_path, resume=str(tmp_path), log_every=7, eval_every=3, threads=2)
    assert check_resume(tmp_path, config_dict(same)) is not None
    changed = tiny_config(tmp_path)
    changed.masking.ratio = 0.2
    with pytest.raises(UserError, match=r"masking\.ratio=0\.2 differs .*masking\.ratio=0\.15"):
        check_resume(tmp_path, config_dict(changed))
    other = tiny_config(tmp_path, lr=1.0)
    assert first_difference(config_dict(cfg), config_dict(other))[0] == "trainer.lr"
    assert check_resume(tmp_path / "nothing-saved", config_dict(other)) is None


def test_a_run_saved_with_the_experiment_plan_in_its_config_still_resumes(tmp_path: Path) -> None:
    """Runs saved before issue 30 recorded the `experiment:` block in their config; it is gone from the schema, and
    such a run resumes (the plan never changed what a run computes)."""
    cfg = tiny_config(tmp_path)
    current = config_dict(cfg)
    assert "experiment" not in current
    write_config(tmp_path, {**current, "experiment": {"name": "study_base", "runs_dir": "runs/study-base"}})
    assert check_resume(tmp_path, current) is not None
