"""One reading rule for every comparison a study makes (issues 37, 47), behind every table, CSV, JSON, README and
README.md's evidence block. The writer's entry points, for any study (the GPU study's too):

    comps = study_comparisons(plan, dec, pre, down, passes)   # a study's results -> [Comparison] (comparisons.py)
    adjust(comps, plan)                                        # family, adjusted p, reading (in place)
    says(c)                                                    # the reading as every table prints it
    readings.verdict_lines(comps, plan), readings.rows(comps)  # README section, comparisons.csv (readings.py)

A study that builds its own `Comparison` records (femlm.study.comparisons) sets ``key``, ``kind``, ``text``,
``short``, the interval (``estimate``, ``low``, ``high``, ``unit``, ``level``), ``better`` (the side of the null
better for ``first``), the arms (``first``, ``second``; empty for a mechanism reading) and ``nature``; a t-test also
``p``, ``n``, ``sd`` (and ``df``; Welch: ``n_other``, ``sd_other``), a bootstrap its ``replicates`` where stored.

A study declares its family in its experiment file (checked when the file loads: femlm.experiment.schema, keys):

    stats:
      declared: {when: before, date: "2026-12-01", commit: abc1234}   # required: before / after the data
      confirmatory: [training_loss/same_rows/fe_passes_subword/final_loss, training_loss/same_rows/fe_subword/final_loss]
      delta: {training_loss/same_rows/fe_passes_subword/final_loss: 0.01,     # optional: equivalence margins
              training_loss/same_rows/fe_subword/final_loss: 0.01}           # (Holm then runs over 2 x 2 hypotheses)

**The reading.** Each comparison gets exactly one of:

* *favours FE* / *against FE*: only an **outcome** (training loss, compute to a target, downstream score) of an
  arm whose masking strategy makes it FE (`femlm.study.arms.role`) against the plan's reference arm
  (``pretrain.reference``, MLM), when the interval excludes the null and the adjusted p is below 0.05;
* *lower* / *higher*: the same for any other comparison, read by what it compares ("FE-MLM (K copies) − i.i.d.
  control (K copies): lower"), and for every **mechanism** reading (the decomposition's predicted variance ratios,
  marked as predictions; the passes measurement; context interactions), which never read *favours/against FE*;
* *equivalent within ±δ*: where the study declares a margin δ for the comparison (``stats.delta``) and the TOST
  of |difference| < δ survives the same adjustment (and no difference was shown);
* *not decided*: anything else -- gated (`femlm.analysis.gates`), censored, no interval, an interval that contains
  the null, an adjusted p not below 0.05, a bootstrap without stored replicates whose interval's level is below
  the family's adjusted level. A null interval is written with what it excludes, never as equality.

**Families.** The declared family is the keys of ``stats.confirmatory`` (femlm.experiment.keys checks them when the
file loads). It is *confirmatory* only if ``stats.declared.when`` is ``before`` the data were seen; a family chosen
after is *primary, chosen after the data*, and every table says so. Holm over every hypothesis of the declared
family at a family-wise 0.05 (statsmodels' ``multipletests``): each member's difference test, and its equivalence
test where it has a δ (the "2 x 2" of a study with two members and two margins); a member without a result, gated,
or without a p is counted at p = 1 (so the family never shrinks). Every other comparison is exploratory
(Benjamini-Hochberg, scipy's ``false_discovery_control``) and never a finding.

**p-values.** t-tests give theirs (paired t over seeds, Welch over fine-tuning seeds, paired t on log compute
ratios); a TOST gives max of its two one-sided t p-values. A bootstrap gives a p only from its stored replicates
(by inversion: the smallest level at which the percentile interval excludes the null, floored at 2/(B+1)); without
them it prints no p and is read by its interval, only where the interval's level reaches 1 − 0.05/m (m the
family's hypotheses): the 95% interval alone decides nothing in a family of more than one.

**Seeds to decide** (declared family, t-tests, not decided): at the declared δ with the upper 95% confidence bound
of the standard deviation when the study declares one, else at the observed effect -- and labelled so, with the
degrees of freedom of the SD it comes from. None for a downstream comparison whose fine-tuning seeds come from one
pre-training seed: more of them cannot separate two checkpoints' methods.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
from scipy import stats as sps

from femlm.analysis.gates import not_measured
from femlm.experiment import keys
from femlm.study import arms
from femlm.study.comparisons import (  # noqa: F401  (re-exported: the writer's entry points in one module)
    AGAINST,
    BOOTSTRAP,
    FAVOURS,
    HIGHER,
    LOWER,
    UNDECIDED,
    Comparison,
    downstream_comparisons,
    passes_comparisons,
    pretrain_comparisons,
    study_comparisons,
    variance_comparisons,
)

ALPHA = 0.05
POWER = 0.8
FAMILY_NAME = {"confirmatory": "confirmatory (declared before the data)",
               "primary": "primary, chosen after the data", "exploratory": "exploratory"}


# ------------------------------------------------------------------------------------------ the plan's family
def _stats(plan: dict[str, Any]) -> dict[str, Any]:
    return plan.get("stats") or {}


def confirmatory_keys(plan: dict[str, Any]) -> list[str]:
    return list(_stats(plan).get("confirmatory") or [])


def declared(plan: dict[str, Any]) -> dict[str, Any]:
    """``stats.declared`` as a mapping ({} when the plan has no family)."""
    d = _stats(plan).get("declared") or {}
    return d if isinstance(d, dict) else asdict(d)


def family_name(plan: dict[str, Any]) -> str:
    """"confirmatory" for a family declared before the data, else "primary" (chosen after them)."""
    return "confirmatory" if declared(plan).get("when") == "before" else "primary"


def declared_text(plan: dict[str, Any]) -> str:
    d = declared(plan)
    when = {"before": "before the data were seen", "after": "after the data were seen"}.get(d.get("when"), "?")
    at = ", ".join(str(x) for x in (d.get("date"), d.get("commit") and f"commit {d['commit']}") if x)
    return f"declared {when}" + (f" ({at}" + (f"; {d['note']}" if d.get("note") else "") + ")" if at else "")


def is_declared(c: Comparison) -> bool:
    return c.family in ("confirmatory", "primary")


def about_fe(c: Comparison, reference: str | None) -> bool:
    """An outcome of an FE arm (by its masking strategy) against the plan's reference arm."""
    return c.nature == "outcome" and bool(c.first) and arms.is_fe(c.first) and c.second == reference


