"""The study's statistics on synthetic curves and scores whose answer is known: real differences must be
detected, noise must not be claimed (checked as a false-positive rate over many simulated studies). The functions
read nothing: an interval's side is checked here; what it is read as is femlm.study.verdicts'."""

from __future__ import annotations

import math

import numpy as np
import pytest

from femlm.study import stats as st


def test_t_interval_welch_and_paired_match_textbook_values() -> None:
    ci = st.t_interval([1.0, 2.0, 3.0])
    assert ci.estimate == 2.0 and ci.n == 3 and ci.df == 2
    assert math.isclose(ci.high - ci.estimate, 4.302653 * 1.0 / math.sqrt(3), rel_tol=1e-5)
    assert math.isnan(st.t_interval([5.0]).low) and st.t_interval([]).n == 0
    # Welch: scipy's ttest_ind(equal_var=False) p-value and df
    from scipy import stats

    a, b = [1.0, 2.0, 4.0, 3.5], [2.5, 3.0, 5.0, 6.0, 4.0]
    w = st.welch(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert math.isclose(w.p, ref.pvalue, rel_tol=1e-9) and math.isclose(w.estimate, np.mean(a) - np.mean(b))
    assert w.low < w.estimate < w.high
    p = st.paired([3.0, 4.0, 5.5], [2.0, 3.5, 4.0])
    assert math.isclose(p.estimate, (1.0 + 0.5 + 1.5) / 3)
    assert not hasattr(st, "verdict") and not hasattr(st, "ratio_verdict")  # one reading rule: femlm.study.verdicts


# The hand-written formulas femlm used before scipy.stats computed its t-based intervals (issue 30): scipy must
# give the same numbers, to rounding.
def _old_t(values: list[float], level: float = 0.95) -> tuple[float, ...]:
    from scipy import stats

    x = np.asarray(values, dtype=float)
    n, mean, std = len(x), float(x.mean()), float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * std / math.sqrt(n)
    p = float(2 * stats.t.sf(abs(mean) / (std / math.sqrt(n)), n - 1))
    return mean, mean - half, mean + half, p, n - 1


def _old_welch(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, ...]:
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    est, se = float(x.mean() - y.mean()), math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return est, est - half, est + half, float(2 * stats.t.sf(abs(est) / se, df)), float(df)


SAMPLES = [[1.0, 2.0, 3.0], [0.1, 0.3, 0.2, 0.25], [5.0, 5.0, 5.1], [1e10, 1e10 + 3, 1e10 + 7], [-2.0, -1.0],
           [3.0, 3.0001], [7.1, 7.1, 7.1000000001], np.random.default_rng(0).normal(0, 1, 7).tolist(),
           np.random.default_rng(1).lognormal(0, 2, 5).tolist(), np.log([3e12, 4e12, 5e12]).tolist()]


def _same(new: tuple[float, ...], old: tuple[float, ...]) -> bool:
    return all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) for a, b in zip(new, old, strict=True))


@pytest.mark.parametrize("level", [0.95, 0.9])
def test_scipy_gives_the_numbers_of_the_old_formulas(level: float) -> None:
    for x in SAMPLES:
        ci = st.t_interval(x, level)
        assert _same((ci.estimate, ci.low, ci.high, ci.p, ci.df), _old_t(x, level)), x
        for y in SAMPLES:
            w = st.welch(x, y, level)
            assert _same((w.estimate, w.low, w.high, w.p, w.df), _old_welch(x, y, level)), (x, y)
            if len(x) == len(y) and x is not y:
                d = [a - b for a, b in zip(x, y, strict=True)]
                pd = st.paired(x, y, level)
                assert _same((pd.estimate, pd.low, pd.high, pd.p, pd.df), _old_t(d, level)), (x, y)
    # no spread: a zero-width interval, p 1 or 0 (scipy's statistic would be 0/0 or infinite)
    flat = st.t_interval([2.0, 2.0, 2.0])
    assert (flat.low, flat.high, flat.p, flat.df) == (2.0, 2.0, 0.0, 2)
    assert st.welch([1.0, 1.0], [1.0, 1.0]).p == 1.0 and math.isnan(st.welch([1.0, 1.0], [1.0, 1.0]).df)


