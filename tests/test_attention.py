"""The attention kernels of the training step (femlm/runtime/attention.py): chosen inside the compiled graph, never
cuDNN for training with attention dropout, and the kernel that ran recorded.

The CPU stands in for the GPU: its fused kernel (`_scaled_dot_product_flash_attention_for_cpu`) takes no dropout, so
these models have none, and femlm's kernel context (a no-op off CUDA) is enforced here. The compiled step goes through
a recording `aot_eager` backend: dynamo's graph shows where the kernel context is entered (dynamo traces
`sdpa_kernel` into calls in the graph), and AOT autograd's forward and backward graphs show which attention
operator each call became, decided while tracing. The step runs under an outer math-only context, so only a context
*inside* the traced region can select the fused kernel.
"""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch.nn.attention import SDPBackend, sdpa_kernel

from femlm.errors import UserError
from femlm.runtime import attention
from femlm.runtime.attention import AttentionKernels, parse_backends, plan_kernels, training_kernels
from femlm.runtime.config import RuntimeConfig
from femlm.train import core as core_module
from femlm.train.evaluation import EvalSet
from helpers.tiny import synthetic_blocks, tiny_core

torch.set_num_threads(1)
LAYERS = 2  # tiny_core's model: one HF layer runs in the encoder, the last one as the sparse layer
FUSED_FW, FUSED_BW = "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Recorder:
    """A torch.compile backend that keeps dynamo's graphs and AOT autograd's forward and backward graphs."""

    def __init__(self) -> None:
        self.dynamo: list[torch.fx.GraphModule] = []
        self.aot: dict[str, list[torch.fx.GraphModule]] = {"forward": [], "backward": []}

        def keep(kind: str):  # noqa: ANN202
            def compiler(gm: torch.fx.GraphModule, inputs: list) -> torch.fx.GraphModule:
                self.aot[kind].append(gm)
                return make_boxed_func(gm.forward)
            return compiler

        self._aot = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))

    def __call__(self, gm: torch.fx.GraphModule, inputs: list):  # noqa: ANN204
        self.dynamo.append(gm)
        return self._aot(gm, inputs)


def context_problems(rec: Recorder) -> list[str]:
    """Where a traced attention call is not under femlm's fused-kernel context inside the graph, or an attention
    operator is not the fused one (empty: every call is)."""
    problems = []
    calls = 0
    for gm in rec.dynamo:
        active: list | None = None  # the kernels of the innermost context entered in this graph
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is torch.nn.attention._sdpa_kernel:
                active = [a.args[0] for a in node.args[0]]  # _backend_from_string(name) nodes
            elif node.op == "call_function" and node.target is F.scaled_dot_product_attention:
                calls += 1
                if active is None:
                    problems.append(f"{node.name}: no kernel context entered before it in the graph")
                elif active[0] != "FLASH_ATTENTION":
                    problems.append(f"{node.name}: under {active}, not the fused kernels")
                # the exit re-enters the previous kernels: a second _sdpa_kernel node resets `active` above
    if not calls:
        problems.append("no attention call in the traced graphs")
    for kind, op in (("forward", FUSED_FW), ("backward", FUSED_BW)):
        names = [str(n.target) for gm in rec.aot[kind] for n in gm.graph.nodes if n.op == "call_function"]
        fused = sum(op + "." in name for name in names)
        unfused = [n for n in names if "bmm" in n or "attention_math" in n]
        if unfused or not fused or (kind == "forward" and fused != calls):  # a backward per training call
            problems.append(f"{kind}: {fused} {op} for {calls} attention calls, unfused ops {unfused[:4]}")
    return problems


def fused_backward(rec: Recorder) -> int:
    return sum(FUSED_BW + "." in str(n.target) for gm in rec.aot["backward"] for n in gm.graph.nodes)


def compiled_step(monkeypatch: pytest.MonkeyPatch, sparse: bool = True) -> tuple[Recorder, object]:
    """One compiled training step and one compiled evaluation of a tiny core whose kernels are runtime=gpu's
    request, enforced on the CPU, under an outer math-only context."""
    rec = Recorder()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=rec))
    monkeypatch.setattr(core_module, "plan_kernels", functools.partial(plan_kernels, enforce=True))
    core = tiny_core(compile=True, sdpa_backend=["flash", "efficient"], sparse_prediction=sparse)
    return rec, core