# ------------------------------------------------------------------------------------------ the rule
def adjust(comps: list[Comparison], plan: dict[str, Any], alpha: float = ALPHA) -> list[Comparison]:
    """Family, adjusted p and reading of every comparison (the list, with one entry added per declared key the
    results lack: a run cut short or a smoke plan; it stays in the family, counted at p = 1, not decided)."""
    names = confirmatory_keys(plan)
    have = {c.key for c in comps}
    for key in [k for k in names if k not in have]:
        keys.check_spelling(key)
        kind = key.split("/", 1)[0]
        comps.append(Comparison(key, kind, f"{key} (declared)", None, None, None,
                                "ratio" if kind in ("variance_ratio", "compute_ratio", "passes") else "difference",
                                short=key, gated=["no result: the study has no such comparison (a run not "
                                                  "finished, or a smaller plan)"]))
    fam = family_name(plan)
    deltas = {str(k): float(v) for k, v in (_stats(plan).get("delta") or {}).items()}
    reference = (plan.get("pretrain") or {}).get("reference")
    for c in comps:
        c.family = fam if c.key in names else "exploratory"
        c.about_fe = about_fe(c, reference)
        c.delta = deltas.get(c.key)
        if c.replicates and c.p is None:
            c.p, c.p_method = bootstrap_p(c), f"bootstrap by inversion ({len(c.replicates)} resamples)"
        c.p_equivalence = tost_p(c, c.delta) if c.delta is not None and not c.gated else None
    sizes = {}
    for family in (fam, "exploratory"):
        members = [c for c in comps if c.family == family]
        tests = [(c, "difference", c.p) for c in members] + [(c, "equivalence", c.p_equivalence) for c in members
                                                             if c.delta is not None]
        sizes[family] = len(tests)
        if not tests:
            continue
        ps = np.asarray([1.0 if p is None or c.gated or c.bound else float(p) for c, _, p in tests])
        adj = (multiple(ps, "holm") if family != "exploratory" else multiple(ps, "bh"))
        for (c, what, p), q in zip(tests, adj, strict=True):
            if p is None or c.gated or c.bound:
                continue  # counted at p = 1; no adjusted p of its own is printed
            if what == "difference":
                c.p_adjusted = float(q)
            else:
                c.p_equivalence_adjusted = float(q)
    for c in comps:
        read(c, alpha, sizes.get(c.family, 1))
        if is_declared(c) and c.reading == UNDECIDED and not c.gated:
            c.seeds_needed, c.seeds_basis = seeds_to_decide(c, alpha / max(sizes[c.family], 1))
    return comps


def multiple(ps: np.ndarray, method: str) -> np.ndarray:
    if method == "holm":
        from statsmodels.stats.multitest import multipletests

        return multipletests(ps, alpha=ALPHA, method="holm")[1]
    return sps.false_discovery_control(ps, method="bh")


