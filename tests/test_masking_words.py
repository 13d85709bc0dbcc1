"""Word boundaries, whole-word and span masking (SpanBERT lengths, whole words never split, FE disjointness)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from femlm.masking import (
    MaskingConfig,
    build_masker,
    make_generator,
    sample_word_spans,
    truncated_geometric_pmf,
    word_ids_from_starts,
    word_start_table,
)

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIALS = [PAD, CLS, SEP, MASK]
VOCAB = 100
CONT = 60  # ids >= CONT are "##" continuation pieces in the synthetic vocabulary
TABLE = torch.arange(VOCAB) < CONT
HYP = settings(max_examples=25, deadline=None, derandomize=True)


class FakeTokenizer:
    """Just enough of a HF tokenizer for word_start_table."""

    def __init__(self, tokens: list[str], special_ids: list[int]) -> None:
        self.tokens, self.all_special_ids = tokens, special_ids

    def __len__(self) -> int:
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.tokens[i] for i in ids]


def word_batch(rows: int, length: int, seed: int, cont_prob: float = 0.4, sep_at: int | None = None):
    """Rows of [CLS] words [SEP] (optionally a second [SEP] mid-row) and padding; words have 1..several pieces."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((rows, length), PAD, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r in range(rows):
        n = int(torch.randint(length // 2, length - 1, (1,), generator=g))
        starts = torch.randint(4, CONT, (n,), generator=g)
        conts = torch.randint(CONT, VOCAB, (n,), generator=g)
        is_cont = torch.rand(n, generator=g) < cont_prob
        is_cont[0] = False
        ids[r, 0], ids[r, 1 : n + 1], ids[r, n + 1] = CLS, torch.where(is_cont, conts, starts), SEP
        if sep_at is not None and sep_at < n:
            ids[r, sep_at] = SEP
        att[r, : n + 2] = 1
    return ids, att


def masker_for(strategy: str, granularity: str, **kw: object):
    cfg = MaskingConfig(name="t", strategy=strategy, granularity=granularity, **kw)  # type: ignore[arg-type]
    return build_masker(cfg, mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIALS, word_starts=TABLE)


def words_of(ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
    special = torch.isin(ids, torch.tensor(SPECIALS)) | ~att.bool()
    return word_ids_from_starts(ids, TABLE, special)


# ---------------------------------------------------------------------------------------------- boundaries
def test_word_start_table_schemes() -> None:
    wp = FakeTokenizer(["[PAD]", "[CLS]", "the", "##s", "run", "##ning", "[MASK]"], [0, 1, 6])
    assert word_start_table(wp).tolist() == [True, True, True, False, True, False, True]
    bpe = FakeTokenizer(["<s>", "</s>", "\u0120the", "the", ",", "\u0120run", "ning"], [0, 1])
    assert word_start_table(bpe).tolist() == [True, True, True, False, False, True, False]
    sp = FakeTokenizer(["<pad>", "\u2581the", "s", "\u2581run"], [0])
    assert word_start_table(sp).tolist() == [True, True, False, True]
    assert word_start_table(bpe, scheme="none").all()
    with pytest.raises(ValueError, match="scheme"):
        word_start_table(bpe, scheme="bytes")


def test_word_ids_from_starts_handles_specials_and_leading_continuations() -> None:
    # [CLS] ##x a ##b ##c [SEP] ##d e [PAD] [PAD]; a continuation right after a special starts a new word
    ids = torch.tensor([[CLS, 70, 10, 71, 72, SEP, 73, 11, PAD, PAD]])
    special = torch.isin(ids, torch.tensor(SPECIALS))
    assert word_ids_from_starts(ids, TABLE, special).tolist() == [[0, 1, 2, 2, 2, 3, 4, 5, 6, 7]]
    assert word_ids_from_starts(ids, None, special).tolist() == [list(range(10))]


@pytest.mark.mirror
@pytest.mark.parametrize(
    ("name", "word", "piece"), [("bert-base-uncased", "the", "##s"), ("roberta-base", "\u0120the", "s")]
)
def test_word_start_table_on_real_tokenizers(name: str, word: str, piece: str) -> None:
    from pathlib import Path

    from transformers import AutoTokenizer

    path = Path("/work/shared/data/tokenizers") / name
    if not path.is_dir():
        pytest.skip(f"{path} absent")
    tok = AutoTokenizer.from_pretrained(str(path))
    table = word_start_table(tok)
    assert table.numel() == len(tok)
    assert bool(table[tok.convert_tokens_to_ids(word)]) and not bool(table[tok.convert_tokens_to_ids(piece)])
    assert table[torch.tensor(tok.all_special_ids)].all()


# ---------------------------------------------------------------------------------------------- span lengths
def test_truncated_geometric_pmf_matches_spanbert_formula() -> None:
    lengths, pmf = truncated_geometric_pmf(0.2, 1, 10)
    assert lengths.tolist() == list(range(1, 11))
    expected = np.array([0.2 * 0.8 ** (i - 1) for i in range(1, 11)])
    np.testing.assert_allclose(pmf, expected / expected.sum())
    assert abs(pmf.sum() - 1) < 1e-12 and abs(float((lengths * pmf).sum()) - 3.797) < 1e-3


def test_realised_span_lengths_follow_clipped_geometric() -> None:
    lengths, pmf = truncated_geometric_pmf(0.2, 1, 10)
    rng = np.random.default_rng(0)
    n_words, realised = 20_000, []
    word_len, adjacent = [1] * n_words, [True] * (n_words - 1)
    for _ in range(25):  # sparse masks (1.5%), so truncation at neighbours/budget is rare
        spans = sample_word_spans(word_len, adjacent, [300], rng, lengths, pmf)
        realised += [n for _, _, n in spans[:-1]]  # the last span may be cut by the budget
    counts = np.bincount(realised, minlength=11)[1:]
    tv = 0.5 * np.abs(counts / counts.sum() - pmf).sum()
    assert tv < 0.03, (tv, counts.tolist())
    assert stats.chisquare(counts, pmf * counts.sum()).pvalue > 1e-3
    # the same statistic rejects a neighbouring law (p=0.3), so the check has power
    _, other = truncated_geometric_pmf(0.3, 1, 10)
    assert stats.chisquare(counts, other * counts.sum()).pvalue < 1e-3


def test_sample_word_spans_respects_budgets_and_segments() -> None:
    rng = np.random.default_rng(1)
    lengths, pmf = truncated_geometric_pmf(0.2, 1, 10)
    word_len = [1, 3, 2, 1, 1, 4, 1, 2, 1, 1] * 5
    adjacent = [i % 10 != 4 for i in range(49)]  # a segment break after every 5th word
    for _ in range(50):
        spans = sample_word_spans(word_len, adjacent, [8, 8, 8], rng, lengths, pmf)
        used, covered = [0, 0, 0], set()
        for k, w0, n in spans:
            words = set(range(w0, w0 + n))
            assert not covered & words
            covered |= words
            assert all(adjacent[w] for w in range(w0, w0 + n - 1))
            used[k] += sum(word_len[w] for w in words)
        assert max(used) <= 8 and sum(used) >= 21  # never over, and (single-token words remain) close to full


# ---------------------------------------------------------------------------------------------- masking
@HYP
@given(
    strategy=st.sampled_from(["random", "fully_explored", "iid"]),
    granularity=st.sampled_from(["whole_word", "span"]),
    seed=st.integers(0, 2**31),
)
def test_whole_words_never_split_and_specials_never_masked(
    strategy: str, granularity: str, seed: int
) -> None:
    k = 1 if strategy == "random" else 4
    ids, att = word_batch(6, 48, seed, sep_at=20)
    masker = masker_for(strategy, granularity, ratio=0.15, num_masks=k)
    sel = masker.select(ids, att, make_generator(seed, 0))
    valid = att.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))
    wid = words_of(ids, att)
    n_valid = valid.sum(1)
    tau = masker.budget(n_valid)
    assert not (sel & ~valid[:, None]).any()
    for b in range(ids.shape[0]):
        for c in range(k):
            chosen_words = wid[b][sel[b, c]].unique()
            in_chosen = torch.isin(wid[b], chosen_words) & valid[b]
            assert torch.equal(in_chosen, sel[b, c]), "a word was split"
            size, budget = int(sel[b, c].sum()), int(tau[b])
            if granularity == "whole_word":
                assert size <= budget  # budget rule: stop at or just under tau
            else:  # spans: over or short by less than one word (see femlm.masking.spans)
                longest = int(torch.bincount(wid[b][valid[b]]).max())
                assert abs(size - budget) < longest
        if strategy == "fully_explored":
            assert (sel[b].sum(0) <= 1).all()


def test_whole_word_hits_tau_exactly_when_single_piece_words_remain() -> None:
    ids, att = word_batch(50, 64, seed=3, cont_prob=0.3)
    for strategy, k in [("random", 1), ("fully_explored", 4)]:
        masker = masker_for(strategy, "whole_word", ratio=0.15, num_masks=k)
        sel = masker.select(ids, att, make_generator(0, 0))
        tau = masker.budget((att.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))).sum(1))
        assert torch.equal(sel.sum(-1), tau[:, None].expand(-1, k))