def eval_set(core) -> EvalSet:  # noqa: ANN001
    out = core.masker(synthetic_blocks(12, 32, 99, seed=7).long(), None, torch.Generator().manual_seed(3))
    return EvalSet(out["input_ids"], out["labels"])


def run(core, evaluate: bool = True) -> None:  # noqa: ANN001
    with sdpa_kernel(SDPBackend.MATH):  # the caller's state: only the graph's own context can pick flash
        core.step(1)
        if evaluate:
            core.evaluate(eval_set(core))


@pytest.mark.parametrize("sparse", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["sparse-layer", "dense"])
def test_every_attention_call_of_the_compiled_step_runs_fused_under_the_graphs_own_context(
        monkeypatch: pytest.MonkeyPatch, sparse: bool) -> None:
    rec, core = compiled_step(monkeypatch, sparse)
    assert (core.objective.last_layer is not None) == sparse
    run(core)
    assert len(rec.dynamo) == 2  # the training step and the evaluation, each one graph
    assert context_problems(rec) == []
    calls = sum(n.target is F.scaled_dot_product_attention for gm in rec.dynamo for n in gm.graph.nodes)
    assert calls == 2 * LAYERS  # every layer (HF's and the sparse one) in training and in evaluation
    assert fused_backward(rec) == LAYERS  # and each training call's backward


def test_the_check_fails_when_the_context_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, core = compiled_step(monkeypatch)
    monkeypatch.setattr(AttentionKernels, "context", lambda self, training: contextlib.nullcontext())
    run(core, evaluate=False)
    problems = context_problems(rec)
    assert any("no kernel context" in p for p in problems) and any("bmm" in p for p in problems), problems


