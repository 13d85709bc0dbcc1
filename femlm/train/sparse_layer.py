"""The last encoder layer, run only where the loss looks.

The MLM loss reads the last layer's output at the labelled positions only (~15% of them, τ per FE copy).
Every position still supplies keys and values, but the queries, the attention output projection and the
feed-forward block of the last layer are needed at the labelled rows alone. On BERT-base at seq 128 that
is ~6% of the encoder's FLOPs, on the 4-layer tiny model ~18%. Same outputs as the dense layer (tests
compare losses and gradients); the model and its checkpoints are untouched.

Only BERT-style layers (BERT, RoBERTa and their copies) qualify: the sub-modules are called as they are
(`attention.output`, `intermediate`, `output`), and only self-attention is recomputed here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from femlm.train.positions import LabelPositions

# Post-LayerNorm encoders whose layers are BertLayer copies (pre-LN variants such as roberta-prelayernorm
# normalise inside `attention.forward`, which is bypassed here, so they are left out).
_BERT_STYLE = {"bert", "roberta", "xlm-roberta", "camembert"}


def sparse_last_layer(model: nn.Module) -> nn.Module | None:
    """The model's last encoder layer when it can run sparse, else None (the dense path is used)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in _BERT_STYLE or getattr(config, "is_decoder", False):
        return None
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None  # relative position scores live inside the attention forward
    layers = getattr(getattr(model.base_model, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        return None
    layer = layers[-1]
    attention = getattr(layer, "attention", None)
    self_attention = getattr(attention, "self", None)
    needed = [(self_attention, ("query", "key", "value", "dropout", "num_attention_heads", "attention_head_size")),
              (attention, ("output",)), (layer, ("intermediate", "output"))]
    if not all(obj is not None and hasattr(obj, name) for obj, names in needed for name in names):
        return None
    if getattr(layer, "chunk_size_feed_forward", 0) or getattr(layer, "add_cross_attention", False):
        return None
    return layer


@contextlib.contextmanager
def without_last_layer(model: nn.Module) -> Iterator[None]:
    """Run `model.base_model` through all but its last encoder layer (HF still prepares embeddings/masks)."""
    encoder = model.base_model.encoder
    layers = encoder.layer
    encoder.layer = nn.ModuleList(list(layers)[:-1])
    try:
        yield
    finally:
        encoder.layer = layers


def sparse_layer_forward(layer: nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor | None,
                         at: LabelPositions) -> torch.Tensor:
    """`layer(hidden)` at the positions `at`, as rows [T, H] in their order.

    Queries of each sequence's kept positions are packed into [B, at.width, H], so one SDPA call attends them
    to all of their sequence's keys; padding keys are masked as HF masks them. The positions come found
    (femlm/train/positions.py): no shape here depends on the labels' values, so torch.compile sees one graph.
    """
    attn = layer.attention.self
    batch, length, _ = hidden.shape
    heads, head_dim = attn.num_attention_heads, attn.attention_head_size
    rows, slots = at.rows, at.slots
    selected = hidden[rows, at.cols]  # [T, H]

    queries = attn.query(selected)
    packed = queries.new_zeros(batch, at.width, heads * head_dim).index_put((rows, slots), queries)
    q = packed.view(batch, -1, heads, head_dim).transpose(1, 2)
    k = attn.key(hidden).view(batch, length, heads, head_dim).transpose(1, 2)
    v = attn.value(hidden).view(batch, length, heads, head_dim).transpose(1, 2)
    mask = None
    if attention_mask is not None:
        visible = attention_mask.bool()
        visible = visible | ~visible.any(1, keepdim=True)  # an all-padding row has no labels: avoid NaN
        mask = visible[:, None, None, :]
    context = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=attn.dropout.p if layer.training else 0.0,
        scale=getattr(attn, "scaling", head_dim ** -0.5))
    context = context.transpose(1, 2).reshape(batch, -1, heads * head_dim)[rows, slots]  # [T, H]
    attention_output = layer.attention.output(context, selected)
    return layer.output(layer.intermediate(attention_output), attention_output)
