"""Exact resume after SIGKILL, refusal to resume a different run, and the NaN stop."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from femlm.errors import UserError
from femlm.runs import Run
from femlm.train import inputs
from femlm.train.loop import run_pretrain
from helpers.processes import child_env
from helpers.tiny import fake_load_blocks, tiny_config, tiny_tokenizer

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"max_steps": 40, "save_every": 5, "eval_every": 5, "log_every": 1, "batch_size": 8, "keep_last": 2}

# The killed run: the same config, each step padded with a short sleep (numerics untouched) so that the
# kill lands mid-run rather than after the end.
CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    from femlm.runs import Run
    from femlm.train.loop import run_pretrain
    from femlm.train import core
    from helpers.tiny import patch_blocks, tiny_config
    root, settings = Path(sys.argv[1]), eval(sys.argv[2])
    patch_blocks()
    step = core.PretrainCore.step
    def slow_step(self, s):
        out = step(self, s)
        time.sleep(0.03)
        return out
    core.PretrainCore.step = slow_step
    cfg = tiny_config(root / "tok", **settings)
    run = Run(dir=root / "killed", command="pretrain-scratch")
    run.dir.mkdir(exist_ok=True)
    run_pretrain(cfg, run)
""")


def curve(run_dir: Path) -> list[tuple]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("eval_loss"), r.get("eval_accuracy")) for r in records]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / "final" / "model.safetensors")


@pytest.fixture
def synthetic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    tiny_tokenizer(tmp_path / "tok")
    return tmp_path


def fresh_run(root: Path, name: str) -> Run:
    run = Run(dir=root / name, command="pretrain-scratch")
    run.dir.mkdir(exist_ok=True)
    return run


def test_sigkill_then_resume_is_bitwise_identical(synthetic: Path) -> None:
    root = synthetic
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), repr(SETTINGS)], env=child_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt_dir = root / "killed" / "checkpoints"
    deadline = time.time() + 240
    while not any(p.name.startswith("state_") and ".tmp-" not in p.name for p in
                  (ckpt_dir.iterdir() if ckpt_dir.is_dir() else [])):
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "the training subprocess never saved a state"
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 0.6))  # anywhere in the run: mid-step, mid-eval or mid-save
    assert child.poll() is None, "the run finished before it could be killed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not (ckpt_dir / "final").exists()
    killed_at = max(int(p.name.split("_")[1].split(".")[0]) for p in ckpt_dir.iterdir()
                    if p.name.startswith("state_"))

    print(f"killed after state {killed_at}", flush=True)
    # The uninterrupted reference, in this process (same thread count, same code path).
    reference = run_pretrain(tiny_config(root / "tok", **SETTINGS), fresh_run(root, "reference"))

    resumed_cfg = tiny_config(root / "tok", resume=str(root / "killed"), **SETTINGS)
    resumed = run_pretrain(resumed_cfg, Run(dir=root / "killed", command="pretrain-scratch", created=False))

    ref_w, res_w = weights(root / "reference"), weights(root / "killed")
    assert ref_w.keys() == res_w.keys()
    for name in ref_w:
        assert torch.equal(ref_w[name], res_w[name]), f"{name} differs (killed after state {killed_at})"
    ref_curve, res_curve = curve(root / "reference"), curve(root / "killed")
    assert res_curve == ref_curve  # same values, no duplicates, no gaps
    assert resumed["final_eval_loss"] == reference["final_eval_loss"]
    assert len(list(ckpt_dir.glob("state_*"))) <= SETTINGS["keep_last"]
    assert not list(ckpt_dir.glob("*.tmp-*"))


def test_resume_with_a_different_config_is_refused(synthetic: Path) -> None:
    run = fresh_run(synthetic, "run")
    run_pretrain(tiny_config(synthetic / "tok", max_steps=4), run)
    cfg = tiny_config(synthetic / "tok", max_steps=4, resume=str(run.dir))
    cfg.masking.num_masks, cfg.masking.strategy, cfg.masking.name = 4, "fully_explored", "fe_subword"
    before = (run.dir / "metrics.jsonl").read_text()
    (run.dir / "config.yaml").write_text("masking:\n  name: fe_subword\n")  # what the CLI's start_run wrote
    with pytest.raises(UserError, match=r"resume: masking.name='fe_subword' differs"):
        run_pretrain(cfg, Run(dir=run.dir, command="pretrain-scratch", created=False))
    assert (run.dir / "metrics.jsonl").read_text() == before
    assert "name: mlm_subword" in (run.dir / "config.yaml").read_text()  # the run's own config is back


