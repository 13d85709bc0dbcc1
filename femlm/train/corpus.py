"""The corpus side of pre-training: ``femlm prepare`` (prepare a corpus ahead of training) and the corpus part of
a pre-training run's plan (``--dry-run`` and the start of training), on top of femlm.data's preparation.

Both take a pre-training config (sections ``domain``, ``data``, ``model``, ``trainer``, ``masking``, ``runtime``,
``download``), so ``femlm prepare domain=news`` prepares exactly the corpus (same cache key) that
``femlm continual-pretrain domain=news`` will read, and a run started afterwards finds it ready.
"""

from __future__ import annotations

import sys
from typing import Any

from femlm.data.plan import CorpusPlan, check_passes, corpus_plan, corpus_summary
from femlm.data.sources import check_sources, kind_of
from femlm.train.compute import step_layout

SMALL_BYTES = 256 * 2**20  # a dry run prepares corpora up to this size (local files and mirror samples) to count


def corpus_tokenizer(cfg: Any) -> Any:
    """The tokenizer a run of this config uses (femlm.models.load's rule), else (no tokenizer and no checkpoint:
    pretrain-scratch's) the shared WordPiece vocabulary trained on the domain (femlm.train.inputs)."""
    from femlm.models.load import load_tokenizer, tokenizer_for

    if cfg.model.tokenizer or cfg.model.name_or_path:
        return tokenizer_for(cfg.model, cfg.download)[0]
    from femlm.train.inputs import shared_wordpiece

    return load_tokenizer(str(shared_wordpiece(cfg)), cfg.download)


def run_reads(trainer: Any, masking: Any) -> tuple[int, int]:
    """(optimizer steps, source blocks per step) of a run (femlm.train.compute: the same total for every arm at
    equal compute under same_sequences; K times fewer for a K-copy arm under same_rows)."""
    layout = step_layout(trainer.equal_compute, trainer.batch_size, trainer.max_steps, masking.num_copies)
    return layout.steps, layout.sequences


def _steps_and_sequences(cfg: Any) -> tuple[int, int]:
    trainer = getattr(cfg, "trainer", None)
    if trainer is None or getattr(cfg, "masking", None) is None:
        return 0, 0
    return run_reads(trainer, cfg.masking)


def _local_bytes(cfg: Any) -> int | None:
    """Total bytes of the domain's local sources (None when any source is an hf: dataset)."""
    from femlm.data.local import local_corpus_files

    total = 0
    for spec in cfg.domain.all_sources:
        kind = kind_of(spec)
        if kind == "hf":
            return None
        if kind == "file":
            total += sum(p.stat().st_size for p in local_corpus_files(spec))
    return total


def dry_run_plan(cfg: Any, tokenizer: Any = None, prepare_small: bool = True) -> CorpusPlan:
    """The corpus plan of a pre-training config without training.

    Every source is checked first (an unreachable Hub corpus is a one-line error saying how to point
    ``domain.sources`` at local files: never a silent fall-back to a stand-in). A corpus already prepared is
    described exactly; a small local one (mirror samples, files up to `SMALL_BYTES`) is prepared to count it;
    anything else is listed unprepared (its counts come with `femlm prepare` or the start of training)."""
    from femlm.data.prepare import corpus_dir, corpus_key
    from femlm.data.tokens import PreparedCorpus, is_prepared

    check_sources(cfg.domain, cfg.download)
    steps, per_step = _steps_and_sequences(cfg)
    tokenizer = tokenizer if tokenizer is not None else corpus_tokenizer(cfg)
    key = corpus_key(cfg.domain, tokenizer, cfg.data.block_size, cfg.download, cfg.data.corpus_seed(cfg.seed))
    final = corpus_dir(key, cfg.domain, cfg.download, cfg.download.cache_path())
    local = _local_bytes(cfg)
    if not is_prepared(final) and prepare_small and local is not None and local <= SMALL_BYTES:
        prepared = prepare_for(cfg, tokenizer)
        return corpus_plan(prepared.meta, cfg.domain, cfg.data.block_size, steps, per_step)
    meta = PreparedCorpus(final).meta if is_prepared(final) else None
    return corpus_plan(meta, cfg.domain, cfg.data.block_size, steps, per_step)


