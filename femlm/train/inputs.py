"""Everything a pre-training run needs before its first step: tokenizer, model, token blocks, masker,
and the check that a resumed run is the same run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from femlm.errors import UserError
from femlm.masking import build_masker, word_start_table
from femlm.train.distributed import DistInfo, barrier, broadcast_object
from femlm.train.model import (
    build_scratch_model,
    check_compatible,
    check_tokenizer,
    load_checkpoint_model,
    load_tokenizer,
)

CONFIG_FILE = "pretrain_config.json"
# Keys a resumed run may change: they do not alter the trajectory (or only its float summation order:
# micro_batch_size), they say where things are (download, logger), or how often we look (log/eval/save).
RESUME_FREE = ("trainer.resume", "trainer.max_steps", "trainer.log_every", "trainer.eval_every",
               "trainer.save_every", "trainer.keep_last", "trainer.threads", "trainer.device", "trainer.compile",
               "trainer.micro_batch_size", "trainer.eval_batch_size", "trainer.variance_probe", "data.num_proc",
               "download", "logger", "dry_run")


# ----------------------------------------------------------------------------------------------- model
def tokenizer_and_model(cfg: Any, run_dir: Path, dist: DistInfo) -> tuple[Any, torch.nn.Module, str | None]:
    """(tokenizer, model, init_from). init=scratch builds random weights; init=checkpoint loads one."""
    mcfg = cfg.model
    offline = bool(cfg.download.offline)
    if cfg.init == "checkpoint":
        if not mcfg.name_or_path:
            raise UserError("model.name_or_path is not set: init=checkpoint needs a checkpoint directory or Hub id")
        model = load_checkpoint_model(mcfg.name_or_path, mcfg.attn_implementation, offline)
        source = mcfg.tokenizer or mcfg.name_or_path
        try:
            tokenizer = load_tokenizer(source, cfg.download)
        except UserError as err:
            key = "model.tokenizer" if mcfg.tokenizer else "model.name_or_path (its tokenizer)"
            raise UserError(f"{key}={source}: {err}") from None
        check_tokenizer(tokenizer, f"tokenizer {source}")
        check_compatible(model, tokenizer, cfg.data.block_size, f"model.name_or_path={mcfg.name_or_path}")
        return tokenizer, model, str(mcfg.name_or_path)
    tokenizer = scratch_tokenizer(cfg, run_dir, dist)
    check_tokenizer(tokenizer, "the tokenizer")
    model = build_scratch_model(mcfg, tokenizer, cfg.download, mcfg.attn_implementation)
    check_compatible(model, tokenizer, cfg.data.block_size, f"model={mcfg.name}")
    return tokenizer, model, None


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
    """A WordPiece vocabulary trained once per (documents, vocab size) in the cache and shared by every run.

    The `tokenizers` trainer breaks frequency ties in hash-map order, which differs between processes, so two
    runs training on the same text get slightly different vocabularies; arms of one experiment (MLM vs FE-MLM)
    must share one, or their losses and blocks are not comparable."""
    from femlm.data.corpus import load_documents
    from femlm.data.tokenizer import train_wordpiece

    documents = load_documents(cfg.domain, cfg.download, cfg.seed)
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(doc.encode("utf-8", "surrogatepass") + b"\0")
    key = f"wordpiece-v{cfg.model.vocab_size}-{digest.hexdigest()[:16]}"
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
                            num_proc=cfg.data.num_proc, seed=cfg.seed, preparer=dist.local_rank == 0, token=token,
                            waiters=dist.distributed)
    return corpus.train, corpus.validation


def make_masker(cfg: Any, tokenizer: Any) -> Any:
    word_starts = word_start_table(tokenizer) if cfg.masking.granularity != "subword" else None
    return build_masker(cfg.masking, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                        special_ids=tokenizer.all_special_ids, word_starts=word_starts)


# ----------------------------------------------------------------------------------------------- resume
def config_dict(cfg: Any) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _free(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESUME_FREE)


def first_difference(saved: dict[str, Any], current: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first key (in config order) whose value differs, ignoring RESUME_FREE keys."""
    old, new = _flatten(saved), _flatten(current)
    for key in list(new) + [k for k in old if k not in new]:
        if _free(key):
            continue
        if old.get(key, "<absent>") != new.get(key, "<absent>"):
            return key, old.get(key, "<absent>"), new.get(key, "<absent>")
    return None


def check_resume(run_dir: Path, current: dict[str, Any], writer: bool = True) -> dict[str, Any] | None:
    """Refuse to continue a run with a different config; returns the saved config (None: nothing saved)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    diff = first_difference(saved, current)
    if diff is not None:
        key, old, new = diff
        # The CLI already rewrote config.yaml with the refused config: put the run's own config back.
        if writer:
            import yaml

            (run_dir / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
        raise UserError(f"trainer.resume: {key}={new!r} differs from the run being resumed ({key}={old!r} in "
                        f"{path}); resume with the original run's overrides (its config.yaml) or start a new run")
    if saved.get("trainer", {}).get("max_steps") != current["trainer"]["max_steps"]:
        warnings.warn("trainer.max_steps changed on resume: the learning-rate schedule is stretched to the new "
                      "length from the current step on", stacklevel=2)
    return saved


def write_config(run_dir: Path, current: dict[str, Any]) -> None:
    path = run_dir / CONFIG_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(current, indent=2) + "\n")
    os.replace(tmp, path)
