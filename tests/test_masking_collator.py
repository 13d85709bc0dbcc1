"""Collator, YAML configs, HF parity, equal-compute batching and the K-mask loss identity on a real model."""

from __future__ import annotations

import types

import pytest
import torch

from femlm.masking import (
    IGNORE_INDEX,
    MaskingCollator,
    MaskingConfig,
    MaskingConfigError,
    build_masker,
    sequences_per_batch,
)
from helpers.configs import composed, options

WORDS = [
    *("the", "a", "of", "to", "and", "in", "is", "it", "that", "was", "for", "on", "are"),
    *("with", "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by"),
]
PIECES = ["##s", "##ing", "##ed", "##ly", "##er", "##tion"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    """A tiny WordPiece BertTokenizerFast built offline."""
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *PIECES]
    path = tmp_path_factory.mktemp("tok") / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab=str(path))  # transformers 5 spelling
    if len(tok) < len(vocab):  # transformers 4 spelling
        tok = BertTokenizerFast(vocab_file=str(path))
    assert len(tok) == len(vocab)
    return tok


def sentences(n: int, seed: int = 0) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(12, 30, (1,), generator=g))
        idx = torch.randint(0, len(WORDS), (k,), generator=g).tolist()
        suffix = torch.randint(0, 3 * len(PIECES), (k,), generator=g).tolist()
        out.append(
            " ".join(
                WORDS[i] + (PIECES[s][2:] if s < len(PIECES) else "")
                for i, s in zip(idx, suffix, strict=True)
            )
        )
    return out


# ---------------------------------------------------------------------------------------------- configs
def test_every_masking_arm_composes_with_the_papers_values() -> None:
    for name in options("masking"):
        cfg = composed("pretrain-scratch", f"masking={name}").masking
        assert cfg.name == name and cfg.ratio == 0.15 and cfg.span_p == 0.2
        if cfg.strategy == "fully_explored_passes":  # K visits per cycle: floor(1 / ratio) unless given
            assert cfg.num_masks == 6  # floor(1 / 0.15)
        else:
            assert cfg.num_masks == (4 if name.startswith(("fe_", "iid_")) else 1)
    with pytest.raises(MaskingConfigError, match="splitz"):
        MaskingConfig.from_dict({"splitz": 4})


def test_sequences_per_batch() -> None:
    assert sequences_per_batch(32, 4) == 8
    assert sequences_per_batch(32, 1) == 32
    with pytest.raises(MaskingConfigError, match="rows=30"):
        sequences_per_batch(30, 4)


# ---------------------------------------------------------------------------------------------- collator
def test_collator_pads_masks_and_repeats(tokenizer) -> None:
    cfg = MaskingConfig(name="fe", strategy="fully_explored", num_masks=4, ratio=0.15)
    col = MaskingCollator.from_tokenizer(cfg, tokenizer, seed=0, pad_to_multiple_of=8)
    feats = [tokenizer(s) for s in sentences(3)]
    feats[1] = {"input_ids": torch.tensor(feats[1]["input_ids"])}  # tensors and dicts without masks work too
    batch = col(feats)
    lens = [len(f["input_ids"]) for f in feats]
    assert batch["input_ids"].shape == (12, -(-max(lens) // 8) * 8)
    assert batch["attention_mask"].sum(1).tolist() == [n for n in lens for _ in range(4)]
    assert batch["token_type_ids"].shape == batch["input_ids"].shape
    labels = batch["labels"]
    special = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids)) & (
        labels == IGNORE_INDEX
    )
    assert ((labels != IGNORE_INDEX) & ~batch["attention_mask"].bool()).sum() == 0
    assert special.sum() >= 12 * 2  # [CLS]/[SEP]/[PAD] stay unmasked
    per_row = (labels != IGNORE_INDEX).sum(1).view(3, 4)
    assert (per_row == per_row[:, :1]).all()  # all copies of a sequence mask the same tau
    no_idx = MaskingCollator.from_tokenizer(cfg, tokenizer, return_indices=False)(feats)
    assert "sequence_index" not in no_idx and "copy_index" not in no_idx


def test_collator_rng_steps_counter_and_state(tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = MaskingConfig(ratio=0.3)
    feats = [tokenizer(s) for s in sentences(8, seed=1)]
    col = MaskingCollator.from_tokenizer(cfg, tokenizer, seed=3)
    first, second = col(feats), col(feats)  # plain HF use: the call counter advances
    assert not torch.equal(first["labels"], second["labels"])
    state = col.state_dict()
    third = col(feats)
    col.load_state_dict(state)
    assert torch.equal(col(feats)["labels"], third["labels"])  # resume from a saved counter
    col.set_step(41)
    a = col(feats)
    col.set_step(41)
    assert torch.equal(col(feats)["input_ids"], a["input_ids"])  # trainer resume at step 41
    col.set_step(42)
    assert not torch.equal(col(feats)["labels"], a["labels"])
    col.set_step(41, rank=1)
    assert not torch.equal(col(feats)["labels"], a["labels"])  # other data-parallel rank, other masks
    # in a DataLoader worker (id 1 of 2) the first call is global batch 1: same masks as single-process call 2
    fresh = MaskingCollator.from_tokenizer(cfg, tokenizer, seed=3)
    monkeypatch.setattr(
        torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=1, num_workers=2)
    )
    assert torch.equal(fresh(feats)["labels"], second["labels"])


