"""Fully-explored MLM in a run_mlm.py-style Hugging Face Trainer script: one collator changed.

    python examples/hf_trainer_fe.py --max-steps 20        # offline: the data mirror's WikiText-2 + BERT tokenizer

Each sequence becomes K masked rows, so `per_device_train_batch_size` is `--rows // K` sequences: the same rows
(and FLOPs) per step as an MLM run of `--rows`; `--strategy fully_explored_passes` makes one row per sequence and
spreads its K disjoint masks over K epochs. The model is a tiny random BERT (swap in your own).
"""

from __future__ import annotations

import argparse
import os
from itertools import chain
from pathlib import Path

from datasets import load_dataset
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, Trainer, TrainingArguments, set_seed

from femlm import DataCollatorForFullyExploredLM

MIRROR = Path(os.environ.get("FEMLM_MIRROR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def arguments(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default=str(MIRROR / "corpus/wikitext-2/wiki.valid.tokens"), help="a text file")
    p.add_argument("--tokenizer", default=str(MIRROR / "tokenizers/bert-base-uncased"))
    p.add_argument("--max-lines", type=int, default=2000, help="lines of --text to use")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--rows", type=int, default=16, help="model rows per step: rows // K sequences x K copies")
    p.add_argument("--num-masks", type=int, default=4, help="K masked copies per sequence (passes: per cycle)")
    p.add_argument("--strategy", default="fully_explored", choices=["fully_explored", "fully_explored_passes",
                                                                   "iid", "random"],
                   help="fully_explored_passes: one row per sequence, its K disjoint masks over K epochs")
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--out", default="runs/examples")
    return p.parse_args()


def blocks_and_model(args: argparse.Namespace):
    """run_mlm.py's data path (dataset -> tokenize -> group into blocks) and a tiny random BERT."""
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    raw = load_dataset("text", data_files=args.text, split=f"train[:{args.max_lines}]")
    tokenized = raw.map(lambda b: tokenizer(b["text"], return_special_tokens_mask=True), batched=True,
                        remove_columns=["text"])

    def group_texts(batch: dict) -> dict:
        joined = {k: list(chain(*batch[k])) for k in batch}
        n = len(joined["input_ids"]) // args.block_size * args.block_size
        return {k: [v[i : i + args.block_size] for i in range(0, n, args.block_size)] for k, v in joined.items()}

    set_seed(0)  # the random model's initial weights
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=args.block_size)
    return tokenizer, tokenized.map(group_texts, batched=True), BertForMaskedLM(config)


def main() -> None:
    args = arguments(__doc__)
    tokenizer, blocks, model = blocks_and_model(args)
    # was: DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    collator = DataCollatorForFullyExploredLM(tokenizer, mlm_probability=0.15, num_masks=args.num_masks, seed=0,
                                              strategy=args.strategy)
    print(collator, f"-> {collator.sequences_for(args.rows)} sequences = {args.rows} rows per step")
    training = TrainingArguments(args.out, max_steps=args.max_steps, learning_rate=1e-3, logging_steps=1,
                                 per_device_train_batch_size=collator.sequences_for(args.rows), save_strategy="no",
                                 report_to=[], use_cpu=True, seed=0)
    trainer = Trainer(model=model, args=training, train_dataset=blocks, data_collator=collator)
    trainer.add_callback(collator.epoch_callback())  # new masks every epoch (without it: the same masks each epoch)
    trainer.train()
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    print(f"losses per step: {' '.join(f'{x:.4f}' for x in losses)}")


if __name__ == "__main__":
    main()
