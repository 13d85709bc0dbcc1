"""runtime.compile=true: the training and evaluation steps compile whole (no graph break), once each over batches
whose label counts vary (one shape per run: femlm/train/batches.py), and train as eager does.

Graph breaks are counted by `torch._dynamo.explain` (cheap: dynamo traces, nothing is code-generated). The
20-step test compiles through the `aot_eager` backend: dynamo's guards, and so its recompilations, are the
backend's inputs, not its output, and aot_eager also traces the backward, without inductor's C++ builds (about a
minute per graph on this 2-core machine). The inductor test (slow) checks the numbers of the real backend.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.utils import counters

from femlm.masking import MaskingConfig
from femlm.train.evaluation import EvalSet
from femlm.train.positions import LabelPositions
from helpers.tiny import synthetic_blocks, tiny_core

torch.set_num_threads(1)
BERNOULLI = MaskingConfig(name="mlm_bernoulli", count="bernoulli")  # label counts vary from batch to batch
SPAN = MaskingConfig(name="mlm_span", granularity="span")  # SpanBERT spans of words: counts vary too
WORD_STARTS = torch.rand(99, generator=torch.Generator().manual_seed(0)) < 0.6  # a vocabulary with "##" pieces
FE = MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4)  # exact: the same count every batch


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def eval_set(core, rows: int = 20) -> EvalSet:
    out = core.masker(synthetic_blocks(rows, 32, 99, seed=7).long(), None, torch.Generator().manual_seed(3))
    return EvalSet(out["input_ids"], out["labels"])


def test_padding_keeps_the_loss() -> None:
    core = tiny_core(masking=BERNOULLI)
    rows = core.batch(1)
    rows["attention_mask"][0, 20:] = 0  # a padded row: the spare query slot must not disturb real ones
    rows["labels"][0, 20:] = -100
    ids, attention = rows["input_ids"], rows["attention_mask"]
    exact = LabelPositions.from_labels(rows["labels"])
    padded = exact.padded(exact.rows.numel() + 7, exact.width + 3)
    assert padded.rows.numel() > exact.rows.numel() and padded.width > exact.width
    core.objective.eval()
    (a, n, right), (b, m, right_padded) = (core.objective(ids, attention, at, with_accuracy=True)
                                           for at in (exact, padded))
    assert n == m == (rows["labels"] != -100).sum() and right == right_padded
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_train_and_eval_steps_have_no_graph_break(model_type: str, sparse: bool) -> None:
    core = tiny_core(model_type, masking=BERNOULLI, sparse_prediction=sparse)
    assert (core.objective.last_layer is not None) == sparse  # the sparse last layer, or the dense fallback
    rows = core.batch(1)
    rows["attention_mask"][0, 24:] = 0
    rows["labels"][0, 24:] = -100
    for with_accuracy in (False, True):  # the training step's forward, the evaluation step's
        explained = torch._dynamo.explain(core.objective)(*core.probe_inputs(rows, 0, 8), with_accuracy=with_accuracy)
        assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
        assert explained.graph_count == 1


@pytest.mark.parametrize(("masking", "sparse"), [(BERNOULLI, True), pytest.param(BERNOULLI, False, marks=pytest.mark.slow),
                                                 pytest.param(SPAN, True, marks=pytest.mark.slow)],
                         ids=["bernoulli-sparse", "bernoulli-dense", "span-sparse"])  # 15 s each: 2 in the slow tier
def test_twenty_compiled_steps_compile_once_and_match_eager(masking: MaskingConfig, sparse: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    eager = tiny_core(masking=masking, word_starts=WORD_STARTS, sparse_prediction=sparse)
    compiled = tiny_core(masking=masking, word_starts=WORD_STARTS, sparse_prediction=sparse, compile=True)
    counts = set()
    for step in range(1, 21):
        a, b = eager.step(step), compiled.step(step)
        counts.add(a.masked_tokens)
        assert a.masked_tokens == b.masked_tokens
        assert b.loss == pytest.approx(a.loss, rel=1e-6), step
    train_graphs = counters["stats"]["unique_graphs"]
    evals = eager.evaluate(eval_set(eager)), compiled.evaluate(eval_set(compiled))
    assert evals[1] == pytest.approx(evals[0], rel=1e-6)
    assert not counters["graph_break"]
    assert len(counts) >= 8  # the batches really vary ...
    assert train_graphs == 1  # ... yet the step compiled once (the shape is fixed before the first step)
    # the evaluation: one graph, its own, for full batches of 8 rows and the last 4 of 20 (padded)
    assert counters["stats"]["unique_graphs"] - train_graphs == 1
    for p, q in zip(eager.objective.parameters(), compiled.objective.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # inductor builds C++ kernels: ~2-4 min on 2 loaded cores
def test_inductor_compiled_step_equals_eager() -> None:
    eager, compiled = tiny_core(masking=FE), tiny_core(masking=FE, compile=True)
    for step in range(1, 4):
        a, b = eager.step(step), compiled.step(step)
        assert b.loss == pytest.approx(a.loss, rel=1e-5)  # inductor fuses and reorders float sums
        assert b.grad_norm == pytest.approx(a.grad_norm, rel=1e-4)
    assert counters["stats"]["unique_graphs"] == 1  # exact masking: one shape, one compilation
    data = eval_set(eager, rows=16)  # two full evaluation batches: one more graph
    loss, accuracy = eager.evaluate(data)
    assert compiled.evaluate(data) == (pytest.approx(loss, rel=1e-5), accuracy)
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"]
