"""Span masking by segment-then-deal (femlm/masking/spans.py) and SpanBERT's per-span replacement.

Claims tested: FE-span copies (K = 2, 4, 8) have the span-length law of MLM-span (the old anchor-and-grow
sampler fails the same test); the law is the truncated geometric up to the documented cuts; copies are
disjoint, word-aligned, never touch specials/padding; each copy holds tau tokens up to less than one word;
every copy label masks every position with probability tau/n; per-span replacement is one 80/10/10 draw per
run of masked tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from femlm.masking import (
    MaskingConfig,
    MaskingConfigError,
    build_masker,
    make_generator,
    mask_budget,
    placed_spans,
    sample_segment_spans,
    sample_word_spans,
    truncated_geometric_pmf,
    word_ids_from_starts,
)
from femlm.masking.sampling import select_word_level
from femlm.masking.spans import draw_rows, segment_words, span_law

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIALS = [PAD, CLS, SEP, MASK]
VOCAB = 200
CONT = 120  # ids >= CONT are "##" continuation pieces
TABLE = torch.arange(VOCAB) < CONT
LENGTHS, PMF = truncated_geometric_pmf(0.2, 1, 10)
LAW = span_law(LENGTHS, PMF)
ALPHA = 1e-3  # significance level of every goodness-of-fit check (all draws are seeded: deterministic)


# ---------------------------------------------------------------------------------------------- fixtures
def word_rows(seed: int, count: int, lengths: tuple[int, ...] = (128, 512)) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(word_len, adjacent)`` of realistic rows: ``[CLS] A [SEP] B [SEP]`` blocks of 128/512 tokens whose
    words have 1-3 pieces (70/20/10 %), the [SEP] in the middle breaking adjacency."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        n = lengths[i % len(lengths)] - 3
        word_len = rng.choice([1, 2, 3], p=[0.7, 0.2, 0.1], size=n)
        ends = np.cumsum(word_len)
        m = int(np.searchsorted(ends, n)) + 1
        word_len = word_len[:m].copy()
        word_len[-1] -= ends[m - 1] - n
        adjacent = np.ones(m - 1, dtype=bool)
        adjacent[int(np.searchsorted(np.cumsum(word_len), n // 2))] = False
        rows.append((word_len, adjacent))
    return rows


def tau_of(n: int, ratio: float, k: int) -> int:
    return int(mask_budget(torch.tensor([n]), ratio, k)[0])


def token_batch(rows: list[tuple[np.ndarray, np.ndarray]], pad: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids for ``word_rows``: [CLS], words (a start id then continuation ids), [SEP] at each break,
    a final [SEP], then ``pad`` padding positions."""
    g = np.random.default_rng(0)
    seqs = []
    for word_len, adjacent in rows:
        ids = [CLS]
        for w, n in enumerate(word_len.tolist()):
            ids += [int(g.integers(4, CONT))] + g.integers(CONT, VOCAB, n - 1).tolist()
            if w < len(adjacent) and not adjacent[w]:
                ids.append(SEP)
        seqs.append([*ids, SEP])
    length = max(len(s) for s in seqs) + pad
    ids = torch.full((len(seqs), length), PAD, dtype=torch.long)
    att = torch.zeros_like(ids)
    for r, s in enumerate(seqs):
        ids[r, : len(s)], att[r, : len(s)] = torch.tensor(s), 1
    return ids, att


def masker_for(strategy: str, k: int = 1, ratio: float = 0.15, **kw: object):
    cfg = MaskingConfig(name="t", strategy=strategy, granularity="span", ratio=ratio, num_masks=k, **kw)  # type: ignore[arg-type]
    return build_masker(cfg, mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIALS, word_starts=TABLE)


def valid_of(ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
    return att.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))


def new_histogram(rows, ratio: float, k: int, seed: int, repeats: int = 1, tau_k: int = 0, law=LAW) -> np.ndarray:
    """Counts of placed span lengths 1..10 (words) over all copies of ``repeats`` draws per row; tau is the
    budget of ``tau_k`` copies (default ``k``). All rows are drawn in one batch, as the masker does."""
    word_len = np.concatenate([w for w, _ in rows])
    new_run = np.concatenate([np.concatenate(([True], ~a)) for _, a in rows])
    word_row = np.repeat(np.arange(len(rows)), [w.size for w, _ in rows])
    tau = np.array([tau_of(int(w.sum()), ratio, tau_k or k) for w, _ in rows])
    rng, counts = np.random.default_rng(seed), np.zeros(LENGTHS.max() + 1, dtype=np.int64)
    for _ in range(repeats):
        draw = draw_rows(word_len, new_run, word_row, tau, k, rng, law)
        counts += np.bincount(placed_spans(draw)[2], minlength=counts.size)
    return counts[1:]