def read(c: Comparison, alpha: float = ALPHA, m: int = 1) -> Comparison:
    """The reading of one comparison (see the module doc); ``m``: its family's hypotheses. Only an FE arm against
    the reference on an outcome (`about_fe`) reads favours / against FE."""
    side = c.side()
    rule = "Holm" if is_declared(c) else "Benjamini-Hochberg"
    equivalent = (c.delta is not None and c.p_equivalence_adjusted is not None and c.p_equivalence_adjusted < alpha)
    within = f"equivalent within ±{c.delta:g}" if c.delta is not None else ""
    if c.gated:
        c.reading, c.why = UNDECIDED, not_measured(c.gated)
        return c
    if c.bound:
        c.reading, c.why = UNDECIDED, f"a censored ratio ({c.bound}): a bound, no interval, no test"
        return c
    if c.low is None or c.high is None:
        c.reading, c.why = UNDECIDED, "no interval"
        return c
    if side is None:
        decided = False
        why = f"the interval contains {c.null:g}; {excluded(c)}"
    elif c.p is None:  # a bootstrap without replicates: read by its interval at the family's adjusted level
        need = 1 - alpha / max(m, 1)
        decided = c.level >= need - 1e-12
        why = ("" if decided else f"the {c.level:.0%} interval excludes {c.null:g}, but its replicates were not "
               f"stored, so there is no p and no interval at the family's adjusted level {need:.2%} "
               f"(1 - {alpha:g}/{m})")
    else:
        decided = c.p_adjusted is not None and c.p_adjusted < alpha
        why = ("" if decided else f"the interval excludes {c.null:g} but the {rule}-adjusted p "
               f"{fmt_p(c.p_adjusted)} is not below {alpha:g}")
    if decided:
        c.reading = (FAVOURS if side == c.better else AGAINST) if c.about_fe else side
        c.why = f"{side} than {c.null:g}" + (f"; also {within}" if equivalent else "")
    elif equivalent:
        c.reading, c.why = within, (f"TOST {rule}-adjusted p {fmt_p(c.p_equivalence_adjusted)} below {alpha:g}: "
                                    f"the interval at 90% lies within ±{c.delta:g}")
    else:
        c.reading, c.why = UNDECIDED, why + (f"; not shown {within} (TOST {rule}-adjusted p "
                                             f"{fmt_p(c.p_equivalence_adjusted)})" if within else "")
    return c


def excluded(c: Comparison) -> str:
    """What a null interval rules out: the largest distance of its ends from the null."""
    if c.low is None or c.high is None:
        return "no interval"
    if c.unit == "ratio":
        return f"ratios outside [{fmt_num(c.low, c)}, {fmt_num(c.high, c)}] excluded"
    return f"differences larger than {max(abs(c.low), abs(c.high)):.3g} excluded"


# ------------------------------------------------------------------------------------------ tests
def welch_df(c: Comparison) -> float | None:
    if c.df:
        return c.df
    if not (c.sd and c.sd_other and c.n and c.n_other) or c.n < 2 or c.n_other < 2:
        return None
    a, b = c.sd ** 2 / c.n, c.sd_other ** 2 / c.n_other
    return (a + b) ** 2 / (a ** 2 / (c.n - 1) + b ** 2 / (c.n_other - 1))


def standard_error(c: Comparison) -> tuple[float, float] | None:
    """(se, df) of a t-test comparison of a difference, None where the record lacks them."""
    if c.unit != "difference" or not c.sd or not c.n or c.n < 2:
        return None
    if c.kind == "downstream":
        df = welch_df(c)
        if df is None:
            return None
        return math.sqrt(c.sd ** 2 / c.n + c.sd_other ** 2 / c.n_other), df
    return c.sd / math.sqrt(c.n), float(c.df or c.n - 1)


def tost_p(c: Comparison, delta: float | None) -> float | None:
    """Two one-sided t-tests of |difference| >= delta: the larger of the two p-values (None without a t-test)."""
    se = standard_error(c)
    if delta is None or se is None or c.estimate is None:
        return None
    s, df = se
    lower = sps.t.sf((c.estimate + delta) / s, df)  # H0: difference <= -delta
    upper = sps.t.cdf((c.estimate - delta) / s, df)  # H0: difference >= +delta
    return float(max(lower, upper))


def bootstrap_p(c: Comparison) -> float | None:
    """p by inverting percentile intervals of the stored replicates: twice the share on the far side of the null,
    floored at 2/(B+1)."""
    r = np.asarray([x for x in (c.replicates or []) if x is not None and math.isfinite(x)], dtype=float)
    if not len(r):
        return None
    far = min(int((r <= c.null).sum()), int((r >= c.null).sum()))
    return float(min(1.0, 2 * (1 + far) / (len(r) + 1)))


