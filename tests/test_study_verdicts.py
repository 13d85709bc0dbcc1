"""The sign-aware verdict writer (issue 37): femlm/study/verdicts.py on synthetic study results.

Every comparison type (variance ratio, training loss, compute ratio, downstream score, FE vs its control, passes)
is built in each of the three readings -- favours FE, against FE, not decided -- and the test checks where it
lands: its reading, the section of the study README, the evidence summary, the CSV row. Numbers only: no run,
no file.
"""

from __future__ import annotations

from typing import Any

import pytest
from statsmodels.stats.multitest import multipletests

from femlm.errors import UserError
from femlm.study.verdicts import (
    AGAINST,
    FAVOURS,
    UNDECIDED,
    adjust,
    rows,
    seeds_to_decide,
    study_comparisons,
    summary_lines,
    verdict_lines,
)

# (low, high) of an interval in each reading, for a difference where lower is better and for a ratio.
LOWER_IS_BETTER = {FAVOURS: (-0.05, -0.02), AGAINST: (0.02, 0.05), UNDECIDED: (-0.02, 0.03)}
HIGHER_IS_BETTER = {FAVOURS: (0.02, 0.05), AGAINST: (-0.05, -0.02), UNDECIDED: (-0.02, 0.03)}
RATIO = {FAVOURS: (0.80, 0.90), AGAINST: (1.10, 1.20), UNDECIDED: (0.95, 1.08)}


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


def pretraining(kind: str, reading: str) -> dict[str, Any]:
    """One mode (same rows) with an FE arm against MLM, and FE against its control, set to ``reading``."""
    loss = diff(*LOWER_IS_BETTER[reading]) if kind in ("training_loss", "fe_vs_control") else diff(-0.01, 0.01)
    r = ratio(*RATIO[reading]) if kind == "compute_ratio" else ratio(0.9, 1.1)
    comp = {"final_loss": {"paired": loss, "welch": loss, "verdict": ""},
            "mean_loss": {"paired": diff(-0.01, 0.01), "welch": diff(-0.01, 0.01), "verdict": ""},
            "ratio_to_75%": {**r, "verdict": ""}}
    vs = {"fe": "fe_subword", "control": "iid_subword", "paired_seeds": [1, 2, 3, 4, 5],
          "final_loss": {**(loss if kind == "fe_vs_control" else diff(-0.01, 0.01)), "verdict": ""},
          "mean_loss": {**diff(-0.01, 0.01), "verdict": ""}}
    return {"same_rows": {"arms": {}, "targets": {"75%": {"loss": 5.0}},
                          "comparisons": {"fe_subword": comp}, "fe_vs_control": vs}}


def downstream(reading: str) -> dict[str, Any]:
    c = diff(*HIGHER_IS_BETTER[reading])
    summary = {"fe_subword": {"n": 5, "std": 0.02}, "mlm_subword": {"n": 5, "std": 0.02}}
    return {"aclarc": {"metric": "macro_f1", "summary": summary, "vs_mlm": {"fe_subword": c}}}


def passes(reading: str) -> list[dict[str, Any]]:
    lo, hi = RATIO[reading]
    return [{"run": "warmup_r15", "K": 6, "tau": 19, "block_size": 128, "sequences": 32,
             "measured_ratio": (lo * hi) ** 0.5, "measured_ratio_ci": [lo, hi], "not_measured": []}]


KEYS = {"variance_ratio": "variance_ratio/warmup/K4", "training_loss": "training_loss/same_rows/fe_subword/final_loss",
        "compute_ratio": "compute_ratio/same_rows/fe_subword/75%", "downstream": "downstream/aclarc/fe_subword",
        "fe_vs_control": "fe_vs_control/same_rows/final_loss", "passes": "passes/warmup_r15/K6"}


def study(kind: str, reading: str, confirmatory: bool = True):
    dec = {"warmup": decomposition(*RATIO[reading])} if kind == "variance_ratio" else {}
    pre = pretraining(kind, reading) if kind in ("training_loss", "compute_ratio", "fe_vs_control") else {}
    down = downstream(reading) if kind == "downstream" else {}
    pas = passes(reading) if kind == "passes" else []
    plan = {"name": "synthetic", "stats": {"confirmatory": [KEYS[kind]] if confirmatory else []},
            "pretrain": {"reference": "mlm_subword"}}
    comps = adjust(study_comparisons(plan, dec, pre, down, pas), plan)
    (c,) = [c for c in comps if c.key == KEYS[kind]]
    return plan, comps, c


def section_of(lines: list[str], needle: str) -> str:
    """The '###' section and the 'Favours FE:' / 'Against FE:' list a bullet containing ``needle`` is in."""
    head = sub = ""
    for line in lines:
        if line.startswith("### "):
            head, sub = line[4:], ""
        elif line.endswith(":") and not line.startswith("- "):
            sub = line[:-1]
        elif line.startswith("- ") and needle in line:
            return f"{head} / {sub}".rstrip(" /")
    raise AssertionError(f"{needle!r} in no section")


@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("reading", [FAVOURS, AGAINST, UNDECIDED])
def test_each_comparison_lands_by_sign_and_interval(kind: str, reading: str) -> None:
    plan, comps, c = study(kind, reading)
    assert c.reading == reading and c.family == "confirmatory"
    lines = verdict_lines(comps, plan)
    where = section_of(lines, c.text)
    if reading == UNDECIDED:
        assert where == "Confirmatory, not decided"
    else:
        assert where == f"Findings (confirmatory, surviving Holm) / {reading[0].upper()}{reading[1:]}"
    # The summary (docs/evidence.md, README.md) carries it too, with the same reading, whichever it is.
    (bullet,) = [s for s in summary_lines(comps) if c.text in s]
    assert f"**{reading}**" in bullet
    (row,) = [r for r in rows(comps) if r["key"] == c.key]
    assert row["reading"] == reading and row["p_adjusted"] is not None


