"""The drop-in behaves as HF's `DataCollatorForLanguageModeling` where a switching user relies on it (issue 31).

Written from HF's documented behaviour (its collator and `tokenizer.pad`), in parity mode (`num_masks=1,
strategy="random", count="bernoulli"`: compared with HF's own output, bit for bit, under the same torch RNG
state) and in FE mode (`num_masks=4`: each of HF's rows becomes 4 rows). Items: 1 extra feature keys, 2 whole-word
Bernoulli, 3 short rows, 4 padding side / no pad token / `return_tensors`, 5 a given `special_tokens_mask`.
"""

from __future__ import annotations

import contextlib
import copy
import math
from pathlib import Path

import pytest
import torch

from femlm import DataCollatorForFullyExploredLM
from femlm.masking import IGNORE_INDEX, MaskingConfig, MaskingError, build_masker

torch.set_num_threads(1)

WORDS = ["play", "walk", "talk", "the", "a", "of", "run", "jump", "read", "sing", "cook", "swim"]
PIECES = ["##ing", "##ed", "##s", "##er"]
PARITY = {"num_masks": 1, "strategy": "random", "count": "bernoulli"}
FE = {"num_masks": 4}
MODES = {"parity": PARITY, "fe": FE}


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory):
    """A tiny WordPiece BertTokenizerFast (offsets for whole words), built offline."""
    from transformers import BertTokenizerFast

    path = tmp_path_factory.mktemp("tok") / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *PIECES]) + "\n")
    return BertTokenizerFast(vocab=str(path))


def text(g: torch.Generator, lo: int, hi: int) -> str:
    n = int(torch.randint(lo, hi, (1,), generator=g))
    words = torch.randint(len(WORDS), (n,), generator=g).tolist()
    ends = torch.randint(2 * len(PIECES), (n,), generator=g).tolist()
    return " ".join(WORDS[w] + (PIECES[e][2:] if e < len(PIECES) else "") for w, e in zip(words, ends, strict=True))


def pairs(tok, n: int, seed: int = 0, **kwargs) -> list[dict]:
    """BERT pre-training features: sentence pairs of unequal lengths with both sentence-level labels."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        f = dict(tok(text(g, 3, 12), text(g, 2, 8), **kwargs))
        out.append({**f, "next_sentence_label": i % 2, "sentence_order_label": (i // 2) % 2})
    return out


def hf_and_ours(tok, feats, rng_seed: int = 0, hf_kwargs: dict | None = None, **ours_kwargs):
    """HF's batch and the drop-in's on the same features from the same torch RNG state (both seed=None)."""
    from transformers import DataCollatorForLanguageModeling

    with pytest.warns(UserWarning) if (hf_kwargs or {}).get("whole_word_mask") else contextlib.nullcontext():
        hf = DataCollatorForLanguageModeling(tok, **(hf_kwargs or {}))
    ours = DataCollatorForFullyExploredLM(tok, **ours_kwargs)
    torch.manual_seed(rng_seed)
    a = hf(copy.deepcopy(feats))
    torch.manual_seed(rng_seed)
    return a, ours(copy.deepcopy(feats)), ours


def assert_rows_repeat(hf: dict, ours: dict, k: int, skip: tuple[str, ...] = ("input_ids", "labels")) -> None:
    """Every key of HF's batch is in ours, each HF row repeated for its k copies (the masked keys aside)."""
    assert set(ours) == set(hf)
    for key, value in hf.items():
        if key not in skip:
            assert torch.equal(ours[key], value.repeat_interleave(k, dim=0)), key


