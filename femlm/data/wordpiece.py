"""A new WordPiece vocabulary trained on a corpus (pre-training from scratch without a tokenizer), saved as a
BERT tokenizer."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from femlm.data.tokenizer import BERT_SPECIALS, bert_from_vocab
from femlm.errors import UserError

log = logging.getLogger(__name__)


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
    tokenizer = bert_from_vocab(vocab_file, lowercase=lowercase)
    tokenizer.save_pretrained(str(out_dir))
    log.info("trained a WordPiece vocabulary of %d tokens on %d documents -> %s", len(vocab), len(docs), out_dir)
    return tokenizer
