"""The GPU study's gates: the warm-up must leave the context-free plateau, each arm must improve on the warm-up.

The warm-up's reference is the context-free baseline of femlm.train.baseline (its ``loss``: token frequencies where
the evaluation hid or replaced the token, the token itself where it kept it, over the realised masks of exactly the
held-out set the run scores: about 0.9 x the unigram cross-entropy under 80/10/10, and below every context-free
predictor's loss), computed on the warm-up's prepared corpus with the run's data.eval_blocks and data.eval_seed.
"""

from __future__ import annotations

from typing import Any


def baseline_for(cfg: Any, corpus: Any, tokenizer: Any) -> dict[str, Any]:
    """The context-free baseline on the held-out set a run of `cfg` evaluates on `corpus`."""
    from femlm.train.baseline import corpus_baseline

    return corpus_baseline(corpus, tokenizer, cfg.data.eval_blocks, cfg.data.eval_seed)


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
