"""HF-compatible data collator around a :class:`Masker`, plus batch sizing at equal rows.

K copies and the K-mask gradient (paper Eq. 5)
----------------------------------------------
A batch of ``B`` rows can hold ``B/K`` sequences times K masked copies (`sequences_per_batch`), so FE-MLM costs
the same forward/backward FLOPs as the MLM baseline with ``B`` rows (femlm.train.compute has both of femlm's
equal-compute readings). The model's loss is the usual
token mean of the cross-entropy over all labelled positions of all rows. This equals the paper's K-mask
gradient ``g(m_1..m_K) = 1/K * sum_k g(m_k)`` because every copy of sequence ``b`` masks exactly ``tau_b``
tokens: copy ``k`` contributes ``T = sum_b tau_b`` labelled tokens, the same ``T`` for every ``k``, so

    mean over all K*T tokens = (1/(K*T)) * sum_k sum_{tokens of copy k} loss
                             = (1/K) * sum_k [ (1/T) * sum_{tokens of copy k} loss ]
                             = mean over copies of the per-copy token means,

and by linearity the same holds for gradients. (Across sequences the token mean weights sequence ``b`` by
``tau_b``, exactly like the standard MLM loss, so baseline and FE share one definition of the loss.) For
whole-word granularity a copy can end short of ``tau`` by less than one word (see ``sample_word_spans``), for
span granularity over or short by less than one word (see ``femlm.masking.spans``), so the identity is then
approximate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .config import MaskingConfig, MaskingConfigError
from .maskers import Masker, build_masker
from .sampling import make_generator
from .words import word_ids_from_offsets, word_start_table

# Feature keys dropped (the masker writes the labels); per-token keys are padded, every other key stacked.
_DROPPED = ("labels",)


def sequences_per_batch(rows: int, num_masks: int) -> int:
    """How many source sequences fill a batch of ``rows`` model rows when each becomes ``num_masks`` copies
    (``rows`` must be a multiple of ``num_masks``)."""
    if rows < 1 or num_masks < 1:
        raise MaskingConfigError(f"rows={rows}, num_masks={num_masks} are invalid; allowed: both >= 1")
    if rows % num_masks:
        raise MaskingConfigError(
            f"batch rows={rows} is invalid with masking.num_masks={num_masks}; "
            f"allowed: a multiple of {num_masks} (e.g. {max(num_masks, rows - rows % num_masks)})"
        )
    return rows // num_masks


def masker_for_tokenizer(cfg: MaskingConfig, tokenizer: Any, **options: bool) -> tuple[Masker, int]:
    """(masker, pad id) of ``cfg`` for a HF tokenizer: mask id, ``len(tokenizer)``, special ids, word starts;
    ``options``: the :class:`Masker`'s keyword options (``given_mask_only``, ``allow_short_rows``)."""
    if tokenizer.mask_token_id is None:
        raise MaskingConfigError("tokenizer.mask_token is None; allowed: a tokenizer with a mask token")
    word_starts = word_start_table(tokenizer) if cfg.granularity != "subword" else None
    masker = build_masker(
        cfg,
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_ids=tokenizer.all_special_ids,
        word_starts=word_starts,
        **options,
    )
    pad = getattr(tokenizer, "pad_token_id", None)  # a tokenizer without padding pads with the mask token
    pad = tokenizer.mask_token_id if pad is None else pad
    return masker, pad


def _as_list(x: Any) -> list[int]:
    if isinstance(x, torch.Tensor):
        return x.tolist()
    return list(x)


