"""Preemption in one process (the default suite): SIGTERM / SIGUSR2 arriving mid-step, during an evaluation or
during a save stops the run after the step with a saved state, and resuming ends bit-identical to an
uninterrupted run. The cluster paths (submitit_local requeue, 2 tasks, torchrun + resume=auto, max_num_timeout
exhausted) are in tests/test_preemption_cluster.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from femlm import stop
from femlm.runs import Run
from femlm.train import checkpoint as ckpt
from femlm.train import core, inputs
from femlm.train.loop import run_pretrain
from helpers.tiny import fake_load_blocks, tiny_config, tiny_tokenizer

torch.set_num_threads(1)
SETTINGS = {"max_steps": 12, "save_every": 4, "eval_every": 3, "log_every": 1, "keep_last": 3}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run (once for the module): its tokenizer, weights and metrics."""
    root = tmp_path_factory.mktemp("preemption")
    tiny_tokenizer(root / "tok")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inputs, "load_blocks", fake_load_blocks())
        run(root, "reference")
    return root


@pytest.fixture
def synthetic(reference: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    (tmp_path / "reference").symlink_to(reference / "reference")
    (tmp_path / "tok").symlink_to(reference / "tok")
    return tmp_path


def records(run_dir: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("eval_loss")) for r in rows]


def run(root: Path, name: str, resume: bool = False) -> dict:
    cfg = tiny_config(root / "tok", **SETTINGS, **({"resume": str(root / name)} if resume else {}))
    target = Run(dir=root / name, command="pretrain-scratch", created=not resume)
    target.dir.mkdir(exist_ok=True)
    return run_pretrain(cfg, target)


def same_as_reference(root: Path, name: str) -> None:
    ref, got = load_file(root / "reference/checkpoints/final/model.safetensors"), \
        load_file(root / name / "checkpoints/final/model.safetensors")
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert records(root / name) == records(root / "reference")


def signal_at(monkeypatch: pytest.MonkeyPatch, where: str, target_step: int, signum: int) -> list[int]:
    """Send `signum` to this process inside `where` ("step", "evaluate" or "save") at `target_step`."""
    seen: list[int] = []
    if where == "step":
        original = core.PretrainCore.step

        def step(self, s):  # the signal lands in the middle of the step: after the forward/backward passes
            if s == target_step:
                os.kill(os.getpid(), signum)
                seen.append(s)
            return original(self, s)

        monkeypatch.setattr(core.PretrainCore, "step", step)
    elif where == "evaluate":
        original_eval = core.PretrainCore.evaluate

        def evaluate(self, eval_set, batch_rows=None, should_stop=None):
            if self.scheduler.last_epoch == target_step and not seen:
                os.kill(os.getpid(), signum)
                seen.append(target_step)
                batch_rows = 2  # 2 rows a batch: the stop lands mid-evaluation, with batches still to go
            return original_eval(self, eval_set, batch_rows, should_stop)

        monkeypatch.setattr(core.PretrainCore, "evaluate", evaluate)
    return seen


@pytest.mark.parametrize(("where", "at", "signum"), [("step", 5, signal.SIGTERM), ("step", 5, signal.SIGUSR2),
                                                     ("evaluate", 6, signal.SIGUSR1)])
def test_signal_stops_after_the_step_and_resume_is_bitwise_identical(synthetic: Path, monkeypatch, where: str,
                                                                      at: int, signum: int) -> None:
    """Mid-step (step 5: no evaluation follows) or mid-evaluation (step 6, evaluated every 3 steps: the state is
    saved with its evaluation still to do, and the resumed run does it first)."""
    seen = signal_at(monkeypatch, where, at, signum)
    with pytest.raises(stop.StopRequested) as stopped:
        run(synthetic, "stopped")
    assert seen == [at] and stopped.value.signum == signum
    assert f"state saved at step {at}" in str(stopped.value)
    state = ckpt.load_state(synthetic / f"stopped/checkpoints/state_{at}")
    assert state["progress"]["step"] == at and state["eval_pending"] == (where == "evaluate")
    assert signal.getsignal(signum) is signal.SIG_DFL  # the handlers are put back
    monkeypatch.undo()
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    run(synthetic, "stopped", resume=True)
    same_as_reference(synthetic, "stopped")


def test_signal_during_a_save_finishes_it_and_keeps_the_previous_state(synthetic: Path, monkeypatch) -> None:
    """SIGTERM inside the write of state_8: the write completes (the handler only sets a flag), the run stops
    after step 8, and both state_4 and state_8 load."""
    original = ckpt.save_state

    def save_state(ckpt_dir, step, state, meta, keep_last):
        if step == 8:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(ckpt_dir, step, state, meta, keep_last)

    monkeypatch.setattr(ckpt, "save_state", save_state)
    with pytest.raises(stop.StopRequested) as stopped:
        run(synthetic, "stopped")
    assert "after step 9" in str(stopped.value) or "after step 8" in str(stopped.value)
    steps = [s for s, _ in ckpt.state_dirs(synthetic / "stopped/checkpoints")]
    assert 4 in steps and 8 in steps
    for s, path in ckpt.state_dirs(synthetic / "stopped/checkpoints"):
        assert ckpt.load_state(path)["progress"]["step"] == s
    assert not list((synthetic / "stopped/checkpoints").glob("*.tmp-*"))


def test_handoff_without_a_launcher_exits_with_128_plus_the_signal() -> None:
    assert stop.handoff(signal.SIGTERM) == 143 and stop.handoff(signal.SIGUSR2) == 128 + signal.SIGUSR2
    assert stop.handoff(None) == 130
