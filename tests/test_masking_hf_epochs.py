"""The drop-in's masks keyed by (seed, sequence, epoch) (issue 28): every strategy, and FE across passes.

Claims tested: with an int seed a sequence's masked rows do not depend on the batch around it (composition, order,
padding side and length, DataLoader workers); without the epoch they are static, with `set_epoch` each epoch draws
new ones, and the epoch reaches DataLoader workers, persistent ones included; `fully_explored_passes` through the
drop-in masks every maskable token exactly once per cycle of K epochs (K tau = n), tau per epoch, each epoch's
mask uniform over positions and over tau-subsets (exact-count MLM, chi-square), short rows by FE mode's rule;
undefined settings are refused in one line naming the key. Where people train: a real `transformers.Trainer` with
2 DataLoader workers over 2 cycles covers each sequence once per cycle, resumes mid-epoch on the same masks, and a
plain loop with `set_epoch` draws the Trainer's masks; 2 ranks draw what 1 process draws.
"""

from __future__ import annotations

import math
import pickle
from itertools import combinations
from multiprocessing.reduction import ForkingPickler
from types import SimpleNamespace

import pytest
import torch
from scipy import stats

from femlm import DataCollatorForFullyExploredLM
from femlm.masking import IGNORE_INDEX, MaskingConfigError
from helpers.tiny import tiny_tokenizer

torch.set_num_threads(1)
PAD, CLS, SEP = 0, 2, 3
ALPHA = 1e-3  # every draw is seeded: each goodness-of-fit check is deterministic
MODES = {
    "fully_explored": {"num_masks": 4},
    "iid": {"num_masks": 4, "strategy": "iid"},
    "random": {"num_masks": 1, "strategy": "random"},
    "bernoulli": {"num_masks": 1, "strategy": "random", "count": "bernoulli"},
    "passes": {"num_masks": 4, "strategy": "fully_explored_passes"},
}


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))  # [PAD] 0, [CLS] 2, [SEP] 3, [MASK] 4, w0.. from 5


def sequences(n: int, lo: int, hi: int, seed: int = 0) -> list[dict]:
    """n distinct features [CLS] + lo..hi-1 ordinary tokens + [SEP] (so rows are padded)."""
    g = torch.Generator().manual_seed(seed)
    out: dict[tuple, None] = {}
    while len(out) < n:
        length = int(torch.randint(lo, hi, (1,), generator=g))
        out[(CLS, *torch.randint(5, 128, (length,), generator=g).tolist(), SEP)] = None
    return [{"input_ids": list(ids)} for ids in out]