def test_resume_of_a_finished_run_changes_nothing(synthetic: Path) -> None:
    run = fresh_run(synthetic, "run")
    first = run_pretrain(tiny_config(synthetic / "tok", max_steps=4, save_every=2), run)
    before = curve(run.dir)
    again = run_pretrain(tiny_config(synthetic / "tok", max_steps=4, save_every=2, resume=str(run.dir)),
                         Run(dir=run.dir, command="pretrain-scratch", created=False))
    assert curve(run.dir) == before and again["final_eval_loss"] == first["final_eval_loss"]


def test_nan_loss_stops_with_one_line_and_keeps_the_last_checkpoint(synthetic: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from femlm.train import core

    backward = core.PretrainCore.backward

    def poisoned(self: core.PretrainCore, rows: dict) -> tuple:
        loss_sum, count = backward(self, rows)
        if self.scheduler.last_epoch + 1 == 6:  # the 6th optimizer step
            loss_sum = loss_sum * float("nan")
        return loss_sum, count

    monkeypatch.setattr(core.PretrainCore, "backward", poisoned)
    run = fresh_run(synthetic, "run")
    with pytest.raises(UserError) as err:
        run_pretrain(tiny_config(synthetic / "tok", max_steps=10, save_every=4), run)
    message = str(err.value)
    assert "\n" not in message and "loss became nan at step 6" in message
    assert "state_4" in message and "trainer.lr" in message
    assert not run.created  # the CLI's error handler must not delete the run directory
    assert (run.dir / "checkpoints" / "state_4" / "state.pt").is_file()
    assert not (run.dir / "checkpoints" / "final").exists()
    assert max(r[0] for r in curve(run.dir)) == 5


def test_a_nonfinite_step_stops_the_run_before_the_variance_probe_writes(synthetic: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradients go NaN at step 2, a step that reads nothing; the probe's step 3 reads first (core.read_at), so the
    run stops there naming step 2, and metrics.jsonl holds no NaN row (before, the probe wrote its rows from the
    NaN weights and the run stopped only at the next log step)."""
    import math

    from femlm.train import core

    backward = core.PretrainCore.backward

    def poisoned(self: core.PretrainCore, rows: dict) -> tuple:
        out = backward(self, rows)
        if self.scheduler.last_epoch + 1 == 2:
            for param in self.params:
                param.grad.mul_(float("nan"))
        return out

    monkeypatch.setattr(core.PretrainCore, "backward", poisoned)
    cfg = tiny_config(synthetic / "tok", max_steps=8, log_every=4, eval_every=8, save_every=8)
    cfg.logger.variance_probe.enabled, cfg.logger.variance_probe.every, cfg.logger.variance_probe.remasks = True, 3, 2
    run = fresh_run(synthetic, "run")
    with pytest.raises(UserError, match="gradient norm became nan at step 2"):
        run_pretrain(cfg, run)
    records = [json.loads(line) for line in (run.dir / "metrics.jsonl").read_text().splitlines()]
    values = [v for r in records for v in r.values() if isinstance(v, float)]
    assert records and all(math.isfinite(v) for v in values)
    assert max(r["step"] for r in records) == 0  # step 0's evaluation only: nothing after the bad step


@pytest.mark.slow  # two compiled runs (aot_eager) of 12 steps: ~20 s; fast cover: test_sigkill_then_resume_is_bitwise_identical
def test_a_compiled_run_resumes_bitwise(synthetic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime.compile=true (aot_eager: dynamo's graphs and AOT autograd, no C++ builds): a run cut after its state at
    step 6 and resumed in a fresh compile ends with the uninterrupted run's weights and curve, bit for bit."""
    import functools

    from femlm.train import core

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    settings = {"max_steps": 12, "save_every": 3, "eval_every": 3, "log_every": 1, "compile": True}
    reference = run_pretrain(tiny_config(synthetic / "tok", **settings), fresh_run(synthetic, "reference"))
    torch._dynamo.reset()
    step = core.PretrainCore.step

    def crash_at_7(self: core.PretrainCore, s: int):  # noqa: ANN202
        if s == 7:
            raise RuntimeError("simulated crash")
        return step(self, s)

    monkeypatch.setattr(core.PretrainCore, "step", crash_at_7)
    cut = fresh_run(synthetic, "cut")
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_pretrain(tiny_config(synthetic / "tok", **settings), cut)
    monkeypatch.setattr(core.PretrainCore, "step", step)
    torch._dynamo.reset()  # a new process would compile afresh
    resumed = run_pretrain(tiny_config(synthetic / "tok", resume=str(cut.dir), **settings),
                           Run(dir=cut.dir, command="pretrain-scratch", created=False))
    ref_w, res_w = weights(synthetic / "reference"), weights(cut.dir)
    assert ref_w.keys() == res_w.keys() and all(torch.equal(ref_w[k], res_w[k]) for k in ref_w)
    assert curve(cut.dir) == curve(synthetic / "reference")
    assert resumed["final_eval_loss"] == reference["final_eval_loss"]
