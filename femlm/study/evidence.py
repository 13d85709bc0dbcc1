"""What a decomposition run's numbers may be called (issue 27): its gates, its units, and the sentences drawn.

One decomposition.json (``j``) holds both parts of `femlm analyze decomposition`. Before a sentence is written:

* the gates of `femlm.analysis.gates` are applied (again: runs written before the gates existed get them
  too; `apply_gates` is idempotent), so a gated verdict reads "not measured: <reason>";
* every interval names its unit and count. The decomposition's intervals are over its pool sequences. The null
  model's are over whole sequences where the run has them (``by_sequence``, issue 27); a run from before has
  intervals over mask pairs within bins and groups, conditional on its few sequences, and with fewer than
  `MIN_UNITS` sequences femlm prints none of them.
* the per-compute ratios are *predictions* of the decomposition at the run's tau and parameters, and say so.

What the numbers are read as is femlm.study.verdicts' (one rule); this module only says what may be printed.
"""

from __future__ import annotations

from typing import Any

from femlm.analysis.gates import apply_gates, decomposition_gates, null_model_gates
from femlm.analysis.intervals import MIN_UNITS
from femlm.study.text import as_interval, fmt


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