class MaskingCollator:
    """``collator(features) -> batch``: pads dynamically, masks, returns ``B*K`` rows.

    ``features``: list of dicts with ``input_ids`` (list or 1-D tensor) and optionally ``attention_mask``,
    ``special_tokens_mask``, ``token_type_ids`` and ``offset_mapping``; bare id lists/tensors are accepted too.
    Per-token fields are padded as a HF tokenizer's ``pad`` pads them, on ``padding_side``; the special-tokens
    mask and the offsets are consumed (the offsets give whole-word boundaries, as in HF); a given ``labels`` is
    replaced; every other key (e.g. ``next_sentence_label``) is stacked as given -- values of unequal lengths
    raise ``ValueError``, as HF's ``tokenizer.pad`` does -- and each row's value repeated for its K copies.
    ``pad_token_id=None``: no padding possible; a batch that needs it, or dict features, raise ``ValueError``
    (HF's behaviour for a tokenizer without a pad token).

    Randomness: the masks of a call are drawn from ``make_generator(seed, step, rank, micro_step)``.
    A trainer calls :meth:`set_step` before each optimizer step (``micro_step`` restarts at 0 and counts
    the calls within the step), so a resumed run redraws identical masks. In plain HF use nobody calls
    ``set_step``: ``micro_step`` is then a call counter (saved/restored by ``state_dict``). Inside a
    DataLoader worker the counter is mapped to the global batch index ``calls * num_workers + worker_id``,
    which keeps workers from duplicating masks and -- with the DataLoader's round-robin batch assignment --
    reproduces the single-process masks. ``set_step`` from the main process does not reach workers' copies.

    ``seed=None`` draws from torch's global generator instead (as HF's collator does without a seed; DataLoader
    workers seed theirs differently), so masks are then not reproducible from the collator alone.

    Ratio schedule (``cfg.ratio_schedule: linear``): the ratio of a call is ``cfg.ratio_at(position,
    schedule_steps)``, where ``position`` is the step given to :meth:`set_step` when a trainer drives the
    collator, else the global batch index + 1 (the call counter, mapped across workers as above). K stays
    fixed; tau follows the ratio.

    ``return_indices=False`` drops ``sequence_index``/``copy_index`` for models that reject extra kwargs.
    """

    padding_side = "right"  # "left" pads on the left (the drop-in reads its tokenizer's)
    pad_token_type_id = 0  # token_type_ids of padding

    def __init__(
        self,
        masker: Masker,
        pad_token_id: int | None,
        seed: int | None = 0,
        pad_to_multiple_of: int | None = None,
        return_indices: bool = True,
        schedule_steps: int | None = None,
    ) -> None:
        cfg = masker.cfg
        if cfg.ratio_schedule != "constant" and (schedule_steps is None or schedule_steps < 1):
            raise MaskingConfigError(
                f"schedule_steps={schedule_steps!r} is invalid with ratio_schedule={cfg.ratio_schedule!r}; allowed: "
                "the number of batches (trainer steps x gradient accumulation) the schedule spans, >= 1"
            )
        self.masker = masker
        self.pad_token_id = None if pad_token_id is None else int(pad_token_id)
        self.seed = None if seed is None else int(seed)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.return_indices = return_indices
        self.schedule_steps = schedule_steps
        self.step = 0
        self.rank = 0
        self.micro_step = 0

    @classmethod
    def from_tokenizer(
        cls, cfg: MaskingConfig, tokenizer: Any, seed: int = 0, **kwargs: Any
    ) -> MaskingCollator:
        """Masker + collator from a HF tokenizer (mask/pad ids, ``len(tokenizer)``, specials, word starts)."""
        masker, pad = masker_for_tokenizer(cfg, tokenizer)
        return cls(masker, pad_token_id=pad, seed=seed, **kwargs)

    # ------------------------------------------------------------------ RNG state
    def set_step(self, step: int, rank: int = 0, micro_step: int = 0) -> None:
        self.step, self.rank, self.micro_step = int(step), int(rank), int(micro_step)

    def state_dict(self) -> dict[str, int | None]:
        return {"seed": self.seed, "step": self.step, "rank": self.rank, "micro_step": self.micro_step}

    def load_state_dict(self, state: Mapping[str, int | None]) -> None:
        self.seed = None if state["seed"] is None else int(state["seed"])
        self.set_step(state["step"], state["rank"], state["micro_step"])

    def next_call(self) -> tuple[torch.Generator | None, float | None]:
        """(generator, ratio) of the current call (ratio None: the config's own); advances ``micro_step``."""
        micro = self.micro_step
        info = torch.utils.data.get_worker_info()
        if info is not None:
            micro = micro * info.num_workers + info.id
        self.micro_step += 1
        gen = None if self.seed is None else make_generator(self.seed, self.step, self.rank, micro)
        cfg = self.masker.cfg
        if cfg.ratio_schedule == "constant":
            return gen, None
        return gen, cfg.ratio_at(self.step if self.step > 0 else micro + 1, self.schedule_steps)

    # ------------------------------------------------------------------ collation
    def pad(self, features: Sequence[Any]) -> dict[str, torch.Tensor]:
        """Pad ``input_ids`` and the per-token fields to the longest row (see the class doc); stack the rest."""
        return self.pad_with_lengths(features)[0]

    def pad_with_lengths(self, features: Sequence[Any]) -> tuple[dict[str, torch.Tensor], list[int]]:
        """:meth:`pad`, and each row's length as given (its tokens sit at the end of the row when
        ``padding_side`` is ``"left"``, at the start otherwise)."""
        if len(features) == 0:
            raise ValueError("MaskingCollator got an empty list of features")
        mappings = isinstance(features[0], Mapping)
        feats = [f if isinstance(f, Mapping) else {"input_ids": f} for f in features]
        ids = [_as_list(f["input_ids"]) for f in feats]
        lens = [len(x) for x in ids]
        length = max(lens)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            length = (length + m - 1) // m * m
        if self.pad_token_id is None and (mappings or any(n != length for n in lens)):
            raise ValueError("the tokenizer has no pad token, so this batch cannot be padded; allowed: set "
                             "tokenizer.pad_token (e.g. tokenizer.pad_token = tokenizer.eos_token)")
        if self.padding_side not in ("right", "left"):
            raise ValueError(f"padding_side={self.padding_side!r} is invalid; allowed: right | left")
        left = self.padding_side == "left"

        def field(key: str, default: Any, fill: Any, dtype: torch.dtype) -> torch.Tensor:
            # one torch.tensor call over padded Python lists: far cheaper than a tensor copy per row
            rows = []
            for f, n in zip(feats, lens, strict=True):
                row, pad = (_as_list(f[key]) if key in f else [default] * n), [fill] * (length - n)
                rows.append(pad + row if left else row + pad)
            return torch.tensor(rows, dtype=dtype)

        out = {"input_ids": field("input_ids", None, self.pad_token_id, torch.long),
               "attention_mask": field("attention_mask", 1, 0, torch.long)}
        for key in (k for k in feats[0] if k not in ("input_ids", "attention_mask", *_DROPPED)):
            if key == "token_type_ids":  # rows lacking it: segment A
                out[key] = field(key, 0, self.pad_token_type_id, torch.long)
            elif key in ("special_tokens_mask", "offset_mapping"):  # padding is special, its offsets (0, 0)
                _check_every_row_has(key, feats)
                out[key] = field(key, None, 1 if key == "special_tokens_mask" else (0, 0),
                                 torch.bool if key == "special_tokens_mask" else torch.long)
            else:
                out[key] = _stack(key, feats)
        return out, lens

    def __call__(self, features: Sequence[Any]) -> dict[str, torch.Tensor]:
        padded = self.pad(features)
        ids, attention = padded.pop("input_ids"), padded.pop("attention_mask")
        special, offsets = padded.pop("special_tokens_mask", None), padded.pop("offset_mapping", None)
        word_ids = None
        if offsets is not None and self.masker.cfg.granularity != "subword":  # HF's word boundaries
            word_ids = word_ids_from_offsets(offsets, ~self.masker.valid_mask(ids, attention, special))
        generator, ratio = self.next_call()
        out = self.masker(ids, attention, generator, special_mask=special, word_ids=word_ids, ratio=ratio)
        k = self.masker.num_copies
        for key, value in padded.items():  # token_type_ids and every extra key, one value per copy
            out[key] = value.repeat_interleave(k, dim=0)
        if not self.return_indices:
            out.pop("sequence_index")
            out.pop("copy_index")
        return out


def _check_every_row_has(key: str, feats: Sequence[Mapping[str, Any]]) -> None:
    missing = sum(key not in f for f in feats)
    if missing:
        raise ValueError(f"feature key {key!r} is missing from {missing} of {len(feats)} rows; allowed: every row "
                         "has the keys of the first row")


def _stack(key: str, feats: Sequence[Mapping[str, Any]]) -> torch.Tensor:
    """One tensor of every row's ``key`` (as HF's ``tokenizer.pad`` converts keys it does not pad)."""
    _check_every_row_has(key, feats)
    values = [f[key] for f in feats]
    try:
        if isinstance(values[0], torch.Tensor):
            return torch.stack(values)
        return torch.tensor(values)
    except (ValueError, TypeError, RuntimeError) as err:
        raise ValueError(f"feature key {key!r} cannot be stacked into one tensor ({err}); allowed: numbers or "
                         "equal-length lists per row (pad or drop the key before the collator)") from None
