"""`femlm analyze analysis.kind=passes`: how much disjoint masks across passes lower the variance of a cycle.

A sequence x read on K passes contributes, over one cycle of K visits, the summed gradient
``G = sum_k g(x, m_k)`` (one masked copy per visit, each an exact-count MLM mask of tau tokens). Two ways to
mask the visits:

* MLM (independent visits): m_1..m_K independent uniform tau-masks;
* ``fully_explored_passes`` (disjoint visits): m_1..m_K the K disjoint masks of one FE draw.

Per sequence ``Var(G) = K sigma_m2(x) + K (K - 1) c(x)``, with c = 0 for independent masks and c = c_FE < 0 for
disjoint ones, so the decomposition (`femlm.analysis.decomposition`) predicts the ratio

    Var_disjoint(G) / Var_independent(G) = 1 + (K - 1) c_FE / sigma_m2          (a prediction)

(the ratio of Theorem 1 for the K-mask mean gradient: the sum is K times the mean). This module measures it
directly, and independently of the prediction's estimates: per sequence D cycles of each kind (fresh masks
from their own streams), the unbiased sample variance of G over the D cycles (Welford, one vector of P
floats per arm and K in memory), averaged over the sequences. It also runs the decomposition's
`pool_terms` on the same sequences (its own masks) and reports the prediction beside the measurement.

Left out, and said so in every output: parameter drift between passes. The K visits of a cycle happen at K
different points of training; here all K gradients are taken at one set of weights (the checkpoint's), so the
measured ratio is the mask-sampling effect alone. Also left out: the data term, which cancels in a pass's
summed gradient under random reshuffling (each sequence read once per pass), and the 80/10/10 replacement
(the gradients replace every masked token by the mask token, as every `femlm analyze` study).

Intervals: expanded percentile bootstrap over the sequences (the unit: each carries its own cycles;
`femlm.analysis.intervals`), the measured and the predicted ratio resampled jointly (the same sequences), so
measured / predicted gets an interval too. Below ``intervals.MIN_UNITS`` sequences no interval is given, and the
gates (`femlm.analysis.gates.passes_gates`: too few units, a variance out of range, mean vs median of means)
say why a ratio is "not measured". The median-of-means ratio is printed beside the mean's.

Cost in gradient rows (one forward + backward of one masked sequence each), S = ``analysis.pool``,
D = ``analysis.draws``, J = ``analysis.reference``: measured ``2 S D Kmax``, predicted ``S (J + 2 D Kmax)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from femlm.masking import make_generator

from .decomposition import pool_terms, term_estimates
from .estimators import GradFn, Progress
from .gates import passes_gates
from .intervals import MIN_UNITS, interval_note, median_of_means, unit_interval
from .masks import sample_kmasks

STREAM_IID, STREAM_FE, STREAM_BOOT = 41, 42, 43
ARMS = {"independent": ("iid", STREAM_IID), "disjoint": ("fully_explored", STREAM_FE)}
DRIFT_NOTE = ("parameter drift between passes is left out: all K visits of a cycle are taken at this checkpoint's "
              "weights, so the ratio is the mask-sampling effect alone")


def passes_cost(pool: int, reference: int, draws: int, kmax: int) -> dict[str, int]:
    """Gradient rows: the direct measurement and the decomposition's prediction."""
    return {"measured": 2 * pool * draws * kmax, "predicted": pool * (reference + 2 * draws * kmax)}


@dataclass
class PassesResult:
    rows: list[dict[str, Any]]  # one per K
    per_sequence: dict[str, np.ndarray] = field(default_factory=dict)  # arm -> [S, len(K)] Var(G) per sequence
    stats: dict[str, Any] = field(default_factory=dict)


