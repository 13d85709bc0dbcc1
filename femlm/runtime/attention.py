"""Which scaled-dot-product-attention kernels a step may use (`runtime.sdpa_backend`), and which one it runs.

* The request: `auto` (torch picks per call), one kernel (`flash`) or a list in priority order
  (`[flash, efficient]`, what `runtime=gpu` asks for). `parse_backends` checks it.
* The rule for training: attention dropout p > 0 is never run by cuDNN. Some cuDNN SDPA kernels apply dropout
  in steps of 1/16 (torch <= 2.11 routed p = 0.1 there silently), so a training step with dropout allows the
  requested kernels without `cudnn`, and `auto` becomes flash, efficient, math. Evaluation has no dropout and
  takes the request as it is. A request of cuDNN alone for a model with attention dropout is refused.
* Where it applies: `AttentionKernels.context(training)` is entered *inside* the function torch.compile traces
  (femlm/train/objective.py), so the compiled graph itself holds the kernel choice (dynamo records the context
  as calls in the graph) whatever state its caller has. On CUDA only: off CUDA the context is a no-op (the CPU has
  no dropout in its fused kernel) unless `enforce=True` (tests).
* What ran: `dispatched` asks torch's own dispatcher (`torch._fused_sdp_choice`, the function SDPA calls) at the
  run's real shapes, dtype and dropout, under the same context: what summary.json records beside the request.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from femlm.errors import UserError

BACKENDS = ("flash", "efficient", "cudnn", "math")
FUSED = ("flash", "efficient")
_ENUM = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
_NAME = {v: k for k, v in _ENUM.items()}
# Keys HF configs name the attention-probability dropout with (BERT/RoBERTa, ModernBERT/DeBERTa-style, GPT-style).
_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout", "attn_pdrop")


def parse_backends(value: Any, key: str = "runtime.sdpa_backend") -> tuple[str, ...]:
    """The request as kernel names in priority order; () for `auto`. A string, a comma string or a list."""
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) or hasattr(value, "__iter__"):
        names = [str(v).strip() for v in value]
    else:
        names = [str(value)]
    allowed = f"allowed auto or one or more of {', '.join(BACKENDS)}, e.g. {key}=[flash,efficient]"
    if names == ["auto"]:
        return ()
    if not names or any(n not in BACKENDS for n in names) or len(set(names)) != len(names):
        raise UserError(f"{key}={value!r}: {allowed}")
    return tuple(names)


def attention_dropout(config: Any) -> float | None:
    """The attention-probability dropout of an HF config (None: not found under a known key)."""
    found = [float(getattr(config, k)) for k in _DROPOUT_KEYS if isinstance(getattr(config, k, None), (int, float))]
    return max(found) if found else None


def training_kernels(requested: tuple[str, ...], dropout: float | None) -> tuple[str, ...] | None:
    """The kernels a training step may use (None: torch's own choice). Attention dropout (or an unknown rate)
    excludes cuDNN."""
    if dropout == 0.0:
        return requested or None
    if not requested:
        return ("flash", "efficient", "math")
    kept = tuple(k for k in requested if k != "cudnn")
    if not kept:
        raise UserError(f"runtime.sdpa_backend={list(requested)}: cuDNN attention may apply dropout in steps of "
                        f"1/16, and this model trains with attention dropout {dropout if dropout is not None else '?'}; "
                        "use flash or efficient (e.g. runtime.sdpa_backend=[flash,efficient]) or auto")
    return kept


@dataclass(frozen=True)
class AttentionKernels:
    """The kernels of training and evaluation steps (None: torch's choice) and whether they are enforced."""

    requested: tuple[str, ...] = ()
    training: tuple[str, ...] | None = None
    evaluation: tuple[str, ...] | None = None
    enforced: bool = False  # CUDA: the contexts select kernels; elsewhere they do nothing

    def kernels(self, training: bool) -> tuple[str, ...] | None:
        return self.training if training else self.evaluation

    def context(self, training: bool) -> contextlib.AbstractContextManager:
        """`torch.nn.attention.sdpa_kernel` over this step's kernels, in their order (a no-op when not enforced
        or for torch's choice). Enter it inside the compiled function: dynamo traces it into the graph."""
        names = self.kernels(training)
        if not self.enforced or names is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, _ENUM[n]) for n in names], set_priority=True)

    def describe(self) -> dict[str, Any]:
        """For summary.json: the request and the kernels each kind of step may use."""

        def text(names: tuple[str, ...] | None) -> str:
            return ",".join(names) if names is not None else "auto"

        return {"requested": text(self.requested or None), "training": text(self.training),
                "evaluation": text(self.evaluation), "enforced": self.enforced}