# ---------------------------------------------------------------------------------------------- 1 extra keys
@pytest.mark.parametrize("mode", MODES)
def test_keeps_every_feature_key_hf_keeps(tok, mode: str) -> None:
    feats = pairs(tok, 6, return_special_tokens_mask=True)
    hf, ours, collator = hf_and_ours(tok, feats, **MODES[mode])
    assert {"next_sentence_label", "sentence_order_label", "token_type_ids"} <= set(hf)
    assert "special_tokens_mask" not in ours  # consumed, as in HF
    if mode == "parity":  # the whole batch, bit for bit
        assert all(torch.equal(ours[k], hf[k]) for k in hf) and set(ours) == set(hf)
    else:
        assert_rows_repeat(hf, ours, collator.num_masks)
        base = torch.where(hf["labels"] != IGNORE_INDEX, hf["labels"], hf["input_ids"]).repeat_interleave(4, dim=0)
        labelled = ours["labels"] != IGNORE_INDEX
        assert torch.equal(ours["labels"][labelled], base[labelled])
        assert torch.equal(ours["input_ids"][~labelled], base[~labelled])


@pytest.mark.parametrize("mode", MODES)
def test_bert_for_pretraining_gets_its_loss(tok, mode: str) -> None:
    """Both heads' labels reach the model: BertForPreTraining returns a loss only with next_sentence_label."""
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=64)).eval()
    batch = DataCollatorForFullyExploredLM(tok, seed=0, **MODES[mode])(pairs(tok, 4))
    batch.pop("sentence_order_label")  # ALBERT's; BERT's forward does not take it
    loss = model(**batch).loss
    assert loss is not None and math.isfinite(float(loss.detach()))
    batch.pop("next_sentence_label")
    assert model(**batch).loss is None


def test_ragged_unknown_keys_raise_value_error_like_hf(tok) -> None:
    from transformers import DataCollatorForLanguageModeling

    feats = [{**tok("play walk"), "extra": [1, 2, 3]}, {**tok("play"), "extra": [1]}]
    for collator in (DataCollatorForLanguageModeling(tok), DataCollatorForFullyExploredLM(tok, **PARITY)):
        with pytest.raises(ValueError):
            collator(copy.deepcopy(feats))
    partial = [tok("play walk", return_special_tokens_mask=True), tok("play")]  # HF: KeyError
    with pytest.raises(ValueError, match="'special_tokens_mask' is missing from 1 of 2 rows"):
        DataCollatorForFullyExploredLM(tok)(partial)


# ---------------------------------------------------------------------------------------------- 2 whole words
def test_whole_word_parity_is_hfs_bernoulli_over_words(tok) -> None:
    """With offsets and HF's forced all-[MASK] replacement, the drop-in's whole-word draw is HF's, bit for bit;
    with the default 80/10/10 the same words are selected."""
    g = torch.Generator().manual_seed(3)
    feats = [tok(text(g, 4, 20), return_offsets_mapping=True, padding="max_length", max_length=48)
             for _ in range(8)]  # HF cannot pad offsets itself
    for seed in range(3):
        hf, ours, _ = hf_and_ours(tok, feats, seed, hf_kwargs={"whole_word_mask": True}, whole_word_mask=True,
                                  mask_replace_prob=1.0, random_replace_prob=0.0, **PARITY)
        assert all(torch.equal(ours[k], hf[k]) for k in hf) and set(ours) == set(hf)
        _, bert, _ = hf_and_ours(tok, feats, seed, whole_word_mask=True, **PARITY)
        assert torch.equal(bert["labels"], hf["labels"])


