"""Tokenizer files: the mirrored bert-base-uncased / roberta-base vocabularies and model configs. Loading any
tokenizer by name or directory is femlm.models.load.load_tokenizer; training a new WordPiece vocabulary is
femlm.data.wordpiece."""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Any

import transformers
from transformers import PreTrainedTokenizerFast

from femlm.data.config import DownloadConfig
from femlm.data.fetch import resolve_files
from femlm.data.registry import ALIASES

MIRRORED = ("bert-base-uncased", "roberta-base")
MAX_POSITIONS = 512  # both models' tokenizer_config model_max_length (RoBERTa has 514 positions: 2 offset)
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # a trained WordPiece vocabulary's (femlm.data.wordpiece)


def _fast_class(name: str) -> Any:
    # transformers 5 folded XTokenizerFast into XTokenizer (tokenizers backend); 4.x keeps both.
    return getattr(transformers, f"{name}Fast", None) or getattr(transformers, name)


def _files_kwargs(cls: Any, **files: str) -> dict[str, str]:
    """vocab=/merges= (transformers 5) or vocab_file=/merges_file= (4.x)."""
    params = inspect.signature(cls.__init__).parameters
    return {(k if k in params else f"{k}_file"): v for k, v in files.items()}


def bert_from_vocab(vocab: Path, lowercase: bool = True) -> PreTrainedTokenizerFast:
    cls = _fast_class("BertTokenizer")
    return cls(**_files_kwargs(cls, vocab=str(vocab)), do_lower_case=lowercase, model_max_length=MAX_POSITIONS)


def vocabulary_fingerprint(tokenizer: Any) -> str:
    """sha256 of a tokenizer's vocabulary, its tokens in id order one per line (for a WordPiece vocabulary the
    sha256 of its vocab.txt): two runs with the same fingerprint split text into the same ids."""
    vocab = tokenizer.get_vocab()
    text = "".join(f"{token}\n" for token, _ in sorted(vocab.items(), key=lambda kv: kv[1]))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _roberta_from_files(vocab: Path, merges: Path) -> PreTrainedTokenizerFast:
    cls = _fast_class("RobertaTokenizer")
    return cls(**_files_kwargs(cls, vocab=str(vocab), merges=str(merges)), model_max_length=MAX_POSITIONS)


def mirrored_tokenizer(name: str, download: DownloadConfig) -> PreTrainedTokenizerFast | None:
    """bert-base-uncased / roberta-base built from their mirrored (or cached, downloaded) vocabulary files;
    None for any other name (femlm.models.load.load_tokenizer then tries a directory or the Hub)."""
    key = ALIASES.get(name, name)
    if key == "bert-base-uncased":
        return bert_from_vocab(resolve_files(key, download, roles=("vocab",))["vocab"], lowercase=True)
    if key == "roberta-base":
        files = resolve_files(key, download, roles=("vocab", "merges"))
        return _roberta_from_files(files["vocab"], files["merges"])
    return None


def mirrored_config_path(name: str, download: DownloadConfig) -> Path | None:
    """The HF ``config.json`` of bert-base-uncased / roberta-base from the mirror or cache; None otherwise."""
    key = ALIASES.get(name, name)
    if key not in MIRRORED:
        return None
    return resolve_files(key, download, roles=("config",))["config"]