def test_flops_to_reach_interpolates_the_first_crossing() -> None:
    x, y = [0.0, 10.0, 20.0, 30.0], [5.0, 4.0, 3.0, 3.5]
    assert st.flops_to_reach((x, y), 3.5) == pytest.approx(15.0)
    assert st.flops_to_reach((x, y), 3.0) == pytest.approx(20.0)
    assert st.flops_to_reach((x, y), 6.0) == 0.0  # reached at the start
    assert st.flops_to_reach((x, y), 2.9) is None  # never: censored
    # non-monotone curve: the first time it gets there, not a later one
    assert st.flops_to_reach(([0, 1, 2, 3], [4.0, 2.0, 5.0, 1.0]), 3.0) == pytest.approx(0.5)


def test_mean_loss_is_the_normalised_area_over_the_range() -> None:
    assert st.mean_loss(([0.0, 1.0], [0.0, 1.0]), 0.0, 1.0) == pytest.approx(0.5)
    assert st.mean_loss(([0.0, 1.0, 2.0], [2.0, 2.0, 2.0]), 0.5, 1.5) == pytest.approx(2.0)
    assert st.mean_loss(([0.0, 2.0], [0.0, 2.0]), 1.0, 2.0) == pytest.approx(1.5)
    assert math.isnan(st.mean_loss(([0.0, 1.0], [0.0, 1.0]), 0.0, 2.0))  # outside the curve


def test_common_grid_is_the_union_inside_the_shared_range() -> None:
    a = ([0.0, 2.0, 4.0, 6.0], [4.0, 3.0, 2.0, 1.0])
    b = ([0.0, 3.0, 5.0], [4.0, 2.5, 1.5])
    grid = st.common_grid([a, b])
    assert grid.tolist() == [0.0, 2.0, 3.0, 4.0, 5.0]
    vals = st.interpolate(a, np.array([1.0, 5.0, 7.0]))
    assert vals[0] == pytest.approx(3.5) and vals[1] == pytest.approx(1.5) and math.isnan(vals[2])
    b2 = st.band([a, a], grid)
    assert np.allclose(b2["mean"], st.interpolate(a, grid)) and np.allclose(b2["low"], b2["mean"])


def curve(speed: float, level: float, flops: np.ndarray, rng: np.random.Generator, noise: float) -> st.Curve:
    """A falling loss: level + 2 exp(-speed * c), plus evaluation noise."""
    return flops, level + 2.0 * np.exp(-speed * flops) + rng.normal(0, noise, len(flops))


def study(rng: np.random.Generator, fe_speed: float, seeds: int = 3, noise: float = 0.01,
          seed_sd: float = 0.02) -> dict:
    flops = np.linspace(0, 10, 11)
    arms = {}
    shifts = rng.normal(0, seed_sd, seeds)  # a seed effect shared by the arms (same data order and init)
    for name, speed in (("mlm", 0.2), ("fe", fe_speed)):
        curves = [curve(speed, 3.0 + shifts[i], flops, rng, noise) for i in range(seeds)]
        arms[name] = st.ArmCurves(name, list(range(1, seeds + 1)), curves)
    return st.compare_pretraining(arms, "mlm")


@pytest.mark.parametrize("seeds", [0, 1, 2, 9])
def test_band_is_the_t_interval_of_each_grid_point(seeds: int) -> None:
    """The band tests every grid point at once; each point's numbers are t_interval's, to the bit: curves that end
    early (fewer values past their end), identical values (a zero-width interval), one curve (no interval)."""
    rng = np.random.default_rng(seeds)
    curves = []
    for i in range(seeds):
        x = np.sort(rng.uniform(0, 100 - 10 * (i % 3), 12))
        curves.append((x.tolist(), (np.full(12, 2.0) if i == 1 else rng.normal(5, 1, 12)).tolist()))
    grid = np.linspace(0, 100, 41)
    got = st.band(curves, grid)
    values = np.stack([st.interpolate(c, grid) for c in curves]) if curves else np.zeros((0, len(grid)))
    for j in range(len(grid)):
        ci = st.t_interval(values[:, j].tolist())
        want = [ci.estimate, ci.low, ci.high, ci.n]
        assert np.array_equal([got[k][j] for k in ("mean", "low", "high", "n")], want, equal_nan=True), (j, want)
    if seeds >= 2:
        assert np.isfinite(got["low"]).any() and (got["n"] < seeds).any()  # both kinds of point were met


