"""Mixed precision in pre-training: bf16 autocast and fp16 with torch's GradScaler train on the CPU; an fp16
overflow skips its step and backs the scale off; a resumed run continues with the saved scale; every
checkpoint's femlm.json names its precision, as summary.json does."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
import torch

from femlm.runs import Run
from femlm.train import checkpoint as ckpt
from femlm.train import inputs
from femlm.train.loop import run_pretrain
from helpers.tiny import fake_load_blocks, tiny_config, tiny_core, tiny_tokenizer

torch.set_num_threads(1)


def params(core) -> list[torch.Tensor]:
    return [p.detach().clone() for p in core.objective.parameters()]


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precisions_train_like_fp32(precision: str, sparse: bool) -> None:
    reference = tiny_core(sparse_prediction=sparse)
    core = tiny_core(precision=precision, sparse_prediction=sparse)
    assert core.scaler.is_enabled() == (precision == "fp16")
    start = params(core)
    losses = [(reference.step(s).loss, core.step(s).loss) for s in range(1, 7)]
    # the same batches, weights within rounding of fp32's: losses agree to ~1e-4 (batch to batch they differ by 0.06)
    assert all(math.isfinite(b) and b == pytest.approx(a, abs=2e-3) for a, b in losses), losses
    assert all(not torch.equal(a, b) for a, b in zip(start, params(core), strict=True))
    assert core.scaler.get_scale() == (65536.0 if precision == "fp16" else 1.0)  # no overflow, no growth yet


def overflow_next_backward(core) -> None:
    """Make the next backward's gradients non-finite, as an fp16 overflow does (a one-shot gradient hook)."""
    param = next(p for p in core.objective.parameters() if p.requires_grad)

    def hook(grad: torch.Tensor) -> torch.Tensor:
        handle.remove()
        return grad * math.inf

    handle = param.register_hook(hook)


def test_fp16_overflow_skips_the_step_and_backs_off_the_scale() -> None:
    core = tiny_core(precision="fp16")
    core.step(1)
    before, scale = params(core), core.scaler.get_scale()
    overflow_next_backward(core)
    stats = core.step(2)  # no NonFiniteLoss: with a scaler an overflow is a skipped step, not a divergence
    assert math.isfinite(stats.loss) and not math.isfinite(stats.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(before, params(core), strict=True))  # weights untouched
    assert core.scaler.get_scale() == scale * 0.5  # backoff
    assert math.isfinite(core.step(3).grad_norm)
    assert not all(torch.equal(a, b) for a, b in zip(before, params(core), strict=True))  # training goes on
    assert core.scaler.get_scale() == scale * 0.5


def test_compiled_fp16_step_equals_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Autocast and the scaler around the compiled step (aot_eager, as in tests/test_train_compile.py)."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    eager, compiled = tiny_core(precision="fp16"), tiny_core(precision="fp16", compile=True)
    for step in range(1, 4):
        if step == 2:  # the hook fires through the compiled backward too
            overflow_next_backward(eager)
            overflow_next_backward(compiled)
        assert compiled.step(step).loss == pytest.approx(eager.step(step).loss, rel=1e-6)
    assert compiled.scaler.get_scale() == eager.scaler.get_scale() == 32768.0
    torch._dynamo.reset()


def test_fp32_nonfinite_gradient_still_stops() -> None:
    from femlm.train.core import NonFiniteLoss

    core = tiny_core()
    overflow_next_backward(core)
    with pytest.raises(NonFiniteLoss, match="gradient norm"):
        core.step(1)


def test_resume_restores_the_loss_scale(tmp_path: Path) -> None:
    core = tiny_core(precision="fp16")
    core.step(1)
    overflow_next_backward(core)
    core.step(2)
    core.step(3)
    ckpt.save_state(tmp_path, 3, {"core": core.state_dict()}, {}, keep_last=1)
    resumed = tiny_core(precision="fp16")
    resumed.load_state_dict(ckpt.load_state(tmp_path / "state_3")["core"])
    assert resumed.scaler.get_scale() == core.scaler.get_scale() == 32768.0
    assert resumed.scaler.state_dict() == core.scaler.state_dict()  # scale and growth tracker
    for step in (4, 5):
        assert resumed.step(step).loss == core.step(step).loss
    assert all(torch.equal(a, b) for a, b in zip(params(core), params(resumed), strict=True))


def test_checkpoint_metadata_records_the_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    tiny_tokenizer(tmp_path / "tok")
    cfg = tiny_config(tmp_path / "tok", max_steps=4, save_every=2, eval_every=4, precision="fp16")
    run = Run(dir=tmp_path / "run", command="pretrain-scratch")
    run.dir.mkdir()
    summary = run_pretrain(cfg, run)
    assert summary["precision"] == "fp16"
    for name in ("step_2", "step_4", "final"):
        assert json.loads((run.dir / "checkpoints" / name / "femlm.json").read_text())["precision"] == "fp16"
    assert json.loads((run.dir / "checkpoints" / "state_4" / "meta.json").read_text())["precision"] == "fp16"