def prepare_for(cfg: Any, tokenizer: Any, progress: bool | None = None) -> Any:
    from femlm.data.prepare import prepare_corpus

    return prepare_corpus(cfg.domain, tokenizer, cfg.data.block_size, cfg.download, cfg.download.cache_path(),
                          num_proc=cfg.runtime.workers(), seed=cfg.data.corpus_seed(cfg.seed), progress=progress)


def training_plan(cfg: Any, meta: dict[str, Any]) -> CorpusPlan:
    """The plan at the start of training (the corpus is prepared): raises past ``trainer.max_passes``."""
    steps, per_step = _steps_and_sequences(cfg)
    plan = corpus_plan(meta, cfg.domain, cfg.data.block_size, steps, per_step)
    check_passes(plan, cfg.trainer.max_passes)
    return plan


def run_prepare(cfg: Any, run: Any) -> dict[str, Any]:
    """``femlm prepare``: read, sample and tokenize the domain corpus into the cache; print and record its plan
    (``corpus.json`` in the run directory). Passes past ``trainer.max_passes`` are reported, not refused: the
    corpus is useful for other runs; the training run itself refuses."""
    check_sources(cfg.domain, cfg.download)
    tokenizer = corpus_tokenizer(cfg)
    corpus = prepare_for(cfg, tokenizer, progress=True)
    steps, per_step = _steps_and_sequences(cfg)
    plan = corpus_plan(corpus.meta, cfg.domain, cfg.data.block_size, steps, per_step)
    limit = cfg.trainer.max_passes
    lines = plan.lines()
    if limit is not None and plan.passes is not None and plan.passes > limit:
        lines.append(f"  warning: more than trainer.max_passes={limit:g} passes: training with these settings "
                     "will stop; use a larger corpus or fewer steps")
    baseline = None
    if tokenizer.mask_token_id is not None and corpus.meta["validation"]["blocks"]:
        from femlm.train.baseline import corpus_baseline

        baseline = corpus_baseline(corpus, tokenizer, cfg.data.eval_blocks, cfg.data.eval_seed)
        lines.append(f"  context-free baseline of the held-out set (data.eval_blocks={baseline['eval_blocks']}, "
                     f"{baseline['targets']:,} targets, 80/10/10): {baseline['loss']:.3f} nats (token frequencies, "
                     f"kept tokens known; without that knowledge {baseline['bayes_loss']:.3f}; every target hidden "
                     f"{baseline['unigram_loss']:.3f})")
    print("\n".join(lines), file=sys.stdout)
    meta = corpus.meta
    summary = {"kind": "prepare", "domain": cfg.domain.name, "path": str(corpus.path), "plan": plan.as_dict(),
               "corpus": corpus_summary(meta), "baseline": baseline, "seconds": meta.get("seconds"),
               "tokens_per_s": meta.get("tokens_per_s"), "workers": meta.get("workers")}
    run.write_json("corpus.json", summary)
    return summary


def plan_prepare(cfg: Any, run: Any) -> dict[str, Any]:
    """`femlm prepare --dry-run`: the sources checked, the corpus plan (exact when it is prepared already)."""
    return dry_run_plan(cfg, prepare_small=False).as_dict()


def training_plan_from_blocks(cfg: Any, train_blocks: Any) -> CorpusPlan | None:
    """`training_plan` for the train blocks `femlm.train.inputs.load_blocks` returned (None for in-memory test
    blocks, which have no meta.json)."""
    from femlm.data.tokens import TokenBlocks, read_meta

    if not isinstance(train_blocks, TokenBlocks):
        return None
    return training_plan(cfg, read_meta(train_blocks.path.parent))
