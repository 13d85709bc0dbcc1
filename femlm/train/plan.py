"""`plan_pretrain`: everything a pre-training run checks before its first step, without training.

A `--dry-run` calls it, and so does the real run (through the same functions of femlm.train.inputs): the
tokenizer and the model's config (no weights read), the corpus's blocks (prepared and cached, so the real run
starts at once), the masker and the batch layout, and what the run will process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.masking import sequences_per_batch
from femlm.train.distributed import DistInfo
from femlm.train.inputs import load_blocks, make_masker, tokenizer_and_config


def plan_pretrain(cfg: Any, run: Any) -> dict[str, Any]:
    """The plan of a pre-training run; raises UserError where the real run would."""
    dist = DistInfo()
    run_dir = Path(run.dir)
    tokenizer, config, init_from = tokenizer_and_config(cfg, run_dir, dist)
    masker = make_masker(cfg, tokenizer)
    train, validation = load_blocks(cfg, tokenizer, dist)
    if train.shape[0] == 0 or validation.shape[0] == 0:
        raise UserError(f"domain {cfg.domain.name}: no train or validation blocks of data.block_size="
                        f"{cfg.data.block_size}; add documents or lower data.block_size")
    try:
        sequences = sequences_per_batch(cfg.trainer.batch_size, masker.num_copies, cfg.masking.equal_compute)
    except ValueError as err:
        raise UserError(f"trainer.batch_size={cfg.trainer.batch_size}: {err}") from None
    steps = cfg.trainer.max_steps
    return {
        "model": {"name": cfg.model.name, "init_from": init_from, "model_type": config.model_type,
                  "vocab_size": config.vocab_size, "tokenizer_size": len(tokenizer)},
        "corpus": {"domain": cfg.domain.name, "train_blocks": int(train.shape[0]),
                   "validation_blocks": int(validation.shape[0]), "block_size": int(train.shape[1])},
        "batch": {"rows": sequences * masker.num_copies, "sequences": sequences, "masks_per_sequence":
                  masker.num_copies},
        "steps": steps,
        "passes": round(steps * sequences / int(train.shape[0]), 2),
    }
