"""The context-free baseline of the held-out MLM loss: what a model reaches that has learned token frequencies
and nothing from context (the plateau a from-scratch run sits on before it learns, issue 45).

The evaluation masks 15% of the held-out tokens with the 80/10/10 law (`femlm.train.evaluation`): a target's
input is [MASK], a random token, or the token itself. The baseline scores each target of that fixed held-out set

* ``loss`` (the gate's reference): the training tokens' frequencies where the token is hidden or replaced, the
  token itself (loss 0) where it is kept: about 0.9 x the unigram cross-entropy under 80/10/10, computed here
  exactly over the realised masks. It knows which visible tokens were kept, which no model does, so every
  context-free predictor's loss is at least this: a run below it by a margin has used context;
* ``bayes_loss``: the best a context-free predictor can do without that knowledge (the posterior of the target
  given the visible token under the masking law; random tokens are uniform over the vocabulary);
* ``unigram_loss``: the frequencies at every target (as if every target were hidden), and ``unigram_entropy``,
  the entropy of the frequencies themselves.

Frequencies are the training split's token counts, add-one smoothed over the vocabulary less its special tokens
(the masks never select them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from femlm.train.evaluation import EVAL_MASKING, build_eval_set

CHUNK = 1 << 24  # tokens counted at a time


def token_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Occurrences of each id in a flat array of token ids (a memory map is read a chunk at a time)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), CHUNK):
        counts += np.bincount(np.asarray(tokens[start:start + CHUNK], dtype=np.int64), minlength=vocab_size)
    return counts


def context_free_baseline(counts: np.ndarray, input_ids: torch.Tensor, labels: torch.Tensor,
                          special_ids: list[int], mask_id: int) -> dict[str, Any]:
    """The baselines of the module docstring on one masked held-out set (`labels` -100 where not a target),
    from training token `counts` (one per vocabulary id)."""
    vocab = len(counts)
    smoothed = counts.astype(np.float64) + 1
    smoothed[special_ids] = 0  # never a target
    prob = torch.from_numpy(smoothed / smoothed.sum())
    picked = labels != -100
    target, shown = labels[picked].long(), input_ids[picked].long()
    hidden, kept = shown == mask_id, shown == target
    nll = -prob[target].log()
    # Bayes: given a visible token v, P(target = t | v) = p(t) (a [t = v] + b / V) / (a p(v) + b / V), a and b the
    # shares of targets kept and replaced by a random token.
    a = 1.0 - EVAL_MASKING.mask_replace_prob - EVAL_MASKING.random_replace_prob
    b = EVAL_MASKING.random_replace_prob
    visible = ~hidden
    posterior = prob[target] * (a * kept + b / vocab) / (a * prob[shown] + b / vocab)
    bayes = torch.where(visible, -posterior.log(), nll)
    support = prob[prob > 0]
    entropy = -(support * support.log()).sum()
    top = int(np.argmax(smoothed))
    n = int(picked.sum())
    return {"loss": float(torch.where(kept, 0.0, nll).sum() / n), "bayes_loss": float(bayes.mean()),
            "unigram_loss": float(nll.mean()), "unigram_entropy": float(entropy), "targets": n,
            "hidden": int(hidden.sum()), "kept": int(kept.sum()), "replaced": int((visible & ~kept).sum()),
            "top_token_id": top, "top_share": float((target == top).double().mean()),
            "train_tokens": int(np.delete(counts, special_ids).sum())}


def corpus_baseline(corpus: Any, tokenizer: Any, eval_blocks: int, eval_seed: int) -> dict[str, Any]:
    """`context_free_baseline` of a prepared corpus (`femlm.data.tokens.PreparedCorpus`) on the held-out set a
    run with ``data.eval_blocks`` / ``data.eval_seed`` scores (`build_eval_set`: the same masks), with the
    vocabulary's fingerprint and the token files' sha256."""
    from femlm.data.tokenizer import vocabulary_fingerprint
    from femlm.data.tokens import corpus_fingerprints

    counts = token_counts(np.memmap(corpus.path / "train.bin", dtype=corpus.meta["dtype"], mode="r"), len(tokenizer))
    eval_set = build_eval_set(corpus.validation, eval_blocks, eval_seed, tokenizer)
    out = context_free_baseline(counts, eval_set.input_ids, eval_set.labels, sorted(tokenizer.all_special_ids),
                                tokenizer.mask_token_id)
    out.update(top_token=tokenizer.convert_ids_to_tokens(out["top_token_id"]), eval_blocks=len(eval_set),
               eval_seed=eval_seed, vocabulary_sha256=vocabulary_fingerprint(tokenizer),
               corpus_sha256=corpus_fingerprints(corpus.meta, corpus.path))
    return out
