"""Random draws behind every masking strategy: budgets, position selection, whole words, generators.

Everything takes an explicit ``torch.Generator`` (or a numpy ``Generator`` seeded from one) so that a run
resumed at step ``s`` draws exactly the masks an uninterrupted run would have drawn.

Selection functions return ``BoolTensor[B, K, L]``: ``sel[b, k, l]`` says that copy ``k`` of sequence ``b``
masks position ``l``. Turning a selection into model inputs (80/10/10 replacement) is in ``maskers.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .wholeword import sample_whole_words

_M64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------- generators
def _splitmix64(x: int) -> int:
    # SplitMix64 finaliser: a bijective avalanche mix, so nearby (seed, step) pairs give unrelated streams.
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def mix_seed(seed: int, step: int, rank: int = 0, micro_step: int = 0) -> int:
    """Deterministic 63-bit seed from four integers (order matters; negative values are allowed)."""
    h = 0
    for value in (seed, step, rank, micro_step):
        h = _splitmix64(h ^ (int(value) & _M64))
    return h >> 1  # torch accepts any uint64, numpy too; 63 bits keeps it a positive Python/C long


def mix_seeds(seed: int, steps: np.ndarray, ranks: np.ndarray, micro_step: int = 0) -> list[int]:
    """``[mix_seed(seed, steps[i], ranks[i], micro_step) ...]`` for int64 arrays, in numpy uint64 (wraps mod 2**64)."""
    h = np.zeros(np.broadcast_shapes(np.shape(steps), np.shape(ranks)), dtype=np.uint64)
    for value in (np.uint64(int(seed) & _M64), np.asarray(steps, dtype=np.int64).view(np.uint64),
                  np.asarray(ranks, dtype=np.int64).view(np.uint64), np.uint64(int(micro_step) & _M64)):
        h = _splitmix64_np(h ^ value)  # int64 viewed as uint64: two's complement, as ``& _M64`` is
    return (h >> np.uint64(1)).tolist()


def _splitmix64_np(x: np.ndarray) -> np.ndarray:
    """`_splitmix64` over a uint64 array (wrapping, as the scalar version masks). femlm/data/sample.py has the same
    mixer for document sampling: the layers (tests/test_layers.py) let neither import the other."""
    with np.errstate(over="ignore"):  # 0-d inputs compute as numpy scalars, which warn on the intended wrap
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def make_generator(seed: int, step: int, rank: int = 0, micro_step: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``(seed, step, rank, micro_step)``.

    A trainer that resumes at optimizer step ``s`` calls this with the same four numbers and gets the same
    masks; different ranks (data-parallel workers) and micro-steps (gradient accumulation) get independent
    streams instead of duplicated masks.
    """
    return torch.Generator().manual_seed(mix_seed(seed, step, rank, micro_step))


def numpy_rng(generator: torch.Generator) -> np.random.Generator:
    """A numpy generator whose seed is one draw from ``generator`` (keeps a single source of randomness)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------- budgets
def mask_budget(n_valid: torch.Tensor, ratio: float, copies: int = 1) -> torch.Tensor:
    """tau per row: ``round_half_up(ratio * n_valid)``, at least 1 when ``n_valid > 0``, 0 otherwise.

    Round-half-up (not Python's banker's rounding) so that tau is monotone in ``n_valid`` and easy to state.
    With ``copies = K > 1`` tau is additionally capped at ``n_valid // K``: rounding can push ``K * tau``
    above ``n_valid`` when ``K * ratio`` is close to 1 (e.g. ratio 0.25, K 4, n 10 -> round(2.5) = 3 and
    12 > 10). The cap only bites in that rounding corner; the same rule is used for the ``iid`` control so
    that FE and iid differ only in overlap. Rows with ``n_valid < K`` get tau 0 and are rejected by the
    masker (see ``check_fits``).
    """
    tau = torch.floor(n_valid.double() * float(ratio) + 0.5).long()
    tau = torch.where(n_valid > 0, tau.clamp(min=1), torch.zeros_like(tau))
    if copies > 1:
        tau = torch.minimum(tau, n_valid // copies)
    return tau


# ---------------------------------------------------------------------------------------------- sub-word draws
def random_ranks(valid: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Rank of every position in a uniformly random order of the valid positions of its row.

    Ranks ``0 .. n_valid-1`` go to valid positions (a uniform random permutation), invalid positions get
    the ranks after them. Implemented as argsort of i.i.d. float64 keys with invalid keys set to 2 (> any
    U[0,1) key); float64 makes ties (which would favour low indices) vanishingly rare even for L=512.
    Works on any leading shape; ranks are along the last dimension.
    """
    keys = torch.rand(valid.shape, generator=generator, dtype=torch.float64, device=generator.device)
    return ranks_from_keys(keys.to(valid.device), valid)