def power_at(n: int, effect: float, alpha: float, two_sample: bool) -> float:
    """Power of a two-sided t-test (paired: n pairs; two-sample: n per arm) at the standardised effect."""
    df = 2 * n - 2 if two_sample else n - 1
    nc = effect * math.sqrt(n / 2 if two_sample else n)
    crit = sps.t.ppf(1 - alpha / 2, df)
    return float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))


def seeds_for(effect: float, alpha: float, power: float = POWER, two_sample: bool = False,
              limit: int = 100_000) -> int | None:
    """The fewest seeds per arm with at least ``power`` (counted up, not solved: no root-finder to go astray)."""
    if not effect > 0:
        return None
    n = 2
    while n <= limit and power_at(n, effect, alpha, two_sample) < power:
        n = n + 1 if n < 64 else int(n * 1.05) + 1
    return n if n <= limit else None


def sd_upper(sd: float, n: int, level: float = 0.95) -> float:
    """The upper one-sided ``level`` confidence bound of a standard deviation from n values."""
    return sd * math.sqrt((n - 1) / sps.chi2.ppf(1 - level, n - 1))


def seeds_to_decide(c: Comparison, alpha: float, power: float = POWER) -> tuple[int | None, str]:
    """(seeds per arm, how they were planned) for a declared t-test comparison that is not decided."""
    if c.kind not in keys.T_KINDS or c.one_seed or not c.sd or not c.n or c.n < 2 or c.estimate is None:
        return None, ""
    two = c.kind == "downstream"
    sd = math.sqrt((c.sd ** 2 + (c.sd_other or c.sd) ** 2) / 2) if two else c.sd
    if c.delta is not None:
        upper = sd_upper(sd, c.n)
        n = seeds_for(c.delta / upper, alpha, power, two)
        return n, (f"planned from the declared delta {c.delta:g} and the upper 95% bound {upper:.3g} of the SD "
                   f"({c.n - 1} degrees of freedom), {power:.0%} power at level {alpha:.3g}")
    n = seeds_for(abs(c.estimate) / sd, alpha, power, two)
    return n, (f"at the observed effect, which a raw-p filter biases upward, with the SD from {c.n - 1} degrees of "
               f"freedom: {power:.0%} power at level {alpha:.3g}; an estimate, not a plan")


# ------------------------------------------------------------------------------------------ text
def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "< 1e-15" if p < 1e-15 else f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def ratio_decimals(values: list[float | None]) -> int:
    """Decimals that show a ratio's distance from 1 and its interval's width: 3, more where "1.000" or two equal
    ends would hide them (at most 6)."""
    xs = [x for x in values if x is not None]
    for d in range(3, 7):
        texts = [f"{x:.{d}f}" for x in xs]
        if all(t != f"{1:.{d}f}" or x == 1 for t, x in zip(texts, xs, strict=True)) and len(set(texts)) == len(
                set(xs)):
            return d
    return 6


def fmt_num(x: float | None, c: Comparison) -> str:
    if x is None:
        return "n/a"
    if c.unit == "ratio":
        return f"{x:.{ratio_decimals([c.estimate, c.low, c.high])}f}"
    return f"{x:.3g}"


def fmt_value(c: Comparison) -> str:
    if c.estimate is None:
        return "n/a"
    if c.low is None or c.high is None:
        return fmt_num(c.estimate, c) + (f" ({c.bound} bound)" if c.bound else " (no interval)")
    return f"{fmt_num(c.estimate, c)} [{fmt_num(c.low, c)}, {fmt_num(c.high, c)}]"


def says(c: Comparison) -> str:
    """The reading as a table prints it: FE's readings (and *not decided*) alone, any other with what it compares,
    a mechanism's with what it is."""
    if c.reading in (FAVOURS, AGAINST, UNDECIDED):
        return c.reading
    if c.nature == "prediction":
        return f"{c.reading} (a prediction, not a training outcome)"
    if c.nature == "mechanism":
        return f"{c.reading} (mechanism, not FE's benefit)"
    return f"{c.contrast}: {c.reading}" if c.first else c.reading


def strip_readings(study: dict[str, Any]) -> dict[str, Any]:
    """study.json without a reading of its own: the decomposition's per-K descriptions of its intervals become
    the study's reading (femlm.study.verdicts, in comparisons.csv), and no other word is kept (issue 47)."""
    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items() if k not in ("verdict", "interval_reading", "exceeds_seed_noise",
                                                                  "exceeds_seed_noise_vs_no_continual")}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return {k: (walk(v) if k in ("pretraining", "downstream", "decomposition", "decomposition_rows") else v)
            for k, v in study.items()}