def test_without_word_table_whole_word_equals_token_level_counts() -> None:
    cfg = MaskingConfig(granularity="whole_word", ratio=0.2)
    masker = build_masker(cfg, mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIALS)
    ids, att = word_batch(20, 40, seed=0)
    sel = masker.select(ids, att, make_generator(0, 0))
    assert torch.equal(
        sel.sum(-1)[:, 0], masker.budget((att.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))).sum(1))
    )


def test_fe_span_copies_are_exchangeable_and_iid_spans_overlap() -> None:
    ids, att = word_batch(400, 128, seed=5, cont_prob=0.2)
    fe = masker_for("fully_explored", "span", ratio=0.15, num_masks=4).select(ids, att, make_generator(1, 0))
    counts = fe.sum(-1).float()  # [B, K]
    means = counts.mean(0)
    assert (means.max() - means.min()).item() < 0.3, means  # same marginal law for every copy label
    # the first token position masked by a copy is equally likely to belong to any copy
    first_copy = fe.float().argmax(-1).float().mean(0)
    assert (first_copy.max() - first_copy.min()).item() < 6, first_copy
    assert (fe.sum(1) <= 1).all()
    iid = masker_for("iid", "span", ratio=0.15, num_masks=4).select(ids, att, make_generator(1, 0))
    assert (iid.sum(1) > 1).any()


