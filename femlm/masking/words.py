"""Word boundaries for pre-tokenised blocks.

Packed pre-training blocks (``group_texts``) have lost the tokenizer's ``offset_mapping``, so whole-word and
span masking recover words from the token ids alone: a per-vocabulary lookup table says whether a token id
*starts* a word, and a cumulative sum over that table gives word ids, vectorised over the batch.
"""

from __future__ import annotations

from typing import Any

import torch

SCHEMES = ("wordpiece", "bpe", "sentencepiece", "none")


def _detect_scheme(tokens: list[str | None]) -> str:
    """Guess the sub-word convention from the vocabulary: the most frequent marker wins.

    Counting (rather than "any token has the marker") matters: RoBERTa's byte-level vocabulary contains
    a few literal ``##...`` tokens, and BERT's contains no ``Ġ``/``▁`` tokens.
    """
    present = [t for t in tokens if t]
    counts = {
        "wordpiece": sum(t.startswith("##") for t in present),
        "bpe": sum(t.startswith("\u0120") for t in present),  # "Ġ": byte-level BPE (GPT-2/RoBERTa) space
        "sentencepiece": sum(t.startswith("\u2581") for t in present),  # "▁": SentencePiece space marker
    }
    best = max(counts, key=counts.__getitem__)
    return best if counts[best] > 0 else "none"


def word_start_table(tokenizer: Any, scheme: str | None = None) -> torch.Tensor:
    """BoolTensor[len(tokenizer)]: ``True`` where the token id begins a new word.

    * WordPiece (BERT): every token except ``##``-continuations starts a word.
    * Byte-level BPE (RoBERTa): tokens starting with ``Ġ`` (a preceding space) and special tokens start a
      word; everything else continues the previous word. Punctuation without a leading space therefore stays
      attached to its word ("word," is one word) -- the usual RoBERTa whole-word heuristic.
    * SentencePiece: tokens starting with ``▁`` and special tokens start a word.
    * ``none``/unknown: every token is its own word (whole-word masking degenerates to sub-word masking).

    The first token after a special token always starts a word regardless of the table; that is handled by
    :func:`word_ids_from_starts` (e.g. RoBERTa's first word has no ``Ġ``).
    """
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    scheme = scheme or _detect_scheme(tokens)
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is invalid; allowed: {' | '.join(SCHEMES)}")
    if scheme == "wordpiece":
        starts = [not (t or "").startswith("##") for t in tokens]
    elif scheme == "bpe":
        starts = [(t or "\u0120").startswith("\u0120") for t in tokens]
    elif scheme == "sentencepiece":
        starts = [(t or "\u2581").startswith("\u2581") for t in tokens]
    else:
        starts = [True] * size
    table = torch.tensor(starts, dtype=torch.bool)
    special = [i for i in getattr(tokenizer, "all_special_ids", []) if 0 <= i < size]
    if special:
        table[torch.tensor(special, dtype=torch.long)] = True
    return table


def word_ids_from_starts(
    input_ids: torch.Tensor, table: torch.Tensor | None, special_mask: torch.Tensor
) -> torch.Tensor:
    """LongTensor[B, L] of word ids (0-based, increasing along each row), computed with one cumsum.

    A token starts a word if the table says so, if it is special (specials and padding -- pass both in
    ``special_mask`` -- are words of their own and never merge with neighbours), if it follows a special
    token, or if it is the first token of the row. ``table=None`` makes every token its own word.
    """
    special_mask = special_mask.bool()
    if table is None:
        starts = torch.ones_like(special_mask)
    else:
        starts = table.to(input_ids.device)[input_ids.clamp(0, table.numel() - 1)]
        # ids outside the table (added tokens) are treated as word starts rather than crashing
        starts = starts | (input_ids >= table.numel()) | (input_ids < 0)
    after_special = torch.zeros_like(special_mask)
    after_special[:, 1:] = special_mask[:, :-1]
    starts = starts | special_mask | after_special
    starts[:, 0] = True
    return starts.long().cumsum(dim=1) - 1


def word_ids_from_offsets(offsets: torch.Tensor, special_mask: torch.Tensor) -> torch.Tensor:
    """LongTensor[B, L] of word ids from a fast tokenizer's ``offset_mapping`` ``[B, L, 2]``: Hugging Face's rule.

    As ``DataCollatorForLanguageModeling(whole_word_mask=True)`` reads words: a token starts a word when its
    start differs from the previous token's end (a gap: a space) or the previous token is special; special
    tokens and padding (``special_mask``) are words of their own. Same id convention as
    :func:`word_ids_from_starts`.
    """
    special_mask = special_mask.bool()
    start, end = offsets[..., 0], offsets[..., 1]
    prev_end = torch.full_like(end, -1)
    prev_end[:, 1:] = end[:, :-1]
    after_special = torch.zeros_like(special_mask)
    after_special[:, 1:] = special_mask[:, :-1]
    starts = special_mask | after_special | (start != prev_end)
    starts[:, 0] = True
    return starts.long().cumsum(dim=1) - 1


def select_word_bernoulli(
    word_ids: torch.Tensor, valid: torch.Tensor, ratio: float, copies: int, generator: torch.Generator
) -> torch.Tensor:
    """Bernoulli over whole words (Hugging Face's whole-word masking): ``BoolTensor[B, copies, L]``.

    The first maskable token of every word is drawn with probability ``ratio`` in one ``torch.bernoulli`` over
    ``[B*copies, L]`` (every other position has probability 0), and a drawn word is masked whole -- the draw,
    shape and order of HF's ``torch_mask_tokens`` with ``whole_word_mask=True``, so with the same word ids and
    generator state the selection is identical.
    """
    bsz, length = valid.shape
    rows = valid.repeat_interleave(copies, dim=0)
    wid = word_ids.repeat_interleave(copies, dim=0).to(valid.device)
    prev = torch.full_like(wid, -1)
    prev[:, 1:] = wid[:, :-1]
    first = rows & (wid != prev)
    dev = generator.device
    prob = torch.full(rows.shape, float(ratio), device=dev).masked_fill_(~first.to(dev), 0.0)
    chosen = torch.bernoulli(prob, generator=generator).bool().to(valid.device)
    hits = torch.zeros(rows.shape, dtype=torch.long, device=valid.device).scatter_add_(1, wid, chosen.long())
    return (hits.gather(1, wid).bool() & rows).view(bsz, copies, length)
