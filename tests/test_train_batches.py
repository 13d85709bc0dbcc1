"""The GPU-shaped step on the CPU (issue 36): one compiled graph per run, no device reads in steps that do not
log, and the next batch built beside the running step (femlm/train/batches.py).

Graphs are counted with dynamo's counters through the cheap `aot_eager` backend (as tests/test_train_compile.py
explains: dynamo's guards, and so its recompilations, do not depend on the backend); device reads with a
TorchDispatchMode, which is thread-local, so it sees the training thread only; concurrency by ordering, never by
wall time.
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode

from femlm.masking import MaskingConfig, build_masker
from femlm.train.batches import Shape, prepare, split_label_chunks
from femlm.train.core import NonFiniteLoss, eval_shape
from femlm.train.evaluation import EVAL_MASKING, EvalSet
from femlm.train.positions import LabelPositions
from helpers.tiny import synthetic_blocks, tiny_core

torch.set_num_threads(1)
BERNOULLI = MaskingConfig(name="mlm_bernoulli", count="bernoulli")
WORD_STARTS = torch.rand(99, generator=torch.Generator().manual_seed(0)) < 0.6  # a vocabulary with "##" pieces
ARMS = {
    "mlm-exact": MaskingConfig(),
    "mlm-bernoulli": BERNOULLI,
    "whole-word": MaskingConfig(name="mlm_wwm", granularity="whole_word"),
    "whole-word-bernoulli": MaskingConfig(name="mlm_wwm_b", granularity="whole_word", count="bernoulli"),
    "span": MaskingConfig(name="mlm_span", granularity="span"),
    "fe-k4": MaskingConfig(name="fe", strategy="fully_explored", num_masks=4),
    "fe-passes": MaskingConfig(name="fe_passes", strategy="fully_explored_passes", num_masks=4),
    "ratio-schedule": MaskingConfig(name="mlm_sched", ratio=0.3, ratio_schedule="linear", ratio_final=0.15),
}


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def everything_masked(rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with every position labelled: far beyond any bound of a 15% law (rows and width)."""
    return {**rows, "labels": rows["input_ids"].clone()}


def eval_set(core) -> EvalSet:
    """Held-out rows masked as every run masks them (EVAL_MASKING, whatever the training arm; FE across passes'
    masker cannot mask with a batch generator)."""
    masker = build_masker(EVAL_MASKING, mask_token_id=4, vocab_size=99, special_ids=[0, 1, 2, 3, 4])
    out = masker(synthetic_blocks(20, 32, 99, seed=7).long(), None, torch.Generator().manual_seed(3))
    return EvalSet(out["input_ids"], out["labels"])


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_fits_its_bound_in_one_chunk(arm: str) -> None:
    core = tiny_core(masking=ARMS[arm], word_starts=WORD_STARTS, compile=False)
    shape = core.masker.label_bound(core.micro_rows, 32, core.blocks)
    for step in range(1, 41):
        labels = core.batch(step)["labels"]
        (at,) = split_label_chunks(labels, shape)  # one chunk: the one graph of the run
        assert at.rows.numel() == shape.size and at.width == shape.width
        assert (at.targets != -100).sum() == (labels != -100).sum()
    if arm in ("mlm-exact", "fe-k4", "fe-passes"):  # exact counts: the bound is the count itself
        assert shape.size == (core.batch(1)["labels"] != -100).sum(1).max() * core.micro_rows


