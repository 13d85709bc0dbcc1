"""Masking strategies for MLM pre-training: random MLM, fully-explored (FE) and i.i.d. K-mask control.

Pure tensor code independent of any trainer. Strategies x granularities:

* ``random``: one mask per sequence with exactly tau = round(ratio * n_valid) tokens (the paper's M(tau)),
  or, with ``count: bernoulli``, Hugging Face's i.i.d. per-token masking.
* ``fully_explored``: a uniform random partition of the maskable positions into K disjoint masks of tau
  tokens each (M_FE(tau)); each single mask is marginally uniform over M(tau) (Lemma 2, unbiased).
* ``iid``: K independent masks (may overlap) -- isolates non-overlap from having K copies.
* granularity ``subword`` | ``whole_word`` | ``span`` (SpanBERT truncated-geometric span lengths).

Typical use::

    cfg = MaskingConfig(name="fe_subword", strategy="fully_explored", splits=4)
    collator = MaskingCollator.from_tokenizer(cfg, tokenizer, seed=0)
    batch = collator(features)            # input_ids/attention_mask/labels/sequence_index/copy_index
"""

from .collator import MaskingCollator, sequences_per_batch
from .config import MaskingConfig, MaskingConfigError, MaskingError
from .maskers import IGNORE_INDEX, Masker, apply_replacement, build_masker
from .sampling import make_generator, mask_budget, sample_word_spans, truncated_geometric_pmf
from .words import word_ids_from_starts, word_start_table

__all__ = [
    "IGNORE_INDEX",
    "Masker",
    "MaskingCollator",
    "MaskingConfig",
    "MaskingConfigError",
    "MaskingError",
    "apply_replacement",
    "build_masker",
    "make_generator",
    "mask_budget",
    "sample_word_spans",
    "sequences_per_batch",
    "truncated_geometric_pmf",
    "word_ids_from_starts",
    "word_start_table",
]