def test_span_masks_contain_multi_word_runs() -> None:
    ids, att = word_batch(100, 128, seed=8, cont_prob=0.0)  # every token is a word
    span = masker_for("random", "span", ratio=0.15).select(ids, att, make_generator(2, 0))[:, 0]
    word = masker_for("random", "whole_word", ratio=0.15).select(ids, att, make_generator(2, 0))[:, 0]
    runs = lambda m: int((m[:, 1:] & ~m[:, :-1]).sum() + m[:, 0].sum())  # noqa: E731
    # same number of masked tokens, but spans come in runs (mean run ~3.8 words vs ~1.2 for random words)
    assert int(span.sum()) == int(word.sum())
    assert runs(span) * 2 < runs(word)


def test_span_copies_are_exchangeable_in_distribution() -> None:
    """Swapping copy labels must not change the joint law (else FE copies would differ from one another).

    Sign test on the number of contiguous masked runs of copy 0 vs copy 1: a sampler that always serves
    copy 0 first gives copy 0 fewer runs (its first span is never cut short), which this test rejects.
    """
    lengths, pmf = truncated_geometric_pmf(0.2, 1, 10)
    rng = np.random.default_rng(0)
    fewer = more = 0
    for _ in range(6000):
        masks = np.zeros((2, 8), dtype=bool)
        for k, w0, n in sample_word_spans([1] * 8, [True] * 7, [3, 3], rng, lengths, pmf):
            masks[k, w0 : w0 + n] = True
        runs = (masks[:, 1:] & ~masks[:, :-1]).sum(1) + masks[:, 0]
        fewer += int(runs[0] < runs[1])
        more += int(runs[0] > runs[1])
    assert stats.binomtest(fewer, fewer + more).pvalue > 1e-3, (fewer, more)
