"""A new WordPiece vocabulary trained on a corpus (pre-training from scratch without a tokenizer), saved as a
BERT tokenizer.

Determinism: `tokenizers`' trainer (0.23 and earlier; huggingface/tokenizers#1794) gives the continuing-subword
tokens (``##a``, ``##b``, ...) their ids in the iteration order of a Rust hash map that is seeded afresh in every
process, and merges of equal count are then chosen by those ids: the same text trained in two processes gives two
different vocabularies (other tokens, not only other ids), and every corpus tokenized with them differs. So the
vocabulary is trained in two passes: the first (no merges) finds the continuing-subword alphabet, the second
trains with those tokens listed, sorted, right after the special tokens, which fixes their ids before any merge.
The result depends only on the documents, `vocab_size` and the `tokenizers` version; `vocabulary_fingerprint`
(femlm.data.tokenizer) names it in every result that uses it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerFast

from femlm.data.tokenizer import BERT_SPECIALS, bert_from_vocab
from femlm.errors import UserError

log = logging.getLogger(__name__)
PREFIX = "##"


def _train(docs: list[str], vocab_size: int, specials: list[str], lowercase: bool) -> Any:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase, clean_text=True,
                                                    handle_chinese_chars=True, strip_accents=None)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials,
                                        continuing_subword_prefix=PREFIX, show_progress=False)
    backend.train_from_iterator(docs, trainer=trainer, length=len(docs))
    return backend


def continuing_alphabet(vocab: Iterable[str]) -> list[str]:
    """The single-character continuing-subword tokens (``##`` + one character) of a vocabulary, sorted."""
    return sorted(t for t in vocab if t.startswith(PREFIX) and len(t) == len(PREFIX) + 1)


def train_wordpiece(documents: Iterable[str], vocab_size: int, out_dir: Path, lowercase: bool = True
                    ) -> PreTrainedTokenizerFast:
    """Train a BERT-style WordPiece vocabulary (BERT normalizer and special tokens) on `documents`, save it
    with save_pretrained in `out_dir`, and return it (as a BERT fast tokenizer, so it reloads the same).
    The same documents give the same vocab.txt in every process (see the module docstring)."""
    if vocab_size < len(BERT_SPECIALS) + 1:
        raise UserError(f"vocab_size={vocab_size}: must exceed the {len(BERT_SPECIALS)} special tokens")
    docs = list(documents)
    if not docs:
        raise UserError("train_wordpiece: no documents to train the vocabulary on")
    # Pass 1 stops before the first merge: it only collects the alphabet, whatever ids the hash map gave it.
    alphabet = continuing_alphabet(_train(docs, len(BERT_SPECIALS) + 1, BERT_SPECIALS, lowercase).get_vocab())
    backend = _train(docs, vocab_size, BERT_SPECIALS + alphabet, lowercase)
    vocab = sorted(backend.get_vocab().items(), key=lambda kv: kv[1])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Rebuild through the BERT tokenizer class from a vocab.txt: the same pipeline bert-base-uncased uses (only
    # BERT_SPECIALS are special there; the ## tokens listed in pass 2 are ordinary vocabulary entries).
    vocab_file = out_dir / "vocab.txt"
    vocab_file.write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")
    tokenizer = bert_from_vocab(vocab_file, lowercase=lowercase)
    tokenizer.save_pretrained(str(out_dir))
    log.info("trained a WordPiece vocabulary of %d tokens on %d documents -> %s", len(vocab), len(docs), out_dir)
    return tokenizer
