"""The fixed held-out set: validation blocks masked once, identically for every masking strategy.

Every run masks the first `data.eval_blocks` validation blocks with exact random sub-word masks (15%, 80/10/10,
the `mlm_subword` recipe) drawn from `make_generator(data.eval_seed, 0)`. The masks do not depend on the
training strategy, so held-out loss curves of MLM, FE-MLM and the i.i.d. control are directly comparable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from femlm.masking import MaskingConfig, make_generator, masker_for_tokenizer

EVAL_MASKING = MaskingConfig(name="mlm_subword", strategy="random", granularity="subword", ratio=0.15,
                             num_masks=1, count="exact", mask_replace_prob=0.8, random_replace_prob=0.1)


@dataclass
class EvalSet:
    input_ids: torch.Tensor  # [N, L]
    labels: torch.Tensor  # [N, L], -100 where not masked

    def shard(self, rank: int, world_size: int) -> EvalSet:
        """Rows rank, rank+W, ... (ranks score disjoint rows; sums are all-reduced)."""
        return EvalSet(self.input_ids[rank::world_size], self.labels[rank::world_size])

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def build_eval_set(blocks: torch.Tensor, count: int, seed: int, tokenizer: Any) -> EvalSet:
    """Mask the first `count` blocks once. `blocks` is [M, L] of token ids."""
    rows = blocks[:count].long()
    masker = masker_for_tokenizer(EVAL_MASKING, tokenizer)[0]
    out = masker(rows, None, make_generator(seed, 0))
    return EvalSet(out["input_ids"], out["labels"])
