"""Every comparison a study makes, read from its interval *and* its direction, under one multiplicity rule
(issue 37). The writer's one entry point for any study (the GPU study's too):

    comps = study_comparisons(plan, dec, pre, down, passes)   # a study's results -> [Comparison] (comparisons.py)
    adjust(comps, plan)                                        # family, adjusted p, reading (in place)
    lines = verdict_lines(comps, plan)                         # the README's "What the evidence says"

* **Readings.** Each comparison gets one of three: *favours FE*, *against FE*, *not decided*. Which side of the
  null (0 for a difference, 1 for a ratio) favours FE is the comparison's ``better``: a lower loss, a lower
  variance ratio, a lower compute-to-target ratio, a *higher* downstream score. A gated estimate
  (`femlm.analysis.gates`), a missing interval, an interval that contains the null, or a confirmatory
  comparison that does not survive its adjustment reads *not decided*; a null interval is written with the
  smallest difference it rules out ("differences larger than X excluded"), never as equality.
* **One multiplicity rule.** The family is the study's confirmatory comparisons, the keys listed in its
  experiment file (``stats.confirmatory``); every other comparison is exploratory. Confirmatory p-values are
  adjusted with Holm at a family-wise 0.05 (statsmodels' ``multipletests``), exploratory ones with
  Benjamini-Hochberg (scipy's ``false_discovery_control``); a reading needs its interval to exclude the null
  *and* its adjusted p below 0.05. Only confirmatory comparisons that survive are findings.
* **p-values.** t-tests give theirs (paired t over seeds, Welch over fine-tuning seeds, paired t on log compute
  ratios). A bootstrap interval (the decomposition's predicted ratios, the passes measurement, the null
  model) has none: its p is recovered from the interval by the normal approximation (Altman & Bland, BMJ
  2011; on the log scale for a ratio), and the CSV says so in ``p_method``.
* **Seeds to decide.** For a confirmatory t-test comparison that is not decided, the seeds a re-measurement
  would need for 80% power at the observed effect and the Bonferroni level 0.05 / m (Holm's first step, so the
  comparison survives whatever its rank), from the observed standard deviation (statsmodels' power solvers).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
from scipy import stats as sps

from femlm.analysis.gates import not_measured
from femlm.study.comparisons import (  # noqa: F401  (re-exported: the writer's entry points in one module)
    AGAINST,
    FAVOURS,
    UNDECIDED,
    Comparison,
    downstream_comparisons,
    p_from_interval,
    passes_comparisons,
    pretrain_comparisons,
    study_comparisons,
    variance_comparisons,
)

# A decided reading of a comparison that is not about FE's benefit (a control arm, the null model).
NOT_FE = {("context", "higher"): "context interactions detected (not about FE's benefit)",
          ("context", "lower"): "the residual rises with Hamming distance (not about FE's benefit)",
          ("training_loss", "higher"): "the control's loss is higher than MLM's",
          ("training_loss", "lower"): "the control's loss is lower than MLM's",
          ("compute_ratio", "higher"): "the control needs more compute than MLM",
          ("compute_ratio", "lower"): "the control needs less compute than MLM"}
ALPHA = 0.05
POWER = 0.8
KINDS = ("variance_ratio", "context", "passes", "training_loss", "compute_ratio", "fe_vs_control", "downstream")


# ------------------------------------------------------------------------------------------ the rule
def confirmatory_keys(plan: dict[str, Any]) -> list[str]:
    return list((plan.get("stats") or {}).get("confirmatory") or [])


def adjust(comps: list[Comparison], plan: dict[str, Any], alpha: float = ALPHA) -> list[Comparison]:
    """Family, adjusted p and reading of every comparison (the list, with one entry added per declared key the
    results lack: a run cut short or a smoke plan; it stays in the family, not decided). A key of no known kind is
    an error of the experiment file."""
    from statsmodels.stats.multitest import multipletests

    from femlm.errors import UserError

    keys = confirmatory_keys(plan)
    have = {c.key for c in comps}
    for key in [k for k in keys if k not in have]:
        kind = key.split("/", 1)[0]
        if kind not in KINDS:
            raise UserError(f"stats.confirmatory of {plan.get('name')}: {key!r} is no comparison key "
                            f"(<kind>/<where>/<what>, kind one of {', '.join(KINDS)})")
        comps.append(Comparison(key, kind, f"{key} (declared confirmatory)", None, None, None,
                                "ratio" if kind in ("variance_ratio", "compute_ratio", "passes") else "difference",
                                gated=["no result: the study has no such comparison (a run not finished, or a "
                                       "smaller plan)"]))
    for c in comps:
        c.family = "confirmatory" if c.key in keys else "exploratory"
    for family in ("confirmatory", "exploratory"):
        tested = [c for c in comps if c.family == family and c.p is not None and not c.gated]
        if not tested:
            continue
        ps = np.asarray([c.p for c in tested])
        adj = (multipletests(ps, alpha=alpha, method="holm")[1] if family == "confirmatory"
               else sps.false_discovery_control(ps, method="bh"))
        for c, q in zip(tested, adj, strict=True):
            c.p_adjusted = float(q)
    m = sum(c.family == "confirmatory" for c in comps)
    for c in comps:
        read(c, alpha)
        if c.family == "confirmatory" and c.reading == UNDECIDED and not c.gated:
            c.seeds_needed = seeds_to_decide(c, alpha / max(m, 1))
    return comps


def read(c: Comparison, alpha: float = ALPHA) -> Comparison:
    """The reading of one comparison from its interval, its direction and its adjusted p."""
    side = c.side()
    if c.gated:
        c.reading, c.why = UNDECIDED, not_measured(c.gated)
    elif c.bound:
        c.reading, c.why = UNDECIDED, f"a censored ratio ({c.bound}): a bound, no interval, no test"
    elif c.low is None or c.high is None:
        c.reading, c.why = UNDECIDED, "no interval"
    elif side is None:
        c.reading, c.why = UNDECIDED, f"the interval contains {c.null:g}; {excluded(c)}"
    elif c.p_adjusted is None or c.p_adjusted >= alpha:
        rule = "Holm" if c.family == "confirmatory" else "Benjamini-Hochberg"
        c.reading, c.why = UNDECIDED, (f"the interval excludes {c.null:g} but the {rule}-adjusted p "
                                       f"{fmt_p(c.p_adjusted)} is not below {alpha:g}")
    elif not c.about_fe:
        c.reading, c.why = side, f"{side} than {c.null:g}"
    else:
        c.reading, c.why = (FAVOURS if side == c.better else AGAINST), f"{side} than {c.null:g}"
        if c.kind == "fe_vs_control":  # both arms may be FE (passes vs K-copy): say which one the reading favours
            c.why += f": {'the first arm' if c.reading == FAVOURS else 'its control'} did better"
    return c


def excluded(c: Comparison) -> str:
    """What a null interval rules out: the largest distance of its ends from the null."""
    if c.low is None or c.high is None:
        return "no interval"
    if c.unit == "ratio":
        return f"ratios outside [{c.low:.3g}, {c.high:.3g}] excluded"
    return f"differences larger than {max(abs(c.low), abs(c.high)):.3g} excluded"


def seeds_to_decide(c: Comparison, alpha: float, power: float = POWER) -> int | None:
    """Seeds per arm for ``power`` at the observed effect and level ``alpha`` (paired t or Welch); None where
    the comparison has no seed standard deviation (a bootstrap over sequences) or no effect."""
    from statsmodels.stats.power import TTestIndPower, TTestPower

    est = c.estimate
    if est is None or est == 0 or c.kind not in ("training_loss", "fe_vs_control", "downstream") or not c.sd:
        return None
    if c.kind == "downstream":
        if not c.sd_other:
            return None
        pooled = math.sqrt((c.sd ** 2 + c.sd_other ** 2) / 2)
        n = TTestIndPower().solve_power(effect_size=abs(est) / pooled, alpha=alpha, power=power)
    else:
        n = TTestPower().solve_power(effect_size=abs(est) / c.sd, alpha=alpha, power=power)
    return int(math.ceil(float(np.asarray(n).item())))


# ------------------------------------------------------------------------------------------ text
def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "< 1e-15" if p < 1e-15 else f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def fmt_value(c: Comparison) -> str:
    if c.estimate is None:
        return "n/a"
    if c.low is None or c.high is None:
        return f"{c.estimate:.3g}" + (f" ({c.bound} bound)" if c.bound else " (no interval)")
    return f"{c.estimate:.3g} [{c.low:.3g}, {c.high:.3g}]"


def sentence(c: Comparison) -> str:
    """One comparison as a README bullet: what, the interval, raw and adjusted p, the reading and why."""
    rule = "Holm" if c.family == "confirmatory" else "BH"
    ps = (f"; p {fmt_p(c.p)}, {rule}-adjusted {fmt_p(c.p_adjusted)}" if c.p is not None and not c.gated else "")
    head = c.reading if c.about_fe or c.reading == UNDECIDED else NOT_FE.get((c.kind, c.reading),
                                                                            f"{c.reading} (not about FE)")
    more = (f" A re-measurement needs about {c.seeds_needed} seeds per arm (80% power at the observed effect, "
            f"level 0.05 / {{m}})." if c.seeds_needed else "")
    return f"{c.text}: {fmt_value(c)}{ps}: **{head}**" + (f" ({c.why})" if c.why else "") + "." + more


def rule_sentence(plan: dict[str, Any], comps: list[Comparison]) -> str:
    m = sum(c.family == "confirmatory" for c in comps)
    stats = plan.get("stats") or {}
    when = stats.get("declared") or "before the data were seen"
    return (f"One multiplicity rule (femlm/study/verdicts.py): the family is the {m} confirmatory comparisons "
            f"that `stats.confirmatory` of femlm/conf/experiment/{plan.get('name', 'study')}.yaml declares "
            f"(declared {when}), adjusted with Holm at a family-wise 0.05; the other {len(comps) - m} comparisons "
            "are exploratory, adjusted with Benjamini-Hochberg, and are not findings. Every reading needs its "
            "interval to exclude 'no difference' and its adjusted p below 0.05; raw and adjusted p-values are in "
            f"`comparisons.csv`. This README makes {len(comps)} comparisons in all.")


def verdict_lines(comps: list[Comparison], plan: dict[str, Any], heading: str = "##") -> list[str]:
    """The README's verdict sections: findings (confirmatory, surviving), confirmatory not decided,
    exploratory by reading."""
    m = sum(c.family == "confirmatory" for c in comps)
    conf = [c for c in comps if c.family == "confirmatory"]
    expl = [c for c in comps if c.family != "confirmatory"]

    def bullets(cs: list[Comparison]) -> list[str]:
        return [f"- {sentence(c).replace('{m}', str(m))}" for c in cs] or ["- (none)"]

    lines = [f"{heading} What the evidence says", "", rule_sentence(plan, comps), "",
             f"{heading}# Findings (confirmatory, surviving Holm)", "",
             "Favours FE:", *bullets([c for c in conf if c.reading == FAVOURS]), "",
             "Against FE:", *bullets([c for c in conf if c.reading == AGAINST]), ""]
    other = [c for c in conf if not c.about_fe and c.reading != UNDECIDED]
    lines += ["Not about FE's benefit:", *bullets(other), ""] if other else []
    lines += [f"{heading}# Confirmatory, not decided", "", *bullets([c for c in conf if c.reading == UNDECIDED]), "",
              f"{heading}# Exploratory readings (Benjamini-Hochberg; not findings)", ""]
    for reading in (FAVOURS, AGAINST, UNDECIDED):
        lines += [f"{reading[0].upper()}{reading[1:]}:", *bullets([c for c in expl if c.reading == reading]), ""]
    other = [c for c in expl if not c.about_fe and c.reading != UNDECIDED]
    lines += ["Decided, not about FE's benefit (controls, context interactions):", *bullets(other), ""] if other else []
    return lines


def summary_lines(comps: list[Comparison]) -> list[str]:
    """The short form docs/evidence.md and README.md carry: the confirmatory comparisons, each by its reading."""
    m = sum(c.family == "confirmatory" for c in comps)
    conf = [c for c in comps if c.family == "confirmatory"]
    out = [f"- {sentence(c).replace('{m}', str(m))}" for c in sorted(conf, key=order)]
    expl = [c for c in comps if c.family != "confirmatory"]
    n = {r: sum(1 for c in expl if c.reading == r) for r in (FAVOURS, AGAINST, UNDECIDED)}
    out.append(f"- Exploratory (not findings; Benjamini-Hochberg): {n[FAVOURS]} favour FE, {n[AGAINST]} are against "
               f"it, {n[UNDECIDED]} not decided, {len(expl) - sum(n.values())} decided but not about FE (controls, "
               "context interactions); each is listed in the study's README and comparisons.csv.")
    return out


def order(c: Comparison) -> int:
    """Findings first (favours, against), then the rest."""
    return {FAVOURS: 0, AGAINST: 1}.get(c.reading, 2)


def rows(comps: list[Comparison]) -> list[dict[str, Any]]:
    """comparisons.csv: one row per comparison, raw and adjusted p side by side."""
    keep = ("key", "kind", "family", "estimate", "low", "high", "unit", "better", "p", "p_method", "p_adjusted",
            "reading", "why", "n", "seeds_needed", "text")
    return [{k: v for k, v in asdict(c).items() if k in keep} for c in comps]
