"""The drop-in `femlm.DataCollatorForFullyExploredLM`: HF's argument names, HF parity, seeds, rows, schedules."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import pytest
import torch

from femlm import DataCollatorForFullyExploredLM
from femlm.masking import IGNORE_INDEX, MaskingConfigError
from helpers.tiny import tiny_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def features(tokenizer, n: int, seed: int = 0) -> list[dict]:
    """n sentences of 10..40 words (so rows are padded), with the tokenizer's special_tokens_mask."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        words = torch.randint(0, 120, (int(torch.randint(10, 41, (1,), generator=g)),), generator=g)
        out.append(tokenizer(" ".join(f"w{i}" for i in words.tolist()), return_special_tokens_mask=True))
    return out


def draw_stats(collator, feats, calls: int, tokenizer) -> dict[str, float]:
    """Over `calls` batches of the same features: the masked share of maskable tokens, the [MASK] / random /
    kept shares of masked tokens, and how many special or padding tokens were ever masked."""
    counts = dict.fromkeys(("valid", "masked", "mask", "kept", "random", "special_masked"), 0)
    specials = torch.tensor(tokenizer.all_special_ids)
    for call in range(calls):
        if hasattr(collator, "set_epoch"):  # an int seed keys masks by epoch: a new draw per call, as HF's
            collator.set_epoch(call)
        batch = collator(feats)
        ids, labels = batch["input_ids"], batch["labels"]
        rows = labels.shape[0] // len(feats)
        original = torch.nn.utils.rnn.pad_sequence([torch.tensor(f["input_ids"]) for f in feats], batch_first=True,
                                                   padding_value=tokenizer.pad_token_id).repeat_interleave(rows, 0)
        chosen = labels != IGNORE_INDEX
        special = torch.isin(original, specials)  # [CLS], [SEP] and [PAD]
        assert torch.equal(labels[chosen], original[chosen])  # labels are the original ids
        counts["valid"] += int((~special).sum())
        counts["masked"] += int(chosen.sum())
        counts["special_masked"] += int((chosen & special).sum())
        counts["mask"] += int((chosen & (ids == tokenizer.mask_token_id)).sum())
        counts["kept"] += int((chosen & (ids == original)).sum())
        counts["random"] += int((chosen & (ids != original) & (ids != tokenizer.mask_token_id)).sum())
    m = counts["masked"]
    return {"rate": m / counts["valid"], "mask": counts["mask"] / m, "random": counts["random"] / m,
            "kept": counts["kept"] / m, "masked": m, "valid": counts["valid"],
            "special_masked": counts["special_masked"]}


def test_constructor_takes_hf_collators_arguments_with_their_defaults() -> None:
    from transformers import DataCollatorForLanguageModeling

    ours = inspect.signature(DataCollatorForFullyExploredLM).parameters
    hf = inspect.signature(DataCollatorForLanguageModeling).parameters
    assert list(ours)[: len(hf)] == list(hf)  # the same names in the same order: positional calls carry over
    assert {k: ours[k].default for k in hf} == {k: hf[k].default for k in hf}
    assert [k for k, p in ours.items() if p.kind is p.KEYWORD_ONLY][:4] == ["num_masks", "strategy",
                                                                            "granularity", "count"]


def test_parity_with_hf_collator_on_the_same_batch(tokenizer) -> None:
    """num_masks=1, random, bernoulli draws what DataCollatorForLanguageModeling draws: the masked share of
    maskable tokens, 80/10/10 among masked tokens, and no special or padding token ever masked."""
    from transformers import DataCollatorForLanguageModeling

    feats = features(tokenizer, 64)
    hf = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=11)
    ours = DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, seed=11, num_masks=1, strategy="random",
                                          count="bernoulli")
    a, b = draw_stats(hf, feats, 40, tokenizer), draw_stats(ours, feats, 40, tokenizer)
    print(f"\nHF    {a}\nfemlm {b}")
    assert a["valid"] == b["valid"] and a["special_masked"] == b["special_masked"] == 0
    for stats in (a, b):  # each against the configured law: 4.5 binomial standard errors
        for key, p, n in (("rate", 0.15, stats["valid"]), ("mask", 0.8, stats["masked"]),
                          ("random", 0.1 * (1 - 2 / len(tokenizer)), stats["masked"]),
                          ("kept", 0.1 + 0.1 * 2 / len(tokenizer), stats["masked"])):
            assert abs(stats[key] - p) < 4.5 * math.sqrt(p * (1 - p) / n), (key, stats[key], p)
    for key in ("rate", "mask", "random", "kept"):  # and against each other
        p = (a[key] + b[key]) / 2
        assert abs(a[key] - b[key]) < 4.5 * math.sqrt(2 * p * (1 - p) / min(a["valid"], a["masked"])), key


