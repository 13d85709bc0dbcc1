"""Where the mini-batch gradient's variance comes from: data sampling against mask sampling (issue 17, part 1).

The paper's law of total variance splits the variance of the mini-batch gradient into a data-sampling term
and a mask-sampling term and analyses only the second. At equal rows per step FE with K copies holds K times
fewer sequences: it trades data variance for mask variance. This module measures both terms for a checkpoint
and a pool of sequences, predicts the variance of every arm's batch gradient and checks the prediction
against directly resampled batch gradients.

Notation. x a sequence of the corpus (the pool: ``S_p`` validation blocks, a sample of it), g(x, m) the
gradient of the masked-LM loss (`gradients`), ``mu_x = E_m g(x, m)``, ``mu = E_x mu_x``. All "variances" are
traces of covariance matrices (expected squared distances), like everywhere in `femlm.analysis`.

* data term  ``sigma_d2 = Var_x(mu_x) = E_x |mu_x - mu|^2``
* mask term  ``sigma_m2 = E_x Var_m(g | x) = E_x E_m |g(x, m) - mu_x|^2``
* copy covariance ``c = E_x E <g(x, m_1) - mu_x, g(x, m_2) - mu_x>`` for two masks of one K-mask draw:
  ``c_fe`` (disjoint masks), ``c_iid`` (independent masks: 0, measured as a control).

A batch of S slots -- each slot a sequence drawn from the corpus with K masked copies, slots independent --
has, by the law of total variance applied to one slot and Theorem 1 to its K copies,

    Var(g_batch) = (1/S) [sigma_d2 + sigma_m2 / K + (1 - 1/K) c]                                    (*)

Arms at R rows per step (``analysis.batch_rows``, the run's ``trainer.batch_size``):

* MLM: S = R, K = 1: ``(sigma_d2 + sigma_m2) / R``.
* FE / iid, **same rows per step** (``trainer.equal_compute: same_rows``): S = R / K sequences x K copies:
  ``(K sigma_d2 + sigma_m2 + (K - 1) c) / R``.
* FE / iid, **same sequences per step** (``trainer.equal_compute: same_sequences``): S = R sequences x K
  copies = R K rows, K times the compute of a step: ``(sigma_d2 + sigma_m2 / K + (1 - 1/K) c) / R``; equal compute gives FE K
  times fewer steps, so it is compared through variance x rows per step.

Per unit compute (variance x rows per step) **both modes give the same comparison**: ``K sigma_d2 + sigma_m2 +
(K - 1) c`` for FE or iid against ``sigma_d2 + sigma_m2`` for MLM. FE has the lower variance at equal compute
iff ``(K - 1)(sigma_d2 + c) < 0``, i.e. ``c_fe < -sigma_d2``; iid (c = 0) never has. The verdict per K is the
ratio ``(K sigma_d2 + sigma_m2 + (K - 1) c_fe) / (sigma_d2 + sigma_m2)`` with its 95% interval: "FE reduces the
training-gradient variance at equal compute" only when the whole interval is below 1.

Estimators (per pool sequence s, then averaged over the pool; each is unbiased):

* reference: J i.i.d. uniform masks -> ``mu^_s`` and ``v^_s`` (unbiased sample trace variance).
* D draws of Kmax masks per sequence and arm (FE: the first Kmax chunks of one random permutation; iid: Kmax
  independent masks), one tau for every K. Centred Gram matrices ``G_kl = <g_k - mu^_s, g_l - mu^_s>``.
  Centring at the estimate adds the same ``|mu^_s - mu_s|^2`` to every off-diagonal entry of both arms, and
  independent masks have covariance 0, so ``c_fe,s(K) = mean_draws mean_{k != l < K} G^fe_kl - mean_draws
  mean_{k != l} G^iid_kl``: unbiased even conditionally on mu^_s (the shift cancels; no correction term). The
  iid control ``c_iid,s(K) = mean G^iid_kl - v^_s / J`` is corrected with the unbiased estimate of
  ``E|mu^_s - mu_s|^2 = v_s / J`` instead and is reported (0 in expectation); the predictions use the exact
  c_iid = 0 (independence is a property of the sampler, not of the model). With one tau, a pair of masks of
  an FE K-draw is a uniform pair of disjoint tau-masks whatever K, so c_fe does not depend on K: the per-K
  estimates (first K masks of each draw) are reported as a check, and the pooled one (all pairs of the
  Kmax-draws) goes into the predictions. (c_fe would depend on K only through tau, e.g. tau = n / K in a
  full partition.)
* the reference and the iid draws are ``J' = J + D Kmax`` i.i.d. uniform masks: their mean ``mu~_s`` and
  unbiased sample trace variance ``v'_s``. ``sigma_m2 = mean_s v'_s``.
* ``sigma_d2 = sum_s |mu~_s - mean_t mu~_t|^2 / (S_p - 1) - mean_s v'_s / J'``: the between-sequence sum of
  squares of *estimated* means exceeds the true one by ``(1 - 1/S_p) sum_s v_s / J'`` in expectation, which
  the second term removes (the one-way random-effects ANOVA estimator; it can come out negative when the data
  term is small against ``sigma_m2 / J'``).

Intervals: expanded percentile bootstrap (`intervals`: percentile levels widened for the number of units, so
that 12 units cover about nominally) over the pool's sequences, every term resampled *jointly* (the same resampled
sequences), so predicted variances, ratios and verdicts get intervals that carry the terms' correlations.
The sequence is the unit because the sequences are the independent draws (each carries its own masks); a
percentile bootstrap rather than a jackknife or delta-method standard error because sigma_d2 is a variance
estimate with a skewed sampling distribution at S_p ~ 32-128 and the verdict is a ratio of such estimates.
The bootstrap of sigma_d2 needs the inner products ``<mu~_s, mu~_t>`` of all pairs of sequences: they come
from a seeded CountSketch of ``mu~_s - mu~_1`` (`sketch`; unbiased, ``analysis.sketch_dim`` = 0 stores the
exact vectors instead). The point estimate is exact (running sums), and the replicates are shifted by the
sketch's error at the point. A resample's between-sequence sum of squares has bootstrap expectation
``(1 - 1/S_p)`` times the sample's, so replicates scale it by ``S_p / (S_p - 1)`` to centre the percentile
interval on the estimate.

Direct check: B batches. Each draws R pool sequences uniformly with replacement and gives every one an FE and
an iid draw of Kmax fresh masks; prefixes then give every arm, K and mode from the same batch (the first K
masks of a draw are a K-draw with the same tau, the first R/K slots a same-rows batch, the first iid mask an
MLM row). ``measured = mean_b |g_b - mu^|^2 - E|mu^ - mu|^2`` with ``mu^ = mean_s mu~_s`` (independent of the
batch masks) and ``E|mu^ - mu|^2 = sum_s v_s / (J' S_p^2)`` estimated without bias. The batches sample the
*pool*, whose data variance is ``(1 - 1/S_p) sigma_d2``; the prediction they are checked against
(``check_predicted``) uses that factor. Intervals of measured values: bootstrap over batches, paired across
arms (which share sequences, so arm ratios are precise); measured / predicted combines the batch and sequence
bootstraps, which is conservative (the sequence bootstrap also counts the sampling of the pool itself, on which
the check is conditional).

Cost in gradient rows (one forward + backward of one masked sequence each):
``terms = S_p (J + 2 D Kmax)``, ``check = 2 B R Kmax``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from femlm.masking import make_generator

from .decomposition_check import check_batches, check_rows_fit
from .estimators import GradFn, Progress, reference_stats
from .intervals import interval_note, unit_interval
from .masks import sample_kmasks, sample_uniform
from .sketch import CountSketch, gram
from .units import pool_unit_arrays, robust_terms

# masks and resamples: one stream each (24 is decomposition_check.STREAM_CHECK)
STREAM_REFERENCE, STREAM_IID, STREAM_FE, STREAM_BOOT, STREAM_SKETCH = 21, 22, 23, 25, 26
NAN2 = [float("nan"), float("nan")]


def decomposition_cost(pool: int, reference: int, draws: int, kmax: int, batches: int, rows: int) -> dict[str, int]:
    """Gradient rows of the study: the terms, and the direct check of the predictions."""
    return {"terms": pool * (reference + 2 * draws * kmax), "check": 2 * batches * rows * kmax}


# ---------------------------------------------------------------------------------------------- terms
@dataclass
class PoolTerms:
    """Per-sequence estimates over the pool (one entry per sequence) and the cross-sequence Gram matrix."""

    num_masks: list[int]  # the K values, sorted
    tau: int
    reference: int  # J
    pooled: int  # J' = J + D Kmax
    draws: int  # D
    mask_var: np.ndarray  # [S_p] v'_s, unbiased tr Var_m(g | x_s)
    c_fe: np.ndarray  # [S_p, len(num_masks)] per K
    c_iid: np.ndarray  # [S_p, len(num_masks)]
    c_fe_all: np.ndarray  # [S_p] all pairs of the Kmax-draws
    c_iid_all: np.ndarray  # [S_p]
    single_fe: np.ndarray  # [S_p] tr Var(g(m)) from the FE masks (each marginally uniform: Lemma 2's check)
    gram: np.ndarray  # [S_p, S_p] <mu~_s - mu~_1, mu~_t - mu~_1>: exact diagonal, off-diagonal sketched or exact
    between: float  # exact sum_s |mu~_s - mean_t mu~_t|^2
    pool_mean: torch.Tensor  # [P] float64: mu^ = mean_s mu~_s
    sketch_dim: int

    @property
    def pool(self) -> int:
        return len(self.mask_var)


def _draw_grams(grad_fn: GradFn, seq: int, draws: torch.Tensor, centre: torch.Tensor, chunk: int,
                progress: Progress | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``draws[D, m, L]`` of one sequence -> (centred Gram per draw ``[D, m, m]``, sum of centred rows ``[P]``)."""
    count, m, length = draws.shape
    per_call = max(1, chunk // m)
    grams = torch.empty(count, m, m, dtype=torch.float64)
    total = torch.zeros_like(centre)
    for start in range(0, count, per_call):
        block = draws[start:start + per_call]
        seq_idx = torch.full((block.shape[0] * m,), seq, dtype=torch.long)
        centred = grad_fn(seq_idx, block.reshape(-1, length)).double().to(centre.device) - centre
        total += centred.sum(dim=0)
        c = centred.view(block.shape[0], m, -1)
        grams[start:start + block.shape[0]] = (c @ c.transpose(1, 2)).cpu()
        if progress is not None:
            progress.update(len(seq_idx))
    return grams, total


def _pair_mean(grams: torch.Tensor, k: int) -> float:
    """Mean off-diagonal entry of the leading k x k blocks, over draws."""
    g = grams[:, :k, :k]
    return float((g.sum(dim=(1, 2)) - g.diagonal(dim1=1, dim2=2).sum(dim=1)).mean() / (k * (k - 1)))


def pool_terms(grad_fn: GradFn, valid: torch.Tensor, num_masks: list[int], tau: int, reference: int, draws: int,
               seed: int, chunk: int, sketch_dim: int, progress: Progress | None = None) -> PoolTerms:
    """Per-sequence estimates of the mask term, the copy covariances and the sequence means (see module doc).

    Processes one sequence at a time, so memory is O(chunk x P) plus the sketches ``S_p x sketch_dim``
    (``S_p x P`` floats with ``sketch_dim`` 0).
    """
    pool, ks = valid.shape[0], sorted(set(num_masks))
    kmax = ks[-1]
    if reference < 2 or draws < 1 or pool < 2:
        raise ValueError("needs reference >= 2 masks, draws >= 1 and a pool of >= 2 sequences")
    ref_masks = sample_uniform(valid, tau, reference, make_generator(seed, tau, micro_step=STREAM_REFERENCE))
    iid = sample_kmasks(valid, tau, kmax, "iid", draws, make_generator(seed, tau, micro_step=STREAM_IID))
    fe = sample_kmasks(valid, tau, kmax, "fully_explored", draws, make_generator(seed, tau, micro_step=STREAM_FE))
    pooled = reference + draws * kmax
    mask_var, single_fe, diag = np.empty(pool), np.empty(pool), np.empty(pool)
    c_fe, c_iid = np.empty((pool, len(ks))), np.empty((pool, len(ks)))
    c_fe_all, c_iid_all = np.empty(pool), np.empty(pool)
    sketch: CountSketch | None = None
    origin = total = None
    images = []
    for s in range(pool):
        def on_seq(seq_idx: torch.Tensor, masks: torch.Tensor, s: int = s) -> torch.Tensor:
            return grad_fn(torch.full_like(seq_idx, s), masks)

        ref = reference_stats(on_seq, ref_masks[s:s + 1], chunk, progress)
        mean_s, v_s = ref.mean[0], float(ref.trace_var[0])
        g_iid, sum_iid = _draw_grams(grad_fn, s, iid[:, s], mean_s, chunk, progress)
        g_fe, _ = _draw_grams(grad_fn, s, fe[:, s], mean_s, chunk, progress)
        # Centring at the estimate mu^_s adds the same |mu^_s - mu_s|^2 to every off-diagonal entry of both arms;
        # independent masks have zero covariance, so the iid pairs measure that shift exactly and c_fe is the
        # difference (unbiased even conditionally on mu^_s). The iid control itself is corrected with v^_s / J.
        shift = _pair_mean(g_iid, kmax)
        c_fe[s] = [_pair_mean(g_fe, k) - shift for k in ks]
        c_iid[s] = [_pair_mean(g_iid, k) - v_s / reference for k in ks]
        c_fe_all[s], c_iid_all[s] = c_fe[s, -1], c_iid[s, -1]
        single_fe[s] = float(g_fe.diagonal(dim1=1, dim2=2).mean()) - shift
        # Pool the reference and the iid draws (all i.i.d. uniform masks): mean mu~_s, sample variance v'_s.
        delta = sum_iid / pooled  # mu~_s - mu^_s
        sum_sq = (reference - 1) * v_s + float(g_iid.diagonal(dim1=1, dim2=2).sum()) - pooled * float(delta @ delta)
        mask_var[s] = sum_sq / (pooled - 1)
        mu_s = mean_s + delta
        if origin is None:
            origin, total = mu_s.clone(), torch.zeros_like(mu_s)
            sketch = CountSketch(mu_s.numel(), sketch_dim, make_generator(seed, 0, micro_step=STREAM_SKETCH),
                                 mu_s.device)
        assert sketch is not None and total is not None
        x = mu_s - origin  # sketch after removing a common vector: the error then scales with the spread
        diag[s] = float(x @ x)
        total += x
        images.append(x[None].float() if sketch.exact else sketch(x[None]))
    assert origin is not None and total is not None
    g = gram(torch.cat(images)).cpu().numpy()
    np.fill_diagonal(g, diag)
    return PoolTerms(
        num_masks=ks, tau=tau, reference=reference, pooled=pooled, draws=draws, mask_var=mask_var, c_fe=c_fe,
        c_iid=c_iid, c_fe_all=c_fe_all, c_iid_all=c_iid_all, single_fe=single_fe, gram=g,
        between=float(diag.sum() - float(total @ total) / pool), pool_mean=origin + total / pool,
        sketch_dim=sketch_dim)


def term_estimates(terms: PoolTerms, counts: np.ndarray, resampled: bool = True) -> dict[str, np.ndarray]:
    """Terms from resampled sequences: ``counts[B, S_p]`` (how often each sequence is drawn).

    ``resampled`` False with ``counts`` all ones gives the point estimates. Returns ``[B]`` arrays
    (``c_fe_k``/``c_iid_k``: ``[B, len(num_masks)]``). The between-sequence sum of squares of a resample is
    ``sum_s n_s G_ss - (n^T G n) / S_p``, shifted by the difference between the exact and the Gram-based value
    at the point (zero up to rounding when the Gram matrix is exact) and, for a bootstrap replicate, scaled by
    ``S_p / (S_p - 1)`` (module doc).
    """
    pool = terms.pool
    w = counts / pool
    g = terms.gram
    between_gram = lambda n: n @ np.diag(g) - np.einsum("bs,st,bt->b", n, g, n) / pool  # noqa: E731
    shift = terms.between - float(between_gram(np.ones((1, pool)))[0])
    noise = terms.mask_var / terms.pooled
    scale = pool / (pool - 1) if resampled else 1.0
    return {
        "sigma_d2": (between_gram(counts) + shift) * scale / (pool - 1) - w @ noise,
        "sigma_m2": w @ terms.mask_var,
        "c_fe": w @ terms.c_fe_all, "c_iid": w @ terms.c_iid_all,
        "c_fe_k": w @ terms.c_fe, "c_iid_k": w @ terms.c_iid,
        "single_fe": w @ terms.single_fe,
        "centre_noise": (w @ noise) / pool,  # E|mu^ - mu|^2 of the pool mean
    }


# ---------------------------------------------------------------------------------------------- predictions
def arm_specs(num_masks: list[int], rows: int) -> list[dict[str, Any]]:
    """Every arm of the comparison: arm, mode, K, sequences and rows per step."""
    specs = [{"arm": "mlm", "mode": "baseline", "K": 1, "sequences": rows, "rows": rows}]
    for k in sorted(set(num_masks)):
        for arm in ("fe", "iid"):
            specs.append({"arm": arm, "mode": "same_rows", "K": k, "sequences": rows // k, "rows": rows})
            specs.append({"arm": arm, "mode": "same_sequences", "K": k, "sequences": rows, "rows": rows * k})
    return specs


def predicted_variance(est: dict[str, Any], spec: dict[str, Any], data_factor: float = 1.0) -> Any:
    """Eq. (*) for one arm: ``(data_factor sigma_d2 + sigma_m2 / K + (1 - 1/K) c) / S``.

    ``data_factor`` 1 for sequences from the corpus, ``1 - 1/S_p`` for sequences resampled from the pool
    (sigma_d2 has the unbiased S_p - 1 denominator; the pool's own variance has S_p). c is c_fe for FE and
    exactly 0 for iid masks."""
    k = spec["K"]
    slot = data_factor * est["sigma_d2"] + est["sigma_m2"] / k
    if spec["arm"] == "fe":
        slot = slot + (1 - 1 / k) * est["c_fe"]
    return slot / spec["sequences"]


# ---------------------------------------------------------------------------------------------- the study
@dataclass
class DecompositionResult:
    rows: list[dict[str, Any]]  # one per arm x mode x K (decomposition.csv)
    terms: dict[str, Any]  # sigma_d2, sigma_m2, c_fe(K), c_iid(K) with intervals
    verdicts: dict[str, Any]  # per K
    stats: dict[str, Any] = field(default_factory=dict)
    units: dict[str, np.ndarray] = field(default_factory=dict)  # per pool sequence (unit_arrays)


def _verdict(ci: list[float], name: str) -> str:
    """Where the 95% interval of ``name`` / MLM per unit compute lies against 1: a description of one run's interval,
    unadjusted, not a reading (a study reads it with its family: femlm.study.verdicts)."""
    if not all(np.isfinite(ci)):
        return "no interval (bootstrap = 0)"
    if ci[1] < 1:
        return f"{name} / MLM: 95% interval below 1 (unadjusted)"
    if ci[0] > 1:
        return f"{name} / MLM: 95% interval above 1 (unadjusted)"
    return f"{name} / MLM: 95% interval contains 1"


def decomposition_study(grad_fn: GradFn, valid: torch.Tensor, num_masks: list[int], tau: int, rows: int,
                        reference: int, draws: int, batches: int, seed: int, chunk: int, n_boot: int,
                        sketch_dim: int = 4096, progress: Progress | None = None) -> DecompositionResult:
    """The terms, the predictions for every arm at ``rows`` rows per step, the direct check and the verdicts.

    ``valid[S_p, L]`` is the pool (rows of the model inputs 0..S_p-1 of ``grad_fn``). ``batches`` 0 skips the
    direct check (measured columns are NaN).
    """
    ks = sorted(set(num_masks))
    check_rows_fit(rows, ks)
    terms = pool_terms(grad_fn, valid, ks, tau, reference, draws, seed, chunk, sketch_dim, progress)
    pool = terms.pool
    rng = np.random.default_rng(make_generator(seed, 0, micro_step=STREAM_BOOT).initial_seed())
    point = {k: v[0] for k, v in term_estimates(terms, np.ones((1, pool)), resampled=False).items()}
    boot = term_estimates(terms, rng.multinomial(pool, np.full(pool, 1 / pool), size=n_boot)) if n_boot else None
    measured_x = (check_batches(grad_fn, valid, ks, tau, rows, batches, terms.pool_mean, seed, chunk, progress)
                  if batches else None)
    batch_counts = rng.multinomial(batches, np.full(batches, 1 / batches), size=n_boot) if batches and n_boot else None
    factor = 1 - 1 / pool
    specs = arm_specs(ks, rows)

    def seq_ci(samples: np.ndarray) -> list[float]:
        return unit_interval(samples, pool).bounds  # the pool's sequences are the bootstrap's units

    def measured(key: tuple[str, int, str], counts: np.ndarray | None = None) -> Any:
        if measured_x is None:
            return float("nan") if counts is None else np.full(n_boot, np.nan)
        x = measured_x[key]
        mean = float(x.mean()) if counts is None else counts @ x / batches
        return mean - point["centre_noise"]

    mlm = specs[0]
    mlm_key = ("mlm", 1, "baseline")
    out_rows = []
    for spec in specs:
        key = (spec["arm"], spec["K"], spec["mode"])
        pred = float(predicted_variance(point, spec))
        pred_check = float(predicted_variance(point, spec, factor))
        meas = measured(key)
        per_compute = pred * spec["rows"] / (float(predicted_variance(point, mlm)) * rows)
        meas_per_compute = meas * spec["rows"] / (measured(mlm_key) * rows)
        row = {"arm": spec["arm"], "mode": spec["mode"], "K": spec["K"], "sequences_per_step": spec["sequences"],
               "rows_per_step": spec["rows"], "predicted_var": pred, "predicted_var_ci": list(NAN2),
               "check_predicted_var": pred_check, "measured_var": meas, "measured_var_ci": list(NAN2),
               "measured_over_predicted": meas / pred_check, "measured_over_predicted_ci": list(NAN2),
               "var_x_rows": pred * spec["rows"], "var_x_rows_ci": list(NAN2),
               "per_compute_vs_mlm": per_compute, "per_compute_vs_mlm_ci": list(NAN2),
               "measured_per_compute_vs_mlm": meas_per_compute, "measured_per_compute_vs_mlm_ci": list(NAN2),
               "batches": batches}
        if boot is not None:
            b_pred = predicted_variance(boot, spec)
            b_check = predicted_variance(boot, spec, factor)
            row["predicted_var_ci"] = seq_ci(b_pred)
            row["var_x_rows_ci"] = seq_ci(b_pred * spec["rows"])
            row["per_compute_vs_mlm_ci"] = seq_ci(b_pred * spec["rows"] / (predicted_variance(boot, mlm) * rows))
            if batch_counts is not None:
                b_meas = measured(key, batch_counts)
                row["measured_var_ci"] = unit_interval(b_meas, batches).bounds
                row["measured_over_predicted_ci"] = unit_interval(b_meas / b_check, min(batches, pool)).bounds
                row["measured_per_compute_vs_mlm_ci"] = unit_interval(
                    b_meas * spec["rows"] / (measured(mlm_key, batch_counts) * rows), batches).bounds
        out_rows.append(row)

    # ------------------------------------------------------------------ terms and verdicts
    def term(name: str, j: int | None = None) -> dict[str, Any]:
        value = point[name] if j is None else point[name][j]
        ci = list(NAN2) if boot is None else seq_ci(boot[name] if j is None else boot[name][:, j])
        return {"estimate": float(value), "ci": ci}

    terms_out = {
        "sigma_d2": term("sigma_d2"), "sigma_m2": term("sigma_m2"),
        "c_fe": term("c_fe"), "c_iid": term("c_iid"),
        "c_fe_by_K": {str(k): term("c_fe_k", j) for j, k in enumerate(ks)},
        "c_iid_by_K": {str(k): term("c_iid_k", j) for j, k in enumerate(ks)},
        "sigma_m2_from_fe_masks": term("single_fe"),
        "pool_mean_error": float(point["centre_noise"]),
    }
    verdicts: dict[str, Any] = {}
    for k in ks:
        by_arm: dict[str, Any] = {}
        for arm in ("fe", "iid"):
            row = next(r for r in out_rows if r["arm"] == arm and r["K"] == k and r["mode"] == "same_rows")
            seqs_row = next(r for r in out_rows if r["arm"] == arm and r["K"] == k and r["mode"] == "same_sequences")
            c_point, c_boot = (point["c_fe"], None if boot is None else boot["c_fe"]) if arm == "fe" else (0.0, 0.0)
            margin = point["sigma_d2"] + c_point
            margin_ci = list(NAN2) if boot is None else seq_ci(boot["sigma_d2"] + c_boot)
            name = "FE" if arm == "fe" else "i.i.d. K-mask"
            by_arm[arm] = {
                "per_compute_vs_mlm": row["per_compute_vs_mlm"], "ci": row["per_compute_vs_mlm_ci"],
                "verdict": _verdict(row["per_compute_vs_mlm_ci"], name),
                "c_plus_sigma_d2": float(margin), "c_plus_sigma_d2_ci": margin_ci,
                "measured_same_rows": row["measured_per_compute_vs_mlm"],
                "measured_same_rows_ci": row["measured_per_compute_vs_mlm_ci"],
                "measured_same_sequences": seqs_row["measured_per_compute_vs_mlm"],
                "measured_same_sequences_ci": seqs_row["measured_per_compute_vs_mlm_ci"],
            }
        fe_iid = ((k * point["sigma_d2"] + point["sigma_m2"] + (k - 1) * point["c_fe"])
                  / (k * point["sigma_d2"] + point["sigma_m2"]))
        fe_iid_ci = list(NAN2)
        if boot is not None:
            fe_iid_ci = seq_ci((k * boot["sigma_d2"] + boot["sigma_m2"] + (k - 1) * boot["c_fe"])
                               / (k * boot["sigma_d2"] + boot["sigma_m2"]))
        by_arm["fe_vs_iid"] = {"ratio": float(fe_iid), "ci": fe_iid_ci}
        verdicts[str(k)] = by_arm
    stats = {"pool": pool, "tau": tau, "num_masks": ks, "rows": rows, "reference": reference, "draws": draws,
             "pooled_iid_masks": terms.pooled, "batches": batches, "bootstrap": n_boot, "sketch_dim": sketch_dim,
             "pool_factor": factor,
             "intervals": {"terms": interval_note("pool sequences", pool, n_boot),
                           "measured": interval_note("directly resampled batches", batches, n_boot)}}
    terms_out["robust"] = robust_terms(terms)
    return DecompositionResult(rows=out_rows, terms=terms_out, verdicts=verdicts, stats=stats, units=pool_unit_arrays(terms))

