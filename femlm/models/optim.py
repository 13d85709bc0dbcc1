"""Optimizer parameter groups: which weights decay (shared by pre-training and fine-tuning)."""

from __future__ import annotations

from typing import Any

from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay matrices only: no weight decay on biases and LayerNorm weights (the BERT/RoBERTa recipe)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        lowered = name.lower()
        if param.ndim < 2 or "bias" in lowered or "layernorm" in lowered or "layer_norm" in lowered:
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