@pytest.mark.parametrize("kind", list(KEYS))
def test_an_undeclared_comparison_is_exploratory_and_never_a_finding(kind: str) -> None:
    plan, comps, c = study(kind, FAVOURS, confirmatory=False)
    assert c.family == "exploratory" and c.reading == FAVOURS
    assert section_of(verdict_lines(comps, plan), c.text) == "Exploratory readings (Benjamini-Hochberg; not findings) / Favours FE"
    assert not [s for s in summary_lines(comps) if c.text in s]  # counted there, not listed as a finding


def test_a_worse_downstream_score_is_against_fe_not_support() -> None:
    """The old writer filed any downstream difference beyond the seed noise as support, a worse one included."""
    _, comps, c = study("downstream", AGAINST)
    assert c.estimate < 0 and c.reading == AGAINST


def test_an_unfavourable_control_contrast_reaches_the_summary() -> None:
    """The old writer dropped an FE-vs-control result that was not 'lower' from docs/evidence.md's summary."""
    _, comps, c = study("fe_vs_control", AGAINST)
    assert any(c.text in s and f"**{AGAINST}**" in s for s in summary_lines(comps))


def test_holm_over_the_family_and_bh_over_the_rest() -> None:
    """Three confirmatory p-values adjusted together by Holm: 0.03 and 0.04 alone would pass, not in this family
    (the second step multiplies 0.03 by 2)."""
    dec = {"warmup": decomposition(1.10, 1.20)}
    pre = pretraining("training_loss", AGAINST)
    pre["same_rows"]["comparisons"]["fe_subword"]["final_loss"]["paired"]["p"] = 0.03
    pre["same_rows"]["fe_vs_control"]["final_loss"]["p"] = 0.04
    keys = [KEYS["training_loss"], KEYS["fe_vs_control"], KEYS["variance_ratio"]]
    plan = {"name": "s", "stats": {"confirmatory": keys}, "pretrain": {"reference": "mlm_subword"}}
    pre["same_rows"]["fe_vs_control"]["final_loss"].update(low=-0.05, high=-0.01)
    comps = {c.key: c for c in adjust(study_comparisons(plan, dec, pre, {}, []), plan)}
    raw = [comps[k].p for k in keys]
    expected = multipletests(raw, method="holm")[1]
    assert [comps[k].p_adjusted for k in keys] == pytest.approx(list(expected))
    loss = comps[KEYS["training_loss"]]
    assert loss.low > 0 and loss.p_adjusted >= 0.05 and loss.reading == UNDECIDED  # excluded 0, did not survive
    assert "Holm-adjusted p" in loss.why and loss.seeds_needed and loss.seeds_needed > loss.n
    assert all(c.family == "exploratory" for k, c in comps.items() if k not in keys)


def test_a_null_result_states_what_it_excludes() -> None:
    _, comps, c = study("training_loss", UNDECIDED)
    assert "differences larger than 0.03 excluded" in c.why
    _, comps, c = study("compute_ratio", UNDECIDED)
    assert "ratios outside [0.95, 1.08] excluded" in c.why


def test_gated_and_censored_comparisons_are_not_decided() -> None:
    plan, comps, c = study("passes", FAVOURS)
    rows_ = passes(FAVOURS)
    rows_[0]["not_measured"] = ["heavy tails"]
    (g,) = adjust(study_comparisons(plan, {}, {}, {}, rows_), plan)
    assert g.reading == UNDECIDED and "not measured: heavy tails" in g.why and g.p_adjusted is None
    pre = pretraining("compute_ratio", AGAINST)
    pre["same_rows"]["comparisons"]["fe_subword"]["ratio_to_75%"]["bound"] = "lower"
    plan = {"name": "s", "stats": {}, "pretrain": {"reference": "mlm_subword"}}
    (cut,) = [x for x in adjust(study_comparisons(plan, {}, pre, {}, []), plan) if x.kind == "compute_ratio"]
    assert cut.reading == UNDECIDED and cut.low is None and "censored" in cut.why


def test_seeds_to_decide_grow_as_the_effect_shrinks() -> None:
    _, _, c = study("training_loss", AGAINST)
    big = seeds_to_decide(c, 0.01)
    c.estimate /= 2
    assert seeds_to_decide(c, 0.01) > big > 2


def test_a_declared_comparison_without_a_result_stays_in_the_family_not_decided() -> None:
    """A study cut short (or a smoke plan) lacks a declared comparison: it is listed, not decided, and still counts
    in Holm's family; a key of no known kind is a one-line error of the experiment file."""
    keys = [KEYS["training_loss"], "downstream/aclarc/fe_subword"]
    plan = {"name": "s", "stats": {"confirmatory": keys}, "pretrain": {"reference": "mlm_subword"}}
    comps = {c.key: c for c in adjust(study_comparisons(plan, {}, pretraining("training_loss", AGAINST), {}, []), plan)}
    lost = comps["downstream/aclarc/fe_subword"]
    assert lost.family == "confirmatory" and lost.reading == UNDECIDED and "no result" in lost.why
    assert sum(c.family == "confirmatory" for c in comps.values()) == 2
    bad = {**plan, "stats": {"confirmatory": ["trainingloss/same_rows/fe_subword/final_loss"]}}
    with pytest.raises(UserError, match="'trainingloss/same_rows/fe_subword/final_loss' is no comparison key"):
        adjust(study_comparisons(bad, {}, pretraining("training_loss", AGAINST), {}, []), bad)
