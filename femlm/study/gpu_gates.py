"""The GPU study's gates: the warm-up must leave the context-free plateau, each arm must improve on the warm-up.

The context-free baseline is the best any predictor can do that sees only the token at the masked position, under
the evaluation's masking law (femlm.train.evaluation: of the chosen positions, [MASK] with probability a = 0.8, a
uniformly random id with b = 0.1, the token itself with c = 0.1), with token frequencies p estimated on the
training blocks (add-one smoothed, special tokens excluded as the masks exclude them). Given the visible id v:

  v = [MASK]   P(w | v) = p(w)
  otherwise    P(w | v) = p(w) (b u + c [w = v]) / (b u + c p(v)),   u = 1 / vocabulary size

its mean negative log-likelihood over the held-out set's actual masked positions is the baseline (about 0.9 x the
unigram entropy: the tiny pipeline's scratch runs sat there for 250 steps). It is computed on exactly the set the
run evaluates (`build_eval_set` with the run's data.eval_blocks and data.eval_seed).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def token_counts(blocks: Any, vocab_size: int) -> np.ndarray:
    """Occurrences of every id in the training blocks (a memory-mapped TokenBlocks, or a tensor)."""
    array = blocks.array if hasattr(blocks, "array") else np.asarray(blocks)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, array.shape[0], 65536):  # a slice at a time: the file stays in the page cache
        counts += np.bincount(np.asarray(array[start:start + 65536]).reshape(-1).astype(np.int64),
                              minlength=vocab_size)[:vocab_size]
    return counts


def context_free_loss(counts: np.ndarray, input_ids: Any, labels: Any, mask_id: int, special_ids: list[int],
                      mask_prob: float = 0.8, random_prob: float = 0.1) -> dict[str, float]:
    """The baseline's mean loss over the labelled positions, and the plain unigram loss -log p(w) beside it."""
    vocab = counts.shape[0]
    freq = counts.astype(np.float64) + 1.0
    freq[list(special_ids)] = 0.0
    p = freq / freq.sum()
    labels, inputs = np.asarray(labels), np.asarray(input_ids)
    chosen = labels != -100
    w, v = labels[chosen].astype(np.int64), inputs[chosen].astype(np.int64)
    keep = 1.0 - mask_prob - random_prob
    u = 1.0 / vocab
    shown = p[w] * (random_prob * u + keep * (w == v)) / (random_prob * u + keep * p[v])
    prob = np.where(v == mask_id, p[w], shown)
    return {"loss": float(-np.log(prob).mean()), "unigram_loss": float(-np.log(p[w]).mean()),
            "positions": int(chosen.sum())}


def baseline_for(cfg: Any, corpus: Any, tokenizer: Any) -> dict[str, float]:
    """The context-free baseline on the held-out set a run of `cfg` evaluates on `corpus`."""
    from femlm.train.evaluation import EVAL_MASKING, build_eval_set

    eval_set = build_eval_set(corpus.validation, cfg.data.eval_blocks, cfg.data.eval_seed, tokenizer)
    counts = token_counts(corpus.train, len(tokenizer))
    out = context_free_loss(counts, eval_set.input_ids.numpy(), eval_set.labels.numpy(), tokenizer.mask_token_id,
                            tokenizer.all_special_ids, EVAL_MASKING.mask_replace_prob,
                            EVAL_MASKING.random_replace_prob)
    return {**out, "eval_blocks": len(eval_set), "train_tokens": int(counts.sum())}


def warmup_gate(final_loss: float | None, baseline: float, margin: float) -> dict[str, Any]:
    """Passed when the warm-up's final held-out loss lies at least `margin` nats below the baseline."""
    gap = None if final_loss is None else baseline - final_loss
    return {"passed": gap is not None and gap >= margin, "loss": final_loss, "baseline": baseline, "margin": margin,
            "below_baseline": gap}


def arm_gate(summary: dict[str, Any]) -> dict[str, Any]:
    """Passed when the arm's final held-out loss is below its step-0 value (the warm-up checkpoint's on ACL)."""
    first, final = summary.get("first_eval_loss"), summary.get("final_eval_loss")
    return {"passed": first is not None and final is not None and final < first, "warmup_loss": first,
            "final_loss": final}
