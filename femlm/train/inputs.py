"""Everything a pre-training run needs before its first step: tokenizer, model, token blocks and masker."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from femlm.errors import UserError
from femlm.masking import masker_for_tokenizer
from femlm.models.load import check_compatible, construct_model, load_masked_lm, load_tokenizer
from femlm.models.resolve import ResolvedModel, resolve_masked_lm, resolve_scratch
from femlm.train.distributed import DistInfo, barrier, broadcast_object


# ----------------------------------------------------------------------------------------------- model
def resolve_model(cfg: Any, run_dir: Path, dist: DistInfo) -> ResolvedModel:
    """The model of this run, resolved once with every check of loading and no weights read: the plan of a
    dry run and the first half of `tokenizer_and_model`. continual-pretrain reads `model.name_or_path`;
    pretrain-scratch builds a config (and trains a WordPiece vocabulary when `model.tokenizer` is null)."""
    mcfg = cfg.model
    if cfg.command == "continual-pretrain":
        if mcfg.name_or_path is None:
            raise UserError(f"model={mcfg.name} names no checkpoint (model.name_or_path is unset): continual "
                            "pre-training continues one; give model.name_or_path=<checkpoint directory or Hub id>, "
                            "e.g. a pretrain-scratch run's checkpoints/final or roberta-base, or train from random "
                            "weights with femlm pretrain-scratch")
        resolved = resolve_masked_lm(mcfg, cfg.download)
        where = f"model.name_or_path={mcfg.name_or_path}"
    else:
        source = str(mcfg.tokenizer or run_dir / "tokenizer")
        resolved = resolve_scratch(mcfg, scratch_tokenizer(cfg, run_dir, dist), source, cfg.download)
        where = f"model={mcfg.name}"
    check_compatible(resolved.config, resolved.tokenizer, cfg.data.block_size, where)
    return resolved


def tokenizer_and_model(cfg: Any, run_dir: Path, dist: DistInfo) -> tuple[ResolvedModel, torch.nn.Module, list[str]]:
    """(resolved, model, new_head): the checkpoint's weights, or random ones seeded by the caller; `new_head`
    names the masked-LM head parameters initialised fresh (model.new_mlm_head=true on an encoder saved without
    its head; empty otherwise), announced in one line here and recorded in summary.json."""
    resolved = resolve_model(cfg, run_dir, dist)
    if dist.is_main:
        resolved.announce()
    new_head: list[str] = []
    if resolved.origin != "scratch":
        model, new_head = load_masked_lm(resolved, cfg.download)
        if new_head and dist.is_main:
            print(f"notice: model.new_mlm_head=true: {resolved.source} has no masked-LM head weights; a fresh head "
                  f"is initialised ({len(new_head)} tensors: {', '.join(new_head)}), as run_mlm.py does", flush=True)
    else:
        model = construct_model(resolved)
    return resolved, model, new_head


def scratch_tokenizer(cfg: Any, run_dir: Path, dist: DistInfo) -> Any:
    """`model.tokenizer`, or a WordPiece vocabulary of `model.vocab_size` trained on the domain's documents
    (rank 0 trains it into `<run>/tokenizer`, the other ranks and resumed runs load it from there)."""
    if cfg.model.tokenizer:
        return load_tokenizer(cfg.model.tokenizer, cfg.download)
    out = run_dir / "tokenizer"
    if dist.is_main and not (out / "tokenizer_config.json").is_file():
        shutil.copytree(shared_wordpiece(cfg), out)
    barrier(dist)
    return load_tokenizer(str(out), cfg.download)


def shared_wordpiece(cfg: Any) -> Path:
    """A WordPiece vocabulary trained once per (documents, vocab size) in the cache and shared by every run: on the
    domain's training documents, or on `domain.vocabulary_sources` when it names them.

    Arms of one experiment (MLM vs FE-MLM) must use one vocabulary, or their losses and blocks are not comparable;
    `train_wordpiece` gives the same one in every process (femlm/data/wordpiece.py: `tokenizers`' own trainer
    does not), and the cache trains it once."""
    import dataclasses

    from femlm.data.corpus import load_documents
    from femlm.data.wordpiece import train_wordpiece

    domain = cfg.domain
    if domain.vocabulary_sources:  # another corpus's vocabulary (e.g. the warm-up's, for a continual-phase domain)
        domain = dataclasses.replace(domain, sources=list(domain.vocabulary_sources), validation_sources=[],
                                     vocabulary_sources=[], max_documents=None)
    documents = load_documents(domain, cfg.download, cfg.data.corpus_seed(cfg.seed))
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(doc.encode("utf-8", "surrogatepass") + b"\0")
    key = f"wordpiece2-v{cfg.model.vocab_size}-{digest.hexdigest()[:16]}"  # 2: trained in two passes
    cached = cfg.download.cache_path() / "tokenizers" / key
    if not (cached / "tokenizer_config.json").is_file():
        tmp = cached.with_name(f"{key}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        train_wordpiece(documents, cfg.model.vocab_size, tmp)
        try:
            os.replace(tmp, cached)
        except OSError:  # another run finished first: use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    return cached


# ----------------------------------------------------------------------------------------------- data
def load_blocks(cfg: Any, tokenizer: Any, dist: DistInfo) -> tuple[Any, Any]:
    """(train [N, L], validation [M, L]) token blocks of the domain, memory-mapped (femlm.data.tokens.TokenBlocks:
    indexing returns int32 tensors of just the rows asked for). Local rank 0 prepares the corpus when it is not
    cached; the other ranks wait for it on the file system, not in a collective (femlm.data.shared)."""
    import uuid

    from femlm.data.shared import prepare_shared

    token = broadcast_object(uuid.uuid4().hex if dist.is_main else None, dist)
    corpus = prepare_shared(cfg.domain, tokenizer, cfg.data.block_size, cfg.download, cfg.download.cache_path(),
                            num_proc=cfg.runtime.workers(), seed=cfg.data.corpus_seed(cfg.seed), preparer=dist.local_rank == 0, token=token,
                            waiters=dist.distributed)
    return corpus.train, corpus.validation


def make_masker(cfg: Any, tokenizer: Any) -> Any:
    return masker_for_tokenizer(cfg.masking, tokenizer)[0]