def ranks_from_keys(keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """`random_ranks` from its float64 keys (overwritten: invalid positions set to 2); FE across passes draws
    each row's keys from the row's own generator and ranks the batch here at once."""
    order = keys.masked_fill_(~valid, 2.0).argsort(dim=-1)
    positions = torch.arange(valid.shape[-1], device=valid.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, positions)


def select_subword_exact(
    valid: torch.Tensor, tau: torch.Tensor, copies: int, strategy: str, generator: torch.Generator
) -> torch.Tensor:
    """Exact-count sub-word selection for all three strategies, vectorised over the batch.

    * ``random``/``iid``: each copy takes the ``tau`` lowest ranks of its own permutation (one draw of
      shape ``[B, K, L]``), i.e. a uniform element of M(tau); iid copies may overlap.
    * ``fully_explored``: ONE permutation per row, chunked: copy ``k`` takes ranks ``k*tau .. (k+1)*tau-1``.
      The chunks are disjoint by construction, and since the permutation is uniform every chunk is a
      uniform ``tau``-subset of the valid positions -- the marginal of each copy is Unif(M(tau)), which is
      Lemma 2's condition for the K-mask gradient to be unbiased.
    """
    bsz, length = valid.shape
    if strategy == "fully_explored":
        ranks = random_ranks(valid, generator)  # [B, L]
        t = tau.clamp(min=1)[:, None]
        group = ranks // t  # copy id of every position; >= K for the unselected tail
        in_union = ranks < copies * tau[:, None]
        ks = torch.arange(copies, device=valid.device)[None, :, None]
        return (group[:, None, :] == ks) & in_union[:, None, :]
    expanded = valid[:, None, :].expand(bsz, copies, length)
    ranks = random_ranks(expanded, generator)  # independent permutation per copy
    return ranks < tau[:, None, None]


def select_subword_bernoulli(
    valid: torch.Tensor, ratio: float, copies: int, generator: torch.Generator
) -> torch.Tensor:
    """Hugging Face semantics: every valid token of every copy is chosen independently with prob ``ratio``.

    Draw order and shape (one ``torch.bernoulli`` over ``[B*K, L]``) match ``DataCollatorForLanguageModeling``
    so that with K = 1 and the same generator state the result is bit-identical to the HF collator.
    """
    bsz, length = valid.shape
    rows = valid.repeat_interleave(copies, dim=0)
    dev = generator.device
    prob = torch.full(rows.shape, float(ratio), device=dev).masked_fill_(~rows.to(dev), 0.0)
    chosen = torch.bernoulli(prob, generator=generator).bool().to(valid.device)
    return chosen.view(bsz, copies, length)


# ---------------------------------------------------------------------------------------------- spans
def truncated_geometric_pmf(p: float, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, pmf) of SpanBERT's span-length law: ``P(l) ∝ p (1-p)^(l-lo)`` on ``lo..hi``, renormalised."""
    lengths = np.arange(lo, hi + 1)
    weights = p * (1.0 - p) ** (lengths - lo)
    return lengths, weights / weights.sum()


def sample_word_spans(
    word_len: Sequence[int],
    adjacent: Sequence[bool],
    budgets: Sequence[int],
    rng: np.random.Generator,
    lengths: np.ndarray,
    pmf: np.ndarray,
) -> list[tuple[int, int, int]]:
    """Non-overlapping word-aligned spans shared out among ``len(budgets)`` copies; returns ``(copy, w0, n)``.

    Words are the maskable words of one row, in order, with ``word_len[w]`` tokens; ``adjacent[w]`` says word
    ``w+1`` directly follows word ``w`` (no special token between them), so spans never cross a [SEP].

    Loop (SpanBERT-like, adapted to disjoint word-aligned spans):
      1. the copy with the most remaining budget receives the next span (ties broken by a random priority
         drawn once per row);
      2. the anchor is a uniformly random free word whose length fits that remaining budget -- realised by
         walking one uniform permutation of the words and skipping covered / too long ones, which is
         equivalent and costs O(1) per word;
      3. a length ``l`` in words is drawn from ``pmf``; the span grows right from the anchor over free,
         adjacent words while it has fewer than ``l`` words and stays within the copy's remaining budget.
    Budget rule: a copy never exceeds its budget ("stop at or just under"): it ends exactly at the budget
    unless no free word fits the remainder (rare: single-token words usually remain). This is the rule of
    Google BERT's whole-word masking (``create_pretraining_data.py`` skips a word that would overflow
    ``num_to_predict``); it slightly under-samples long words when the budget is tight. Spans are truncated
    (never merged) at covered words, segment ends and the budget, so realised lengths are slightly shorter
    than ``pmf`` when masks are dense. Because budgets are equal and ties are broken by a uniformly random
    priority, the process is symmetric in the copy labels: the K masks are exchangeable (same marginal law).
    With ``lengths=[1]`` and one budget this is MLM whole-word's law; with K budgets it is NOT each copy's
    MLM law (issue 27: words of 1, 1, 2, 2 tokens, tau 2, K 3 give a 1-token word probability 1/3 per copy vs
    1/2, and a copy under budget w.p. 1/3), so the masker now draws whole words with
    :func:`femlm.masking.wholeword.sample_whole_words`; this function is kept for span-law comparisons.
    """
    n_words = len(word_len)
    remaining = [int(b) for b in budgets]
    n_copies = len(remaining)
    if n_words == 0 or max(remaining, default=0) <= 0:
        return []
    priority = rng.permutation(n_copies).tolist() if n_copies > 1 else [0]
    order = rng.permutation(n_words).tolist()
    if len(lengths) == 1:
        drawn = [int(lengths[0])] * n_words
    else:
        drawn = rng.choice(lengths, size=n_words, p=pmf).tolist()
    free = [True] * n_words
    spans: list[tuple[int, int, int]] = []
    # max() returns the first maximal element, so iterating copies in random priority order breaks ties;
    # the receiving copy only changes after a span is placed, so it is recomputed there, not per word
    k = max(priority, key=remaining.__getitem__)
    cap = remaining[k]
    for start in order:
        if cap <= 0:
            break
        if not free[start] or word_len[start] > cap:
            continue  # caps only shrink, so a skipped word can never fit later: skipping keeps uniformity
        want = drawn[len(spans)]
        used = word_len[start]
        end = start + 1
        while (
            end - start < want
            and end < n_words
            and free[end]
            and adjacent[end - 1]
            and used + word_len[end] <= cap
        ):
            used += word_len[end]
            end += 1
        for w in range(start, end):
            free[w] = False
        remaining[k] = cap - used
        spans.append((k, start, end - start))
        k = max(priority, key=remaining.__getitem__)
        cap = remaining[k]
    return spans


def row_words(token_word_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(word_len, adjacent, tok_word)`` of one row's maskable tokens, given their (increasing) word ids.

    ``word_len[w]``: tokens of maskable word ``w``; ``adjacent[w]``: word ``w+1`` directly follows word ``w``
    (no special token or padding between them, whose ids would make the word ids jump); ``tok_word[t]``:
    the word index of maskable token ``t``. Shared by the whole-word and the span samplers.
    """
    new_word = np.empty(token_word_ids.size, dtype=bool)
    new_word[0] = True
    np.not_equal(token_word_ids[1:], token_word_ids[:-1], out=new_word[1:])
    first = np.flatnonzero(new_word)
    word_len = np.diff(np.append(first, token_word_ids.size))
    wid_of_word = token_word_ids[first]
    adjacent = wid_of_word[1:] == wid_of_word[:-1] + 1
    return word_len, adjacent, np.cumsum(new_word) - 1


def select_word_level(
    word_ids: torch.Tensor,
    valid: torch.Tensor,
    tau: torch.Tensor,
    copies: int,
    strategy: str,
    lengths: np.ndarray,
    pmf: np.ndarray,
    generator: torch.Generator,
) -> torch.Tensor:
    """Whole-word selection ``BoolTensor[B, K, L]``; loops over rows (lean numpy + Python inside).

    The masker uses it for ``granularity: whole_word`` (``lengths=[1]``): every copy follows MLM whole-word's
    law via :func:`femlm.masking.wholeword.sample_whole_words` -- ``random`` one MLM draw, ``iid`` K
    independent ones (may overlap), ``fully_explored`` K disjoint copies each distributed as the MLM draw up to
    the conflict probability stated there. Other ``lengths`` keep the anchor-and-grow :func:`sample_word_spans`
    (span granularity before :mod:`femlm.masking.spans`; kept for comparisons). Only valid tokens are selected.
    """
    bsz, length = valid.shape
    whole_words = len(lengths) == 1 and int(lengths[0]) == 1
    rng = numpy_rng(generator)
    valid_np = valid.cpu().numpy()
    wid_np = word_ids.cpu().numpy()
    tau_np = tau.cpu().numpy()
    out = np.zeros((bsz, copies, length), dtype=bool)
    for b in range(bsz):
        vpos = np.flatnonzero(valid_np[b])
        if vpos.size == 0 or tau_np[b] <= 0:
            continue
        word_len, adjacent_np, tok_word = row_words(wid_np[b, vpos])
        adjacent, word_len_l = adjacent_np.tolist(), word_len.tolist()
        tau_b = int(tau_np[b])
        word_sel = np.zeros((copies, word_len.size), dtype=bool)
        if whole_words and strategy == "fully_explored":  # K disjoint copies, each (nearly) MLM's law
            word_sel = sample_whole_words(word_len_l, tau_b, copies, rng)[None, :] == np.arange(copies)[:, None]
        elif whole_words:  # random (K = 1) or iid: an independent MLM whole-word draw per copy
            for k in range(copies):
                word_sel[k] = sample_whole_words(word_len_l, tau_b, 1, rng) == 0
        elif strategy == "fully_explored":  # one shared draw: K disjoint budgets
            for k, w0, n in sample_word_spans(word_len_l, adjacent, [tau_b] * copies, rng, lengths, pmf):
                word_sel[k, w0 : w0 + n] = True
        else:  # random (K = 1) or iid: an independent single-budget draw per copy
            for k in range(copies):
                for _, w0, n in sample_word_spans(word_len_l, adjacent, [tau_b], rng, lengths, pmf):
                    word_sel[k, w0 : w0 + n] = True
        out[b][:, vpos] = word_sel[:, tok_word]
    return torch.from_numpy(out).to(valid.device)
