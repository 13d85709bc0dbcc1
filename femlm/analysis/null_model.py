"""Context interactions beyond an additive null model (issue 17, part 2; reframed in issue 27).

Covariance falling with the Hamming distance H is guaranteed even for a model whose gradient is a sum of
fixed per-token contributions, g(m) = (1/tau) sum_{i in m} a_i: two masks then share o = tau - H/2 terms, and
the shared terms are all their covariance (Cov_add = kappa(o) D2 below, falling with H whenever D2 > 0). So an
additive gradient already satisfies the paper's Assumption 1, and this study is **not** a test of Assumption 1,
nor of whether FE pays off at equal compute (that is `decomposition`). What it tests is what is left beyond the
additive model: context interactions between the masked tokens.

The additive model. For one sequence with n maskable positions and masks uniform over M(tau), the additive
model is the least-squares projection of m -> g(m) onto {m -> (1/tau) sum_i m_i a_i} in L2(uniform masks),
the first-order Hoeffding/ANOVA term (constants are in the family since sum_i m_i = tau). With
``h_i = E[g(m) | i in m]`` and g-bar = E g(m) = mean_i h_i, the normal equations give
``a_i = (tau (n - 1) h_i - (tau - 1) sum_j h_j) / (n - tau)``, so ``b_i = a_i - mean_j a_j = tau (n - 1)
d_i / (n - tau)`` with ``d_i = h_i - g-bar`` (the first-order effects). Chosen over "per-position gradient
contributions averaged over masks" because the projection's residual r = g - g_add is orthogonal to *every*
additive function, and that makes the decomposition exact at every H:

    Cov(H) = Cov_add(H) + Cov_res(H),    Cov_res(H) = E[<r(m1), r(m2)> | H]          (no cross terms)

(the cross term is sum_j <a_j, E[m1_j r(m2)]>/tau, and given m2, E[m1_j | m2] is affine in m2_j, while
E[m2_j r(m2)] = 0 and E[r] = 0 by orthogonality). Closed form of the additive part, derived from
E[m1_i m2_i] = o/n and E[m1_i m2_j] = (tau^2 - o) / (n (n - 1)) for i != j at overlap o:

    Cov_add(o) = S2 (o n - tau^2) / (tau^2 n (n - 1)),  S2 = sum_i |b_i|^2
               = kappa(o) D2,   kappa(o) = (n - 1)(o n - tau^2) / (n (n - tau)^2),  D2 = sum_i |d_i|^2.

It is affine in o (so in H), zero at the independent-mask mean overlap tau^2 / n, and Cov_add(tau) =
tau (n - 1) D2 / (n (n - tau)) is the additive part of Var(g(m)).

Estimating D2 without bias: for two *independent* uniform masks, E[(|m ∩ m'| - tau^2/n) <g(m), g(m')>] =
p^2 D2 with p = tau / n (the weight has mean zero, so any fixed centring vector drops out; the gradients are
centred at the reference estimate of g-bar for precision, which is independent of the masks). The study draws
G groups of m i.i.d. masks per sequence and averages the weighted centred Gram entries over the m (m - 1)
ordered pairs of each group: one unbiased estimate of D2 per group and sequence, groups independent (the
bootstrap unit for the additive curve).

The measured curve is the covariance study's (`studies.covariance_study`, pairs at stratified H, each pair's
value averaged over the mini-batch of sequences); the additive curve is ``mean_s kappa_s(o) D2_s`` at each
pair's overlap, averaged over the same pairs per Hamming bin; the residual is their difference. Intervals:
(1) ``*_ci`` percentile bootstrap, pairs resampled within their bin (measured, and the bin's mean overlap) and
groups resampled (D2), independently -- conditional on the sequences, since every pair and group is measured
on the same few sequences; (2) ``by_sequence`` and the bins' ``*_ci_seq``: whole sequences resampled, each with
its pairs' covariances and its groups' D2 (the sequences are the independent units; expanded percentile,
`intervals`). A study prints (2) and none below `intervals.MIN_UNITS` sequences. Summary: the measured
decrease from the smallest- to the largest-H bin, the additive decrease, the fraction explained (additive / measured decrease),
the residual's decrease and its Spearman rho against H (bin order) with an interval.

Cost in gradient rows: ``S (J + 2 budget + G m)`` (reference, pairs, groups).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import stats

from femlm.masking import make_generator

from .estimators import GradFn, Progress, Reference, group_grams
from .intervals import interval_note, percentile_interval, unit_interval
from .masks import sample_kmasks
from .studies import covariance_study

STREAM_GROUPS, STREAM_BOOT, STREAM_SEQ_BOOT = 31, 32, 33
NAN2 = [float("nan"), float("nan")]


def null_model_cost(seqs: int, reference: int, budget: int, groups: int, group_size: int) -> int:
    return seqs * (reference + 2 * budget + groups * group_size)


def kappa(overlap: Any, n: Any, tau: int) -> Any:
    """Cov_add(o) / D2 for a sequence with ``n`` maskable positions (module doc)."""
    return (n - 1) * (overlap * n - tau**2) / (n * (n - tau) ** 2)


def additive_d2(grams: torch.Tensor, overlaps: torch.Tensor, n: torch.Tensor, tau: int) -> torch.Tensor:
    """Unbiased D2 per group and sequence from groups of i.i.d. uniform masks: ``[G, S]``.

    ``grams[G, S, m, m]``: centred Gram matrices of each group; ``overlaps[G, S, m, m]``: |m_k ∩ m_l|;
    ``n[S]``: maskable positions. Mean over ordered pairs k != l of ``(o_kl - tau^2/n) G_kl / (tau/n)^2``.
    """
    n = n.double().view(1, -1, 1, 1)
    weight = (overlaps.double() - tau**2 / n) / (tau / n) ** 2
    m = grams.shape[-1]
    off = ~torch.eye(m, dtype=torch.bool)
    return (weight * grams)[..., off].sum(dim=-1) / (m * (m - 1))


@dataclass
class NullModelResult:
    rows: list[dict[str, Any]]  # one per Hamming bin (null_model.csv)
    summary: dict[str, Any]
    pairs: list[dict[str, Any]]  # the covariance study's pairs, with the additive value of each
    stats: dict[str, Any] = field(default_factory=dict)
    units: dict[str, np.ndarray] = field(default_factory=dict)  # per sequence and group (`units`, null_*)


def _spearman_rows(values: np.ndarray) -> np.ndarray:
    """Spearman rho of each row of ``values[B, bins]`` with the bin order (ties have measure zero)."""
    ranks = values.argsort(axis=-1).argsort(axis=-1).astype(np.float64)
    ranks -= ranks.mean(axis=-1, keepdims=True)
    order = np.arange(values.shape[-1], dtype=np.float64)
    order -= order.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ranks @ order) / np.sqrt((ranks**2).sum(axis=-1) * (order**2).sum())


def null_model_study(grad_fn: GradFn, valid: torch.Tensor, tau: int, budget: int, bins: int, ref: Reference,
                     groups: int, group_size: int, seed: int, chunk: int, n_boot: int,
                     progress: Progress | None = None) -> NullModelResult:
    """Measured Cov(H) against the additive model's, per Hamming bin, with the residual (module doc)."""
    if groups < 1 or group_size < 2:
        raise ValueError("the additive model needs groups >= 1 of group_size >= 2 masks")
    cov = covariance_study(grad_fn, valid, tau, budget, bins, ref, seed, chunk, 0, progress)
    masks = sample_kmasks(valid, tau, group_size, "iid", groups, make_generator(seed, tau, micro_step=STREAM_GROUPS))
    grams = group_grams(grad_fn, masks, ref, chunk, progress)  # [G, S, m, m]
    flat = masks.double()
    overlaps = flat @ flat.transpose(-1, -2)
    n_valid = valid.sum(dim=1)
    d2 = additive_d2(grams, overlaps, n_valid, tau).numpy()  # [G, S]
    n_np = n_valid.double().numpy()

    def additive_at(overlap: np.ndarray, d2_seq: np.ndarray) -> np.ndarray:
        """``overlap[..., P]``, ``d2_seq[..., S]`` -> mean_s kappa_s(o) D2_s: ``[..., P]``."""
        a = (kappa(0.0, n_np, tau) * d2_seq).mean(axis=-1)[..., None]
        b = ((kappa(1.0, n_np, tau) - kappa(0.0, n_np, tau)) * d2_seq).mean(axis=-1)[..., None]
        return a + b * overlap  # affine in o

    d2_mean = d2.mean(axis=0)  # [S]
    measured = np.array([r["cov"] for r in cov.rows])
    overlap = np.array([r["overlap"] for r in cov.rows], dtype=np.float64)
    hams = np.array([r["hamming"] for r in cov.rows], dtype=np.float64)
    bin_of = np.array([r["bin"] for r in cov.rows])
    additive = additive_at(overlap, d2_mean)
    labels = np.unique(bin_of)
    members = [np.flatnonzero(bin_of == b) for b in labels]
    m_bins = np.array([measured[i].mean() for i in members])
    o_bins = np.array([overlap[i].mean() for i in members])
    a_bins = additive_at(o_bins, d2_mean)
    r_bins = m_bins - a_bins

    boot: dict[str, np.ndarray] | None = None
    if n_boot:
        rng = np.random.default_rng(make_generator(seed, tau, micro_step=STREAM_BOOT).initial_seed())
        m_b = np.empty((n_boot, labels.size))
        o_b = np.empty((n_boot, labels.size))
        for j, idx in enumerate(members):
            pick = idx[rng.integers(0, idx.size, size=(n_boot, idx.size))]
            m_b[:, j], o_b[:, j] = measured[pick].mean(axis=1), overlap[pick].mean(axis=1)
        g_counts = rng.multinomial(groups, np.full(groups, 1 / groups), size=n_boot)
        d2_b = g_counts @ d2 / groups  # [B, S]
        a_b = additive_at(o_b, d2_b)
        boot = {"measured": m_b, "additive": a_b, "residual": m_b - a_b}

    def band(name: str, j: int) -> list[float]:
        return list(NAN2) if boot is None else percentile_interval(boot[name][:, j]).bounds

    edges = {s["bin"]: (s["h_low"], s["h_high"]) for s in cov.summary}
    rows = []
    for j, b in enumerate(labels):
        rows.append({
            "bin": int(b), "h_low": edges[int(b)][0], "h_high": edges[int(b)][1],
            "h_mean": float(hams[members[j]].mean()), "overlap_mean": float(o_bins[j]),
            "pairs": int(members[j].size),
            "measured": float(m_bins[j]), "measured_ci": band("measured", j),
            "additive": float(a_bins[j]), "additive_ci": band("additive", j),
            "residual": float(r_bins[j]), "residual_ci": band("residual", j),
        })

    def decrease(values: np.ndarray) -> Any:
        return values[..., 0] - values[..., -1]

    var_single = cov.stats["var_single"]
    var_add = float(additive_at(np.array([float(tau)]), d2_mean)[0])
    summary: dict[str, Any] = {
        "measured_decrease": float(decrease(m_bins)), "additive_decrease": float(decrease(a_bins)),
        "residual_decrease": float(decrease(r_bins)),
        "fraction_explained": float(decrease(a_bins) / decrease(m_bins)) if decrease(m_bins) else float("nan"),
        "residual_rho_bins": float(stats.spearmanr(labels, r_bins).statistic) if labels.size >= 3 else float("nan"),
        "var_single": var_single, "var_additive": var_add,
        "additive_share_of_var": var_add / var_single if var_single > 0 else float("nan"),
        "d2_mean": float(d2_mean.mean()),
    }
    pair_res = measured - additive
    for key in ("measured_decrease", "additive_decrease", "residual_decrease", "fraction_explained",
                "residual_rho_bins"):
        summary[f"{key}_ci"] = list(NAN2)
    if boot is not None:
        summary["measured_decrease_ci"] = percentile_interval(decrease(boot["measured"])).bounds
        summary["additive_decrease_ci"] = percentile_interval(decrease(boot["additive"])).bounds
        summary["residual_decrease_ci"] = percentile_interval(decrease(boot["residual"])).bounds
        with np.errstate(invalid="ignore", divide="ignore"):
            summary["fraction_explained_ci"] = percentile_interval(
                decrease(boot["additive"]) / decrease(boot["measured"])).bounds
        if labels.size >= 3:
            summary["residual_rho_bins_ci"] = percentile_interval(_spearman_rows(boot["residual"])).bounds
    seq_units = _by_sequence(cov.per_sequence, members, o_bins, d2, n_np, tau)
    rows, summary["by_sequence"] = _sequence_intervals(seq_units, rows, n_boot, seed, tau)
    pairs = [{**r, "additive": float(a), "residual": float(c)}
             for r, a, c in zip(cov.rows, additive, pair_res, strict=True)]
    st = {"tau": tau, "sequences": int(valid.shape[0]), "n_valid": n_valid.tolist(), "pairs": len(cov.rows),
          "groups": groups, "group_size": group_size, "reference": ref.count, "bootstrap": n_boot,
          "measured_spearman": {k: v for k, v in cov.spearman.items() if k != "bin_ci"},
          "intervals": {
              "sequences": interval_note("sequences", int(valid.shape[0]), n_boot),
              "pairs_and_groups": {**interval_note("mask pairs within Hamming bins (measured) and groups of masks "
                                                   "(D2), conditional on the sequences",
                                                   min(int(m.size) for m in members), n_boot,
                                                   "percentile bootstrap"), "groups": groups}}}
    return NullModelResult(rows=rows, summary=summary, pairs=pairs, stats=st, units=seq_units)


