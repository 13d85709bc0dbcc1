"""The one reading rule (issues 37, 47): femlm/study/verdicts.py on synthetic study results.

Every comparison type (variance ratio, training loss, compute ratio, downstream score, one arm against another,
passes) is built on each side of its null and in between, and the test checks its reading -- favours / against FE
only for an FE arm against the reference arm on an outcome, lower / higher for anything else, not decided -- its
family (Holm over the declared family with missing and gated members at p = 1), its equivalence test, its p-value
(none from a bootstrap without replicates) and where it lands in the README's tables and the CSV. Numbers only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from femlm.study.readings import name_cell, rows, summary_lines, verdict_lines
from femlm.study.verdicts import (
    AGAINST,
    FAVOURS,
    HIGHER,
    LOWER,
    UNDECIDED,
    Comparison,
    adjust,
    fmt_value,
    sd_upper,
    seeds_for,
    study_comparisons,
)

# (low, high) of an interval on each side, for a difference where lower is better and for a ratio.
LOWER_IS_BETTER = {FAVOURS: (-0.05, -0.02), AGAINST: (0.02, 0.05), UNDECIDED: (-0.02, 0.03)}
HIGHER_IS_BETTER = {FAVOURS: (0.02, 0.05), AGAINST: (-0.05, -0.02), UNDECIDED: (-0.02, 0.03)}
RATIO = {FAVOURS: (0.80, 0.90), AGAINST: (1.10, 1.20), UNDECIDED: (0.95, 1.08)}
DECLARED = {"when": "before", "date": "2026-11-27"}


def diff(lo: float, hi: float, p: float | None = None, n: int = 5) -> dict[str, Any]:
    est = (lo + hi) / 2
    sign = lo * hi > 0
    return {"estimate": est, "low": lo, "high": hi, "n": n, "std": (hi - lo), "p": p if p is not None else
            (0.001 if sign else 0.5), "bound": "", "method": "paired t"}


def ratio(lo: float, hi: float) -> dict[str, Any]:
    sign = lo > 1 or hi < 1
    return {**diff(lo, hi), "estimate": (lo * hi) ** 0.5, "p": 0.001 if sign else 0.5,
            "not_reached": {"arm": 0, "reference": 0}}


def decomposition(lo: float, hi: float) -> dict[str, Any]:
    """A decomposition run (decomposition.json's fields the writer reads) with FE / MLM at K=4 in [lo, hi]."""
    term = {"estimate": 1.0, "ci": [0.9, 1.1]}
    fe = {"per_compute_vs_mlm": (lo * hi) ** 0.5, "ci": [lo, hi], "verdict": "", "c_plus_sigma_d2": 0.1,
          "c_plus_sigma_d2_ci": [0.0, 0.2]}
    return {"json": {"settings": {"pool": 40, "tau": 15, "block_size": 128},
                     "parameters": {"patterns": ["*q.weight"], "numel": 10},
                     "terms": {"sigma_d2": term, "sigma_m2": term, "c_fe": term, "c_iid": term},
                     "verdicts": {"4": {"fe": fe, "iid": dict(fe)}}}}


def pretraining(kind: str, side: str, fe: str = "fe_subword", control: str = "iid_subword") -> dict[str, Any]:
    """One mode (same rows) with ``fe`` against MLM and ``fe`` against ``control``, ``kind`` set to ``side``."""
    loss = diff(*LOWER_IS_BETTER[side]) if kind in ("training_loss", "fe_vs_control") else diff(-0.01, 0.01)
    r = ratio(*RATIO[side]) if kind == "compute_ratio" else ratio(0.9, 1.1)
    comp = {"final_loss": {"paired": loss, "welch": loss},
            "mean_loss": {"paired": diff(-0.01, 0.01), "welch": diff(-0.01, 0.01)},
            "ratio_to_75%": r}
    vs = {"fe": fe, "control": control, "paired_seeds": [1, 2, 3, 4, 5],
          "final_loss": loss if kind == "fe_vs_control" else diff(-0.01, 0.01), "mean_loss": diff(-0.01, 0.01)}
    return {"same_rows": {"arms": {}, "targets": {"75%": {"loss": 5.0}},
                          "comparisons": {fe: comp}, "fe_vs_control": vs}}


def downstream(side: str) -> dict[str, Any]:
    c = diff(*HIGHER_IS_BETTER[side])
    summary = {"fe_subword": {"n": 5, "std": 0.02}, "mlm_subword": {"n": 5, "std": 0.02}}
    return {"aclarc": {"metric": "macro_f1", "summary": summary, "vs_mlm": {"fe_subword": c}, "majority": 0.1,
                       "scores": {"fe_subword": [0.2] * 5, "mlm_subword": [0.1, 0.2, 0.2, 0.2, 0.2]}}}


def passes(side: str) -> list[dict[str, Any]]:
    lo, hi = RATIO[side]
    return [{"run": "warmup_r15", "K": 6, "tau": 19, "block_size": 128, "sequences": 32,
             "measured_ratio": (lo * hi) ** 0.5, "measured_ratio_ci": [lo, hi], "not_measured": []}]


KEYS = {"variance_ratio": "variance_ratio/warmup/K4", "training_loss": "training_loss/same_rows/fe_subword/final_loss",
        "compute_ratio": "compute_ratio/same_rows/fe_subword/75%", "downstream": "downstream/aclarc/fe_subword",
        "fe_vs_control": "fe_vs_control/same_rows/final_loss", "passes": "passes/warmup_r15/K6"}
OUTCOMES_OF_FE = ("training_loss", "compute_ratio", "downstream")


def plan_of(keys: list[str], **stats: Any) -> dict[str, Any]:
    return {"name": "synthetic", "stats": {"declared": DECLARED, "confirmatory": keys, **stats},
            "pretrain": {"reference": "mlm_subword"}}


def study(kind: str, side: str, confirmatory: bool = True):
    dec = {"warmup": decomposition(*RATIO[side])} if kind == "variance_ratio" else {}
    pre = pretraining(kind, side) if kind in ("training_loss", "compute_ratio", "fe_vs_control") else {}
    down = downstream(side) if kind == "downstream" else {}
    pas = passes(side) if kind == "passes" else []
    plan = plan_of([KEYS[kind]] if confirmatory else [])
    comps = adjust(study_comparisons(plan, dec, pre, down, pas), plan)
    (c,) = [c for c in comps if c.key == KEYS[kind]]
    return plan, comps, c


def expected(kind: str, side: str) -> str:
    """favours / against FE only for an FE arm against MLM on an outcome; lower / higher for the rest."""
    if side == UNDECIDED:
        return UNDECIDED
    if kind in OUTCOMES_OF_FE:
        return side
    better = HIGHER if kind == "downstream" else LOWER
    worse = LOWER if better == HIGHER else HIGHER
    return better if side == FAVOURS else worse


@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("side", [FAVOURS, AGAINST, UNDECIDED])
def test_each_comparison_reads_by_what_it_compares(kind: str, side: str) -> None:
    """A family of one (the bootstrap ones decide from their 95% interval only then), Holm at 0.05."""
    plan, comps, c = study(kind, side)
    assert c.family == "confirmatory" and c.reading == expected(kind, side), (c.reading, c.why)
    assert c.about_fe == (kind in OUTCOMES_OF_FE)
    lines = verdict_lines(comps, plan)
    table = lines[lines.index("### The declared family: confirmatory (declared before the data)"):]
    (row,) = [line for line in table if line.startswith(f"| {name_cell(c)} |")]
    assert f"| {rows([c])[0]['says']} |" in row  # the table prints the CSV's reading
    assert any(c.contrast in s for s in summary_lines(comps, plan))


@pytest.mark.parametrize("kind", ["variance_ratio", "passes", "fe_vs_control"])
def test_favours_fe_is_never_written_without_the_reference_arm_nor_for_a_mechanism(kind: str) -> None:
    for side in (FAVOURS, AGAINST):
        plan, comps, c = study(kind, side)
        assert c.reading in (LOWER, HIGHER) and not c.about_fe
        text = "\n".join(verdict_lines(comps, plan) + summary_lines(comps, plan))
        (row,) = [line for line in text.splitlines() if line.startswith(f"| {name_cell(c)} |")][:1]
        assert "favours FE" not in row and "against FE" not in row
        assert all("FE" not in r["reading"] for r in rows(comps) if not r["about_fe"])
    # an FE arm against another FE arm (passes vs K-copy) is read by what it compares, whatever the arms' names
    pre = pretraining("fe_vs_control", FAVOURS, fe="fe_passes_subword", control="fe_subword")
    plan = plan_of(["fe_vs_control/same_rows/final_loss"])
    (c,) = [c for c in adjust(study_comparisons(plan, {}, pre, {}, []), plan) if c.key == plan["stats"]["confirmatory"][0]]
    assert rows([c])[0]["says"] == "FE across passes − FE-MLM (K copies): lower"


def test_the_role_comes_from_the_masking_strategy_not_the_name() -> None:
    """mlm_wwm is no FE arm (strategy random); fe_passes_word is one, though no rule matched its name's prefix."""
    from femlm.study import arms

    assert (arms.role("fe_passes_word"), arms.role("iid_span"), arms.role("mlm_wwm")) == ("fe", "control", "mlm")
    pre = pretraining("training_loss", AGAINST, fe="iid_subword")
    plan = plan_of(["training_loss/same_rows/iid_subword/final_loss"])
    (c,) = [c for c in adjust(study_comparisons(plan, {}, pre, {}, []), plan) if c.kind == "training_loss"
            and c.key.endswith("final_loss")]
    assert c.reading == HIGHER and rows([c])[0]["says"] == "i.i.d. control (K copies) − MLM: higher"


@pytest.mark.parametrize("kind", list(KEYS))
def test_an_undeclared_comparison_is_exploratory_and_never_a_finding(kind: str) -> None:
    plan, comps, c = study(kind, FAVOURS, confirmatory=False)
    assert c.family == "exploratory"
    lines = verdict_lines(comps, plan)
    assert any(c.contrast in line for line in lines[lines.index("### Exploratory (Benjamini-Hochberg; not findings)"):])


def test_a_family_chosen_after_the_data_is_primary_not_confirmatory() -> None:
    pre = pretraining("training_loss", AGAINST)
    plan = plan_of([KEYS["training_loss"]])
    plan["stats"]["declared"] = {"when": "after", "date": "2026-11-27", "note": "the headlines"}
    comps = adjust(study_comparisons(plan, {}, pre, {}, []), plan)
    assert {c.family for c in comps if c.key == KEYS["training_loss"]} == {"primary"}
    text = "\n".join(verdict_lines(comps, plan))
    assert "primary, chosen after the data" in text and "declared after the data were seen (2026-11-27" in text
    assert "confirmatory (declared before" not in text


def test_a_missing_member_counts_at_p_one_so_the_family_does_not_shrink() -> None:
    """Two declared members, one without a result: Holm over both gives 2 x 0.03 = 0.06, not decided (code review
    finding 15: the old writer adjusted over the one tested member and read 0.03 as against FE)."""
    keys = [KEYS["training_loss"], "downstream/aclarc/fe_subword"]
    pre = pretraining("training_loss", AGAINST)
    pre["same_rows"]["comparisons"]["fe_subword"]["final_loss"]["paired"]["p"] = 0.03
    plan = plan_of(keys)
    comps = {c.key: c for c in adjust(study_comparisons(plan, {}, pre, {}, []), plan)}
    loss, lost = comps[KEYS["training_loss"]], comps["downstream/aclarc/fe_subword"]
    assert loss.p_adjusted == pytest.approx(0.06) and loss.reading == UNDECIDED
    assert lost.family == "confirmatory" and lost.reading == UNDECIDED and "no result" in lost.why
    # the same p in a family of one is decided: the missing member is what held it back
    alone = {c.key: c for c in adjust(study_comparisons(plan_of(keys[:1]), {}, pre, {}, []), plan_of(keys[:1]))}
    assert alone[KEYS["training_loss"]].reading == AGAINST


def test_a_gated_member_counts_at_p_one_and_shows_no_p() -> None:
    pre = pretraining("training_loss", AGAINST)
    pre["same_rows"]["comparisons"]["fe_subword"]["final_loss"]["paired"]["p"] = 0.03
    plan = plan_of([KEYS["training_loss"], "training_loss/same_rows/fe_subword/mean_loss"])
    comps = study_comparisons(plan, {}, pre, {}, [])
    for c in comps:
        if c.key.endswith("mean_loss"):
            c.gated.append("a gate")
    by = {c.key: c for c in adjust(comps, plan)}
    assert by[KEYS["training_loss"]].p_adjusted == pytest.approx(0.06)
    gated = by["training_loss/same_rows/fe_subword/mean_loss"]
    row = rows([gated])[0]
    assert row["p"] is None and row["p_adjusted"] is None and row["gated"] == "a gate"


def test_holm_over_the_family_and_bh_over_the_rest() -> None:
    pre = pretraining("training_loss", AGAINST)
    pre["same_rows"]["comparisons"]["fe_subword"]["final_loss"]["paired"]["p"] = 0.03
    pre["same_rows"]["fe_vs_control"]["final_loss"].update(p=0.04, low=-0.05, high=-0.01)
    keys = [KEYS["training_loss"], KEYS["fe_vs_control"]]
    plan = plan_of(keys)
    comps = {c.key: c for c in adjust(study_comparisons(plan, {}, pre, {}, []), plan)}
    assert [comps[k].p_adjusted for k in keys] == pytest.approx(list(multipletests([0.03, 0.04], method="holm")[1]))
    loss = comps[KEYS["training_loss"]]
    assert loss.low > 0 and loss.reading == UNDECIDED and "Holm-adjusted p" in loss.why
    assert loss.seeds_needed and loss.seeds_needed > loss.n and "at the observed effect" in loss.seeds_basis
    assert all(c.family == "exploratory" for k, c in comps.items() if k not in keys)


def test_a_bootstrap_without_replicates_has_no_p_and_decides_only_at_the_adjusted_level() -> None:
    """A 95% interval that excludes 1 decides a family of one; in a family of two it would need a 97.5% interval,
    which only the replicates give."""
    _, _, alone = study("passes", FAVOURS)
    assert alone.p is None and alone.reading == LOWER and rows([alone])[0]["p"] is None
    pas = passes(FAVOURS)
    plan = plan_of([KEYS["passes"], KEYS["variance_ratio"]])
    comps = {c.key: c for c in adjust(study_comparisons(plan, {"warmup": decomposition(0.8, 0.9)}, {}, {}, pas), plan)}
    c = comps[KEYS["passes"]]
    assert c.reading == UNDECIDED and "97.50%" in c.why and "replicates were not stored" in c.why
    assert "no p" in "\n".join(verdict_lines(list(comps.values()), plan))


def test_a_bootstrap_with_replicates_gets_its_p_by_inversion() -> None:
    rng = np.random.default_rng(0)
    c = Comparison("passes/warmup/K6", "passes", "x", 0.5, 0.45, 0.55, "ratio", nature="mechanism",
                   replicates=list(rng.normal(0.5, 0.03, 999)))
    (c,) = adjust([c], plan_of(["passes/warmup/K6"]))
    assert c.p == pytest.approx(2 / 1000) and "inversion (999 resamples)" in c.p_method and c.reading == LOWER
    near = Comparison("passes/warmup/K6", "passes", "x", 0.97, 0.9, 1.04, "ratio", nature="mechanism",
                      replicates=list(rng.normal(0.97, 0.035, 999)))
    (near,) = adjust([near], plan_of(["passes/warmup/K6"]))
    share = np.mean(np.asarray(near.replicates) >= 1)
    assert near.p == pytest.approx(2 * (1 + share * 999) / 1000, abs=1e-9) and near.reading == UNDECIDED


def test_equivalence_within_a_declared_margin_is_a_reading_and_both_tests_are_in_the_family() -> None:
    """TOST within +-delta, Holm over the 2 x 2 hypotheses of two declared members (issue 45's design)."""
    pre = pretraining("training_loss", UNDECIDED)
    m = pre["same_rows"]["comparisons"]["fe_subword"]["final_loss"]["paired"]
    m.update(estimate=0.001, low=-0.004, high=0.006, std=0.004, n=20, p=0.6)
    keys = [KEYS["training_loss"], "training_loss/same_rows/fe_subword/mean_loss"]
    plan = plan_of(keys, delta={keys[0]: 0.01, keys[1]: 0.01})
    comps = {c.key: c for c in adjust(study_comparisons(plan, {}, pre, {}, []), plan)}
    c = comps[keys[0]]
    se = 0.004 / math.sqrt(20)
    from scipy import stats as sps
    tost = max(sps.t.sf((0.001 + 0.01) / se, 19), sps.t.cdf((0.001 - 0.01) / se, 19))
    assert c.p_equivalence == pytest.approx(tost)
    other = comps[keys[1]]
    ps = [c.p, other.p, c.p_equivalence, other.p_equivalence]
    assert c.p_equivalence_adjusted == pytest.approx(multipletests(ps, method="holm")[1][2])
    assert c.reading == "equivalent within ±0.01" and rows([c])[0]["says"] == "FE-MLM (K copies) − MLM: equivalent within ±0.01"
    # seeds planned from delta and the upper bound of the SD (not the observed effect)
    assert other.reading == UNDECIDED and "planned from the declared delta 0.01" in other.seeds_basis
    assert other.seeds_needed == seeds_for(0.01 / sd_upper(0.02, 5), 0.05 / 4)


def test_a_margin_is_refused_for_a_comparison_without_a_t_test() -> None:
    from femlm.errors import UserError
    from femlm.experiment.keys import check_plan

    plan = {"pretrain": {"reference": "mlm_subword", "arms": ["mlm_subword", "fe_subword"], "modes": ["same_rows"]},
            "stats": {"delta": {"compute_ratio/same_rows/fe_subword/75%": 0.05}}}
    with pytest.raises(UserError, match="needs a t-test of a difference"):
        check_plan(plan, "x.yaml")


def test_downstream_from_one_pretraining_seed_has_no_seeds_to_decide() -> None:
    plan, comps, c = study("downstream", UNDECIDED)
    assert c.reading == UNDECIDED and c.seeds_needed is None and c.one_seed
    assert any("one pre-training seed" in x for x in c.caveats)
    assert any("scored exactly the majority class" in x for x in c.caveats)  # 1 of 5 MLM seeds collapsed


def test_seeds_are_counted_by_power_not_solved() -> None:
    """statsmodels' solver and the count agree where the solver is well-behaved; the count needs no root-finder
    (the solver returned NaN power at effect sizes near 4, audit finding 10)."""
    for effect, alpha in ((0.5, 0.05), (1.0, 0.0071), (2.0, 0.01)):
        n = seeds_for(effect, alpha)
        assert n == math.ceil(TTestPower().solve_power(effect_size=effect, alpha=alpha, power=0.8))
    assert seeds_for(4.0, 0.0083) >= 2 and seeds_for(0.0, 0.05) is None


def test_ratios_near_one_print_enough_digits() -> None:
    c = Comparison("k", "variance_ratio", "x", 1.0101, 1.0004, 1.0198, "ratio")
    assert fmt_value(c) == "1.0101 [1.0004, 1.0198]"  # not "1.01 [1, 1.02]"
    assert fmt_value(Comparison("k", "passes", "x", 0.435, 0.419, 0.454, "ratio")) == "0.435 [0.419, 0.454]"
