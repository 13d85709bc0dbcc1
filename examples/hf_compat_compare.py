"""The same scenarios on Hugging Face's DataCollatorForLanguageModeling and on femlm's drop-in, side by side.

    python examples/hf_compat_compare.py            # offline: a tiny WordPiece tokenizer built on the spot
    python examples/hf_compat_compare.py --quick    # fewer batches for the rates (what the test runs)
    python examples/hf_compat_compare.py --tokenizer ../shared/data/tokenizers/bert-base-uncased

Columns: HF's collator; femlm in parity mode (num_masks=1, strategy="random", count="bernoulli"); femlm in FE mode
(num_masks=4). Every cell is measured by running the collator (an exception is shown by its type). "same as HF"
compares the whole batch with HF's under the same torch RNG state (seed=None in both).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from femlm import DataCollatorForFullyExploredLM

IGNORE = -100
SENTENCES = [
    "the cat sat on the mat", "a dog was running in the park", "she played the piano all evening",
    "they walked home after the long meeting", "we talked about the weather", "he is reading a book",
    "the children were jumping and singing", "it rained", "cooking dinner takes time", "i swim",
]
PIECES = ["##s", "##ing", "##ed", "##er"]
MODES = ("HF", "femlm parity", "femlm FE K=4")


def tiny_tokenizer() -> Any:
    from transformers import BertTokenizerFast

    words = sorted({w for s in SENTENCES for w in s.split()})
    path = Path(tempfile.mkdtemp()) / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *PIECES]) + "\n")
    return BertTokenizerFast(vocab=str(path))


def collators(tok: Any, **kwargs: Any) -> list[Callable]:
    """HF's collator, femlm parity, femlm FE (``kwargs`` in HF's names go to all three)."""
    import warnings

    from transformers import DataCollatorForLanguageModeling

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HF warns that whole words are all-[MASK]
        hf = DataCollatorForLanguageModeling(tok, **kwargs)
    return [hf, DataCollatorForFullyExploredLM(tok, num_masks=1, strategy="random", count="bernoulli", **kwargs),
            DataCollatorForFullyExploredLM(tok, num_masks=4, **kwargs)]


def call(collator: Callable, feats: list, describe: Callable[[dict, Callable], str], **kwargs: Any) -> str:
    try:
        return describe(collator(copy.deepcopy(feats), **kwargs), collator)
    except Exception as err:  # noqa: BLE001 - the outcome is the cell
        name = type(err).__name__
        return name if type(err) is ValueError or not isinstance(err, ValueError) else f"{name} (a ValueError)"


def rates(collators_: list, feats: list, tok: Any, calls: int, unit: str = "token") -> list[str]:
    """Masked share of maskable tokens (or of words, for ``unit="word"``) and the [MASK]/random/kept shares."""
    out = []
    pieces = torch.tensor([t.startswith("##") for t in tok.convert_ids_to_tokens(list(range(len(tok))))])
    special = torch.tensor(sorted(set(tok.all_special_ids)))
    for collator in collators_:
        valid = masked = m = r = k = 0
        for epoch in range(calls):
            if hasattr(collator, "set_epoch"):  # the drop-in with an int seed: new masks per epoch, not per call
                collator.set_epoch(epoch)
            b = collator(copy.deepcopy(feats))
            chosen = b["labels"] != IGNORE
            original = torch.where(chosen, b["labels"], b["input_ids"])
            counted = ~torch.isin(original, special) & (b["attention_mask"] == 1)
            if unit == "word":
                counted &= ~pieces[original]
            valid += int(counted.sum())
            masked += int((chosen & counted).sum())
            m += int((chosen & (b["input_ids"] == tok.mask_token_id)).sum())
            k += int((chosen & (b["input_ids"] == original)).sum())
            r += int(chosen.sum())
        out.append(f"{masked / valid:.3f} ({m / r:.2f}/{(r - m - k) / r:.2f}/{k / r:.2f})")
    return out


def _extra_keys(b: dict, _: Callable) -> str:
    return ", ".join(sorted(set(b) - {"input_ids", "attention_mask", "labels"})) + f"; {len(b['labels'])} rows"


def _labelled_copies(b: dict, c: Callable) -> str:
    copies = (b["labels"] != IGNORE).any(1).view(3, -1).sum(1).tolist()
    return f"ok; labelled rows per sequence {copies}" + (f"; short_rows={c.short_rows}" if hasattr(c, "short_rows")
                                                         else "")


def _side(b: dict, _: Callable) -> str:
    return "left" if int(b["attention_mask"][-1, 0]) == 0 else "right"


def _ok(b: dict, _: Callable) -> str:
    return "ok"


def _kind(b: dict, _: Callable) -> str:
    return type(b["labels"]).__module__.split(".")[0]


def compare(quick: bool = False, tok: Any = None) -> list[tuple[str, str, str, str]]:
    """Rows ``(scenario, HF, femlm parity, femlm FE)``."""
    tok = tok or tiny_tokenizer()
    calls = 20 if quick else 200
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, cells: list[str]) -> None:
        rows.append((name, *cells))

    pairs = [{**tok(a, b, return_special_tokens_mask=True), "next_sentence_label": i % 2,
              "sentence_order_label": 1 - i % 2}
             for i, (a, b) in enumerate(zip(SENTENCES[:4], SENTENCES[4:8], strict=True))]
    row("keys kept", [call(c, pairs, _extra_keys) for c in collators(tok)])
    row("BertForPreTraining loss", [call(c, pairs, _pretraining_loss(tok)) for c in collators(tok, seed=0)])
    short = [tok(""), tok("i swim"), tok(SENTENCES[3])]  # 0, 2 and 7 maskable tokens
    row("short rows (K=4)", [call(c, short, _labelled_copies) for c in collators(tok, seed=0)])
    tok.padding_side = "left"
    row("padding_side='left'", [call(c, pairs, _side) for c in collators(tok)])
    tok.padding_side = "right"
    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    row("no pad token", [call(c, [no_pad(s) for s in SENTENCES[:2]], _ok) for c in collators(no_pad)])
    equal = [tok("the cat sat")["input_ids"], tok("a dog was")["input_ids"]]
    row("no pad token, equal-length id lists", [call(c, equal, _ok) for c in collators(no_pad)])
    for rt in ("pt", "np", "tf"):
        row(f"return_tensors='{rt}'", [call(c, pairs, _kind, return_tensors=rt) for c in collators(tok)])
    unk = [tok("zzz " + s + " qqq", return_special_tokens_mask=True) for s in SENTENCES]
    bare = [{k: v for k, v in f.items() if k != "special_tokens_mask"} for f in unk]
    row("special_tokens_mask given, [UNK]", [_unk_share(c, unk, tok, calls) for c in collators(tok, seed=2)])
    row("no special_tokens_mask, [UNK]", [_unk_share(c, bare, tok, calls) for c in collators(tok, seed=2)])
    feats = [tok(s, return_special_tokens_mask=True) for s in SENTENCES]
    row("rate of tokens (mask/random/kept)", rates(collators(tok, seed=1), feats, tok, calls))
    words = [tok(s, return_offsets_mapping=True, padding="max_length", max_length=16) for s in SENTENCES]
    row("whole words: rate of words (m/r/k)", rates(collators(tok, seed=1, whole_word_mask=True), words, tok, calls,
                                                    "word"))
    row("same as HF, bit for bit (seed=None)", ["-", *_bit_identical(tok, pairs, unk, bare, words)])
    return rows


def _unk_share(collator: Callable, feats: list, tok: Any, calls: int) -> str:
    """Share of the [UNK] tokens of the text (unknown words) that are masked, per row."""
    unk = masked = 0
    for epoch in range(calls):
        if hasattr(collator, "set_epoch"):  # the drop-in with an int seed: new masks per epoch, not per call
            collator.set_epoch(epoch)
        b = collator(copy.deepcopy(feats))
        original = torch.where(b["labels"] != IGNORE, b["labels"], b["input_ids"])
        unk += int((original == tok.unk_token_id).sum())
        masked += int((b["labels"] == tok.unk_token_id).sum())
    return f"{masked / unk:.3f} of [UNK]s masked"


def _pretraining_loss(tok: Any) -> Callable[[dict, Callable], str]:
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=64)).eval()

    def describe(batch: dict, _: Callable) -> str:
        batch = {k: v for k, v in batch.items() if k != "sentence_order_label"}
        loss = model(**batch).loss
        return "None" if loss is None else "a loss"

    return describe


def _bit_identical(tok: Any, pairs: list, unk: list, bare: list, words: list) -> list[str]:
    """For parity mode: which scenarios give HF's whole batch bit for bit (FE mode: never, by design)."""
    cases = {"pairs+given mask": (pairs, {}), "[UNK]+given mask": (unk, {}), "no mask": (bare, {}),
             "whole words": (words, {"whole_word_mask": True, "mask_replace_prob": 1.0, "random_replace_prob": 0.0})}
    same = []
    for name, (feats, kwargs) in cases.items():
        hf, ours, _ = collators(tok, **kwargs)
        torch.manual_seed(7)
        a = hf(copy.deepcopy(feats))
        torch.manual_seed(7)
        b = ours(copy.deepcopy(feats))
        same.append(f"{name}: {'yes' if set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a) else 'no'}")
    return ["; ".join(same), "no (K=4 rows, exact counts)"]


def table(rows: list[tuple[str, ...]]) -> str:
    head = ("scenario", *MODES)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(4)]

    def line(r: tuple[str, ...]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) + " |"

    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="20 batches per rate instead of 200")
    p.add_argument("--tokenizer", help="a fast tokenizer's directory (default: a tiny one built here)")
    args = p.parse_args()
    tok = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.tokenizer)
    print(table(compare(args.quick, tok)))


if __name__ == "__main__":
    main()
