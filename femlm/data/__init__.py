"""Data: the dataset registry, downloads/mirror, task and corpus readers, token blocks, tokenizers.

Public API (imported lazily, so ``import femlm.data.config`` stays cheap for the CLI)::

    DownloadConfig, TaskConfig, DomainConfig, DataConfig  # config sections (femlm.data.config)
    REGISTRY, GROUPS, get_entry, expand_names           # what exists and where it comes from
    fetch_file, resolve_files, download_all             # mirror -> cache -> verified HTTP download; the command
    load_task, task_data_notes                          # DatasetDict(text[, text_pair], label)
    load_documents, prepare_blocks, blocks_meta         # domain corpus -> cached memory-mapped token blocks
    prepare_corpus, PreparedCorpus, TokenBlocks         # the preparation pipeline and its on-disk result
    corpus_plan, check_passes                           # plans: documents, tokens, blocks, passes
    mirrored_tokenizer, train_wordpiece                 # tokenizer files, new vocabularies (loading: femlm.models.load)

Local data needs no registry entry (`femlm.data.local`): ``domain.sources`` may list ``file:<path|dir|glob>``
(.txt / .jsonl, .gz too, .parquet) and ``hf:<dataset>[?options]`` (`femlm.data.hub`), and ``task.dataset`` may
be a directory path with train/dev[/test] files. See docs/corpora.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "femlm.data.config": ("DataConfig", "DomainConfig", "DownloadConfig", "TaskConfig"),
    "femlm.data.registry": ("GROUPS", "REGISTRY", "DatasetEntry", "FileEntry", "expand_names", "get_entry"),
    "femlm.data.fetch": ("Unavailable", "fetch_file", "resolve_files", "sha256_file"),
    "femlm.data.download": ("download_all",),
    "femlm.data.tasks": ("load_task", "task_data_notes"),
    "femlm.data.corpus": ("blocks_dir", "blocks_meta", "load_documents", "prepare_blocks",
                          "tokenizer_fingerprint"),
    "femlm.data.prepare": ("prepare_corpus",),
    "femlm.data.tokens": ("PreparedCorpus", "TokenBlocks"),
    "femlm.data.plan": ("CorpusPlan", "check_passes", "corpus_plan"),
    "femlm.data.tokenizer": ("mirrored_config_path", "mirrored_tokenizer"),
    "femlm.data.wordpiece": ("train_wordpiece",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    # Lazy: datasets/transformers take seconds to import and most CLI paths only need the configs.
    if name not in _WHERE:
        raise AttributeError(f"module 'femlm.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
