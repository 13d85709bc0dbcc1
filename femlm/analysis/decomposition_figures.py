"""Figures of `femlm analyze decomposition` (matplotlib set up by femlm.outputs), every estimate with its 95%
interval.

* ``decomposition.png``: (a) the terms sigma_d2, sigma_m2, c_FE(K), c_iid(K); (b) variance x rows per step
  (per unit compute) of every arm against K, predicted and measured; (c) measured / predicted per arm and mode.
* ``null_model.png``: measured Cov(H) against the additive null model's, and the residual (interaction) part.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from femlm.outputs import pyplot, save_figure


def _err(value: Any, ci: Sequence[float]) -> np.ndarray | None:
    """Error-bar half-lengths ``[[below], [above]]`` or None when the interval is missing."""
    value = np.atleast_1d(np.asarray(value, dtype=float))
    ci_arr = np.asarray(ci, dtype=float).reshape(-1, 2)
    if not np.isfinite(ci_arr).all():
        return None
    return np.abs(np.stack([value - ci_arr[:, 0], ci_arr[:, 1] - value]))


def plot_decomposition(rows: Sequence[dict[str, Any]], terms: dict[str, Any], path: Path, title: str) -> Path:
    fig, (left, mid, right) = pyplot().subplots(1, 3, figsize=(16, 4.6))
    # (a) the terms
    labels, values, cis, colors = ["sigma_d2", "sigma_m2"], [terms["sigma_d2"], terms["sigma_m2"]], [], ["C0", "C1"]
    for k, t in terms["c_fe_by_K"].items():
        labels.append(f"c_FE K={k}")
        values.append(t)
        colors.append("C3")
    for k, t in terms["c_iid_by_K"].items():
        labels.append(f"c_iid K={k}")
        values.append(t)
        colors.append("C7")
    est = np.array([v["estimate"] for v in values])
    cis = [v["ci"] for v in values]
    x = np.arange(len(labels))
    left.bar(x, est, color=colors, alpha=0.7, yerr=_err(est, cis), capsize=3)
    left.axhline(0.0, color="grey", lw=0.8)
    left.axhline(-terms["sigma_d2"]["estimate"], color="C0", lw=1, ls="--", label="-sigma_d2 (FE wins iff c_FE below)")
    left.set_xticks(x, labels, rotation=35, ha="right", fontsize=8)
    left.set_ylabel("trace of covariance (per sequence)")
    left.set_title("terms (95% bootstrap CI over sequences)", fontsize=9)
    left.legend(fontsize=7)
    # (b) variance x rows per step against K
    mlm = next(r for r in rows if r["arm"] == "mlm")
    ks = sorted({r["K"] for r in rows if r["arm"] != "mlm"})
    mid.axhline(mlm["var_x_rows"], color="k", lw=1, label="MLM predicted")
    lo, hi = mlm["var_x_rows_ci"]
    if np.isfinite([lo, hi]).all():
        mid.axhspan(lo, hi, color="k", alpha=0.1)
    step = 0.06 * (max(ks) - min(ks) or 1)  # side-by-side offsets around each K
    for arm, color, base in (("fe", "C3", -2), ("iid", "C7", 1)):
        arm_rows = {(r["K"], r["mode"]): r for r in rows if r["arm"] == arm}
        pred = np.array([arm_rows[(k, "same_rows")]["var_x_rows"] for k in ks])
        err = _err(pred, [arm_rows[(k, "same_rows")]["var_x_rows_ci"] for k in ks])
        mid.errorbar(np.array(ks) + base * step, pred, yerr=err, fmt="o", color=color, capsize=3,
                     label=f"{arm.upper()} predicted (both modes)")
        for offset, (mode, marker) in enumerate((("same_rows", "s"), ("same_sequences", "^")), start=1):
            meas = np.array([arm_rows[(k, mode)]["measured_var"] * arm_rows[(k, mode)]["rows_per_step"] for k in ks])
            ci = [np.array(arm_rows[(k, mode)]["measured_var_ci"]) * arm_rows[(k, mode)]["rows_per_step"] for k in ks]
            if np.isfinite(meas).any():
                mid.errorbar(np.array(ks) + (base + offset * 0.5) * step, meas, yerr=_err(meas, ci), fmt=marker,
                             mfc="none", color=color, capsize=2, alpha=0.8,
                             label=f"{arm.upper()} measured (pool), {mode.replace('_', ' ')}")
    meas_mlm = mlm["measured_var"] * mlm["rows_per_step"]
    if np.isfinite(meas_mlm):
        mid.axhline(meas_mlm, color="k", lw=1, ls=":", label="MLM measured")
    mid.set_xticks(ks)
    mid.set_xlabel("K (copies per sequence)")
    mid.set_ylabel("Var(batch gradient) x rows per step")
    mid.set_title("per unit compute (lower is better)", fontsize=9)
    mid.legend(fontsize=6)
    # (c) measured / predicted
    names, ratio, ratio_ci = [], [], []
    for r in rows:
        names.append("MLM" if r["arm"] == "mlm" else f"{r['arm'].upper()} K={r['K']} {r['mode'].replace('same_', '')}")
        ratio.append(r["measured_over_predicted"])
        ratio_ci.append(r["measured_over_predicted_ci"])
    y = np.arange(len(names))
    ratio_arr = np.array(ratio, dtype=float)
    if np.isfinite(ratio_arr).any():
        right.errorbar(ratio_arr, y, xerr=_err(ratio_arr, ratio_ci), fmt="o", color="C2", capsize=3)
    right.axvline(1.0, color="grey", lw=0.8, ls=":")
    right.set_yticks(y, names, fontsize=7)
    right.invert_yaxis()
    right.set_xlabel("measured / predicted batch variance")
    right.set_title("direct check (95% CI)", fontsize=9)
    return save_figure(fig, path, title)


def null_model_intervals(rows: Sequence[dict[str, Any]], summary: dict[str, Any]) -> bool:
    """Whether the null model's intervals may be drawn: over whole sequences (``*_ci_seq``, ``by_sequence``) and
    from at least MIN_UNITS of them; intervals over mask pairs within one run's few sequences are never drawn."""
    from femlm.analysis.intervals import MIN_UNITS

    count = (summary.get("by_sequence") or {}).get("count")
    seq = [r.get(f"{k}_ci_seq") for r in rows for k in ("measured", "additive", "residual")]
    return (isinstance(count, int) and count >= MIN_UNITS and bool(seq)
            and np.isfinite(np.asarray([c if c is not None else [np.nan] * 2 for c in seq], dtype=float)).all())