def cycle_variances(grad_fn: GradFn, valid: torch.Tensor, ks: list[int], tau: int, draws: int, strategy: str,
                    generator: torch.Generator, chunk: int, progress: Progress | None = None) -> np.ndarray:
    """``[S, len(ks)]``: per sequence and K, the unbiased sample variance (trace) of ``G = sum_{k<K} g(m_k)``
    over ``draws`` cycles, each cycle the first K masks of a draw of ``max(ks)`` masks (``strategy``)."""
    if draws < 2:
        raise ValueError("a sample variance needs at least 2 cycles per sequence")
    kmax = max(ks)
    masks = sample_kmasks(valid, tau, kmax, strategy, draws, generator)  # [D, S, Kmax, L]
    seqs, length = valid.shape
    out = np.empty((seqs, len(ks)))
    per_call = max(1, chunk // kmax)
    for s in range(seqs):
        mean: list[torch.Tensor | None] = [None] * len(ks)
        m2, seen = np.zeros(len(ks)), 0
        for start in range(0, draws, per_call):
            block = masks[start:start + per_call, s]  # [d, Kmax, L]
            seq_idx = torch.full((block.shape[0] * kmax,), s, dtype=torch.long)
            grads = grad_fn(seq_idx, block.reshape(-1, length)).double().view(block.shape[0], kmax, -1)
            for x_all in grads:  # one cycle at a time: Welford's update of the mean and squared deviations
                seen += 1
                for j, k in enumerate(ks):
                    x = x_all[:k].sum(dim=0)
                    if mean[j] is None:
                        mean[j] = torch.zeros_like(x)
                    delta = x - mean[j]
                    mean[j] += delta / seen
                    m2[j] += float(delta @ (x - mean[j]))
            if progress is not None:
                progress.update(len(seq_idx))
        out[s] = m2 / (seen - 1)
    return out


def passes_study(grad_fn: GradFn, valid: torch.Tensor, num_masks: list[int], tau: int, draws: int, reference: int,
                 seed: int, chunk: int, n_boot: int, sketch_dim: int, progress: Progress | None = None) -> PassesResult:
    """The measured ratio per K with its interval, beside the decomposition's prediction (module doc)."""
    ks = sorted(set(num_masks))
    per_seq = {arm: cycle_variances(grad_fn, valid, ks, tau, draws, strategy,
                                    make_generator(seed, tau, micro_step=stream), chunk, progress)
               for arm, (strategy, stream) in ARMS.items()}
    terms = pool_terms(grad_fn, valid, ks, tau, reference, draws, seed, chunk, sketch_dim, progress)
    pool = valid.shape[0]
    ones = np.ones((1, pool))
    rng = np.random.default_rng(make_generator(seed, 0, micro_step=STREAM_BOOT).initial_seed())
    counts = rng.multinomial(pool, np.full(pool, 1 / pool), size=n_boot) if n_boot else None
    point = {k: v[0] for k, v in term_estimates(terms, ones, resampled=False).items()}
    boot = term_estimates(terms, counts) if counts is not None else None

    def ci(values: np.ndarray | None) -> list[float]:  # no interval below MIN_UNITS sequences (intervals.py)
        return [float("nan")] * 2 if values is None or pool < MIN_UNITS else unit_interval(values, pool).bounds

    rows = []
    for j, k in enumerate(ks):
        dis, ind = per_seq["disjoint"][:, j], per_seq["independent"][:, j]
        measured = float(dis.mean() / ind.mean())
        predicted = float(1 + (k - 1) * point["c_fe"] / point["sigma_m2"])
        b_meas = None if counts is None else (counts @ dis) / (counts @ ind)
        b_pred = None if boot is None else 1 + (k - 1) * boot["c_fe"] / boot["sigma_m2"]
        mean_ci = (lambda v: ci(None if counts is None else counts @ v / pool))  # noqa: E731
        rows.append({
            "K": k, "tau": tau, "sequences": pool, "cycles_per_sequence": draws,
            "var_independent": float(ind.mean()), "var_independent_ci": mean_ci(ind),
            "var_disjoint": float(dis.mean()), "var_disjoint_ci": mean_ci(dis),
            "measured_ratio": measured, "measured_ratio_ci": ci(b_meas),
            "predicted_ratio": predicted, "predicted_ratio_ci": ci(b_pred),
            "measured_over_predicted": measured / predicted,
            "measured_over_predicted_ci": ci(None if b_meas is None else b_meas / b_pred),
            # the same two terms read off the direct measurement: Var_ind = K sigma_m2, Var_dis - Var_ind = K(K-1) c
            "sigma_m2_measured": float(ind.mean() / k),
            "c_fe_measured": float((dis.mean() - ind.mean()) / (k * (k - 1))),
            "sigma_m2": float(point["sigma_m2"]), "sigma_m2_ci": ci(None if boot is None else boot["sigma_m2"]),
            "c_fe": float(point["c_fe"]), "c_fe_ci": ci(None if boot is None else boot["c_fe"]),
            "measured_ratio_median_of_means": float(median_of_means(dis) / median_of_means(ind)),
        })
        rows[-1]["gates"], rows[-1]["prediction_gates"] = passes_gates(rows[-1], pool)
    stats = {"pool": pool, "tau": tau, "num_masks": ks, "draws": draws, "reference": reference, "bootstrap": n_boot,
             "sketch_dim": sketch_dim, "unit": "sequences", "note": DRIFT_NOTE,
             "interval": interval_note("sequences", pool, n_boot)}
    return PassesResult(rows=rows, per_sequence=per_seq, stats=stats)