def test_fe_rows_hold_k_disjoint_exact_masks_and_forward_keys_only(tokenizer) -> None:
    collator = DataCollatorForFullyExploredLM(tokenizer, seed=0)  # FE, K=4, 0.15
    feats = features(tokenizer, 6)
    batch = collator(feats)
    assert set(batch) == {"input_ids", "attention_mask", "labels", "token_type_ids"}
    assert batch["input_ids"].shape[0] == collator.rows(6) == 24 and collator.num_masks == 4
    assert collator.sequences_for(32) == 8
    chosen = (batch["labels"] != IGNORE_INDEX).view(6, 4, -1)
    assert (chosen.sum(1) <= 1).all()  # disjoint
    n_valid = torch.tensor([len(f["input_ids"]) - 2 for f in feats])
    assert torch.equal(chosen.sum(2), torch.floor(0.15 * n_valid + 0.5).long()[:, None].expand(6, 4))


def test_seeds_like_hf_reproducible_and_distinct_across_dataloader_workers(tokenizer) -> None:
    feats = features(tokenizer, 24)

    def batches(seed, workers: int) -> list[torch.Tensor]:
        collator = DataCollatorForFullyExploredLM(tokenizer, seed=seed)
        loader = torch.utils.data.DataLoader(feats, batch_size=4, collate_fn=collator, num_workers=workers,
                                             multiprocessing_context="fork" if workers else None)
        return [b["labels"] for b in loader]

    single = batches(5, 0)
    assert all(torch.equal(x, y) for x, y in zip(single, batches(5, 0), strict=True))
    # two workers: each batch is masked as in one process (no worker repeats another's masks)
    assert all(torch.equal(x, y) for x, y in zip(single, batches(5, 2), strict=True))
    assert not torch.equal(single[0], batches(6, 0)[0])
    torch.manual_seed(0)  # seed=None: torch's global generator, as HF's collator without a seed
    first = batches(None, 0)
    torch.manual_seed(0)
    assert all(torch.equal(x, y) for x, y in zip(first, batches(None, 0), strict=True))


def test_linear_schedule_in_the_drop_in_and_its_state(tokenizer) -> None:
    feats = [{"input_ids": [2, *range(5, 105), 3]}]  # 100 maskable tokens: tau = 100 * ratio
    collator = DataCollatorForFullyExploredLM(tokenizer, seed=0, mlm_probability=0.3, mlm_probability_final=0.15,
                                              ratio_schedule="linear", schedule_steps=4, num_masks=3)
    taus = [int((collator(feats)["labels"] != IGNORE_INDEX).sum()) // 3 for _ in range(4)]
    assert taus == [30, 25, 20, 15]
    state = collator.state_dict()
    after = collator(feats)["labels"]  # past the end: the final ratio
    assert int((after != IGNORE_INDEX).sum()) == 45
    collator.load_state_dict(state)
    assert torch.equal(collator(feats)["labels"], after)
    with pytest.raises(MaskingConfigError, match=r"num_masks \* masking.ratio_final = 4 \* 0.3"):
        DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, mlm_probability_final=0.3,
                                       ratio_schedule="linear", schedule_steps=10)
    with pytest.raises(MaskingConfigError, match="schedule_steps=None"):
        DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.2, mlm_probability_final=0.1,
                                       ratio_schedule="linear")


def test_bad_arguments_fail_with_one_line(tokenizer) -> None:
    for kwargs, match in (({"mlm": False}, "mlm=False"), ({"return_tensors": "np"}, "return_tensors='np'"),
                          ({"strategy": "fe"}, "strategy='fe'"), ({"mlm_probability": 0.3}, "4 \\* 0.3"),
                          ({"whole_word_mask": True, "granularity": "subword"}, "whole_word_mask=True")):
        with pytest.raises(MaskingConfigError, match=match) as err:
            DataCollatorForFullyExploredLM(tokenizer, **kwargs)
        assert "\n" not in str(err.value)


def test_whole_word_mask_flag_masks_whole_words(tmp_path: Path) -> None:
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "walk", "talk", "##ing", "##ed", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))
    text = " ".join(["playing walked talks play walk talking"] * 8)
    collator = DataCollatorForFullyExploredLM(tok, whole_word_mask=True, seed=1, num_masks=2, mlm_probability=0.3)
    batch = collator([tok(text)])
    chosen = batch["labels"] != IGNORE_INDEX
    original = torch.where(chosen, batch["labels"], batch["input_ids"])
    piece = torch.tensor([t.startswith("##") for t in vocab])[original]
    assert piece.any() and torch.equal(chosen[:, 1:][piece[:, 1:]], chosen[:, :-1][piece[:, 1:]])
