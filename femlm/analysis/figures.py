"""Figures of the gradient study (matplotlib set up by femlm.outputs: Agg backend, no display needed).

* ``covariance_distribution.png``: the paper's Figure 2, the distribution of Cov(g(m1), g(m2)) per
  Hamming-distance bin (violins with the quartiles).
* ``covariance_vs_hamming.png``: Figure 3, the mean covariance against H with a bootstrap 95% band.
* ``variance.png``: K-mask gradient variance under i.i.d. and fully-explored masks against K, with
  Theorem 1's predictions, and Var_FE / Var_iid with bootstrap 95% intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from femlm.outputs import pyplot, save_figure


def _bin_label(row: dict[str, Any]) -> str:
    lo, hi = row["h_low"], row["h_high"]
    return str(lo) if lo == hi else f"{lo}-{hi}"


def plot_covariance_distribution(rows: Sequence[dict[str, Any]], summary: Sequence[dict[str, Any]],
                                 path: Path, title: str) -> Path:
    covs = np.array([r["cov"] for r in rows])
    bins = np.array([r["bin"] for r in rows])
    data = [covs[bins == s["bin"]] for s in summary]
    fig, ax = pyplot().subplots(figsize=(7, 4))
    positions = np.arange(len(data))
    many = [i for i, d in enumerate(data) if d.size >= 2]  # a violin needs two points
    if many:
        parts = ax.violinplot([data[i] for i in many], positions=positions[many], showmedians=True,
                              showextrema=False, widths=0.8)
        for body in parts["bodies"]:
            body.set_alpha(0.5)
    for i, d in enumerate(data):
        ax.scatter(np.full(d.size, positions[i]), d, s=6, color="k", alpha=0.3, linewidths=0)
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_xticks(positions, [_bin_label(s) for s in summary], rotation=30)
    ax.set_xlabel("Hamming distance H(m1, m2)")
    ax.set_ylabel("Cov(g(m1), g(m2))")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def plot_covariance_vs_hamming(rows: Sequence[dict[str, Any]], summary: Sequence[dict[str, Any]],
                               spearman: dict[str, Any], path: Path, title: str) -> Path:
    fig, ax = pyplot().subplots(figsize=(6, 4))
    ax.scatter([r["hamming"] for r in rows], [r["cov"] for r in rows], s=6, alpha=0.25, color="C0",
               linewidths=0, label="mask pairs")
    x = np.array([s["h_mean"] for s in summary])
    mean = np.array([s["mean"] for s in summary])
    low = np.array([s["ci_low"] for s in summary])
    high = np.array([s["ci_high"] for s in summary])
    ax.plot(x, mean, "o-", color="C3", label="bin mean")
    if np.isfinite(low).all() and np.isfinite(high).all():
        ax.fill_between(x, low, high, color="C3", alpha=0.2, label="95% bootstrap CI")
    rho = spearman.get("rho_bins", float("nan"))
    ci = spearman.get("ci_bins", [float("nan")] * 2)
    ax.set_title(f"{title}\nSpearman(H, mean cov) = {rho:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]", fontsize=10)
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("Hamming distance H(m1, m2)")
    ax.set_ylabel("Cov(g(m1), g(m2))")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_variance(rows: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    ks = np.array([r["K"] for r in rows])
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 4))
    for key, label, color in (("iid", "i.i.d. masks", "C0"), ("fe", "fully-explored", "C3")):
        var = np.array([r[f"var_{key}"] for r in rows])
        ci = np.array([r[f"var_{key}_ci"] for r in rows], dtype=float)
        err = np.abs(np.stack([var - ci[:, 0], ci[:, 1] - var])) if np.isfinite(ci).all() else None
        left.errorbar(ks, var, yerr=err, fmt="o-", color=color, capsize=3, label=f"{label} (measured)")
        left.plot(ks, [r[f"theorem1_var_{key}"] for r in rows], "--", color=color, alpha=0.7,
                  label=f"{label} (Theorem 1)")
    left.set_xlabel("K (masks per sequence)")
    left.set_ylabel("Var of the K-mask gradient")
    left.legend(fontsize=8)
    ratio = np.array([r["ratio"] for r in rows])
    lo = np.array([r["ci_low"] for r in rows], dtype=float)
    hi = np.array([r["ci_high"] for r in rows], dtype=float)
    err = np.abs(np.stack([ratio - lo, hi - ratio])) if np.isfinite(lo).all() and np.isfinite(hi).all() else None
    right.errorbar(ks, ratio, yerr=err, fmt="o-", color="C2", capsize=3, label="measured (95% CI)")
    right.plot(ks, [r["theorem1_prediction"] for r in rows], "--", color="k", alpha=0.7,
               label="Theorem 1: 1 + (K-1) Cov_FE / Var")
    right.axhline(1.0, color="grey", lw=0.8, ls=":")
    right.set_xlabel("K (masks per sequence)")
    right.set_ylabel("Var_FE / Var_iid")
    right.legend(fontsize=8)
    return save_figure(fig, path, title)
