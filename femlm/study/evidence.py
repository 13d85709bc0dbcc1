"""What a decomposition run's numbers may be called (issue 27): its gates, its units, and the sentences drawn.

One decomposition.json (``j``) holds both parts of `femlm analyze decomposition`. Before a sentence is written:

* the gates of `femlm.analysis.gates` are applied (again: runs written before the gates existed get them
  too; `apply_gates` is idempotent), so a gated verdict reads "not measured: <reason>";
* every interval names its unit and count. The decomposition's intervals are over its pool sequences. The null
  model's are over whole sequences where the run has them (``by_sequence``, issue 27); a run from before has
  intervals over mask pairs within bins and groups, conditional on its few sequences, and with fewer than
  `MIN_UNITS` sequences femlm prints none of them.
* the per-compute ratios are *predictions* of the decomposition at the run's tau and parameters, and say so.
"""

from __future__ import annotations

from typing import Any

from femlm.analysis.gates import apply_gates, decomposition_gates, not_measured, null_model_gates
from femlm.analysis.intervals import MIN_UNITS
from femlm.study.text import as_interval, finite_or_none, fmt


def pool_size(j: dict[str, Any]) -> int | None:
    pool = (j.get("settings") or {}).get("pool")
    return int(pool) if isinstance(pool, int) else None


def null_sequences(j: dict[str, Any]) -> int | None:
    seqs = ((j.get("null_model") or {}).get("settings") or {}).get("sequences")
    return int(seqs) if isinstance(seqs, int) else None


def run_gates(j: dict[str, Any]) -> dict[str, list[str]]:
    """The reasons, per part, that no verdict may be drawn; applies the decomposition's to ``j["verdicts"]``."""
    dec = decomposition_gates(j["terms"], pool_size(j), j["terms"].get("robust"))
    null_summary = (j.get("null_model") or {}).get("summary")
    null = null_model_gates(null_summary, null_sequences(j)) if null_summary else []
    apply_gates(j["verdicts"], dec)
    return {"decomposition": dec, "null_model": null}


def enough(count: int | None) -> bool:
    return count is not None and count >= MIN_UNITS


def null_interval(j: dict[str, Any], key: str) -> dict[str, Any]:
    """``key`` of the null model's summary with the interval femlm may print: over whole sequences where the run
    has it, else (an older run) over pairs and groups; none with fewer than MIN_UNITS sequences."""
    null = j["null_model"]["summary"]
    if not enough(null_sequences(j)):
        return as_interval(null.get(key), None)
    by_seq = null.get("by_sequence") or {}
    ci = by_seq.get(f"{key}_ci") if by_seq else null.get(f"{key}_ci")
    return as_interval(null.get(key), ci)


def null_units(j: dict[str, Any]) -> str:
    seqs = null_sequences(j)
    if not enough(seqs):
        return (f"no intervals: {seqs} sequences are too few for a bootstrap (at least {MIN_UNITS}), so no "
                "statement is drawn")
    if (j["null_model"]["summary"].get("by_sequence") or {}):
        return f"95% intervals over {seqs} sequences (each with its mask pairs and groups)"
    return (f"95% intervals over mask pairs within Hamming bins and groups of masks, conditional on the {seqs} "
            "sequences (a run from before whole sequences were resampled)")


def dec_units(j: dict[str, Any]) -> str:
    pool = pool_size(j)
    if not enough(pool):
        return f"no intervals: {pool} pool sequences are too few for a bootstrap (at least {MIN_UNITS})"
    return f"95% intervals over {pool} pool sequences"


def studied(j: dict[str, Any], model_parameters: int | None = None) -> str:
    """The gradient studied: which parameters, how many values, what share of the model."""
    p = j.get("parameters") or {}
    numel = p.get("numel")
    share = (f", {100 * numel / model_parameters:.2g}% of the model's {model_parameters / 1e6:.1f}M parameters"
             if numel and model_parameters else "")
    return f"the gradient of {', '.join(p.get('patterns') or p.get('names') or ['?'])} ({fmt(numel)} values{share})"


def prediction_label(j: dict[str, Any], model_parameters: int | None = None) -> str:
    s = j.get("settings") or {}
    return (f"predicted by the decomposition at tau = {s.get('tau', '?')} masked tokens per copy, for "
            f"{studied(j, model_parameters)}")


def ratio_sentence(value: float, ci: list[Any], k: str, reasons: list[str], what: str = "predicted ratio") -> str:
    """FE / MLM training-gradient variance per unit compute at K, read from its interval unless gated."""
    if reasons:
        return f"At K={k} the {what} is {fmt(value)}: {not_measured(reasons)}."
    lo, hi = finite_or_none(ci[0]), finite_or_none(ci[1])
    if lo is None or hi is None:
        return f"At K={k} the {what} is {fmt(value)}; no interval was computed, so no verdict is drawn."
    head = f"At K={k} the {what} {value:.3f} [{lo:.3f}, {hi:.3f}]"
    if hi < 1:
        return head + " is below 1: FE's training gradient has lower variance than MLM's at equal compute."
    if lo > 1:
        return (head + " is above 1: at equal compute FE's training gradient has *higher* variance than MLM's (the "
                "K copies cost K times fewer sequences, and the data variance this adds outweighs the negative "
                "covariance between disjoint masks).")
    return head + " contains 1: no difference in training-gradient variance at equal compute was detected."


def null_sentence(j: dict[str, Any], reasons: list[str]) -> str:
    """What the null model shows: context interactions beyond an additive gradient, or not, or not measured.
    It tests interactions only: an additive gradient already satisfies Assumption 1 (covariance falling with the
    Hamming distance), and the null model says nothing about FE's benefit."""
    if reasons:
        return f"Context interactions: {not_measured(reasons)}."
    ci = null_interval(j, "residual_decrease")
    lo, hi = ci["low"], ci["high"]
    if lo is None or hi is None:
        return "Context interactions: no interval, so no statement."
    if lo > 0:
        return ("The residual decreases with H beyond the additive model: evidence of context interactions (the "
                "additive model alone already gives a covariance that falls with H, so this is not a test of "
                "Assumption 1 nor of FE's benefit).")
    if hi < 0:
        return "The residual *increases* with H: the measured decrease is smaller than the additive model gives."
    return ("The residual's decrease contains 0: no context interactions beyond additive per-token gradients were "
            "detected.")
