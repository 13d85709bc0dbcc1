"""The default parameters of the gradient analyses, found by structure for any encoder (`analysis.parameters=null`).

The study's choice is one attention matrix and one feed-forward matrix of the first transformer layer: the query
projection and the feed-forward's up projection (BERT: `*layer.0.attention.self.query.weight`,
`*layer.0.intermediate.dense.weight`; MPNet: `*layer.0.attention.attn.q.weight`, `*layer.0.intermediate.dense.weight`).
Names differ across architectures, so they are found the way `femlm.models.heads` finds the MLM head, by structure:

- the layer list is the encoder's first `nn.ModuleList` of blocks of one class (BERT's `encoder.layer`, ModernBERT's
  `layers`); its first block is layer 0;
- one probe forward pass records the order in which that block calls its `nn.Linear` modules. Every transformer block
  calls its attention projections first and ends with the feed-forward's up and down projections, so
  the **attention matrix** is the first Linear called, and the **feed-forward matrix** the second-to-last;
- a Linear that is also applied to an input shared by all rows (DeBERTa's `query_proj` and `key_proj` with
  `share_att_key` also project the relative position embeddings) cannot have its gradient split per row, so the
  attention matrix is the first Linear called on the rows' hidden states only (DeBERTa: `value_proj`). ModernBERT's
  fused `Wqkv` is its query projection together with key and value.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from femlm.errors import UserError

PROBE_ROWS, PROBE_TOKENS = 2, 8


def layer_list(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """(name, modules) of the first `nn.ModuleList` of same-class blocks in the model (names as in the model)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) and len({type(m) for m in module}) == 1 \
                and any(isinstance(m, nn.Linear) for m in module[0].modules()):
            return name, module
    raise UserError(f"analysis.parameters=null: {type(model).__name__} has no list of transformer layers to pick "
                    "the first layer's matrices from; give analysis.parameters patterns")


def default_parameters(model: nn.Module) -> list[str]:
    """[attention matrix, feed-forward matrix] of layer 0 as full parameter names (see the module docstring)."""
    prefix, layers = layer_list(model)
    block = layers[0]
    linears = {id(m): n for n, m in block.named_modules() if isinstance(m, nn.Linear)}
    calls: list[tuple[str, bool]] = []  # (name in block, whether the input holds the probe's rows)

    def record(module: nn.Module, args: tuple[Any, ...], _output: Any) -> None:
        x = args[0] if args else None
        per_row = isinstance(x, torch.Tensor) and x.ndim == 3 and tuple(x.shape[:2]) == (PROBE_ROWS, PROBE_TOKENS)
        calls.append((linears[id(module)], per_row))

    hooks = [m.register_forward_hook(record) for m in block.modules() if isinstance(m, nn.Linear)]
    first = next(model.parameters())
    ids = (torch.arange(PROBE_ROWS * PROBE_TOKENS) % model.config.vocab_size).view(PROBE_ROWS, PROBE_TOKENS)
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(input_ids=ids.to(first.device), attention_mask=torch.ones_like(ids).to(first.device))
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    order = list(dict.fromkeys(name for name, _ in calls))  # first-call order
    shared = {name for name, per_row in calls if not per_row}
    attention = next((n for n in order if n not in shared), None)
    if attention is None or len(order) < 3 or order[-2] in shared or order.index(attention) >= len(order) - 2:
        raise UserError(f"analysis.parameters=null: the first layer of {type(model).__name__} ({prefix}.0) does not "
                        f"call an attention and a feed-forward Linear the usual way (calls: {', '.join(order)}); "
                        "give analysis.parameters patterns")
    return [f"{prefix}.0.{attention}.weight", f"{prefix}.0.{order[-2]}.weight"]
