"""The study's sentences about `femlm analyze passes` runs (femlm/study/passes.py): each verdict drawn only where the
gates and the interval allow it, on hand-made passes.json fragments."""

from __future__ import annotations

from typing import Any

from femlm.study.passes import passes_conclusions, passes_rows, passes_section, reading


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


def only(runs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    d = runs["warmup_r15"]
    return d["json"], d["json"]["rows"][0]


def test_an_interval_below_one_supports_lower_variance_with_its_scope() -> None:
    runs = run(0.55, [0.45, 0.68])
    assert reading(*only(runs)) == "lower with disjoint visits"
    supports, not_supported = passes_conclusions(runs)
    assert len(supports) == 1 and not not_supported
    assert "K = 6: 0.550 [0.450, 0.680]" in supports[0] and "24 sequences" in supports[0]
    assert "no parameter drift" in supports[0] and "not of training speed" in supports[0]


def test_an_interval_above_one_contradicts() -> None:
    runs = run(1.3, [1.1, 1.5])
    assert reading(*only(runs)) == "higher with disjoint visits"
    supports, not_supported = passes_conclusions(runs)
    assert not supports and "higher with disjoint visits" in not_supported[0]


def test_an_interval_containing_one_is_inconclusive() -> None:
    supports, not_supported = passes_conclusions(run(0.9, [0.7, 1.1]))
    assert not supports and "no difference detected" in not_supported[0]


def test_too_few_sequences_are_not_measured_whatever_the_interval() -> None:
    runs = run(0.5, [0.4, 0.6], sequences=8)
    assert reading(*only(runs)).startswith("not measured: too few units: 8 sequences")
    supports, not_supported = passes_conclusions(runs)
    assert not supports and "not measured" in not_supported[0]


def test_heavy_tails_are_not_measured() -> None:
    runs = run(0.5, [0.4, 0.6], mom=1.2)  # mean and median of means disagree beyond a factor 2
    assert "heavy tails" in reading(*only(runs))
    assert not passes_conclusions(runs)[0]


def test_an_out_of_range_prediction_is_flagged_beside_the_measurement() -> None:
    runs = run(0.55, [0.45, 0.68], sigma_m2=-1.0)
    text = "\n".join(passes_section(runs))
    assert "sigma_m2 = -1 <= 0" in text and "lower with disjoint visits" in text
    (row,) = passes_rows(runs)
    assert row["prediction_not_measured"] and not row["not_measured"]
    assert "expanded percentile bootstrap over 24 sequences" in text


def test_every_k_keeps_its_own_reading_when_one_is_gated() -> None:
    runs = run(0.55, [0.45, 0.68])
    gated = run(2.0, [0.7, 4.5], mom=0.9)["warmup_r15"]["json"]["rows"][0]  # heavy tails at the largest K
    runs["warmup_r15"]["json"]["rows"] = [{**runs["warmup_r15"]["json"]["rows"][0], "K": 4}, {**gated, "K": 6}]
    supports, not_supported = passes_conclusions(runs)
    assert len(supports) == 1 and not not_supported
    assert "K = 4: 0.550 [0.450, 0.680]" in supports[0] and "lower with disjoint visits" in supports[0]
    assert "K = 6: 2.000 [0.700, 4.500]" in supports[0] and "heavy tails" in supports[0]