def by_sequence(batch: dict[str, torch.Tensor], k: int) -> dict[tuple, tuple[tuple, tuple]]:
    """{a sequence's unpadded ids: (its K masked rows' inputs, their labels)}, padding checked and dropped."""
    out = {}
    for b in range(batch["input_ids"].shape[0] // k):
        rows = slice(b * k, (b + 1) * k)
        ids, labels, att = batch["input_ids"][rows], batch["labels"][rows], batch["attention_mask"][rows].bool()
        assert (labels[~att] == IGNORE_INDEX).all() and (ids[~att] == PAD).all()
        original = torch.where(labels != IGNORE_INDEX, labels, ids)[0][att[0]]
        out[tuple(original.tolist())] = (tuple(map(tuple, ids[:, att[0]].tolist())),
                                         tuple(map(tuple, labels[:, att[0]].tolist())))
    return out


def labelled(rows: tuple) -> torch.Tensor:
    return torch.tensor(rows) != IGNORE_INDEX


# ---------------------------------------------------------------------------------------------- keying
@pytest.mark.parametrize("mode", MODES)
def test_a_sequences_masks_do_not_depend_on_the_batch_around_it(tok, mode: str) -> None:
    feats = sequences(12, 8, 40)
    collator = DataCollatorForFullyExploredLM(tok, seed=3, **MODES[mode])
    collator.set_epoch(2)
    k = collator.num_masks
    alone = {key: v for f in feats for key, v in by_sequence(collator([f]), k).items()}
    assert len(alone) == len(feats) and any(labelled(v[1]).any() for v in alone.values())
    assert by_sequence(collator(feats), k) == alone
    tok.padding_side = "left"
    try:
        assert by_sequence(collator(feats[::-1]), k) == alone
    finally:
        tok.padding_side = "right"
    wide = DataCollatorForFullyExploredLM(tok, seed=3, pad_to_multiple_of=64, **MODES[mode])
    wide.set_epoch(2)
    assert by_sequence(wide(feats[5:] + feats[:5]), k) == alone
    loader = torch.utils.data.DataLoader(feats, batch_size=5, shuffle=True, collate_fn=collator, num_workers=2,
                                         multiprocessing_context="fork", generator=torch.Generator().manual_seed(1))
    assert {key: v for batch in loader for key, v in by_sequence(batch, k).items()} == alone
    other = DataCollatorForFullyExploredLM(tok, seed=4, **MODES[mode])
    other.set_epoch(2)
    assert by_sequence(other(feats), k) != alone  # the seed enters


@pytest.mark.parametrize("mode", ["fully_explored", "iid", "random", "bernoulli"])
def test_static_masks_without_the_epoch_and_new_masks_every_epoch_with_it(tok, mode: str) -> None:
    feats = sequences(16, 20, 40)
    collator = DataCollatorForFullyExploredLM(tok, seed=0, **MODES[mode])
    assert collator.epoch == 0
    first = collator(feats)
    assert torch.equal(collator(feats)["labels"], first["labels"])  # no epoch given: the same masks again
    seen = [first["labels"]]
    for epoch in (1, 2, 7):
        collator.set_epoch(epoch)
        seen.append(collator(feats)["labels"])
    assert all(not torch.equal(a, b) for a, b in combinations(seen, 2))
    collator.set_epoch(0)
    assert torch.equal(collator(feats)["input_ids"], first["input_ids"])  # inputs (80/10/10) too


@pytest.mark.parametrize("persistent", [False, True])
def test_the_epoch_reaches_dataloader_workers(tok, persistent: bool) -> None:
    feats = sequences(20, 10, 30)

    def epochs(workers: int, batch_size: int) -> list[dict]:
        collator = DataCollatorForFullyExploredLM(tok, seed=1)
        loader = torch.utils.data.DataLoader(feats, batch_size=batch_size, collate_fn=collator, num_workers=workers,
                                             persistent_workers=persistent and workers > 0,
                                             multiprocessing_context="fork" if workers else None)
        out = []
        for epoch in range(3):
            collator.set_epoch(epoch)  # before iter(loader), as DistributedSampler.set_epoch
            out.append({key: v for batch in loader for key, v in by_sequence(batch, 4).items()})
        return out

    single, workers = epochs(0, 4), epochs(2, 3)
    assert workers == single and single[0] != single[1] != single[2]


def test_set_epoch_crosses_a_spawn_pickle_and_state_dict_carries_it(tok) -> None:
    collator = DataCollatorForFullyExploredLM(tok, seed=0)
    copy = pickle.loads(ForkingPickler.dumps(collator))  # how a spawned DataLoader worker receives it
    collator.set_epoch(5)
    assert copy.epoch == 5
    state = collator.state_dict()
    assert state["epoch"] == 5
    restored = DataCollatorForFullyExploredLM(tok, seed=0)
    restored.load_state_dict(state)
    assert restored.epoch == 5 and restored.state_dict() == state
    restored.load_state_dict({k: v for k, v in state.items() if k != "epoch"})  # a state from before the epoch
    assert restored.epoch == 0
    callback = collator.epoch_callback()
    from transformers import TrainerCallback

    assert isinstance(callback, TrainerCallback)
    callback.on_epoch_begin(None, SimpleNamespace(epoch=1.5), None)  # a Trainer resumed mid-epoch 1
    assert collator.epoch == 1
    for bad in (-1, 1.5, "2"):
        with pytest.raises(MaskingConfigError, match="epoch="):
            collator.set_epoch(bad)


# ---------------------------------------------------------------------------------------------- passes
def passes(tok, **kw) -> DataCollatorForFullyExploredLM:
    return DataCollatorForFullyExploredLM(tok, strategy="fully_explored_passes", **{"seed": 0, **kw})


def visits(collator, feats: list[dict], epochs: range) -> torch.Tensor:
    """BoolTensor[epochs, rows, L]: which positions each epoch's row masks."""
    out = []
    for epoch in epochs:
        collator.set_epoch(epoch)
        out.append(collator(feats)["labels"] != IGNORE_INDEX)
    return torch.stack(out)


def test_passes_mask_every_token_once_per_cycle_tau_per_epoch(tok) -> None:
    feats = sequences(10, 20, 21)  # n = 20 maskable tokens: K 4 x tau 5
    collator = passes(tok, mlm_probability=0.25, num_masks=4)
    assert (collator.num_masks, collator.cycle_length, collator.rows(8)) == (1, 4, 8)
    for cycle in range(2):
        sel = visits(collator, feats, range(4 * cycle, 4 * cycle + 4))
        assert sel.shape == (4, 10, 22) and (sel.sum(dim=2) == 5).all()  # tau per epoch, one row per sequence
        assert (sel.sum(dim=0)[:, 1:-1] == 1).all() and not sel[..., [0, -1]].any()  # once per cycle, no specials
        if cycle == 0:
            first = sel
    assert not torch.equal(first, sel)  # a new cycle draws a new partition
    auto = passes(tok, mlm_probability=0.15, num_masks=None)
    assert auto.cycle_length == 6 and "a cycle of 6 epochs" in repr(auto)


def test_each_epochs_mask_is_an_exact_count_mlm_mask(tok) -> None:
    """Over many sequences: visit v's mask holds tau tokens, uniform over positions; for n = 6, tau = 2 it is
    uniform over the 15 two-subsets (chi-square), in a first and a later cycle."""
    collator = passes(tok, mlm_probability=0.25, num_masks=4)
    for epoch in (1, 6):
        sel = visits(collator, sequences(400, 20, 21, seed=epoch), range(epoch, epoch + 1))[0][:, 1:-1]
        assert (sel.sum(dim=1) == 5).all()
        assert stats.chisquare(sel.sum(dim=0).numpy()).pvalue > ALPHA
    small = passes(tok, mlm_probability=1 / 3, num_masks=3)
    subsets = {s: 0 for s in combinations(range(6), 2)}
    for epoch in (0, 4):
        sel = visits(small, sequences(600, 6, 7, seed=10 + epoch), range(epoch, epoch + 1))[0][:, 1:-1]
        for row in sel:
            subsets[tuple(row.nonzero().flatten().tolist())] += 1
        assert stats.chisquare(list(subsets.values())).pvalue > ALPHA
        subsets = dict.fromkeys(subsets, 0)


def test_passes_short_rows_follow_fe_modes_rule(tok) -> None:
    """n < K: one token at epochs k < n of a cycle, none at the others, counted; K tau > n (rounding): tau capped
    at n // K; a cycle never masks a token twice."""
    feats = [{"input_ids": [CLS, *range(5, 5 + n), SEP]} for n in (0, 1, 2, 3, 10)]
    collator = passes(tok, mlm_probability=0.25, num_masks=4)  # n = 10: tau = round(2.5) = 3, 4 x 3 > 10
    sel = visits(collator, feats, range(4))
    per_epoch = sel.sum(dim=2).T  # [row, epoch]
    for row, n in enumerate((0, 1, 2, 3)):
        assert per_epoch[row].tolist() == [1] * n + [0] * (4 - n)
    assert per_epoch[4].tolist() == [2] * 4 and int(sel.sum(dim=0).max()) == 1
    assert collator.short_rows == 4 * 4


def test_passes_whole_words_from_offsets_stay_whole_and_disjoint_over_a_cycle(tmp_path) -> None:
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "walk", "talk", "##ing", "##ed", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    wp = BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))
    feats = [wp(" ".join(["playing walked talks play walk talking"] * 4), return_offsets_mapping=True)]
    collator = passes(wp, whole_word_mask=True, mlm_probability=0.2, num_masks=4)
    sel = visits(collator, feats, range(4))[:, 0]
    piece = torch.tensor([t.startswith("##") for t in wp.convert_ids_to_tokens(feats[0]["input_ids"])])
    assert torch.equal(sel[:, 1:][:, piece[1:]], sel[:, :-1][:, piece[1:]])  # a piece goes with its word
    assert (sel.sum(dim=1) > 0).all() and int(sel.sum(dim=0).max()) == 1


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"seed": None}, "seed=None"),
    ({"count": "bernoulli", "num_masks": 1}, "masking.count"),
    ({"mlm_probability": 0.25, "num_masks": 5}, "masking.num_masks"),
    ({"granularity": "whole_word", "ratio_schedule": "linear", "mlm_probability_final": 0.1, "schedule_steps": 9},
     "masking.ratio_schedule"),
])
def test_undefined_passes_settings_are_refused_in_one_line(tok, kwargs: dict, key: str) -> None:
    with pytest.raises(MaskingConfigError) as err:
        passes(tok, **kwargs)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_passes_schedule_keeps_a_cycle_disjoint(tok) -> None:
    """The ratio follows the call counter (the documented rule); the cycle's masks stay disjoint."""
    feats = sequences(6, 40, 41)
    collator = passes(tok, mlm_probability=0.25, mlm_probability_final=0.1, ratio_schedule="linear",
                      schedule_steps=4, num_masks=4)
    sel = visits(collator, feats, range(4))
    assert sel.sum(dim=2)[:, 0].tolist() == [10, 8, 6, 4] and int(sel.sum(dim=0).max()) == 1
    assert math.isclose(collator.masker.cfg.ratio_at(4, 4), 0.1)