@pytest.mark.parametrize("mode", MODES)
def test_whole_word_masks_whole_words_at_the_configured_rate(tok, mode: str) -> None:
    """Without offsets (vocabulary markers): a word is masked whole or not at all; parity mode selects each word
    with probability p (Bernoulli over words), FE mode gives K disjoint copies of tau tokens or one token fewer
    (words here have at most 2 tokens; a copy stops at or just under tau)."""
    g = torch.Generator().manual_seed(5)
    feats = [tok(text(g, 5, 30)) for _ in range(16)]
    collator = DataCollatorForFullyExploredLM(tok, whole_word_mask=True, seed=0, mlm_probability=0.2, **MODES[mode])
    k = collator.num_masks
    words = masked = 0
    for epoch in range(10):
        collator.set_epoch(epoch)  # an int seed draws new masks per epoch (static masks without it)
        batch = collator(feats)
        chosen = batch["labels"] != IGNORE_INDEX
        original = torch.where(chosen, batch["labels"], batch["input_ids"])
        piece = torch.tensor([t.startswith("##") for t in tok.convert_ids_to_tokens(list(range(len(tok))))])[original]
        assert torch.equal(chosen[:, 1:][piece[:, 1:]], chosen[:, :-1][piece[:, 1:]])  # a piece follows its word
        words += int(((original > 4) & ~piece).sum())
        masked += int((chosen & ~piece).sum())
        if k > 1:
            assert (chosen.view(len(feats), k, -1).sum(1) <= 1).all()
            n = torch.tensor([len(f["input_ids"]) - 2 for f in feats])
            tau = torch.minimum(torch.floor(0.2 * n + 0.5).long(), n // k)[:, None]
            size = chosen.view(len(feats), k, -1).sum(2)
            assert ((size <= tau) & (size >= tau - 1)).all()
    if k == 1:
        assert abs(masked / words - 0.2) < 4.5 * math.sqrt(0.2 * 0.8 / words), masked / words


# ---------------------------------------------------------------------------------------------- 3 short rows
@pytest.mark.parametrize("granularity", ["subword", "whole_word", "span"])
def test_fe_short_rows_do_not_crash_and_are_counted(tok, granularity: str) -> None:
    """Rows with 0, 1, 2 and 3 maskable tokens at K=4: as many disjoint one-token masks as tokens, the other
    copies unlabelled (as HF leaves an all-special row unlabelled), and counted."""
    feats = [tok(""), tok("play"), tok("play walk"), tok("a the of"), tok(" ".join(["read"] * 40))]
    collator = DataCollatorForFullyExploredLM(tok, seed=0, granularity=granularity)
    labelled = (collator(feats)["labels"] != IGNORE_INDEX).view(5, 4, -1)
    per_copy = labelled.sum(2)
    for row, n in enumerate((0, 1, 2, 3)):
        assert sorted(per_copy[row].tolist()) == [0] * (4 - n) + [1] * n
        assert (labelled[row].sum(0) <= 1).all()  # disjoint
    assert torch.equal(per_copy[4], torch.full((4,), 6))  # round(0.15 * 40): a full row is unaffected
    assert collator.short_rows == 4
    strict = build_masker(MaskingConfig(strategy="fully_explored", num_masks=4), 4, len(tok), tok.all_special_ids)
    with pytest.raises(MaskingError, match="needs at least"):  # femlm's own trainer keeps refusing them
        strict(torch.tensor([[2, 5, 3]]))


def test_parity_empty_row_is_unlabelled_like_hf(tok) -> None:
    feats = [tok(""), tok("play walk talk the a of")]
    hf, ours, collator = hf_and_ours(tok, feats, hf_kwargs={"mlm_probability": 0.9}, mlm_probability=0.9, **PARITY)
    assert all(torch.equal(ours[k], hf[k]) for k in hf)
    assert (ours["labels"][0] == IGNORE_INDEX).all() and collator.short_rows == 1


# ---------------------------------------------------------------------------------------------- 4 silent diffs
@pytest.mark.parametrize("mode", MODES)
def test_left_padding_side_is_honoured(tok, mode: str) -> None:
    feats = pairs(tok, 5)
    tok.padding_side = "left"
    try:
        hf, ours, collator = hf_and_ours(tok, feats, **MODES[mode])
    finally:
        tok.padding_side = "right"
    assert (hf["attention_mask"][:, 0] == 0).any() and (hf["attention_mask"][:, -1] == 1).all()
    if mode == "parity":
        assert all(torch.equal(ours[k], hf[k]) for k in hf)
    else:
        assert_rows_repeat(hf, ours, collator.num_masks)
        assert ((ours["labels"] == IGNORE_INDEX) | (ours["attention_mask"] == 1)).all()


@pytest.mark.parametrize("mode", MODES)
def test_tokenizer_without_pad_token_raises_like_hf(tok, mode: str) -> None:
    from transformers import DataCollatorForLanguageModeling

    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None
    ragged = [tok("play walk")["input_ids"], tok("play")["input_ids"]]
    equal = [tok("play walk")["input_ids"], tok("walk talk")["input_ids"]]
    hf, ours = DataCollatorForLanguageModeling(no_pad), DataCollatorForFullyExploredLM(no_pad, **MODES[mode])
    for feats in ([no_pad("play walk"), no_pad("walk talk")], ragged):  # dicts, or lists that need padding
        for collator in (hf, ours):
            with pytest.raises(ValueError, match="pad"):
                collator(copy.deepcopy(feats))
    assert hf(equal)["input_ids"].shape[0] * ours.num_masks == ours(equal)["input_ids"].shape[0]


@pytest.mark.parametrize("mode", MODES)
def test_return_tensors_argument_of_the_call(tok, mode: str) -> None:
    from transformers import DataCollatorForLanguageModeling

    feats = pairs(tok, 3)
    ours = DataCollatorForFullyExploredLM(tok, seed=0, **MODES[mode])
    batch = ours(feats, return_tensors="pt")
    assert isinstance(batch["labels"], torch.Tensor) and batch["labels"].shape[0] == 3 * ours.num_masks
    with pytest.raises(ValueError, match="tf"):
        DataCollatorForLanguageModeling(tok)(feats, return_tensors="tf")
    for bad in ("tf", "np"):  # HF returns numpy for "np"; the drop-in refuses it (a listed difference)
        with pytest.raises(ValueError, match=f"return_tensors='{bad}'"):
            ours(feats, return_tensors=bad)


# ---------------------------------------------------------------------------------------------- 5 special mask
@pytest.mark.parametrize("given", [True, False])
def test_given_special_tokens_mask_decides_as_in_hf(tok, given: bool) -> None:
    """An unknown word is [UNK], which the tokenizer's special_tokens_mask leaves at 0: given the mask, HF (and
    the drop-in) may mask it; without one, no special id is ever masked."""
    feats = [tok("zzz play walk qqq", return_special_tokens_mask=given), tok("talk", return_special_tokens_mask=given)]
    unk = tok.unk_token_id
    hf, ours, _ = hf_and_ours(tok, feats, hf_kwargs={"mlm_probability": 1.0}, mlm_probability=1.0, **PARITY)
    assert all(torch.equal(ours[k], hf[k]) for k in hf)
    assert bool((ours["labels"] == unk).any()) is given
    fe = DataCollatorForFullyExploredLM(tok, seed=0, mlm_probability=0.25)(copy.deepcopy(feats))  # K=4, tau=1
    labels = fe["labels"].view(2, 4, -1)
    assert bool((labels[0] == unk).any()) is given  # the union of 4 one-token copies of a 4-token row covers it
    assert int((labels[0] != IGNORE_INDEX).sum()) == (4 if given else 2)  # without the mask: a short row


# ---------------------------------------------------------------------------------------------- the comparison
def test_side_by_side_script_runs_quick(tok) -> None:
    import runpy

    script = Path(__file__).resolve().parents[1] / "examples" / "hf_compat_compare.py"
    rows = runpy.run_path(str(script))["compare"](quick=True)
    assert {r[0] for r in rows} >= {"keys kept", "short rows (K=4)", "padding_side='left'", "no pad token",
                                    "return_tensors='np'", "special_tokens_mask given, [UNK]"}
    assert all(len(r) == 4 for r in rows)