def test_a_batch_beyond_the_bound_runs_in_label_chunks_of_the_same_shape_with_the_same_loss() -> None:
    core = tiny_core(masking=BERNOULLI)
    shape = core.masker.label_bound(8, 32)
    rows = everything_masked(core.batch(1))
    chunks = split_label_chunks(rows["labels"], shape)
    assert len(chunks) > 1 and {(p.rows.numel(), p.width) for p in chunks} == {(shape.size, shape.width)}
    whole = LabelPositions.from_labels(rows["labels"])
    loss, count, _ = core.objective(rows["input_ids"], None, whole)
    grads = torch.autograd.grad(loss, core.params)
    parts = [core.objective(rows["input_ids"], None, at) for at in chunks]
    assert sum(int(c) for _, c, _ in parts) == int(count) == 8 * 32
    split_loss = sum(s for s, _, _ in parts)
    torch.testing.assert_close(split_loss, loss, rtol=1e-6, atol=1e-5)
    for a, b in zip(torch.autograd.grad(split_loss, core.params), grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # float sums in another order


def test_a_ragged_last_micro_batch_is_padded_to_the_same_shape_and_adds_nothing() -> None:
    core = tiny_core(masking=BERNOULLI)
    rows = core.batch(1)
    shape = core.masker.label_bound(5, 32)
    chunks = prepare(rows["labels"], rows["input_ids"], 5, shape, torch.device("cpu")).chunks
    assert [(ids.shape, at.rows.numel(), at.width) for ids, at in chunks] == [((5, 32), shape.size, shape.width)] * 2
    assert not chunks[1][0][3:].any() and chunks[1][1].rows.max() < 3  # padding rows: no label points at them
    with torch.no_grad():
        whole, count, _ = core.objective(rows["input_ids"], None, rows["labels"])
        parts = [core.objective(ids, None, at) for ids, at in chunks]
    assert sum(int(c) for _, c, _ in parts) == int(count)
    torch.testing.assert_close(sum(s for s, _, _ in parts), whole, rtol=1e-6, atol=1e-5)


def test_a_compiled_run_of_200_steps_has_one_training_and_one_evaluation_graph(
        fresh_dynamo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    core = tiny_core(masking=BERNOULLI, compile=True)  # one micro-batch of 8 rows (ragged ones: the next test)
    batch = core.batch
    core.batch = lambda step, redraw=None: everything_masked(batch(step)) if step == 100 else batch(step, redraw)
    core.read_at = lambda step: step % 50 == 0
    for step in range(1, 201):
        if step == 100:  # the overflowing batch, in label chunks: the loss of the eager objective at today's weights
            rows = core.batch(100)
            with torch.no_grad():
                expected = core.objective(rows["input_ids"], None, rows["labels"])[0] / rows["labels"].numel()
            stats = core.step(step)
            assert stats.loss == pytest.approx(float(expected), rel=1e-5) and stats.label_chunks > 1
        else:
            assert core.step(step).label_chunks == 1
    assert counters["stats"]["unique_graphs"] == 1  # the training step: all 200, the overflowing one included
    data = eval_set(core)
    first = core.evaluate(data, batch_rows=8)  # batches of 8, 8 and a ragged 4, padded
    assert core.evaluate(data, batch_rows=8) == first
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"]
    core.close()


class ScalarReads(TorchDispatchMode):
    """Counts aten._local_scalar_dense (what .item(), float(), int() and bool() of a tensor run) on this thread."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_an_empty_evaluation_shard_has_a_shape_and_scores_nothing(fresh_dynamo, monkeypatch) -> None:
    """A rank whose held-out shard is empty (fewer held-out rows than ranks) under compile (issue 46, item 6)."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    core = tiny_core(compile=True)
    empty = torch.empty(0, 32, dtype=torch.long)
    assert eval_shape(empty, 8) == Shape(8, 1, 1)
    assert core.evaluate(EvalSet(empty, empty.clone())) == (0.0, 0.0)
    core.close()


def test_steps_that_do_not_log_read_no_device_value_while_the_producer_builds_the_next_batch() -> None:
    core = tiny_core(masking=BERNOULLI)
    built_on, batch = [], core.batch
    core.batch = lambda step, redraw=None: built_on.append(threading.current_thread().name) or batch(step, redraw)
    core.read_at = lambda step: step % 4 == 0
    reads = {}
    core.step(1)
    for step in range(2, 9):
        with ScalarReads() as mode:
            core.step(step)
        reads[step] = mode.count
    assert {s: n for s, n in reads.items() if s % 4} == {2: 0, 3: 0, 5: 0, 6: 0, 7: 0}
    assert reads[4] > 0 and reads[8] > 0  # the counter sees the reads of a logging step
    assert built_on[0] == threading.current_thread().name  # step 1: nothing was built ahead
    assert all(name.startswith("femlm-batches") for name in built_on[1:]) and len(built_on) == 9
    core.close()


def test_a_nonfinite_loss_in_a_step_that_does_not_log_stops_at_the_next_read() -> None:
    core = tiny_core()
    core.read_at = lambda step: step % 5 == 0
    backward = core.backward
    core.backward = lambda rows: (lambda out: (out[0] * float("nan"), out[1]) if rows.step in (2, 3) else out)(
        backward(rows))
    core.step(1)
    for step in (2, 3, 4):
        core.step(step)  # no read: no error yet
    with pytest.raises(NonFiniteLoss, match="loss became nan at step 2"):
        core.check_finite()  # what the loop calls before a save that is not at a reading step
    with pytest.raises(NonFiniteLoss, match="at step 2"):
        core.step(5)
    core.close()


def test_the_next_batch_is_built_while_the_current_step_runs() -> None:
    """Step 2 waits (in its body) for the build of step 3 to start, and that build waits for step 2 to run: only
    a build beside the running step gets both; built inside step 3, neither wait is answered."""
    core = tiny_core()
    order, running, started = [], threading.Event(), threading.Event()
    batch, backward = core.batch, core.backward

    def slow_batch(step, redraw=None):
        if step == 3:
            order.append("build 3 starts")
            started.set()
            order.append("build 3 saw step 2 running" if running.wait(60) else "build 3 alone")
        rows = batch(step, redraw)
        order.append(f"build {step} ends")
        return rows

    def step_body(rows):
        order.append(f"step {rows.step} runs")
        if rows.step == 2:
            running.set()
            order.append("step 2 saw build 3 start" if started.wait(60) else "step 2 alone")
        out = backward(rows)
        order.append(f"step {rows.step} ends")
        return out

    core.batch, core.backward = slow_batch, step_body
    for step in (1, 2, 3):
        core.step(step)
    core.close()
    assert "step 2 saw build 3 start" in order and "build 3 saw step 2 running" in order
    assert order.index("build 3 starts") < order.index("step 2 ends")
    assert order.index("build 3 ends") < order.index("step 3 runs")


def test_an_fe_across_passes_build_never_keeps_a_33_ms_step_waiting() -> None:
    """Issue 46: at the GPU study's shape (256 x 128, FE across passes, K = floor(1 / 0.15)) the producer builds
    step s+1 -- masks, label chunks, padding -- while a 33 ms stub of step s runs (the study model's eager step on
    an H200), so `take` never waits. By ordering, not by time: every build of step s+1 has ended before step s
    ends. (The per-row masks this replaced took longer than the step: their builds ended after it.)"""
    passes = MaskingConfig(name="fe_passes_subword", strategy="fully_explored_passes", num_masks=None)
    core = tiny_core(masking=passes, blocks=2048, length=128, batch_size=256, compile=True)
    order, build = [], core.producer.build

    def recorded(step: int):
        prepared = build(step)
        order.append(f"build {step} ends")
        return prepared

    core.producer.build = recorded
    for step in range(1, 13):
        prepared = core.producer.take(step, step + 1)
        order.append(f"step {step} runs")
        time.sleep(0.033)  # the stub step (it releases the GIL, as a step waiting on its device does)
        order.append(f"step {step} ends")
    core.close()
    assert [tuple(ids.shape) for ids, _ in prepared.chunks] == [(256, 128)] and core.masker.cfg.num_masks == 6
    late = [s for s in range(2, 14) if order.index(f"build {s} ends") > order.index(f"step {s - 1} ends")]
    assert not late, f"take waited for the builds of steps {late}"


def test_the_producer_uses_no_global_random_state() -> None:
    core = tiny_core(masking=ARMS["span"], word_starts=WORD_STARTS)
    torch_state, numpy_state = torch.random.get_rng_state(), np.random.get_state()
    first = core._prepare_step(3)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state, strict=True))
    again = core._prepare_step(3)
    assert all(torch.equal(a[0], b[0]) and all(torch.equal(x, y) for x, y in zip(a[1][:4], b[1][:4], strict=True))
               for a, b in zip(first.chunks, again.chunks, strict=True))


@pytest.mark.slow  # inductor builds C++ kernels: about a minute per graph on 2 cores
@pytest.mark.parametrize("arm", list(ARMS))
def test_inductor_compiles_each_arm_once(arm: str, fresh_dynamo) -> None:
    core = tiny_core(masking=ARMS[arm], word_starts=WORD_STARTS, compile=True)
    for step in range(1, 6):
        core.step(step)
    core.evaluate(eval_set(core))
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"]
    core.close()
