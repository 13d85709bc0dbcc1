"""The GPU study's sample size: N from the declared power rule (femlm/conf/experiment/study_gpu.yaml's
`gpu.analysis.power`), read by the plan (femlm.study.gpu_plan) and by the one upward revision after the first window
(femlm.study.gpu_windows).

Power rule: the equivalence test (two one-sided paired t-tests, TOST) at the true difference 0, per side at the
level the declared procedure is sure to test every equivalence hypothesis at: family_alpha / (2 m) for m
comparisons (Holm over their 2 m difference and equivalence hypotheses, in its first step).
Its power at n pairs is P(the (1 - 2 alpha) t-interval lies inside +-delta), by the noncentral t (the usual
approximation, e.g. PASS's and Julious 2004): the smallest n with power >= the declared power is N.
"""

from __future__ import annotations

import math

from femlm.errors import UserError
from femlm.experiment.gpu_schema import GpuStudy


def tost_power(n: int, sd: float, delta: float, alpha: float) -> float:
    """Power of the paired TOST at level `alpha` per side with n pairs, when the true mean difference is 0."""
    from scipy import stats

    df, se = n - 1, sd / math.sqrt(n)
    crit = stats.t.ppf(1 - alpha, df)
    return max(0.0, float(stats.nct.cdf(-crit, df, -delta / se) - stats.nct.cdf(crit, df, delta / se)))


def tost_pairs(sd: float, delta: float, alpha: float, power: float) -> int:
    """The smallest number of pairs whose TOST reaches `power` (at least 3)."""
    n = 3
    while tost_power(n, sd, delta, alpha) < power:
        n += 1
        if n > 100_000:
            raise UserError(f"power rule: SD {sd} against delta {delta} needs over 100,000 pairs")
    return n


def side_alpha(g: GpuStudy, comparisons: int) -> float:
    """The level of each one-sided test of an equivalence hypothesis under the declared procedure."""
    return g.analysis.power.family_alpha / (2 * max(comparisons, 1))


def planned_n(g: GpuStudy, deltas: list[float], revised_sd: float | None = None) -> int:
    """N: the power rule at the declared SD, or (the one revision) at a larger SD measured in the first window, for
    the family's smallest margin (`deltas`: stats.delta of each member)."""
    if not deltas:
        raise UserError("study_gpu: stats.delta declares no equivalence margin for the family (the power rule needs "
                        "delta)")
    p = g.analysis.power
    sd = max(p.sd, revised_sd or 0.0)
    return tost_pairs(sd, min(deltas), side_alpha(g, len(deltas)), p.power)