def old_histogram(rows, ratio: float, k: int, seed: int, repeats: int = 1, tau_k: int = 0) -> np.ndarray:
    """The same counts for the anchor-and-grow sampler (``sample_word_spans``, span granularity before)."""
    rng, counts = np.random.default_rng(seed), np.zeros(LENGTHS.max() + 1, dtype=np.int64)
    for _ in range(repeats):
        for word_len, adjacent in rows:
            budgets = [tau_of(int(word_len.sum()), ratio, tau_k or k)] * k
            spans = sample_word_spans(word_len.tolist(), adjacent.tolist(), budgets, rng, LENGTHS, PMF)
            counts += np.bincount([n for _, _, n in spans], minlength=counts.size)
    return counts[1:]


def same_law_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square test of homogeneity of two span-length histograms (empty bins dropped)."""
    table = np.stack([a, b])
    return float(stats.chi2_contingency(table[:, table.sum(0) > 0]).pvalue)


def mean_length(counts: np.ndarray) -> float:
    return float((np.arange(1, counts.size + 1) * counts).sum() / counts.sum())


def mean_z(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample z statistic of the mean span length (a test aimed at a shift rather than any change)."""
    lengths = np.arange(1, a.size + 1)
    var = [float((c * (lengths - mean_length(c)) ** 2).sum() / c.sum()) for c in (a, b)]
    return (mean_length(a) - mean_length(b)) / float(np.sqrt(var[0] / a.sum() + var[1] / b.sum()))


# ---------------------------------------------------------------------------------------------- (a) same law
ROWS = word_rows(0, 300)


