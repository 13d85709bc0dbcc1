"""The study's sentences about `femlm analyze passes` runs (femlm/study/passes.py): each reading drawn only where the
gates and the interval allow it, on hand-made passes.json fragments; a mechanism reading (lower / higher), never one
for or against FE."""

from __future__ import annotations

from typing import Any

from femlm.study.passes import passes_rows, passes_section
from femlm.study.verdicts import HIGHER, LOWER, UNDECIDED, adjust, passes_comparisons, says

PLAN = {"name": "s", "stats": {"declared": {"when": "before", "date": "2026-11-27"},
                               "confirmatory": ["passes/warmup_r15/K6"]}}


def readings(runs: dict[str, Any]) -> dict[str, Any]:
    """Each K's comparison after the study's multiplicity rule (femlm.study.verdicts), by key."""
    return {c.key: c for c in adjust(passes_comparisons(passes_rows(runs)), PLAN)}


def run(ratio: float, ci: list[float], sequences: int = 24, mom: float | None = None, sigma_m2: float = 4.0,
        k: int = 6) -> dict[str, Any]:
    row = {"K": k, "tau": 19, "sequences": sequences, "cycles_per_sequence": 8, "var_independent": 10.0,
           "var_disjoint": 10.0 * ratio, "measured_ratio": ratio, "measured_ratio_ci": ci,
           "measured_ratio_median_of_means": ratio if mom is None else mom, "predicted_ratio": 0.6,
           "predicted_ratio_ci": [0.5, 0.7], "measured_over_predicted": ratio / 0.6,
           "measured_over_predicted_ci": [ci[0] / 0.6, ci[1] / 0.6], "sigma_m2": sigma_m2, "c_fe": -0.4}
    j = {"settings": {"pool": sequences, "block_size": 128, "tau": 19, "draws": 8}, "rows": [row],
         "stats": {"interval": {"unit": "sequences", "count": sequences, "resamples": 1000,
                                "method": "expanded percentile bootstrap"}}}
    return {"warmup_r15": {"json": j, "label": "masking ratio 0.15"}}


def section(runs: dict[str, Any]) -> str:
    return "\n".join(passes_section(runs, readings(runs)))


def test_an_interval_below_one_reads_lower_with_its_scope() -> None:
    runs = run(0.55, [0.45, 0.68])
    c = readings(runs)["passes/warmup_r15/K6"]
    assert (c.reading, c.estimate, c.low, c.high, c.n) == (LOWER, 0.55, 0.45, 0.68, 24) and not c.about_fe
    assert "mask term only" in c.text and "one checkpoint" in c.text
    assert says(c) in section(runs) and "lower (mechanism, not FE's benefit)" in section(runs)
    assert any("disjointness itself" in x for x in c.caveats)  # K x tau = 114 of a 128-token block


def test_an_interval_above_one_reads_higher() -> None:
    assert readings(run(1.3, [1.1, 1.5]))["passes/warmup_r15/K6"].reading == HIGHER


def test_an_interval_containing_one_is_not_decided() -> None:
    c = readings(run(0.9, [0.7, 1.1]))["passes/warmup_r15/K6"]
    assert c.reading == UNDECIDED and "ratios outside [0.700, 1.100] excluded" in c.why


def test_too_few_sequences_are_not_measured_whatever_the_interval() -> None:
    runs = run(0.5, [0.4, 0.6], sequences=8)
    c = readings(runs)["passes/warmup_r15/K6"]
    assert c.reading == UNDECIDED and c.why.startswith("not measured: too few units: 8 sequences")


def test_heavy_tails_are_not_measured() -> None:
    runs = run(0.5, [0.4, 0.6], mom=1.2)  # mean and median of means disagree beyond a factor 2
    c = readings(runs)["passes/warmup_r15/K6"]
    assert c.reading == UNDECIDED and "heavy tails" in c.why


def test_an_out_of_range_prediction_is_flagged_beside_the_measurement() -> None:
    runs = run(0.55, [0.45, 0.68], sigma_m2=-1.0)
    text = section(runs)
    assert "sigma_m2 = -1 <= 0" in text and "| lower (mechanism" in text
    (row,) = passes_rows(runs)
    assert row["prediction_not_measured"] and not row["not_measured"]
    assert "expanded percentile bootstrap over 24 sequences" in text


def test_the_prediction_gets_the_sigma_m2_agreement_gate() -> None:
    """results/study-base's r30 run (K=2): sigma_m2 3.70 from the decomposition, 10.3 measured by the independent
    visits (2.8x): its prediction is "not measured", as the decomposition's verdicts are at that factor."""
    runs = run(0.55, [0.45, 0.68], sigma_m2=3.697)
    runs["warmup_r15"]["json"]["rows"][0]["sigma_m2_measured"] = 10.31
    (row,) = passes_rows(runs)
    assert any("two estimates of sigma_m2 disagree" in r for r in row["prediction_not_measured"])
    assert "(not measured: two estimates of sigma_m2 disagree" in "\n".join(passes_section(runs))
    runs["warmup_r15"]["json"]["rows"][0]["sigma_m2_measured"] = 3.9  # within a factor 2: no reason
    assert not passes_rows(runs)[0]["prediction_not_measured"]


def test_every_k_keeps_its_own_reading_when_one_is_gated() -> None:
    runs = run(0.55, [0.45, 0.68])
    gated = run(2.0, [0.7, 4.5], mom=0.9)["warmup_r15"]["json"]["rows"][0]  # heavy tails at the largest K
    runs["warmup_r15"]["json"]["rows"] = [{**runs["warmup_r15"]["json"]["rows"][0], "K": 4}, {**gated, "K": 6}]
    got = readings(runs)
    assert got["passes/warmup_r15/K4"].reading == LOWER and got["passes/warmup_r15/K4"].family == "exploratory"
    assert got["passes/warmup_r15/K6"].reading == UNDECIDED and "heavy tails" in got["passes/warmup_r15/K6"].why
