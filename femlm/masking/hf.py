"""FE-MLM in anyone's training script: a drop-in for Hugging Face's ``DataCollatorForLanguageModeling``.

The change to a ``run_mlm.py`` / ``Trainer`` / accelerate script is one import and one constructor::

    from femlm import DataCollatorForFullyExploredLM
    collator = DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, num_masks=4)
    args = TrainingArguments(per_device_train_batch_size=32 // collator.num_masks, ...)  # 32 rows per step

Built on :class:`femlm.masking.MaskingCollator` (the collator femlm's own trainer uses) and its maskers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .collator import MaskingCollator, masker_for_tokenizer, sequences_per_batch
from .config import MaskingConfig, MaskingConfigError


class DataCollatorForFullyExploredLM(MaskingCollator):
    """``DataCollatorForLanguageModeling``'s arguments (names, order, defaults), plus FE-MLM's.

    Each input sequence becomes ``num_masks`` (K) masked rows: with ``strategy="fully_explored"`` their masks
    are disjoint, ``tau = round(mlm_probability * n)`` tokens each (``K * mlm_probability <= 1``), and the
    model's usual token-mean loss over the batch equals the paper's mean over the K copies (see
    :mod:`femlm.masking.collator`). The batch holds what HF's collator returns: ``input_ids``,
    ``attention_mask``, ``labels``, and every other feature key as HF's ``tokenizer.pad`` gives it
    (``token_type_ids``, ``next_sentence_label``, ``sentence_order_label``, ...), each row's value repeated for
    its K copies; ``special_tokens_mask`` and ``offset_mapping`` are consumed, as in HF. So ``Trainer`` works with
    its default ``remove_unused_columns=True``, and ``BertForPreTraining`` / ``AlbertForPreTraining`` get their
    sentence labels. ``collator(features, return_tensors="pt")`` is HF's ``DataCollatorMixin`` call.

    **Rows.** ``per_device_train_batch_size=B`` trains ``B * K`` rows (:meth:`rows`). Against an MLM run of
    ``R`` rows per step, hold *rows* equal with ``B = R // K`` (:meth:`sequences_for`; the same steps, the same
    FLOPs), or hold *sequences* equal with ``B = R`` and ``max_steps / K`` steps (the same FLOPs again).

    **Short rows** (FE mode). A row with fewer maskable tokens than ``K * max(1, tau)`` -- an empty or one-word
    line -- gets as many disjoint one-token masks as it has tokens, and its other copies are unlabelled (all
    -100), as HF leaves an all-special row unlabelled; :attr:`short_rows` counts such rows (with
    ``count="bernoulli"``: rows with no maskable token). With whole words a word of several tokens does not fit
    a one-token mask and stays unmasked. The K-copy mean identity then holds only approximately for that batch.
    (femlm's own trainer refuses short rows: its blocks are full.)

    Arguments as in HF: ``tokenizer`` (its ``padding_side`` and pad token are honoured as in HF: left padding
    pads on the left; without a pad token a batch that needs padding, or any list of dicts, raises
    ``ValueError``), ``mlm`` (must be True), ``whole_word_mask`` (granularity ``whole_word``; words from the
    features' ``offset_mapping`` when given -- HF's rule -- else from the vocabulary's word-start markers),
    ``mlm_probability`` (the ratio: exactly ``round(p * n)`` tokens per mask with ``count="exact"``, each token --
    or each whole word -- independently with ``count="bernoulli"``), ``mask_replace_prob``,
    ``random_replace_prob``, ``pad_to_multiple_of``, ``return_tensors`` (``"pt"`` only), ``seed`` (None: torch's
    global RNG, as HF; an int: reproducible masks, a pure function of the seed and the batch's global index, so
    DataLoader workers never repeat masks and any ``num_workers`` draws what ``num_workers=0`` draws).

    FE-MLM's: ``num_masks`` (K), ``strategy`` (``fully_explored`` | ``iid`` | ``random``; ``random`` forces
    K = 1), ``granularity`` (``subword`` | ``whole_word`` | ``span``; default from ``whole_word_mask``),
    ``count`` (``exact`` | ``bernoulli``; ``bernoulli`` with ``random`` or ``iid``, sub-word or whole-word), and
    a masking-rate schedule: ``ratio_schedule="linear"`` goes from ``mlm_probability`` at the first batch to
    ``mlm_probability_final`` at batch ``schedule_steps`` (count collator calls: ``max_steps *
    gradient_accumulation_steps``), K fixed and tau following the ratio. ``state_dict`` / ``load_state_dict``
    save and restore the position in the mask stream and schedule
    (``accelerator.register_for_checkpointing(collator)``).

    **Parity mode** ``num_masks=1, strategy="random", count="bernoulli"`` draws what
    ``DataCollatorForLanguageModeling`` draws -- with ``seed=None`` and the same torch RNG state, bit for bit,
    with or without a ``special_tokens_mask``; with ``whole_word_mask=True`` it is Bernoulli over words, and bit
    for bit HF's whole-word draw when the features carry ``offset_mapping`` and ``mask_replace_prob=1.0,
    random_replace_prob=0.0`` (HF's forced setting for whole words).

    **A given ``special_tokens_mask``** decides, as in HF, which tokens may be masked (with the attention mask): a
    token it marks 0 may be masked even if its id is special (a literal ``[UNK]`` in the text). Without one, no
    special id (``tokenizer.all_special_ids``: [CLS], [SEP], [PAD], [MASK], [UNK], ...) is ever masked -- HF's
    ``get_special_tokens_mask(already_has_special_tokens=True)`` rule.

    **Deliberate differences from HF** (all of them):

    1. ``num_masks`` defaults to 4 (FE mode): each sequence gives K rows, and the masks are exact-count
       (``count="exact"``), not Bernoulli; parity mode is ``num_masks=1, strategy="random", count="bernoulli"``.
    2. ``seed=int`` streams differ from HF's (a pure function of seed and batch index; HF seeds DataLoader worker
       ``i`` with ``seed + i``), so only ``seed=None`` reproduces HF's masks bit for bit.
    3. ``return_tensors="np"`` (and any value other than ``"pt"``) is refused with ``ValueError``.
    4. Whole words keep BERT's 80/10/10 replacement (Google BERT's choice; HF forces all-[MASK] with a warning):
       pass ``mask_replace_prob=1.0, random_replace_prob=0.0`` for HF's. Without ``offset_mapping`` words come
       from the vocabulary's markers (HF needs the offsets).
    5. ``attention_mask`` is always returned (HF returns only ``input_ids`` and ``labels`` for bare id lists).
    6. FE mode: short rows are partly unlabelled copies (above), counted in :attr:`short_rows`.
    7. ``mlm=False`` (causal LM) is refused: use HF's collator for it. ``mlm_probability`` must be > 0 (HF
       accepts 0), and ``num_masks * mlm_probability <= 1`` for FE.
    8. Inputs HF fails on are accepted: ``offset_mapping`` of unequal lengths is padded, and a ``labels`` key in
       the features is replaced whatever its shape (HF also replaces it, but first fails on unequal lengths).
    """

    def __init__(
        self,
        tokenizer: Any,
        mlm: bool = True,
        whole_word_mask: bool = False,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        pad_to_multiple_of: int | None = None,
        return_tensors: str = "pt",
        seed: int | None = None,
        *,
        num_masks: int = 4,
        strategy: str = "fully_explored",
        granularity: str | None = None,
        count: str = "exact",
        ratio_schedule: str = "constant",
        mlm_probability_final: float | None = None,
        schedule_steps: int | None = None,
    ) -> None:
        if not mlm:
            raise MaskingConfigError("mlm=False is invalid; allowed: mlm=True (FE-MLM masks tokens; for causal "
                                     "language modelling use DataCollatorForLanguageModeling(mlm=False))")
        if return_tensors != "pt":
            raise MaskingConfigError(f"return_tensors={return_tensors!r} is invalid; allowed: 'pt'")
        granularity = granularity or ("whole_word" if whole_word_mask else "subword")
        if whole_word_mask and granularity == "subword":
            raise MaskingConfigError("whole_word_mask=True is invalid with granularity='subword'; allowed: "
                                     "granularity whole_word | span")
        self.tokenizer = tokenizer
        cfg = MaskingConfig(
            name=f"{strategy}_{granularity}", strategy=strategy, granularity=granularity, ratio=mlm_probability,
            ratio_schedule=ratio_schedule, ratio_final=mlm_probability_final, num_masks=num_masks, count=count,
            mask_replace_prob=mask_replace_prob, random_replace_prob=random_replace_prob,
        )
        masker, _ = masker_for_tokenizer(cfg, tokenizer, given_mask_only=True, allow_short_rows=True)
        super().__init__(masker, pad_token_id=getattr(tokenizer, "pad_token_id", None), seed=seed,
                         pad_to_multiple_of=pad_to_multiple_of, return_indices=False, schedule_steps=schedule_steps)
        self.pad_token_type_id = int(getattr(tokenizer, "pad_token_type_id", 0) or 0)

    def __call__(self, features: Sequence[Any], return_tensors: str | None = None) -> dict[str, torch.Tensor]:
        """HF's ``DataCollatorMixin.__call__``: ``return_tensors`` None or ``"pt"``."""
        if return_tensors not in (None, "pt"):
            raise MaskingConfigError(f"return_tensors={return_tensors!r} is invalid; allowed: 'pt' (or None)")
        self.pad_token_id = getattr(self.tokenizer, "pad_token_id", None)  # read per call, as HF does
        return super().__call__(features)

    @property
    def padding_side(self) -> str:
        """The tokenizer's ``padding_side``, read at every call as HF's ``tokenizer.pad`` does."""
        return getattr(self.tokenizer, "padding_side", "right")

    @property
    def short_rows(self) -> int:
        """Input sequences so far with fewer maskable tokens than ``K * max(1, tau)`` (see the class doc); in
        DataLoader workers each worker counts its own."""
        return self.masker.short_rows

    @property
    def num_masks(self) -> int:
        """K: rows per input sequence (1 for ``strategy="random"``)."""
        return self.masker.num_copies

    def rows(self, sequences: int) -> int:
        """Model rows of a batch of ``sequences`` input sequences (``per_device_train_batch_size``)."""
        return sequences * self.num_masks

    def sequences_for(self, rows: int) -> int:
        """``per_device_train_batch_size`` that gives ``rows`` model rows (a multiple of K)."""
        return sequences_per_batch(rows, self.num_masks)

    def __repr__(self) -> str:
        cfg = self.masker.cfg
        schedule = (f", ratio {cfg.ratio} -> {cfg.ratio_final} over {self.schedule_steps} batches"
                    if cfg.ratio_schedule == "linear" else f", ratio {cfg.ratio}")
        return (f"DataCollatorForFullyExploredLM({cfg.strategy}/{cfg.granularity}, K={self.num_masks} rows per "
                f"sequence{schedule}, count={cfg.count}, seed={self.seed})")