@pytest.mark.parametrize(("ratio", "k"), [(0.15, 2), (0.15, 4), (0.125, 8)])
def test_fe_span_lengths_match_mlm_span_and_old_sampler_fails(ratio: float, k: int) -> None:
    """12-20k spans per side: FE copies and MLM-span agree; the old sampler's FE vs MLM gap is rejected.

    MLM draws use the FE budget: at K=8 the cap ``tau <= n // K`` makes tau one token smaller than MLM's
    (509 tokens: 63 vs 64), and a copy's law depends on tau (a shorter window is cut more often) -- the test
    isolates what the sampler does with K.
    """
    mlm = new_histogram(ROWS, ratio, 1, seed=1, repeats=6, tau_k=k)
    fe = new_histogram(ROWS, ratio, k, seed=2, repeats=max(1, 6 // k))
    assert same_law_pvalue(fe, mlm) > ALPHA, (mean_length(fe), mean_length(mlm))
    assert abs(mean_z(fe, mlm)) < 4, (mean_length(fe), mean_length(mlm))
    old_mlm = old_histogram(ROWS, ratio, 1, seed=1, repeats=6, tau_k=k)
    old_fe = old_histogram(ROWS, ratio, k, seed=2, repeats=max(1, 6 // k))
    assert same_law_pvalue(old_fe, old_mlm) < ALPHA, (mean_length(old_fe), mean_length(old_mlm))


def test_span_length_test_detects_a_small_change_of_law() -> None:
    """Power: spans drawn with span_p 0.23 (pmf mean 3.6 words instead of 3.8) are told apart."""
    mlm = new_histogram(ROWS, 0.15, 1, seed=1, repeats=6)
    other = new_histogram(ROWS, 0.15, 4, seed=3, repeats=1, law=span_law(*truncated_geometric_pmf(0.23, 1, 10)))
    assert same_law_pvalue(other, mlm) < ALPHA


# ---------------------------------------------------------------------------------------------- (b) pmf
def test_span_lengths_follow_truncated_geometric_on_long_runs() -> None:
    """Where cuts are rare (2 runs of ~6000 words), placed spans follow the pmf itself."""
    rows = word_rows(1, 4, lengths=(16_000,))
    counts = new_histogram(rows, 0.15, 4, seed=4, repeats=2)
    assert counts.sum() > 12_000
    assert stats.chisquare(counts, PMF * counts.sum()).pvalue > ALPHA
    _, other = truncated_geometric_pmf(0.23, 1, 10)  # the check has power against a nearby law
    assert stats.chisquare(counts, other * counts.sum()).pvalue < ALPHA


def test_realistic_rows_deviate_from_pmf_only_by_the_documented_cuts() -> None:
    """On 128/512-token rows a copy's spans are whole segments except pieces cut by its two window ends or
    by run ends; whole interior segments keep the pmf's shape, and the overall law stays close to it."""
    rng = np.random.default_rng(5)
    whole, realised = np.zeros(11, dtype=np.int64), np.zeros(11, dtype=np.int64)
    cut_per_copy = []
    for word_len, adjacent in ROWS:
        draw = sample_segment_spans(word_len, adjacent, tau_of(int(word_len.sum()), 0.15, 4), 4, rng, LAW)
        copy, first, n_words = placed_spans(draw)
        seg_len = np.bincount(draw.word_segment)
        is_whole = n_words == seg_len[draw.word_segment[first]]
        realised += np.bincount(n_words, minlength=11)
        whole += np.bincount(n_words[is_whole], minlength=11)
        cut_per_copy += np.bincount(copy[~is_whole], minlength=4).tolist()
    assert max(cut_per_copy) <= 2  # a window has two ends: at most two of its spans are cut pieces
    tv = 0.5 * np.abs(realised[1:] / realised.sum() - PMF).sum()
    assert tv < 0.08, tv  # documented truncation
    old = old_histogram(ROWS[:100], 0.125, 8, seed=5)  # the anchor-and-grow sampler at K=8: TV ~0.33
    assert 0.5 * np.abs(old / old.sum() - PMF).sum() > 0.08
    assert 3.3 < mean_length(realised[1:]) < 3.8
    # whole segments: pmf shape, slightly shortened because long segments are more often cut
    assert 0.5 * np.abs(whole[1:] / whole.sum() - PMF).sum() < 0.06


def boundary_z(law, runs: int = 8000, words: int = 24) -> np.ndarray:
    """z-scores of P(a segment starts at offset d of a run), d = 1..words-1, against 1 / E[segment length]."""
    new_run = np.zeros(runs * words, dtype=bool)
    new_run[::words] = True
    segment = segment_words(new_run, np.random.default_rng(6), law).reshape(runs, words)
    starts = (segment[:, 1:] != segment[:, :-1]).sum(0)
    p = 1.0 / float((LENGTHS * PMF).sum())
    return (starts - runs * p) / np.sqrt(runs * p * (1 - p))


def test_segment_boundaries_are_stationary_not_anchored_at_the_run_start() -> None:
    """The forward-recurrence first segment makes every offset equally likely to start a span; drawing the
    first segment from the pmf itself (boundaries anchored at the run start) fails the same test."""
    threshold = float(stats.norm.isf(ALPHA / (2 * 23)))
    assert np.abs(boundary_z(LAW)).max() < threshold
    anchored = LAW._replace(delays=LAW.lengths, delay_cdf=LAW.cdf)
    assert np.abs(boundary_z(anchored)).max() > threshold


# ---------------------------------------------------------------------------------------------- (c) shape
@pytest.mark.parametrize(("strategy", "k", "ratio"), [("random", 1, 0.15), ("fully_explored", 4, 0.15),
                                                      ("fully_explored", 8, 0.125), ("iid", 4, 0.15)])  # fmt: skip
def test_copies_disjoint_word_aligned_and_never_special(strategy: str, k: int, ratio: float) -> None:
    ids, att = token_batch(word_rows(7, 24, lengths=(131, 515)))  # 128 / 512 maskable tokens: 8 * tau == n
    sel = masker_for(strategy, k, ratio).select(ids, att, make_generator(11, 3))
    valid = valid_of(ids, att)
    wid = word_ids_from_starts(ids, TABLE, ~valid)
    assert not (sel & ~valid[:, None]).any()  # no [CLS]/[SEP]/padding
    for b in range(ids.shape[0]):
        for c in range(k):
            words = wid[b][sel[b, c]].unique()
            assert torch.equal(torch.isin(wid[b], words) & valid[b], sel[b, c]), "a word was split"
    if strategy == "fully_explored":
        assert (sel.sum(1) <= 1).all()
        if ratio * k == 1.0:  # K * tau == n (no pool to exhaust): the copies tile the row
            assert (valid.sum(1) % k == 0).all()
            assert torch.equal(sel.any(1), valid)
    else:
        assert strategy == "random" or (sel.sum(1) > 1).any()  # iid copies overlap


def test_placed_spans_never_cross_a_special() -> None:
    rng = np.random.default_rng(2)
    for word_len, adjacent in ROWS[:100]:
        draw = sample_segment_spans(word_len, adjacent, tau_of(int(word_len.sum()), 0.125, 8), 8, rng, LAW)
        seg = draw.word_segment
        assert (seg[1:][~adjacent] != seg[:-1][~adjacent]).all()  # segments end at every break
        for _, w0, n in zip(*placed_spans(draw), strict=True):
            assert adjacent[w0 : w0 + n - 1].all()


# ---------------------------------------------------------------------------------------------- (d) budget
@pytest.mark.parametrize(("ratio", "k"), [(0.15, 1), (0.15, 2), (0.15, 4), (0.125, 8)])
def test_every_copy_has_tau_tokens_up_to_one_word(ratio: float, k: int) -> None:
    """Over or short by less than one word (a straddling word goes to the window holding its end), and
    exactly tau on average and whenever every word is a single token."""
    rng = np.random.default_rng(8)
    deviations = []
    for word_len, adjacent in ROWS:
        tau = tau_of(int(word_len.sum()), ratio, k)
        draw = sample_segment_spans(word_len, adjacent, tau, k, rng, LAW)
        sizes = np.bincount(draw.word_copy + 1, weights=word_len, minlength=k + 1)[1:]
        assert (np.abs(sizes - tau) < word_len.max()).all(), (sizes, tau)
        deviations += (sizes - tau).tolist()
        ones = np.ones(int(word_len.sum()), dtype=np.int64)  # the same row cut into single-token words
        single = sample_segment_spans(ones, np.ones(ones.size - 1, dtype=bool), tau, k, rng, LAW)
        assert (np.bincount(single.word_copy + 1, minlength=k + 1)[1:] == tau).all()
    deviations = np.asarray(deviations)
    assert abs(deviations.mean()) < 4 * deviations.std() / np.sqrt(deviations.size) + 1e-9
    assert (deviations != 0).any()  # multi-token words do move the edges


# ---------------------------------------------------------------------------------------------- (e) marginals
def position_counts(sel_fn, ids: torch.Tensor, att: torch.Tensor, repeats: int, k: int) -> torch.Tensor:
    """How often copy label ``c`` masks position ``l`` of row ``b``: LongTensor[B, K, L] over ``repeats`` draws."""
    batch, batch_att = ids.repeat(repeats, 1), att.repeat(repeats, 1)
    sel = sel_fn(batch, batch_att, make_generator(5, 9))
    return sel.view(repeats, ids.shape[0], k, -1).sum(0)


def max_z(counts: torch.Tensor, tau: torch.Tensor, n: torch.Tensor, repeats: int, valid: torch.Tensor) -> float:
    """Largest |z| of per-position counts against Binomial(repeats, tau/n) over the valid positions.

    Every count is exactly binomial (independent draws), but positions of one word or span move together,
    so a chi-square sum over positions would be miscalibrated; a Bonferroni bound on max |z| holds anyway.
    """
    p = (tau / n)[:, None].double().expand_as(counts)[valid]
    z = (counts[valid].double() - repeats * p) / (repeats * p * (1 - p)).sqrt()
    return float(z.abs().max())


def test_every_copy_label_masks_every_position_with_probability_tau_over_n() -> None:
    """Exchangeable, uniform marginals: per-position frequency of each FE copy label and of MLM-span is tau/n
    -- also next to the [SEP] and the row ends. (An iid copy is an MLM draw: the same one-copy call.) The old
    sampler fails the same check: it under-masks the first words after every special token."""
    ids, att = token_batch(word_rows(3, 4, lengths=(128,)))
    valid = valid_of(ids, att)
    n = valid.sum(1)
    repeats = 1200
    threshold = float(stats.norm.isf(ALPHA / (2 * 4 * int(valid.sum()))))  # Bonferroni over labels x positions
    for name, masker, k in [("fe", masker_for("fully_explored", 4), 4), ("mlm", masker_for("random"), 1)]:
        counts = position_counts(masker.select, ids, att, repeats, k)
        for c in range(k):
            assert max_z(counts[:, c], masker.budget(n), n, repeats, valid) < threshold, (name, c)
    old = masker_for("fully_explored", 4)
    wid = word_ids_from_starts(ids, TABLE, ~valid)

    def old_select(batch: torch.Tensor, batch_att: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        v = valid_of(batch, batch_att)
        tau = old.budget(v.sum(1))
        return select_word_level(wid.repeat(repeats, 1), v, tau, 4, "fully_explored", LENGTHS, PMF, gen)

    counts = position_counts(old_select, ids, att, repeats, 4)
    assert max_z(counts[:, 0], old.budget(n), n, repeats, valid) > threshold


# ---------------------------------------------------------------------------------------------- (f) replacement
def run_kinds(selected: torch.Tensor, inputs: torch.Tensor, original: torch.Tensor) -> np.ndarray:
    """Per maximal run of selected positions: [#MASK, #original, #other, length] (one row per run)."""
    sel = selected.numpy()
    padded = np.pad(sel, ((0, 0), (1, 0)))
    starts = (sel & ~padded[:, :-1]).ravel()
    run = np.cumsum(starts) - 1  # run id of every position (meaningful where selected)
    flat, got, orig = sel.ravel(), inputs.numpy().ravel(), original.numpy().ravel()
    is_mask, is_orig = got == MASK, got == orig
    columns = [is_mask, is_orig & ~is_mask, ~is_mask & ~is_orig, np.ones_like(flat)]
    return np.stack([np.bincount(run[flat], weights=c[flat], minlength=int(starts.sum())) for c in columns], 1)


@pytest.mark.parametrize("granularity", ["span", "whole_word"])
def test_span_replacement_is_one_80_10_10_draw_per_span(granularity: str) -> None:
    ids, att = token_batch(word_rows(4, 160, lengths=(128,)))
    vocab = 1 << 20  # random ids almost never hit [MASK] or the original id by chance
    cfg = MaskingConfig(name="t", strategy="fully_explored", granularity=granularity, num_masks=4,
                        replacement="span")  # fmt: skip
    masker = build_masker(cfg, mask_token_id=MASK, vocab_size=vocab, special_ids=SPECIALS, word_starts=TABLE)
    out = masker(ids, att, make_generator(0, 1))
    selected = out["labels"] != -100
    original = ids.repeat_interleave(4, dim=0)
    counts = run_kinds(selected, out["input_ids"], original)
    pure = counts[:, :3] == counts[:, 3:]  # the run is all [MASK] / all original / all random
    assert pure.any(1).all(), "a run mixes [MASK], random and kept tokens"
    observed = pure.sum(0)
    assert observed.sum() > 2000 and (counts[:, 3] > 1).sum() > 1000  # many multi-token runs
    assert stats.chisquare(observed, np.array([0.8, 0.1, 0.1]) * observed.sum()).pvalue > ALPHA, observed
    # labels do not depend on the replacement method; per-token replacement does mix kinds within runs
    token = build_masker(MaskingConfig(name="t", strategy="fully_explored", granularity=granularity, num_masks=4),
                         mask_token_id=MASK, vocab_size=vocab, special_ids=SPECIALS, word_starts=TABLE)  # fmt: skip
    per_token = token(ids, att, make_generator(0, 1))
    assert torch.equal(per_token["labels"], out["labels"])
    mixed = ~(run_kinds(selected, per_token["input_ids"], original)[:, :3] == counts[:, 3:]).any(1)
    assert mixed.sum() > 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"replacement": "word"}, "masking.replacement='word' is invalid; allowed: token | span"),
     ({"replacement": "span"}, "masking.replacement='span' is invalid with masking.granularity='subword'")],
)  # fmt: skip
def test_replacement_config_is_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(MaskingConfigError, match=message.replace("|", r"\|")) as info:
        MaskingConfig(**kwargs).validate()
    assert "\n" not in str(info.value)
    assert MaskingConfig(granularity="span", replacement="span").validate().replacement == "span"
