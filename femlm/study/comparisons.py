"""A study's comparisons, each one record (`Comparison`) built from the study's results: the decomposition's
predicted variance ratios and null model, the passes measurement, pre-training losses and compute ratios, FE
against its control, downstream scores. femlm.study.verdicts reads them (readings, multiplicity, text).

`study_comparisons(plan, dec, pre, down, passes, reads)` is the one entry point; a new study (a GPU study, a new
arm) passes its own results in the same shapes and gets every comparison keyed ``<kind>/<where>/<what>``, the keys
its experiment file's ``stats.confirmatory`` lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scipy import stats as sps

FAVOURS, AGAINST, UNDECIDED = "favours FE", "against FE", "not decided"


@dataclass
class Comparison:
    """One comparison: what it is, its interval, which side of the null favours FE, its p-values and reading."""

    key: str  # stable id: "<kind>/<where>/<what>", what ``stats.confirmatory`` lists
    kind: str  # variance_ratio, training_loss, compute_ratio, fe_vs_control, downstream, passes, context
    text: str  # what is compared, with its unit and count
    estimate: float | None
    low: float | None
    high: float | None
    unit: str  # "difference" or "ratio"
    better: str = "lower"  # the side of the null that favours FE ("lower" / "higher")
    p: float | None = None
    p_method: str = ""
    gated: list[str] = field(default_factory=list)
    bound: str = ""  # a censored compute ratio: a bound without interval or p
    n: int | None = None
    sd: float | None = None  # the standard deviation of the paired differences (a paired t-test)
    n_other: int | None = None  # Welch: the other arm's seeds
    sd_other: float | None = None
    about_fe: bool = True  # False: the null model (context interactions), a reading of no FE claim
    family: str = "exploratory"
    p_adjusted: float | None = None
    reading: str = UNDECIDED
    why: str = ""
    seeds_needed: int | None = None

    @property
    def null(self) -> float:
        return 1.0 if self.unit == "ratio" else 0.0

    def side(self) -> str | None:
        """"lower" / "higher" when the interval excludes the null, else None."""
        if self.low is None or self.high is None:
            return None
        return "lower" if self.high < self.null else "higher" if self.low > self.null else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def p_from_interval(estimate: float | None, low: float | None, high: float | None, log: bool,
                    level: float = 0.95) -> float | None:
    """Two-sided p of "no difference" recovered from a symmetric-normal reading of the interval."""
    if estimate is None or low is None or high is None:
        return None
    if log:
        if min(estimate, low, high) <= 0:
            return None
        estimate, low, high = math.log(estimate), math.log(low), math.log(high)
    se = (high - low) / (2 * sps.norm.ppf(0.5 + level / 2))
    if not se > 0:
        return None
    return float(2 * sps.norm.sf(abs(estimate) / se))


# ------------------------------------------------------------------------------------------ builders
def _interval(d: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    return _num(d.get("estimate")), _num(d.get("low")), _num(d.get("high"))


def _ci_pair(value: Any, ci: Any) -> tuple[float | None, float | None, float | None]:
    ci = ci or [None, None]
    return _num(value), _num(ci[0]), _num(ci[1])


def _label(arm: str) -> str:
    from femlm.study.text import label
    return label(arm)


def variance_comparisons(dec: dict[str, Any]) -> list[Comparison]:
    """FE / MLM training-gradient variance per unit compute, predicted by each decomposition run, per K."""
    from femlm.study.evidence import pool_size, prediction_label, run_gates
    from femlm.study.sections import where_label

    out = []
    for where, d in dec.items():
        j = d.get("json")
        if not j:
            continue
        reasons = run_gates(j)["decomposition"]
        for k, v in j["verdicts"].items():
            est, lo, hi = _ci_pair(v["fe"]["per_compute_vs_mlm"], v["fe"]["ci"])
            out.append(Comparison(
                f"variance_ratio/{where}/K{k}", "variance_ratio",
                f"FE (K={k}) / MLM training-gradient variance per unit compute at {where_label(where, d)}, "
                f"{prediction_label(j)} ({pool_size(j)} pool sequences)", est, lo, hi, "ratio",
                p=p_from_interval(est, lo, hi, True), p_method="from the bootstrap interval (normal, log scale)",
                gated=list(reasons), n=pool_size(j)))
    return out


def context_comparisons(dec: dict[str, Any]) -> list[Comparison]:
    """The residual (interaction) decrease of the null model: a reading about context interactions, not FE."""
    from femlm.study.evidence import null_interval, null_sequences, run_gates
    from femlm.study.sections import where_label

    out = []
    for where, d in dec.items():
        j = d.get("json")
        if not j or not (j.get("null_model") or {}).get("summary"):
            continue
        ci = null_interval(j, "residual_decrease")
        est, lo, hi = ci["estimate"], ci["low"], ci["high"]
        gated = run_gates(j)["null_model"] + (["the null model ran on a few sequences and masks, sized as a side "
                                               "number, not as a test"] if d.get("null_model") == "side" else [])
        out.append(Comparison(
            f"context/{where}", "context",
            f"residual (interaction) decrease of the gradient covariance with Hamming distance beyond the additive "
            f"null model at {where_label(where, d)} ({null_sequences(j)} sequences, one checkpoint)",
            est, lo, hi, "difference", better="higher", p=p_from_interval(est, lo, hi, False),
            p_method="from the bootstrap interval (normal)", gated=gated,
            n=null_sequences(j), about_fe=False))
    return out


def pretrain_comparisons(pre: dict[str, Any], reads: dict[str, Any] | None = None) -> list[Comparison]:
    """Per mode and arm vs MLM: final and mean loss (paired t), compute to each target (paired t on log
    ratios); FE against its control (paired t)."""
    from femlm.study.text import MODE_LABEL, contrast, is_fe_arm

    out = []
    for mode, res in pre.items():
        ml = MODE_LABEL.get(mode, mode)
        for arm, c in (res.get("comparisons") or {}).items():
            fe = is_fe_arm(arm)  # a control arm against MLM: a reading, but of no FE claim
            for metric in ("final_loss", "mean_loss"):
                m = c[metric]["paired"]
                what = "final held-out loss" if metric == "final_loss" else "mean held-out loss over the budget"
                out.append(Comparison(
                    f"training_loss/{mode}/{arm}/{metric}", "training_loss",
                    f"{_label(arm)} - MLM, {what}, {ml} (paired t, {m.get('n')} seeds)", *_interval(m),
                    "difference", p=_num(m.get("p")), p_method="paired t", n=m.get("n"), sd=_num(m.get("std")),
                    about_fe=fe))
            for key in [k for k in c if k.startswith("ratio_to_")]:
                r = c[key]
                cut = bool(r.get("bound"))
                est, lo, hi = _interval(r)
                out.append(Comparison(
                    f"compute_ratio/{mode}/{arm}/{key[len('ratio_to_'):]}", "compute_ratio",
                    f"{_label(arm)} / MLM compute to reach target {key[len('ratio_to_'):]}, {ml} (paired t on log "
                    f"ratios, {r.get('n')} seeds)", est, None if cut else lo, None if cut else hi, "ratio",
                    p=None if cut else _num(r.get("p")), p_method="paired t on log ratios", bound=r.get("bound") or "",
                    n=r.get("n"), about_fe=fe))
        vs = res.get("fe_vs_control")
        if vs:
            what = contrast(vs["fe"], vs["control"], (reads or {}).get(mode))
            for metric in ("final_loss", "mean_loss"):
                m = vs[metric]
                name = "final held-out loss" if metric == "final_loss" else "mean held-out loss over the budget"
                out.append(Comparison(
                    f"fe_vs_control/{mode}/{metric}", "fe_vs_control",
                    f"{_label(vs['fe'])} - {_label(vs['control'])}, {name}, {ml} (paired t, "
                    f"{len(vs['paired_seeds'])} seeds; {what})", *_interval(m), "difference", p=_num(m.get("p")),
                    p_method="paired t", n=len(vs["paired_seeds"]), sd=_num(m.get("std"))))
    return out


def downstream_comparisons(down: dict[str, Any], reference: str = "mlm_subword") -> list[Comparison]:
    """Per task and FE arm: the test-score difference to MLM (Welch over fine-tuning seeds); higher favours FE."""
    from femlm.study.text import is_fe_arm

    out = []
    for task, d in down.items():
        ref = d["summary"].get(reference) or {}
        for arm, c in d["vs_mlm"].items():
            if not is_fe_arm(arm) or not c:
                continue
            s = d["summary"].get(arm) or {}
            out.append(Comparison(
                f"downstream/{task}/{arm}", "downstream",
                f"{_label(arm)} - MLM, {task} test {d['metric']} (Welch, {s.get('n')} vs {ref.get('n')} fine-tuning "
                "seeds)", *_interval(c), "difference", better="higher", p=_num(c.get("p")), p_method="Welch t",
                n=s.get("n"), sd=_num(s.get("std")), n_other=ref.get("n"), sd_other=_num(ref.get("std"))))
    return out


def passes_comparisons(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Var(disjoint visits) / Var(independent visits) of a cycle's summed gradient (passes_rows' rows)."""
    out = []
    for r in rows:
        est, lo, hi = _ci_pair(r["measured_ratio"], r.get("measured_ratio_ci"))
        out.append(Comparison(
            f"passes/{r['run']}/K{r['K']}", "passes",
            f"across passes, Var(disjoint) / Var(independent visits) of a cycle's summed gradient, mask term only, "
            f"K={r['K']}, tau {r['tau']} of {r['block_size']}-token blocks ({r['sequences']} sequences, one "
            "checkpoint)", est, lo, hi, "ratio", p=p_from_interval(est, lo, hi, True),
            p_method="from the bootstrap interval (normal, log scale)", gated=list(r.get("not_measured") or []),
            n=r.get("sequences")))
    return out


def study_comparisons(plan: dict[str, Any], dec: dict[str, Any], pre: dict[str, Any], down: dict[str, Any],
                      passes: list[dict[str, Any]], reads: dict[str, Any] | None = None) -> list[Comparison]:
    """Every comparison of one study's results (the collected or the committed ones; see the module doc).
    ``dec``: decomposition runs {key: {"json", "label"}}; ``pre``: femlm.study.compare.analyse_pretraining's
    result; ``down``: analyse_downstream's; ``passes``: femlm.study.passes.passes_rows; ``reads``: per mode and
    arm the K, rows and sequences a run read (study.json's ``arms_read``)."""
    reference = (plan.get("pretrain") or {}).get("reference", "mlm_subword")
    return [*variance_comparisons(dec), *context_comparisons(dec), *passes_comparisons(passes),
            *pretrain_comparisons(pre, reads), *downstream_comparisons(down, reference)]


