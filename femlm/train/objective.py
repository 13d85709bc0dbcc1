"""The sparse masked-LM objective: the loss at the labelled positions only.

HF's `*ForMaskedLM.forward` projects every position to the vocabulary and then ignores 85% of them in the
loss. `MaskedLMObjective` runs the encoder (`model.base_model`), gathers the hidden states of the labelled
positions and applies the model's own MLM head (found by structure: femlm.models.heads) to those rows only. Same loss, same gradients, a fraction of
the head's FLOPs and memory (the [B*L, V] logits never exist). BERT-style encoders also run their last
layer at those rows only (sparse_layer.py). The model stays an ordinary HF model, so `save_pretrained`
checkpoints load with plain transformers.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from femlm.masking.maskers import IGNORE_INDEX
from femlm.models.heads import trace_mlm_head
from femlm.runtime.attention import AttentionKernels
from femlm.train.positions import LabelPositions
from femlm.train.sparse_layer import sparse_last_layer, sparse_layer_forward, without_last_layer


class MaskedLMObjective(nn.Module):
    """Wraps an HF masked LM; `forward` returns the *sum* of cross-entropy over labelled positions (float32),
    the number of labelled positions and, for evaluation, how many were predicted right.

    Sums (not means) let the loop weight micro-batches and ranks by their token counts, so accumulation and
    DDP give exactly the token mean over the whole global batch. DDP wraps this module, not the HF model.
    """

    def __init__(self, model: nn.Module, sparse: bool = True, kernels: AttentionKernels | None = None) -> None:
        super().__init__()
        self.model = model
        # The attention kernels of every SDPA call below (encoder layers and sparse last layer): their context is
        # entered inside `forward`, the function torch.compile traces, so the graph holds the choice
        # (femlm/runtime/attention.py).
        self.kernels = kernels or AttentionKernels()
        self.head, why = trace_mlm_head(model) if sparse else (None, "runtime.sparse_prediction=false")
        if sparse and self.head is None:
            warnings.warn(f"{type(model).__name__}: MLM head not found ({why}); sparse prediction is off "
                          "(full vocabulary projection at every position)", stacklevel=2)
        self.sparse = self.head is not None
        # BERT-style encoders also run their last layer at the labelled rows only (femlm/train/sparse_layer.py).
        self.last_layer = sparse_last_layer(model) if self.sparse else None
        # Which path the run took, for summary.json and femlm.json.
        self.prediction = ("sparse head and last layer" if self.last_layer is not None else
                           "sparse head" if self.sparse else f"dense ({why})")

    def logits_at_labels(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                         at: LabelPositions) -> torch.Tensor:
        """Vocabulary logits [T, V] at the T positions `at` (its targets are `at.targets`)."""
        if self.sparse and self.last_layer is not None:
            with without_last_layer(self.model):
                hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
            return self.head(sparse_layer_forward(self.last_layer, hidden, attention_mask, at))
        if self.sparse:
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
            return self.head(hidden.reshape(-1, hidden.shape[-1])[at.flat(hidden.shape[1])])
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.reshape(-1, logits.shape[-1])[at.flat(logits.shape[1])]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                labels: torch.Tensor | LabelPositions,
                with_accuracy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """`labels`: [B, L] with -100 where unlabelled, or their LabelPositions (found outside torch.compile)."""
        at = labels if isinstance(labels, LabelPositions) else LabelPositions.from_labels(labels)
        with self.kernels.context(self.training):
            logits = self.logits_at_labels(input_ids, attention_mask, at)
        loss_sum = F.cross_entropy(logits.float(), at.targets, reduction="sum", ignore_index=IGNORE_INDEX)
        real = at.targets != IGNORE_INDEX  # padded positions (femlm/train/batches.py) carry padding entries
        correct = ((logits.argmax(-1) == at.targets) & real).sum() if with_accuracy else None
        return loss_sum, real.sum(), correct

    def score(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
              at: LabelPositions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The evaluation step: `forward` with the accuracy, as its own function, so a compiled evaluation is its
        own graph (it never re-enters the training step's compiled frame under no_grad)."""
        return self.forward(input_ids, attention_mask, at, with_accuracy=True)