# ---------------------------------------------------------------------------------------------- where people train
class Recorder(torch.nn.Module):
    """A one-parameter model that keeps every batch the Trainer feeds it (inputs and labels), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[dict[str, torch.Tensor]] = []

    def forward(self, input_ids, attention_mask, labels):
        self.seen.append({"input_ids": input_ids.clone(), "attention_mask": attention_mask.clone(),
                          "labels": labels.clone()})
        return {"loss": (self.weight - 1.0) ** 2}


def per_epoch(batches: list[dict], steps: int) -> list[dict]:
    """by_sequence of each epoch's batches (`steps` batches per epoch); every sequence once per epoch."""
    out = []
    for first in range(0, len(batches), steps):
        epoch = [by_sequence(b, 1) for b in batches[first:first + steps]]
        out.append({key: v for rows in epoch for key, v in rows.items()})
        assert len(out[-1]) == sum(map(len, epoch))
    return out


def test_trainer_with_workers_covers_each_sequence_once_per_cycle_and_resumes_exactly(tok, tmp_path) -> None:
    """A real Trainer, 2 DataLoader workers, 6 epochs = 2 cycles of K = 3; a run resumed from a checkpoint
    mid-epoch 1 draws the uninterrupted run's masks; a plain loop with set_epoch draws the Trainer's masks."""
    from transformers import Trainer, TrainingArguments

    feats, k, steps = sequences(8, 15, 16), 3, 4  # n = 15 = K 3 x tau 5; 8 sequences in 4 steps of 2

    def train(out: str, resume: str | None = None) -> list[dict]:
        collator = passes(tok, mlm_probability=1 / 3, num_masks=k)
        args = TrainingArguments(out, num_train_epochs=2 * k, per_device_train_batch_size=2, learning_rate=0.1,
                                 dataloader_num_workers=2, save_strategy="steps", save_steps=6, logging_steps=100,
                                 report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
        model = Recorder()
        trainer = Trainer(model=model, args=args, train_dataset=feats, data_collator=collator)
        trainer.add_callback(collator.epoch_callback())  # the one line
        trainer.train(resume_from_checkpoint=resume)
        return model.seen

    full = train(str(tmp_path / "a"))
    assert len(full) == 2 * k * steps
    epochs = per_epoch(full, steps)
    for cycle in (epochs[:k], epochs[k:]):
        for ids in map(tuple, (f["input_ids"] for f in feats)):
            sel = torch.stack([labelled(epoch[ids][1])[0] for epoch in cycle])
            assert sel.sum(dim=1).tolist() == [5] * k and sel.sum(dim=0).tolist() == [0] + [1] * 15 + [0]
    assert epochs[0] != epochs[k]  # the second cycle draws a new partition
    resumed = train(str(tmp_path / "b"), resume=str(tmp_path / "a" / "checkpoint-6"))  # epoch 1.5
    assert len(resumed) == len(full) - 6
    assert all(torch.equal(a[key], b[key]) for a, b in zip(full[6:], resumed, strict=True) for key in a)

    collator = passes(tok, mlm_probability=1 / 3, num_masks=k)
    loader = torch.utils.data.DataLoader(feats, batch_size=3, shuffle=True, collate_fn=collator,
                                         generator=torch.Generator().manual_seed(7))
    for epoch in range(2 * k):
        collator.set_epoch(epoch)
        assert {key: v for b in loader for key, v in by_sequence(b, 1).items()} == epochs[epoch]


@pytest.mark.parametrize("mode", ["fully_explored", "passes"])
def test_two_ranks_draw_what_one_process_draws(tok, mode: str) -> None:
    feats = sequences(16, 12, 30)
    single = DataCollatorForFullyExploredLM(tok, seed=2, **MODES[mode])
    ranks = [DataCollatorForFullyExploredLM(tok, seed=2, **MODES[mode]) for _ in range(2)]  # one per process
    samplers = [torch.utils.data.DistributedSampler(feats, num_replicas=2, rank=r, seed=0) for r in range(2)]
    k = single.num_masks
    for epoch in range(3):
        single.set_epoch(epoch)
        want = {key: v for b in torch.utils.data.DataLoader(feats, batch_size=4, collate_fn=single)
                for key, v in by_sequence(b, k).items()}
        got = {}
        for collator, sampler in zip(ranks, samplers, strict=True):
            collator.set_epoch(epoch)
            sampler.set_epoch(epoch)
            for b in torch.utils.data.DataLoader(feats, batch_size=3, sampler=sampler, collate_fn=collator):
                got.update(by_sequence(b, k))
        assert got == want and len(got) == len(feats)