def test_the_check_fails_when_the_context_is_entered_outside_the_compiled_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rec, core = compiled_step(monkeypatch)
    context = AttentionKernels.context
    monkeypatch.setattr(AttentionKernels, "context", lambda self, training: contextlib.nullcontext())
    compiled, kernels = core.module, core.kernels

    def outside(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the pre-issue-46 placement: around the call
        with context(kernels, True):
            return compiled(*args, **kwargs)

    core.module = outside
    run(core, evaluate=False)
    problems = context_problems(rec)
    assert problems and all("no kernel context" in p for p in problems), problems  # fused ops, but not the graph's


# --- the rule: no cuDNN for training with attention dropout -------------------------------------------------------

@pytest.mark.parametrize(("request_", "dropout", "train", "evaluate"), [
    ("auto", 0.1, ("flash", "efficient", "math"), None),  # torch's choice minus cuDNN
    ("auto", 0.0, None, None),  # no dropout: torch's own choice, cuDNN included
    ("auto", None, ("flash", "efficient", "math"), None),  # an unknown rate counts as dropout
    (["cudnn", "flash"], 0.1, ("flash",), ("cudnn", "flash")),  # evaluation may use cuDNN
    (["flash", "efficient"], 0.1, ("flash", "efficient"), ("flash", "efficient")),
    ("cudnn", 0.0, ("cudnn",), ("cudnn",)),
])
def test_training_with_attention_dropout_is_never_routed_to_cudnn(request_, dropout, train, evaluate) -> None:  # noqa: ANN001
    kernels = plan_kernels(request_, "cuda", dropout)
    assert (kernels.training, kernels.evaluation, kernels.enforced) == (train, evaluate, True)
    assert plan_kernels(request_, "cpu", dropout).enforced is False  # the CPU's fused kernel has no dropout


def test_cudnn_alone_for_a_model_with_attention_dropout_is_refused() -> None:
    with pytest.raises(UserError, match=r"runtime.sdpa_backend=\['cudnn'\]: cuDNN attention may apply dropout"):
        training_kernels(("cudnn",), 0.1)
    with pytest.raises(UserError, match="cuDNN"):
        tiny_core(sdpa_backend="cudnn", dropout=0.1)


def test_the_training_context_disables_cudnn_at_every_attention_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager, a model with attention dropout 0.1 and runtime.sdpa_backend=auto: each SDPA call of a training step
    (HF's layer and the sparse layer) sees cuDNN off; each call of the evaluation sees torch's flags untouched."""
    seen: list[tuple[bool, bool]] = []
    sdpa = F.scaled_dot_product_attention

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append((torch.is_grad_enabled(), torch.backends.cuda.cudnn_sdp_enabled()))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    monkeypatch.setattr(core_module, "plan_kernels", functools.partial(plan_kernels, enforce=True))
    core = tiny_core(dropout=0.1)
    assert core.kernels.training == ("flash", "efficient", "math")
    core.step(1)
    core.evaluate(eval_set(core))
    training, evaluation = [c for g, c in seen if g], [c for g, c in seen if not g]
    assert len(training) == LAYERS and training == [False] * LAYERS
    assert evaluation and all(evaluation)


def test_the_kernels_reach_modernberts_attention_calls_and_summary_records_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU study's layers (femlm/conf/experiment/study_gpu.yaml: ModernBERT, runtime.sdpa_backend=efficient),
    eager: every SDPA call of a training step and of an evaluation (its global and its local, masked layers; dense:
    ModernBERT has no sparse last layer) runs under the efficient kernel alone; summary.json's record names it."""
    seen: list[tuple[bool, bool, bool, bool]] = []
    sdpa = F.scaled_dot_product_attention

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        b = torch.backends.cuda
        seen.append((torch.is_grad_enabled(), b.mem_efficient_sdp_enabled(), b.flash_sdp_enabled(),
                     b.math_sdp_enabled()))
        with sdpa_kernel(SDPBackend.MATH):  # the CPU has no efficient kernel: run the call on math
            return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    monkeypatch.setattr(core_module, "plan_kernels", functools.partial(plan_kernels, enforce=True))
    core = tiny_core("modernbert", sdpa_backend="efficient", length=48, arch={"local_attention": 16})
    assert core.objective.last_layer is None and core.objective.model.config.layer_types[1] == "sliding_attention"
    seen.clear()  # the head's tracing forward at construction (femlm.models.heads), no step
    core.step(1)
    core.evaluate(eval_set(core))
    training, evaluation = [c[1:] for c in seen if c[0]], [c[1:] for c in seen if not c[0]]
    assert training == [(True, False, False)] * LAYERS  # (efficient, flash, math) at each layer's call
    assert len(evaluation) == 2 * LAYERS and set(evaluation) == {(True, False, False)}  # 12 blocks: 2 batches
    record = tiny_core("modernbert", sdpa_backend="efficient").attention_record()
    assert record["requested"] == "efficient" and record["attention_dropout"] == 0.0
    assert set(record["dispatched"]) == {"training", "evaluation"}  # no sparse layer


def test_the_request_accepts_a_name_a_list_or_auto() -> None:
    assert parse_backends("auto") == () and parse_backends("flash") == ("flash",)
    assert parse_backends(["flash", "efficient"]) == parse_backends("flash,efficient") == ("flash", "efficient")
    for bad in ("fast", ["flash", "flash"], [], ["auto", "flash"]):
        with pytest.raises(UserError, match="runtime.sdpa_backend=.*allowed auto or one or more of flash"):
            RuntimeConfig(sdpa_backend=bad).validate()


def test_gpu_runtime_asks_for_the_fused_kernels() -> None:
    import yaml

    from femlm import CONF_DIR

    gpu = yaml.safe_load((CONF_DIR / "runtime" / "gpu.yaml").read_text())
    assert parse_backends(gpu["sdpa_backend"]) == attention.FUSED and gpu["tf32"] is True
    assert not attention.keeps_probabilities(gpu["sdpa_backend"], compiled=True)
    assert attention.keeps_probabilities("auto", compiled=True) and not attention.keeps_probabilities("auto", False)


def test_summary_records_the_kernel_torch_dispatches_at_the_run_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    forced = tiny_core(sdpa_backend="flash")  # CPU: not enforced, so torch's choice
    record = forced.attention_record()
    assert record["requested"] == "flash" and record["enforced"] is False
    assert record["dispatched"] == {"training": "flash", "evaluation": "flash", "training_sparse_layer": "flash"}
    with_dropout = tiny_core(dropout=0.1).attention_record()  # the CPU's flash kernel refuses dropout
    assert with_dropout["dispatched"]["training"] == "math" and with_dropout["dispatched"]["evaluation"] == "flash"
    monkeypatch.setattr(core_module, "plan_kernels", functools.partial(plan_kernels, enforce=True))
    impossible = tiny_core(sdpa_backend="efficient").attention_record()  # no CPU kernel: the step would fail
    assert impossible["dispatched"]["training"] == "none"
