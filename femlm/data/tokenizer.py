"""Tokenizer files: the mirrored bert-base-uncased / roberta-base vocabularies and model configs, and new
WordPiece vocabularies trained on a corpus (for pre-training from scratch). Loading any tokenizer by name or
directory is femlm.models.load.load_tokenizer."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import transformers
from transformers import PreTrainedTokenizerFast

from femlm.data.config import DownloadConfig
from femlm.data.fetch import resolve_files
from femlm.data.registry import ALIASES
from femlm.errors import UserError

log = logging.getLogger(__name__)
MIRRORED = ("bert-base-uncased", "roberta-base")
MAX_POSITIONS = 512  # both models' tokenizer_config model_max_length (RoBERTa has 514 positions: 2 offset)
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _fast_class(name: str) -> Any:
    # transformers 5 folded XTokenizerFast into XTokenizer (tokenizers backend); 4.x keeps both.
    return getattr(transformers, f"{name}Fast", None) or getattr(transformers, name)


def _files_kwargs(cls: Any, **files: str) -> dict[str, str]:
    """vocab=/merges= (transformers 5) or vocab_file=/merges_file= (4.x)."""
    params = inspect.signature(cls.__init__).parameters
    return {(k if k in params else f"{k}_file"): v for k, v in files.items()}


def _bert_from_vocab(vocab: Path, lowercase: bool = True) -> PreTrainedTokenizerFast:
    cls = _fast_class("BertTokenizer")
    return cls(**_files_kwargs(cls, vocab=str(vocab)), do_lower_case=lowercase, model_max_length=MAX_POSITIONS)


def _roberta_from_files(vocab: Path, merges: Path) -> PreTrainedTokenizerFast:
    cls = _fast_class("RobertaTokenizer")
    return cls(**_files_kwargs(cls, vocab=str(vocab), merges=str(merges)), model_max_length=MAX_POSITIONS)


def mirrored_tokenizer(name: str, download: DownloadConfig) -> PreTrainedTokenizerFast | None:
    """bert-base-uncased / roberta-base built from their mirrored (or cached, downloaded) vocabulary files;
    None for any other name (femlm.models.load.load_tokenizer then tries a directory or the Hub)."""
    key = ALIASES.get(name, name)
    if key == "bert-base-uncased":
        return _bert_from_vocab(resolve_files(key, download, roles=("vocab",))["vocab"], lowercase=True)
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


def train_wordpiece(documents: Iterable[str], vocab_size: int, out_dir: Path, lowercase: bool = True
                    ) -> PreTrainedTokenizerFast:
    """Train a BERT-style WordPiece vocabulary (BERT normalizer and special tokens) on `documents`, save it
    with save_pretrained in `out_dir`, and return it (as a BERT fast tokenizer, so it reloads the same)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    if vocab_size < len(BERT_SPECIALS) + 1:
        raise UserError(f"vocab_size={vocab_size}: must exceed the {len(BERT_SPECIALS)} special tokens")
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase, clean_text=True,
                                                    handle_chinese_chars=True, strip_accents=None)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS,
                                        continuing_subword_prefix="##", show_progress=False)
    docs = list(documents)
    if not docs:
        raise UserError("train_wordpiece: no documents to train the vocabulary on")
    backend.train_from_iterator(docs, trainer=trainer, length=len(docs))
    vocab = sorted(backend.get_vocab().items(), key=lambda kv: kv[1])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Rebuild through the BERT tokenizer class from a vocab.txt: the same pipeline bert-base-uncased uses.
    vocab_file = out_dir / "vocab.txt"
    vocab_file.write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")
    tokenizer = _bert_from_vocab(vocab_file, lowercase=lowercase)
    tokenizer.save_pretrained(str(out_dir))
    log.info("trained a WordPiece vocabulary of %d tokens on %d documents -> %s", len(vocab), len(docs), out_dir)
    return tokenizer
