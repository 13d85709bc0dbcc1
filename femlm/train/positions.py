"""Where the loss looks: the labelled positions of a batch, found before the model runs.

Finding them (`nonzero`, the most labels in one row) gives tensors whose shapes depend on the labels' values.
Inside `torch.compile` that breaks the graph, so the training and evaluation steps find them eagerly, before
the step, and hand the compiled objective index tensors of known shape. Under runtime.compile=true their number
and the per-row width are padded to one shape fixed for the whole run (femlm/train/batches.py). Padding entries
point at position (0, 0), land in a spare query slot and have target -100: they add nothing to the loss, its
count or its gradients.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from femlm.masking.maskers import IGNORE_INDEX


class LabelPositions(NamedTuple):
    """The T labelled positions of a [B, L] batch in row-major order (a NamedTuple: torch.compile and DDP take
    it as an argument like a tuple of tensors)."""

    rows: torch.Tensor  # [T] batch row of each position
    cols: torch.Tensor  # [T] its column
    slots: torch.Tensor  # [T] its index among its row's positions (the packed query slot, sparse_layer.py)
    targets: torch.Tensor  # [T] the token to predict; IGNORE_INDEX for padding entries
    width: int  # query slots per row: the most positions in one row (padded: plus a spare for padding)

    @classmethod
    def from_labels(cls, labels: torch.Tensor) -> LabelPositions:
        keep = labels != IGNORE_INDEX
        rows, cols = keep.nonzero(as_tuple=True)
        slots = (keep.long().cumsum(1) - 1)[rows, cols]
        most = int(keep.sum(1).max()) if rows.numel() else 0
        return cls(rows, cols, slots, labels[rows, cols], max(most, 1))

    def padded(self, size: int, width: int) -> LabelPositions:
        """`size` entries and `width` slots (> any real slot): padding entries fill the spare slot width - 1."""
        pad = size - self.rows.numel()
        if pad < 0 or width < self.width + (pad > 0):  # the spare slot must be free of real positions
            raise ValueError(f"cannot pad {self.rows.numel()} positions of width {self.width} to {size}, {width}")
        zeros = self.rows.new_zeros(pad)
        return LabelPositions(torch.cat([self.rows, zeros]), torch.cat([self.cols, zeros]),
                              torch.cat([self.slots, zeros + width - 1]),
                              torch.cat([self.targets, zeros + IGNORE_INDEX]), width)

    def to(self, device: torch.device | str) -> LabelPositions:
        return LabelPositions(*(t.to(device, non_blocking=True) for t in self[:4]), self.width)

    def flat(self, length: int) -> torch.Tensor:
        """Indices into the [B*L] flattened positions."""
        return self.rows * length + self.cols
