"""`plan_pretrain`: everything a pre-training run checks before its first step, without training.

A `--dry-run` calls it, and the real run makes the same checks through the same functions: the corpus's sources
(an unreachable Hub corpus is one line, never a silent fall-back to the offline stand-in), the tokenizer and the
model's config (no weights read), the masker and the batch layout, and the corpus plan: documents, tokens and
blocks, and the passes the run would make over them (refused past trainer.max_passes). It also prints the compute
plan (femlm.train.estimate): training FLOPs, the memory of one micro-batch
and GPU hours at the MFU gpu-check measured on that card, else at an assumed one (labelled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from femlm.data.plan import check_passes
from femlm.data.sources import check_sources
from femlm.train.corpus import dry_run_plan
from femlm.train.distributed import DistInfo
from femlm.train.estimate import compute_plan, masked_per_row, model_shape, plan_lines
from femlm.train.inputs import make_masker, resolve_model


def plan_pretrain(cfg: Any, run: Any) -> dict[str, Any]:
    """The plan of a pre-training run; raises UserError where the real run would."""
    check_sources(cfg.domain, cfg.download)
    resolved = resolve_model(cfg, Path(run.dir), DistInfo())
    masker = make_masker(cfg, resolved.tokenizer)
    corpus = dry_run_plan(cfg, resolved.tokenizer)
    check_passes(corpus, cfg.trainer.max_passes)
    shape = model_shape(resolved.config, resolved.attn_implementation, list(cfg.trainer.trainable))
    compute = compute_plan(cfg, shape, masked_per_row(masker, resolved.tokenizer, cfg.data.block_size))
    return {
        "model": {"name": cfg.model.name, "init_from": resolved.source, **resolved.describe()},
        "masking": {"name": cfg.masking.name, "masks_per_sequence": masker.num_copies},
        "steps": cfg.trainer.max_steps,
        "corpus": corpus.as_dict(),
        "corpus_plan": corpus.lines(),
        "compute": compute,
        "compute_plan": plan_lines(compute),
    }