def _by_sequence(per_seq: dict[str, np.ndarray], members: list[np.ndarray], o_bins: np.ndarray, d2: np.ndarray,
                 n: np.ndarray, tau: int) -> dict[str, np.ndarray]:
    """Per-sequence arrays of the null model (``units.npz``): the sequences are its independent units."""
    cov = per_seq["cov"]  # [P, S]
    return {"null_bin_cov": np.stack([cov[i].mean(axis=0) for i in members], axis=1),  # [S, bins]
            "null_overlap_bins": o_bins, "null_d2": d2, "null_var_single": per_seq["var_single"].mean(axis=0),
            "null_n_valid": n, "null_tau": np.array(tau)}


def _sequence_intervals(u: dict[str, np.ndarray], rows: list[dict[str, Any]], n_boot: int, seed: int,
                        tau: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Intervals with whole sequences resampled (each with its pairs' covariances and its groups' D2): the
    curves, decreases, fraction explained, residual rho and additive share. Adds ``*_ci_seq`` to every bin row."""
    seqs = u["null_bin_cov"].shape[0]
    d2_s = u["null_d2"].mean(axis=0)  # [S]
    n = u["null_n_valid"]
    add_s = kappa(u["null_overlap_bins"][None, :], n[:, None], tau) * d2_s[:, None]  # [S, bins]
    var_add_s = kappa(float(tau), n, tau) * d2_s
    out: dict[str, Any] = {"unit": "sequences", "count": seqs}
    keys = ("measured_decrease", "additive_decrease", "residual_decrease", "fraction_explained", "residual_rho_bins",
            "additive_share_of_var", "d2_mean")
    if not n_boot or seqs < 2:
        return [{**r, "measured_ci_seq": list(NAN2), "additive_ci_seq": list(NAN2), "residual_ci_seq": list(NAN2)}
                for r in rows], {**out, **{f"{k}_ci": list(NAN2) for k in keys}}
    rng = np.random.default_rng(make_generator(seed, tau, micro_step=STREAM_SEQ_BOOT).initial_seed())
    w = rng.multinomial(seqs, np.full(seqs, 1 / seqs), size=n_boot) / seqs  # [B, S]
    m_b, a_b = w @ u["null_bin_cov"], w @ add_s
    r_b = m_b - a_b
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = {"measured_decrease": m_b[:, 0] - m_b[:, -1], "additive_decrease": a_b[:, 0] - a_b[:, -1],
                "residual_decrease": r_b[:, 0] - r_b[:, -1],
                "fraction_explained": (a_b[:, 0] - a_b[:, -1]) / (m_b[:, 0] - m_b[:, -1]),
                "residual_rho_bins": (_spearman_rows(r_b) if r_b.shape[1] >= 3 else np.full(n_boot, np.nan)),
                "additive_share_of_var": (w @ var_add_s) / (w @ u["null_var_single"]), "d2_mean": w @ d2_s}
    out.update({f"{k}_ci": unit_interval(boot[k], seqs).bounds for k in keys})
    rows = [{**r, "measured_ci_seq": unit_interval(m_b[:, j], seqs).bounds,
             "additive_ci_seq": unit_interval(a_b[:, j], seqs).bounds,
             "residual_ci_seq": unit_interval(r_b[:, j], seqs).bounds} for j, r in enumerate(rows)]
    return rows, out
