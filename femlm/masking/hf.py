"""FE-MLM in anyone's training script: a drop-in for Hugging Face's ``DataCollatorForLanguageModeling``.

The change to a ``run_mlm.py`` / ``Trainer`` / accelerate script is one import, one constructor and one line
that tells the collator the epoch::

    from femlm import DataCollatorForFullyExploredLM
    collator = DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, num_masks=4, seed=0)
    args = TrainingArguments(per_device_train_batch_size=collator.sequences_for(32), ...)  # 32 rows per step
    trainer.add_callback(collator.epoch_callback())  # Trainer; a plain or accelerate loop: collator.set_epoch(epoch)

Built on :class:`femlm.masking.MaskingCollator` (the collator femlm's own trainer uses) and its maskers.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .collator import MaskingCollator, masker_for_tokenizer, sequences_per_batch
from .config import PASSES, MaskingConfig, MaskingConfigError
from .maskers import IGNORE_INDEX, apply_replacement
from .passes import mask_visits, sequence_key
from .sampling import make_generator
from .words import word_ids_from_offsets

# micro_step streams of make_generator(seed, sequence key, epoch, stream) for random / fully_explored / iid rows
# (fully_explored_passes uses femlm.masking.passes' own two streams)
STREAM_ROW, STREAM_ROW_REPLACE = 28_003, 28_004


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

    **Masks are keyed by (seed, sequence, epoch).** With an int ``seed`` the masks a sequence gets are a pure
    function of the seed, its token ids (``input_ids`` as the feature gives them, hashed by
    :func:`femlm.masking.passes.sequence_key`) and the epoch: each row is masked on its own unpadded span by the
    generator ``(seed, key, epoch)`` (the 80/10/10 replacement by a second stream of the same key, so inputs and
    labels are reproducible), then placed in the padded batch. Batch composition, padding length and side,
    DataLoader workers, ranks, a ``Trainer`` resumed mid-epoch: none changes a sequence's masks, and a ``Trainer``
    and a plain loop with the same seed draw the same masks (two identical sequences get identical masks).
    The epoch is one line: ``trainer.add_callback(collator.epoch_callback())`` in a ``Trainer``,
    ``collator.set_epoch(epoch)`` before each epoch's ``iter(dataloader)`` in a plain or accelerate loop (the
    ``DistributedSampler.set_epoch`` convention); it reaches DataLoader workers, persistent ones too. **Without it
    the epoch stays 0**: a sequence gets the same masks every time it comes back (static masks, which overfit
    within a few epochs), and ``fully_explored_passes`` uses its first mask only. With ``seed=None`` the masks
    come from torch's global RNG, as in HF (new ones at every call; the epoch is not used).

    **Across passes** ``strategy="fully_explored_passes"`` (:mod:`femlm.masking.passes`): one row per sequence
    (a batch of B sequences is B rows), whose mask at epoch ``e`` is mask ``e mod K`` of the K disjoint masks its
    cycle ``e // K`` draws, K = ``num_masks`` (None: ``floor(1 / mlm_probability)``). Over each cycle of K epochs
    every maskable token is masked at most once (exactly once when ``K * tau = n``), ``tau`` tokens per epoch,
    and each epoch's mask is an exact-count MLM mask. It needs an int ``seed`` and the epoch. Short rows follow
    FE mode's rule: ``tau`` is capped at ``n // K``; a row of ``n < K`` maskable tokens masks one token at the
    epochs ``k < n`` of a cycle and is unlabelled at the others, counted in :attr:`short_rows`.

    Arguments as in HF: ``tokenizer`` (its ``padding_side`` and pad token are honoured as in HF: left padding
    pads on the left; without a pad token a batch that needs padding, or any list of dicts, raises
    ``ValueError``), ``mlm`` (must be True), ``whole_word_mask`` (granularity ``whole_word``; words from the
    features' ``offset_mapping`` when given -- HF's rule -- else from the vocabulary's word-start markers),
    ``mlm_probability`` (the ratio: exactly ``round(p * n)`` tokens per mask with ``count="exact"``, each token --
    or each whole word -- independently with ``count="bernoulli"``), ``mask_replace_prob``,
    ``random_replace_prob``, ``pad_to_multiple_of``, ``return_tensors`` (``"pt"`` only), ``seed`` (None: torch's
    global RNG, as HF; an int: masks keyed by (seed, sequence, epoch), above).

    FE-MLM's: ``num_masks`` (K), ``strategy`` (``fully_explored`` | ``iid`` | ``random`` |
    ``fully_explored_passes``; ``random`` forces K = 1), ``granularity`` (``subword`` | ``whole_word`` | ``span``; default from ``whole_word_mask``),
    ``count`` (``exact`` | ``bernoulli``; ``bernoulli`` with ``random`` or ``iid``, sub-word or whole-word), and
    a masking-rate schedule: ``ratio_schedule="linear"`` goes from ``mlm_probability`` at the first batch to
    ``mlm_probability_final`` at batch ``schedule_steps`` (count collator calls: ``max_steps *
    gradient_accumulation_steps``), K fixed and tau following the ratio. The rule: the ratio of a call is the
    schedule at the collator's call counter (its global batch index + 1, mapped across DataLoader workers as
    :class:`~femlm.masking.MaskingCollator` says), not at the epoch; the counter lives in the collator, so
    non-persistent DataLoader workers restart it at every epoch and a ``Trainer`` resume restarts it (``Trainer``
    checkpoints do not hold it). With ``fully_explored_passes`` the masks of a cycle stay disjoint under a
    schedule (sub-words only; whole words and spans refuse one). ``state_dict`` / ``load_state_dict`` save and
    restore the call counter and the epoch (``accelerator.register_for_checkpointing(collator)``).

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
    2. ``seed=int`` masks differ from HF's (keyed by seed, sequence and epoch; HF seeds DataLoader worker ``i``
       with ``seed + i``), so only ``seed=None`` reproduces HF's masks bit for bit.
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
        num_masks: int | None = 4,
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
        if cfg.strategy == PASSES and seed is None:
            raise MaskingConfigError(f"seed=None is invalid with strategy={PASSES!r}; allowed: an int seed (its "
                                     "masks are keyed by seed, sequence and epoch)")
        # shared memory: set_epoch reaches persistent DataLoader workers too (others copy the collator at iter())
        self._epoch = torch.zeros((), dtype=torch.long).share_memory_()

    def __call__(self, features: Sequence[Any], return_tensors: str | None = None) -> dict[str, torch.Tensor]:
        """HF's ``DataCollatorMixin.__call__``: ``return_tensors`` None or ``"pt"``."""
        if return_tensors not in (None, "pt"):
            raise MaskingConfigError(f"return_tensors={return_tensors!r} is invalid; allowed: 'pt' (or None)")
        self.pad_token_id = getattr(self.tokenizer, "pad_token_id", None)  # read per call, as HF does
        if self.seed is None:  # torch's global RNG, the batch at once: HF's draws (parity mode bit for bit)
            return super().__call__(features)
        return self._keyed_call(features)

    # ------------------------------------------------------------------ the epoch
    @property
    def epoch(self) -> int:
        """The epoch the masks are keyed by (0 until :meth:`set_epoch` or :meth:`epoch_callback` sets it)."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Key the masks by ``epoch`` (0, 1, 2, ...): call it before each epoch's ``iter(dataloader)``, as
        ``DistributedSampler.set_epoch``. DataLoader workers see it, persistent ones too (shared memory)."""
        try:
            value = operator.index(epoch)
        except TypeError:
            value = -1
        if value < 0:
            raise MaskingConfigError(f"epoch={epoch!r} is invalid; allowed: an int >= 0 (the pass over the data)")
        self._epoch.fill_(value)

    def epoch_callback(self) -> Any:
        """A ``transformers.TrainerCallback`` that calls :meth:`set_epoch` at every ``on_epoch_begin``:
        ``trainer.add_callback(collator.epoch_callback())``. The ``Trainer`` calls it before it iterates the
        epoch's DataLoader; after a resume mid-epoch ``state.epoch`` is e.g. 1.5, and the epoch is 1."""
        return _epoch_callback_class()(self)

    def state_dict(self) -> dict[str, int | None]:
        return {**super().state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, int | None]) -> None:
        super().load_state_dict(state)
        self.set_epoch(state.get("epoch") or 0)

    # ------------------------------------------------------------------ keyed masks
    def _keyed_call(self, features: Sequence[Any]) -> dict[str, torch.Tensor]:
        """The int-seed path: each row masked on its own span by (seed, sequence key, epoch), then padded."""
        padded, lens = self.pad_with_lengths(features)
        ids, attention = padded.pop("input_ids"), padded.pop("attention_mask")
        special, offsets = padded.pop("special_tokens_mask", None), padded.pop("offset_mapping", None)
        _, ratio = self.next_call()  # the schedule's ratio at the call counter (the class doc's rule)
        epoch, k, length = self.epoch, self.masker.num_copies, ids.shape[1]
        left = self.padding_side == "left"
        inputs = ids.repeat_interleave(k, dim=0)  # padding in place; the masked spans are written below
        labels = torch.full_like(inputs, IGNORE_INDEX)
        for b, n in enumerate(lens):
            span = slice(length - n, length) if left else slice(0, n)
            row, att = ids[b:b + 1, span], attention[b:b + 1, span]
            spec = None if special is None else special[b:b + 1, span]
            word_ids = None
            if offsets is not None and self.masker.cfg.granularity != "subword":  # HF's word boundaries
                word_ids = word_ids_from_offsets(offsets[b:b + 1, span],
                                                 ~self.masker.valid_mask(row, att, spec))
            row_in, row_lab = self._mask_row(row, att, spec, word_ids, sequence_key(row[0]), epoch, ratio)
            inputs[b * k:(b + 1) * k, span] = row_in
            labels[b * k:(b + 1) * k, span] = row_lab
        out = {"input_ids": inputs, "attention_mask": attention.repeat_interleave(k, dim=0), "labels": labels}
        for key, value in padded.items():  # token_type_ids and every extra key, one value per copy
            out[key] = value.repeat_interleave(k, dim=0)
        return out

    def _mask_row(self, row: torch.Tensor, att: torch.Tensor, special: torch.Tensor | None,
                  word_ids: torch.Tensor | None, key: int, epoch: int,
                  ratio: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels) ``[K, n]`` of one row ``[1, n]``, a pure function of (seed, key, epoch, ratio)."""
        masker, cfg = self.masker, self.masker.cfg
        if cfg.strategy == PASSES:  # visit = epoch
            out = mask_visits(masker, row, [key], [epoch], self.seed, att, special, ratio, word_ids)
            return out["input_ids"], out["labels"]
        sel = masker.select(row, att, make_generator(self.seed, key, epoch, STREAM_ROW), special, word_ids, ratio)
        k = sel.shape[1]
        return apply_replacement(row.repeat(k, 1), sel[0], masker.mask_token_id, masker.vocab_size,
                                 cfg.mask_replace_prob, cfg.random_replace_prob,
                                 make_generator(self.seed, key, epoch, STREAM_ROW_REPLACE),
                                 per_span=cfg.replacement == "span")

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
        """K: rows per input sequence (1 for ``strategy="random"`` and ``"fully_explored_passes"``)."""
        return self.masker.num_copies

    @property
    def cycle_length(self) -> int:
        """``fully_explored_passes``: K, the epochs of a cycle (its disjoint masks); other strategies: 1."""
        cfg = self.masker.cfg
        return int(cfg.num_masks) if cfg.strategy == PASSES else 1

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
        cycle = f", a cycle of {self.cycle_length} epochs" if cfg.strategy == PASSES else ""
        return (f"DataCollatorForFullyExploredLM({cfg.strategy}/{cfg.granularity}, K={self.num_masks} rows per "
                f"sequence{cycle}{schedule}, count={cfg.count}, seed={self.seed}, epoch={self.epoch})")


@functools.cache
def _epoch_callback_class() -> type:
    """The ``TrainerCallback`` subclass of :meth:`DataCollatorForFullyExploredLM.epoch_callback` (transformers is
    imported only when a callback is asked for)."""
    from transformers import TrainerCallback

    class FullyExploredEpochCallback(TrainerCallback):
        """``on_epoch_begin``: ``collator.set_epoch(int(state.epoch))`` (before the Trainer iterates the epoch)."""

        def __init__(self, collator: DataCollatorForFullyExploredLM) -> None:
            self.collator = collator

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.collator.set_epoch(int(state.epoch or 0))

    return FullyExploredEpochCallback
