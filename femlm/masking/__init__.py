"""Masking strategies for MLM pre-training: random MLM, fully-explored (FE) and i.i.d. K-mask control.

Pure tensor code independent of any trainer. Strategies x granularities:

* ``random``: one mask per sequence with exactly tau = round(ratio * n_valid) tokens (the paper's M(tau)),
  or, with ``count: bernoulli``, Hugging Face's i.i.d. per-token masking.
* ``fully_explored``: a uniform random partition of the maskable positions into K disjoint masks of tau
  tokens each (M_FE(tau)); each single mask is marginally uniform over M(tau) (Lemma 2, unbiased).
* ``iid``: K independent masks (may overlap) -- isolates non-overlap from having K copies.
* whole words: MLM takes words in a uniform order while they fit tau (Google BERT's rule); each FE copy has that
  law exactly unless a rare "conflict" occurs, and TV <= P(conflict) always (``wholeword.py``,
  docs/masking-laws.md).
* ``fully_explored_passes``: the K disjoint masks of a cycle spread over K visits of the sequence, one masked copy
  per visit (``passes.py``: a pure function of (seed, sequence key, visit); femlm's trainer keys by block and epoch).
* granularity ``subword`` | ``whole_word`` | ``span`` (SpanBERT truncated-geometric span lengths, the same law
  for every strategy and K: segment-then-deal, see ``spans.py``); ``replacement: token | span`` (80/10/10
  per token, or per span as SpanBERT).

Typical use::

    cfg = MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4)
    collator = MaskingCollator.from_tokenizer(cfg, tokenizer, seed=0)
    batch = collator(features)            # input_ids/attention_mask/labels/sequence_index/copy_index

In a Hugging Face script, ``femlm.DataCollatorForFullyExploredLM`` (``hf.py``) takes the arguments of
``DataCollatorForLanguageModeling`` plus K, strategy (``fully_explored_passes`` too), granularity, count and a ratio
schedule; with an int seed its masks are keyed by (seed, sequence, epoch), the epoch given by ``set_epoch`` or
``epoch_callback()``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported lazily: the CLI validates every command line with MaskingConfig, and that must not pull in torch
# (the collator and maskers do).
_EXPORTS = {
    "collator": ("MaskingCollator", "masker_for_tokenizer", "sequences_per_batch"),
    "config": ("MaskingConfig", "MaskingConfigError", "MaskingError"),
    "hf": ("DataCollatorForFullyExploredLM",),
    "passes": ("mask_visits", "sequence_key", "visit_selection"),
    "maskers": ("IGNORE_INDEX", "Masker", "apply_replacement", "build_masker", "span_starts"),
    "sampling": ("make_generator", "mask_budget", "sample_word_spans", "truncated_geometric_pmf"),
    "spans": ("placed_spans", "sample_segment_spans"),
    "words": ("select_word_bernoulli", "word_ids_from_offsets", "word_ids_from_starts", "word_start_table"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'femlm.masking' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