def plan_kernels(request: Any, device_type: str, dropout: float | None, enforce: bool | None = None) -> AttentionKernels:
    """The kernels of a run on `device_type` whose model has attention dropout `dropout`."""
    requested = parse_backends(request)
    return AttentionKernels(requested, training_kernels(requested, dropout), requested or None,
                            device_type == "cuda" if enforce is None else enforce)


def keeps_probabilities(request: Any, compiled: bool) -> bool:
    """Whether a GPU step keeps the attention probabilities for backward: compiled with the math kernel allowed
    (auto or math; femlm/train/estimate.py's memory calibration). Fused kernels keep none."""
    requested = parse_backends(request)
    return bool(compiled) and (not requested or "math" in requested)


def dispatched(kernels: AttentionKernels, training: bool, device: Any, dtype: Any, batch: int, heads: int,
               q_len: int, kv_len: int, head_dim: int, dropout: float) -> str:
    """The kernel torch's dispatcher picks for one attention call of these shapes under the step's context
    (torch._fused_sdp_choice, what scaled_dot_product_attention itself calls): flash | efficient | cudnn | math,
    or `none` when no allowed kernel fits (the step would fail)."""
    import torch
    from torch.nn.attention import SDPBackend

    def empty(length: int) -> torch.Tensor:
        return torch.empty(batch, heads, length, head_dim, dtype=dtype, device=device, requires_grad=training)

    q, k = empty(q_len), empty(kv_len)
    try:
        with kernels.context(training):
            choice = torch._fused_sdp_choice(q, k, k, None, dropout if training else 0.0, False)
    except (RuntimeError, ValueError):
        return "none"
    name = SDPBackend(choice).name
    return _NAME.get(name, name.lower())


def attention_record(kernels: AttentionKernels, config: Any, device: Any, dtype: Any, rows: int, seq: int,
                     dropout: float | None, sparse_width: int | None, compiled: bool) -> dict[str, Any]:
    """summary.json's `sdpa_backend`: the request, the kernels each step may use and the kernel torch dispatches
    for a run's attention calls (micro-batches of `rows` x `seq`; `sparse_width`: the sparse last layer's queries
    per row, None without one) under bf16/fp16 autocast (`dtype`) or fp32 (None)."""
    import torch

    heads, hidden = (int(getattr(config, k, 0) or 0) for k in ("num_attention_heads", "hidden_size"))
    record: dict[str, Any] = {**kernels.describe(), "attention_dropout": dropout}
    if not heads or hidden < heads:  # a config without the usual names: nothing to ask torch
        return {**record, "dispatched": None}
    head_dim, dtype, p = hidden // heads, dtype or torch.float32, dropout or 0.0

    def kernel(training: bool, queries: int) -> str:
        return dispatched(kernels, training, device, dtype, rows, heads, queries, seq, head_dim, p)

    found = {"training": kernel(True, seq), "evaluation": kernel(False, seq)}
    if sparse_width is not None:
        found["training_sparse_layer"] = kernel(True, sparse_width)
    how = "torch._fused_sdp_choice at the run's shapes under the step's kernels"
    if keeps_probabilities(kernels.requested or "auto", compiled):
        how += " (eager dispatch: compiled with math allowed, torch may trace another kernel)"
    return {**record, "dispatched": found, "found_by": how}