def test_collator_whole_word_uses_tokenizer_word_starts(tokenizer) -> None:
    cfg = MaskingConfig(granularity="whole_word", ratio=0.3)
    col = MaskingCollator.from_tokenizer(cfg, tokenizer, seed=0)
    feats = [tokenizer(s) for s in sentences(16, seed=2)]
    batch = col(feats)
    chosen = batch["labels"] != IGNORE_INDEX
    ids = torch.where(chosen, batch["labels"], batch["input_ids"])  # original ids
    is_piece = torch.tensor(
        [t.startswith("##") for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))]
    )
    cont = is_piece[ids]
    # a masked "##" piece implies its preceding piece is masked, and vice versa for an unmasked one
    assert torch.equal(chosen[:, 1:][cont[:, 1:]], chosen[:, :-1][cont[:, 1:]])
    assert cont.any()


def test_bernoulli_masker_is_bit_identical_to_hf_collator(tokenizer) -> None:
    from transformers import DataCollatorForLanguageModeling

    feats = [tokenizer(s) for s in sentences(16, seed=4)]
    hf = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=123)
    ref = hf(feats)
    cfg = MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.15)
    masker = build_masker(cfg, tokenizer.mask_token_id, len(tokenizer), tokenizer.all_special_ids)
    padded = MaskingCollator(masker, tokenizer.pad_token_id).pad(feats)
    ours = masker(padded["input_ids"], padded["attention_mask"], torch.Generator().manual_seed(123))
    assert torch.equal(ours["labels"], ref["labels"])
    assert torch.equal(ours["input_ids"], ref["input_ids"])


# ---------------------------------------------------------------------------------------------- Eq. 5 identity
def _tiny_bert():
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    return BertForMaskedLM(config).double().eval()  # eval: no dropout, so row slices see the same network


def _grads(
    model, batch: dict[str, torch.Tensor], rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    model.zero_grad()
    sub = {
        k: (v if rows is None else v[rows])
        for k, v in batch.items()
        if k in ("input_ids", "attention_mask", "labels")
    }
    loss = model(**sub).loss
    loss.backward()
    return loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("count", ["exact", "bernoulli"])
def test_fe_token_mean_loss_equals_mean_of_per_copy_losses(count: str) -> None:
    model = _tiny_bert()
    strategy = "fully_explored" if count == "exact" else "iid"
    cfg = MaskingConfig(strategy=strategy, num_masks=4, ratio=0.2, count=count)
    masker = build_masker(cfg, mask_token_id=4, vocab_size=100, special_ids=[0, 1, 2, 3, 4])
    col = MaskingCollator(masker, pad_token_id=0, seed=5)
    g = torch.Generator().manual_seed(0)
    feats = [
        [2, *torch.randint(5, 100, (n,), generator=g).tolist(), 3] for n in (30, 21, 17)
    ]  # B/K = 3 sequences
    batch = col(feats)
    loss_all, grad_all = _grads(model, batch)
    losses, grads = zip(*(_grads(model, batch, batch["copy_index"] == k) for k in range(4)), strict=True)
    loss_copies = torch.stack(losses).mean()
    grad_copies = torch.stack(grads).mean(0)
    if count == "exact":
        assert abs(loss_all - loss_copies).item() < 1e-10
        assert (grad_all - grad_copies).abs().max().item() < 1e-6
    else:  # per-copy token counts differ under Bernoulli masking, so the identity breaks (the check can fail)
        assert (grad_all - grad_copies).abs().max().item() > 1e-6


def test_one_seed_draws_one_sequence_of_masks_and_another_seed_others() -> None:
    """Two collators with the same seed mask the same batches the same way, call after call; another seed masks
    them differently (the masks, not the generators' seeds, are compared)."""
    cfg = MaskingConfig(strategy="fully_explored", num_masks=4, ratio=0.2)
    masker = build_masker(cfg, mask_token_id=4, vocab_size=100, special_ids=[0, 1, 2, 3, 4])
    g = torch.Generator().manual_seed(0)
    feats = [[2, *torch.randint(5, 100, (n,), generator=g).tolist(), 3] for n in (30, 21, 17)]

    def masks(seed: int) -> list[torch.Tensor]:
        col = MaskingCollator(masker, pad_token_id=0, seed=seed)
        return [col(feats)["labels"] != IGNORE_INDEX for _ in range(3)]

    same, again, other = masks(5), masks(5), masks(6)
    assert all(torch.equal(a, b) for a, b in zip(same, again, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(same, other, strict=True))
    assert not torch.equal(same[0], same[1])  # each call draws fresh masks
