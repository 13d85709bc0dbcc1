"""FE-MLM in anyone's training script: a drop-in for Hugging Face's ``DataCollatorForLanguageModeling``.

The change to a ``run_mlm.py`` / ``Trainer`` / accelerate script is one import and one constructor::

    from femlm import DataCollatorForFullyExploredLM
    collator = DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, num_masks=4)
    args = TrainingArguments(per_device_train_batch_size=32 // collator.num_masks, ...)  # 32 rows per step

Built on :class:`femlm.masking.MaskingCollator` (the collator femlm's own trainer uses) and its maskers.
"""

from __future__ import annotations

from typing import Any

from .collator import MaskingCollator, masker_for_tokenizer, sequences_per_batch
from .config import MaskingConfig, MaskingConfigError


class DataCollatorForFullyExploredLM(MaskingCollator):
    """``DataCollatorForLanguageModeling``'s arguments (names, order, defaults), plus FE-MLM's.

    Each input sequence becomes ``num_masks`` (K) masked rows: with ``strategy="fully_explored"`` their masks
    are disjoint, ``tau = round(mlm_probability * n)`` tokens each (``K * mlm_probability <= 1``), and the
    model's usual token-mean loss over the batch equals the paper's mean over the K copies (see
    :mod:`femlm.masking.collator`). The batch holds only what a Hugging Face model's ``forward`` accepts
    (``input_ids``, ``attention_mask``, ``labels``, and ``token_type_ids`` when the features have them), so
    ``Trainer`` works with its default ``remove_unused_columns=True``.

    **Rows.** ``per_device_train_batch_size=B`` trains ``B * K`` rows (:meth:`rows`). Against an MLM run of
    ``R`` rows per step, hold *rows* equal with ``B = R // K`` (:meth:`sequences_for`; the same steps, the same
    FLOPs), or hold *sequences* equal with ``B = R`` and ``max_steps / K`` steps (the same FLOPs again).

    Arguments as in HF: ``tokenizer``, ``mlm`` (must be True), ``whole_word_mask`` (granularity
    ``whole_word``; unlike HF it keeps the 80/10/10 replacement, as Google's BERT does), ``mlm_probability``
    (the ratio: exactly ``round(p * n)`` tokens per mask with ``count="exact"``, each token independently with
    ``count="bernoulli"``), ``mask_replace_prob``, ``random_replace_prob``, ``pad_to_multiple_of``,
    ``return_tensors`` (``"pt"`` only), ``seed`` (None: torch's global RNG, as HF; an int: reproducible masks,
    a pure function of the seed and the batch's global index, so DataLoader workers never repeat masks and
    any ``num_workers`` draws what ``num_workers=0`` draws; HF instead seeds worker ``i`` with ``seed + i``).

    FE-MLM's: ``num_masks`` (K), ``strategy`` (``fully_explored`` | ``iid`` | ``random``; ``random`` forces
    K = 1), ``granularity`` (``subword`` | ``whole_word`` | ``span``; default from ``whole_word_mask``),
    ``count`` (``exact`` | ``bernoulli``), and a masking-rate schedule: ``ratio_schedule="linear"`` goes from
    ``mlm_probability`` at the first batch to ``mlm_probability_final`` at batch ``schedule_steps`` (count
    collator calls: ``max_steps * gradient_accumulation_steps``), K fixed and tau following the ratio. With
    ``num_masks=1, strategy="random", count="bernoulli"`` it draws what ``DataCollatorForLanguageModeling``
    draws. ``state_dict`` / ``load_state_dict`` save and restore the position in the mask stream and schedule
    (``accelerator.register_for_checkpointing(collator)``).
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
        masker, pad = masker_for_tokenizer(cfg, tokenizer)
        super().__init__(masker, pad_token_id=pad, seed=seed, pad_to_multiple_of=pad_to_multiple_of,
                         return_indices=False, schedule_steps=schedule_steps)

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
