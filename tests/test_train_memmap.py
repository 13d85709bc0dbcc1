"""Training reads memory-mapped token blocks: the same batches as in-memory blocks (so resume determinism holds),
and resident memory that does not grow with the corpus."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import torch

from femlm.data.tokens import TokenBlocks
from femlm.masking import MaskingConfig, build_masker
from femlm.runtime.config import RuntimeConfig
from femlm.train.config import TrainerConfig
from femlm.train.core import PretrainCore
from femlm.train.evaluation import build_eval_set
from helpers.tiny import synthetic_blocks

VOCAB = 64


def _model() -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("bert", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return AutoModelForMaskedLM.from_config(config)


def _core(blocks: object) -> PretrainCore:
    masker = build_masker(MaskingConfig(), 4, VOCAB, [0, 2, 3])
    tcfg = TrainerConfig(batch_size=8, max_steps=4)
    return PretrainCore(_model(), masker, blocks, tcfg, RuntimeConfig(precision="fp32", threads=1), seed=3)


def _to_file(blocks: torch.Tensor, path: Path) -> TokenBlocks:
    blocks.numpy().astype(np.uint16).tofile(path)
    return TokenBlocks(path, blocks.shape[0], blocks.shape[1], np.uint16)


def test_memmapped_blocks_give_the_same_batches_and_steps(tmp_path: Path) -> None:
    tensor = synthetic_blocks(40, 24, VOCAB, seed=1)
    mapped = _to_file(tensor, tmp_path / "train.bin")
    assert isinstance(mapped.array, np.memmap) and mapped.shape == (40, 24) and len(mapped) == 40
    a, b = _core(tensor), _core(mapped)
    for step in range(1, 12):  # crosses epoch boundaries (2 sequences a step, 40 blocks)
        assert torch.equal(a.sequences(step), b.sequences(step))
    assert a.step(1).loss == b.step(1).loss
    tok = type("Tok", (), {"mask_token_id": 4, "all_special_ids": [0, 2, 3], "__len__": lambda self: VOCAB})()
    assert torch.equal(build_eval_set(tensor, 8, 1, tok).labels, build_eval_set(mapped, 8, 1, tok).labels)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_resident_memory_does_not_grow_with_the_corpus(tmp_path: Path) -> None:
    n_blocks, length = 1_000_000, 64  # 64M tokens: a 128 MB uint16 file
    path = tmp_path / "big.bin"
    writer = np.memmap(path, dtype=np.uint16, mode="w+", shape=(n_blocks, length))
    for start in range(0, n_blocks, 100_000):
        writer[start:start + 100_000] = (np.arange(100_000 * length, dtype=np.uint32) % (VOCAB - 5) + 5
                                         ).reshape(100_000, length)
    writer.flush()
    del writer
    gc.collect()
    small = _core(_to_file(synthetic_blocks(64, length, VOCAB), tmp_path / "small.bin"))
    small.step(1)  # warm up: lazy imports, kernels, allocator
    before = _rss_mb()
    big = _core(TokenBlocks(path, n_blocks, length, np.uint16))
    big.step(1)
    big.step(2)
    grown = _rss_mb() - before
    corpus_mb = path.stat().st_size / 2**20
    # The data order (an int64 permutation, 8 MB here) and a second model are all that may be added.
    assert grown < corpus_mb / 4, f"resident memory grew {grown:.0f} MB for a {corpus_mb:.0f} MB corpus"
