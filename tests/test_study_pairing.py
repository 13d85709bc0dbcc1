"""What pairs the study's arms by seed (femlm.study.stats pairs them): runs of one seed start from the same
weights, read the same data stream (a K-copy arm reads its prefix, in both equal-compute modes the same
sequences) and draw their dropout from the same stream; only the masks differ."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from femlm.masking import MaskingConfig, build_masker
from femlm.runtime.config import RuntimeConfig
from femlm.train.config import TrainerConfig
from femlm.train.core import PretrainCore
from helpers.tiny import TINY_ARCH, synthetic_blocks, tiny_tokenizer


def core(tokenizer, model, blocks, strategy: str, k: int, mode: str, seed: int) -> PretrainCore:
    mcfg = MaskingConfig(name=strategy, strategy=strategy, num_masks=k).validate()
    masker = build_masker(mcfg, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                          special_ids=tokenizer.all_special_ids)
    tcfg = TrainerConfig(batch_size=16, max_steps=8, equal_compute=mode)
    return PretrainCore(copy.deepcopy(model), masker, blocks, tcfg, RuntimeConfig(threads=1), seed)


def test_arms_of_one_seed_read_one_stream_from_one_start(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForMaskedLM

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(AutoConfig.for_model(**{**TINY_ARCH, "vocab_size": len(tokenizer)}))
    blocks = synthetic_blocks(200, 32, len(tokenizer))
    mlm = core(tokenizer, model, blocks, "random", 1, "same_rows", seed=3)
    fe_rows = core(tokenizer, model, blocks, "fully_explored", 4, "same_rows", seed=3)
    fe_seqs = core(tokenizer, model, blocks, "fully_explored", 4, "same_sequences", seed=3)
    iid_rows = core(tokenizer, model, blocks, "iid", 4, "same_rows", seed=3)
    assert fe_rows.max_steps == 8 and fe_seqs.max_steps == 2  # same compute: 8 x 16 rows, 2 x 64 rows
    stream = torch.cat([mlm.sequences(s) for s in (1, 2)])  # MLM's first 32 sequences
    rows_stream = torch.cat([fe_rows.sequences(s) for s in range(1, 9)])  # FE same rows: 8 steps x 4 sequences
    seqs_stream = torch.cat([fe_seqs.sequences(s) for s in (1, 2)])  # FE same sequences: 2 steps x 16
    assert torch.equal(rows_stream, stream) and torch.equal(seqs_stream, stream)  # a prefix of MLM's stream
    assert torch.equal(torch.cat([iid_rows.sequences(s) for s in range(1, 9)]), stream)
    for a, b in zip(mlm.objective.model.parameters(), fe_seqs.objective.model.parameters(), strict=True):
        assert torch.equal(a, b)  # one start
    other_seed = core(tokenizer, model, blocks, "random", 1, "same_rows", seed=4)
    assert not torch.equal(other_seed.sequences(1), mlm.sequences(1))  # seeds differ in their data order


def test_split_seed_gives_every_run_one_corpus_split(monkeypatch) -> None:
    """data.split_seed: the held-out documents (and the corpus sample) no longer follow each run's seed, so a
    warm-up and arms of several seeds share one held-out set that none of them trains on."""
    from femlm.config import FemlmConfig
    from femlm.data import shared
    from femlm.train import inputs
    from femlm.train.distributed import DistInfo

    seen = []

    class Prepared:
        train = validation = None

    def fake_prepare(domain, tokenizer, block_size, download, cache_dir, num_proc, seed, **kwargs):
        seen.append(seed)
        return Prepared()

    monkeypatch.setattr(shared, "prepare_shared", fake_prepare)
    for run_seed, split_seed in ((1, None), (2, None), (1, 0), (2, 0), (3, 0)):
        cfg = FemlmConfig()
        cfg.seed, cfg.data.split_seed = run_seed, split_seed
        inputs.load_blocks(cfg, None, DistInfo())
    assert seen == [1, 2, 0, 0, 0]