def plot_null_model(rows: Sequence[dict[str, Any]], summary: dict[str, Any], path: Path, title: str) -> dict[str, Any]:
    """``null_model.png``: the measured Cov(H) against the additive null model's, and the residual; intervals over
    whole sequences only, and only from MIN_UNITS of them (`null_model_intervals`). Returns what it drew (the
    numbers in its titles and the curves), so a test can hold it to the text beside it."""
    show = null_model_intervals(rows, summary)
    by_seq = summary.get("by_sequence") or {}
    count = by_seq.get("count") if by_seq else None

    def interval(key: str) -> list[float | None]:
        value = summary.get(key)
        ci = by_seq.get(f"{key}_ci") if show else None
        return [value, *(ci if ci is not None else [None, None])]

    def text(v: list[float | None]) -> str:
        if v[0] is None:
            return "n/a"
        return f"{v[0]:.2f}" + (f" [{v[1]:.2f}, {v[2]:.2f}]" if v[1] is not None and v[2] is not None else
                                " (no interval)")

    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4.2))
    x = np.array([r["h_mean"] for r in rows])
    drawn: dict[str, Any] = {"h_mean": x.tolist(), "intervals": show, "sequences": count}
    for key, label, color in (("measured", "measured Cov(H)", "C0"), ("additive", "additive null model", "C1"),
                              ("residual", "residual = measured - additive", "C3")):
        value = np.array([r[key] for r in rows], dtype=float)
        ax = right if key == "residual" else left
        ax.plot(x, value, "o-", color=color, label=label)
        drawn[key] = value.tolist()
        if show:
            ci = np.array([r[f"{key}_ci_seq"] for r in rows], dtype=float)
            ax.fill_between(x, ci[:, 0], ci[:, 1], color=color, alpha=0.2)
            drawn[f"{key}_ci"] = ci.tolist()
    drawn["fraction_explained"] = interval("fraction_explained")
    drawn["residual_rho_bins"] = interval("residual_rho_bins")
    units = f"95% intervals over {count} sequences" if show else (
        f"no intervals: {count} sequences" if count else "no intervals: too few sequences, or none resampled")
    for ax in (left, right):
        ax.axhline(0.0, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("Hamming distance H(m1, m2)")
        ax.legend(fontsize=8)
    left.set_ylabel("Cov(g(m1), g(m2))")
    left.set_title(f"additive model explains {text(drawn['fraction_explained'])} of the fall ({units})", fontsize=9)
    right.set_ylabel("residual covariance")
    right.set_title(f"interaction part: Spearman(H, residual) = {text(drawn['residual_rho_bins'])}", fontsize=9)
    save_figure(fig, path, title)
    return drawn
