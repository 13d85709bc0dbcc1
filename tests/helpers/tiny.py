"""Tiny, self-contained inputs for tests and benchmarks: a WordPiece tokenizer with a synthetic vocabulary,
synthetic token blocks with learnable structure, and a pre-training config for a few-step CPU run.

Nothing here reads the data mirror, so the training core can be tested on any machine in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_tokenizer(out_dir: Path, words: int = 123) -> Any:
    """A BERT tokenizer over `[specials] + w0..w{words-1}`, saved in `out_dir` (len = words + 5)."""
    from transformers import BertTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = out_dir / "vocab.txt"
    vocab.write_text("".join(f"{t}\n" for t in SPECIALS + [f"w{i}" for i in range(words)]))
    tokenizer = BertTokenizer(vocab=str(vocab), do_lower_case=True, model_max_length=512)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def synthetic_blocks(n: int, length: int, vocab_size: int, seed: int = 0, first_id: int = 5) -> torch.Tensor:
    """[n, length] int32 blocks: [CLS] + a noisy arithmetic walk + [SEP]. Neighbours predict each other, so a
    masked LM's loss falls well below log(vocab) within a few dozen steps."""
    gen = torch.Generator().manual_seed(seed)
    span = vocab_size - first_id
    starts = torch.randint(span, (n, 1), generator=gen)
    strides = torch.randint(1, 4, (n, 1), generator=gen)
    walk = (starts + strides * torch.arange(length - 2)) % span
    noise = torch.rand(walk.shape, generator=gen) < 0.1
    walk = torch.where(noise, torch.randint(span, walk.shape, generator=gen), walk)
    body = walk + first_id
    cls = torch.full((n, 1), 2)
    sep = torch.full((n, 1), 3)
    return torch.cat([cls, body, sep], dim=1).to(torch.int32)


TINY_ARCH = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 64, "max_position_embeddings": 64}


# Keys of `tiny_config(**settings)` that live in the runtime section (speed and cadence, not the recipe).
RUNTIME_KEYS = {"threads", "eval_every", "save_every", "keep_last", "log_every", "micro_batch_size",
                "eval_batch_size", "precision", "device", "compile", "sparse_prediction", "keep_freed_memory"}


def tiny_config(tokenizer_dir: Path, **settings: Any) -> Any:
    """A pretrain-scratch FemlmConfig for a seconds-long CPU run on synthetic blocks (wandb and the progress bar
    off); `settings` are trainer or runtime keys."""
    from femlm.config import FemlmConfig

    cfg = FemlmConfig()
    cfg.command = "pretrain-scratch"
    cfg.model.name = "tiny"
    cfg.model.tokenizer = str(tokenizer_dir)
    cfg.model.arch = dict(TINY_ARCH)
    cfg.data.block_size = 32
    cfg.data.eval_blocks = 16
    cfg.logger.wandb.mode = "disabled"
    cfg.logger.progress = False
    t, rt = cfg.trainer, cfg.runtime
    t.batch_size, t.max_steps, t.lr, t.warmup_ratio = 8, 12, 3e-3, 0.1
    rt.eval_every, rt.save_every, rt.keep_last, rt.log_every, rt.threads = 4, 4, 2, 1, 1
    for key, value in settings.items():
        if key == "resume":
            cfg.resume = value
            continue
        target = rt if key in RUNTIME_KEYS else t
        if not hasattr(target, key):
            raise AttributeError(f"tiny_config: no trainer or runtime key {key!r}")
        setattr(target, key, value)
    return cfg


def fake_load_blocks(n_train: int = 96, n_val: int = 24, seed: int = 0) -> Any:
    """A stand-in for `femlm.train.inputs.load_blocks` that returns synthetic blocks (no corpus needed)."""

    def load_blocks(cfg: Any, tokenizer: Any, dist: Any) -> tuple[torch.Tensor, torch.Tensor]:
        length = cfg.data.block_size
        return (synthetic_blocks(n_train, length, len(tokenizer), seed),
                synthetic_blocks(n_val, length, len(tokenizer), seed + 1))

    return load_blocks


def patch_blocks(n_train: int = 96, n_val: int = 24, seed: int = 0) -> None:
    """Make `run_pretrain` read synthetic blocks instead of the domain corpus (subprocesses, benchmarks)."""
    from femlm.train import inputs

    inputs.load_blocks = fake_load_blocks(n_train, n_val, seed)


def tiny_core(model_type: str = "bert", masking: Any = None, blocks: int = 200, seed: int = 0,
              word_starts: torch.Tensor | None = None, length: int = 32, batch_size: int = 8, dropout: float = 0.0,
              arch: dict[str, Any] | None = None, **runtime: Any) -> Any:
    """A PretrainCore over a 2-layer, 32-wide model without dropout (so two cores built alike take identical
    steps; `dropout`: the attention dropout) on synthetic `length`-token blocks (32), batch `batch_size` (8);
    `masking`: a MaskingConfig (default mlm_subword) with its `word_starts` table (whole-word, span), `arch`:
    further HF config keys, `runtime`: RuntimeConfig keys (precision defaults to fp32, so the machine's `auto`
    choice never enters a test)."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    from femlm.masking import MaskingConfig, build_masker
    from femlm.runtime.config import RuntimeConfig
    from femlm.train.config import TrainerConfig
    from femlm.train.core import PretrainCore

    shape = {k: v for k, v in TINY_ARCH.items() if k != "model_type"}
    shape["max_position_embeddings"] = max(shape["max_position_embeddings"], length)
    extra = {"pad_token_id": 1} if model_type == "roberta" else {}
    if model_type == "modernbert":  # SPECIALS' ids (its defaults name its own 50k vocabulary); its dropout key
        extra = {"pad_token_id": 0, "cls_token_id": 2, "sep_token_id": 3, "bos_token_id": 2, "eos_token_id": 3,
                 "attention_dropout": dropout}
    config = AutoConfig.for_model(model_type, vocab_size=99, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=dropout, **shape, **extra, **(arch or {}))
    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config)
    masker = build_masker(masking or MaskingConfig(), mask_token_id=4, vocab_size=99, special_ids=[0, 1, 2, 3, 4],
                          word_starts=word_starts)
    trainer = TrainerConfig(batch_size=batch_size, max_steps=20, lr=3e-3, warmup_ratio=0.1)
    return PretrainCore(model, masker, synthetic_blocks(blocks, length, 99, seed), trainer,
                        RuntimeConfig(**{"precision": "fp32", "device": "cpu", **runtime}), seed)