def test_a_real_speed_up_is_detected() -> None:
    out = study(np.random.default_rng(0), fe_speed=0.3)
    comp = out["comparisons"]["fe"]
    assert comp["final_loss"]["paired"]["high"] < 0 and comp["mean_loss"]["paired"]["high"] < 0
    for key in ("50%", "75%"):
        r = comp[f"ratio_to_{key}"]
        # the exact ratio for exponential curves is speed_mlm / speed_fe = 2/3
        assert r["high"] < 1 and r["low"] < 2 / 3 < r["high"] * 1.1
        assert r["not_reached"] == {"arm": 0, "reference": 0}
    assert out["targets"]["50%"]["loss"] > out["targets"]["75%"]["loss"]
    assert len(out["per_run"]) == 6 and len(out["bands"]["fe"]["mean"]) == len(out["grid"])


def test_a_slower_arm_that_never_reaches_the_target_is_a_censored_bound() -> None:
    out = study(np.random.default_rng(1), fe_speed=0.05)
    r = out["comparisons"]["fe"]["ratio_to_75%"]
    assert r["not_reached"]["arm"] == 3 and r["bound"] == "lower"
    assert r["estimate"] > 1  # a lower bound on the ratio: at least this much more compute
    assert out["comparisons"]["fe"]["final_loss"]["paired"]["low"] > 0


def test_noise_is_not_claimed_more_often_than_the_level_says() -> None:
    """Identical arms, 300 simulated 3-seed studies: each 95% interval claims a difference ~5% of the time."""
    rng = np.random.default_rng(2)
    claims = {"final_loss": 0, "mean_loss": 0, "ratio_to_50%": 0}
    trials = 300
    for _ in range(trials):
        comp = study(rng, fe_speed=0.2, noise=0.03)["comparisons"]["fe"]
        claims["final_loss"] += excludes(comp["final_loss"]["paired"], 0.0)
        claims["mean_loss"] += excludes(comp["mean_loss"]["paired"], 0.0)
        claims["ratio_to_50%"] += excludes(comp["ratio_to_50%"], 1.0)
    for key, count in claims.items():
        assert count / trials < 0.10, (key, count)


def excludes(ci: dict, null: float) -> bool:
    low, high = ci.get("low"), ci.get("high")
    return low is not None and high is not None and math.isfinite(low) and (low > null or high < null)


def test_downstream_difference_against_seed_noise() -> None:
    rng = np.random.default_rng(3)
    real = st.compare_scores({"mlm": rng.normal(0.30, 0.01, 5).tolist(), "fe": rng.normal(0.36, 0.01, 5).tolist(),
                              "iid": rng.normal(0.30, 0.01, 5).tolist()}, "mlm")
    assert real["comparisons"]["fe"]["low"] > 0
    assert real["rows"]["fe"]["n"] == 5 and real["rows"]["fe"]["std"] > 0
    false = 0
    for _ in range(300):
        scores = {"mlm": rng.normal(0.3, 0.05, 5).tolist(), "fe": rng.normal(0.3, 0.05, 5).tolist()}
        false += excludes(st.compare_scores(scores, "mlm")["comparisons"]["fe"], 0.0)
    assert false / 300 < 0.10


def test_fe_against_the_control_is_paired_by_seed() -> None:
    """FE vs the i.i.d. K-mask control pairs runs by seed: a constant per-seed offset shared by both arms cancels,
    so a small but consistent FE advantage is detected though the seeds' spread is far larger."""
    from femlm.study.compare import fe_vs_control

    offsets = {1: 0.0, 2: 1.0, 3: -1.0, 4: 2.0}
    rows = [{"arm": arm, "seed": s, "final_loss": 5.0 + off + delta, "mean_loss": 6.0 + off + delta + 0.001 * s}
            for s, off in offsets.items() for arm, delta in (("fe_subword", -0.05), ("iid_subword", 0.0))]
    rows.append({"arm": "fe_subword", "seed": 9, "final_loss": 0.0, "mean_loss": 0.0})  # no partner: left out
    out = fe_vs_control(rows, "fe_subword", "iid_subword", 0.95)
    assert out is not None and out["paired_seeds"] == [1, 2, 3, 4]
    assert out["final_loss"]["estimate"] == pytest.approx(-0.05)
    assert out["final_loss"]["high"] < 0 and out["mean_loss"]["high"] < 0
    assert fe_vs_control(rows, "fe_subword", "absent_arm", 0.95) is None
