"""Intervals over independent units, the smallest number of units they need, and a heavy-tail-robust mean.

Every interval femlm prints is a bootstrap over *units*: the independent draws of the study (pool sequences for
the decomposition's terms, sequences for the null model's curves, seeds for training comparisons). Pairs of
masks within one sequence are not independent draws; resampling them gives an interval conditional on the
sequences, which is stated as such wherever it is kept.

The threshold. A percentile bootstrap of a mean over n units is too narrow for small n (it uses the plug-in
variance, (n - 1)/n of the unbiased one, and normal instead of t quantiles). A simulation (1,000-2,000
samples x 1,000 resamples; the coverage test in tests/test_analysis_intervals.py re-runs a small version)
gave the nominal-95% percentile interval of a mean these coverages at n = 4 / 6 / 8 / 10 / 12 / 20 / 40:
normal data 0.79 / 0.88 / 0.89 / 0.92 / 0.92 / 0.93 / 0.94, exponential 0.76 / 0.83 / 0.83 / 0.86 / 0.86 /
0.91 / 0.91, and the decomposition's per-compute ratio (the production `term_estimates` on a synthetic pool)
0.87 / 0.88 / 0.90 / 0.91 / 0.91 / 0.91 / 0.93. The *expanded percentile* interval (Hesterberg, "What
teachers should know about the bootstrap", 2015: the same replicates, quantiles at
``Phi(-sqrt(n / (n - 1)) t_{n-1, 1-alpha/2})`` instead of alpha/2) covers 0.95 for normal data and 0.90-0.92
for exponential or lognormal(0.5) data from n = 10 on, but 0.86-0.89 at n = 6-8. ``MIN_UNITS = 12``: the
first size at which the intervals cover at least 90% for skewed data and nominally for normal data, with a
margin over 10. Below it femlm prints no interval and draws no verdict. Heavy tails (lognormal(1)) are
undercovered at every n up to 40 (0.83-0.89): that is what the heavy-tail gate (`gates`) is for.

`Interval` is femlm's one interval type: these bootstraps return it, and so do the evidence study's t-intervals
(femlm.study.stats, which imports it from here: analysis sits below study). Result files hold an interval as its
``bounds``, ``[low, high]``.

The bootstraps are femlm's own, not ``scipy.stats.bootstrap``: femlm resamples *units* with multinomial counts
(``rng.multinomial``) applied to per-unit terms, so that every estimate built from the same units (a ratio's
numerator and denominator, the decomposition's terms) is resampled jointly, from seeded streams; scipy's
bootstrap draws its own indices and would not give the same numbers (nor the expanded percentile levels).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

MIN_UNITS = 12
LEVEL = 0.95
NAN = float("nan")


@dataclass
class Interval:
    """An estimate (a mean, difference or ratio; NaN where only the bounds were computed) with its interval;
    ``n`` the number of units behind it (seeds, sequences; 0 where not known)."""

    estimate: float
    low: float
    high: float
    n: int
    std: float = NAN  # sample standard deviation of the units (where meaningful)
    p: float = NAN  # two-sided p-value of "no difference" (differences only)
    df: float = NAN
    method: str = ""
    bound: str = ""  # "", "lower" (true value >= estimate) or "upper" (<=): censored inputs

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}

    @property
    def bounds(self) -> list[float]:
        """[low, high]: how result files (decomposition.json, variance.csv, ...) hold an interval."""
        return [self.low, self.high]

    @property
    def excludes_zero(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high) and (self.low > 0 or self.high < 0)

    @property
    def excludes_one(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high) and (self.low > 1 or self.high < 1)


def expanded_levels(units: int, level: float = LEVEL) -> tuple[float, float]:
    """Quantile levels of the expanded percentile interval over ``units`` independent units (module doc)."""
    if units < 2:
        return (1 - level) / 2, 1 - (1 - level) / 2
    z = math.sqrt(units / (units - 1)) * stats.t.ppf(1 - (1 - level) / 2, units - 1)
    low = float(stats.norm.cdf(-z))
    return low, 1 - low


def unit_interval(samples: np.ndarray, units: int, level: float = LEVEL) -> Interval:
    """The expanded percentile interval of bootstrap replicates over ``units`` resampled units.

    Non-finite replicates are dropped; NaN bounds when none is left."""
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return Interval(NAN, NAN, NAN, units, method="expanded percentile bootstrap")
    low, high = np.quantile(finite, expanded_levels(units, level))
    return Interval(NAN, float(low), float(high), units, method="expanded percentile bootstrap")


def percentile_interval(samples: np.ndarray, estimate: float = NAN, units: int = 0) -> Interval:
    """The plain 95% percentile interval of bootstrap replicates: their 2.5% and 97.5% quantiles, non-finite
    replicates dropped (NaN bounds when none is left)."""
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return Interval(estimate, NAN, NAN, units, method="percentile bootstrap")
    low, high = np.quantile(finite, [0.025, 0.975])
    return Interval(estimate, float(low), float(high), units, method="percentile bootstrap")


def interval_note(unit: str, count: int, resamples: int, method: str = "expanded percentile bootstrap") -> dict[str, Any]:
    """What an interval rests on, as decomposition.json records it beside the intervals."""
    return {"unit": unit, "count": int(count), "resamples": int(resamples), "method": method, "level": LEVEL,
            "min_units": MIN_UNITS, "enough": int(count) >= MIN_UNITS}


def mom_blocks(units: int) -> int:
    """Blocks of the median of means: about sqrt(n), at least 3 (a median of fewer is a mean)."""
    return max(3, int(math.isqrt(units)))


def median_of_means(values: np.ndarray) -> float:
    """Median of the means of ``mom_blocks(n)`` consecutive blocks of ``values[n]`` (units in their drawn order,
    a seeded random choice, so consecutive blocks are random blocks); nan below 6 units."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < 6:
        return float("nan")
    return float(np.median([b.mean() for b in np.array_split(values, mom_blocks(values.size))]))


def largest_share(values: np.ndarray) -> float:
    """The largest unit's share of the sum of non-negative ``values`` (1/n when even, near 1 when one dominates)."""
    values = np.asarray(values, dtype=np.float64)
    total = float(values.sum())
    return float(values.max() / total) if values.size and total > 0 else float("nan")
