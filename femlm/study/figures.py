"""The study's figures: loss against compute with seed bands, and downstream scores per seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from femlm.outputs import arm_colors, pyplot, save_figure
from femlm.study.arms import label
from femlm.study.text import MODE_LABEL


def plot_curves(mode: str, res: dict[str, Any], path: Path, title: str,
                baseline: tuple[str, float] | None = None) -> dict[str, Any]:
    """Loss against compute, mean and 95% band per arm, and each arm's paired difference to MLM; ``baseline``: a
    reference loss drawn across (the unigram plateau, (label, loss)). Returns what it drew (the last point of every
    curve, the targets, the baseline), so a test can hold the figure to the README beside it."""
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(13, 4.6))
    scale = 1e15
    colors = arm_colors([*res["bands"], *res["differences"]])
    drawn: dict[str, Any] = {"path": Path(path), "final": {}, "difference_final": {}, "targets": {},
                             "baseline": None}
    for arm, b in res["bands"].items():
        x = np.asarray(b["flops"]) / scale
        left.plot(x, b["mean"], color=colors[arm], label=f"{label(arm)} (n={int(np.nanmax(b['n']))})")
        left.fill_between(x, b["low"], b["high"], color=colors[arm], alpha=0.2)
        drawn["final"][arm] = _last(b["mean"])
    if baseline is not None:
        left.axhline(baseline[1], color="black", lw=1.0, ls="--", label=f"{baseline[0]} ({baseline[1]:.3f})")
        drawn["baseline"] = float(baseline[1])
    for i, (key, t) in enumerate(res["targets"].items()):  # labels at alternate ends: they never overlap
        left.axhline(t["loss"], color="grey", lw=0.6, ls=":")
        left.annotate(f"target {key} ({t['loss']:.3f})", (0.01 if i % 2 == 0 else 0.99, t["loss"]),
                      xycoords=("axes fraction", "data"), ha="left" if i % 2 == 0 else "right",
                      va="bottom" if i % 2 == 0 else "top", fontsize=7, color="grey")
        drawn["targets"][key] = float(t["loss"])
    left.set_xlabel("training compute (PFLOP, model FLOPs)")
    left.set_ylabel("held-out masked-LM loss")
    left.set_title(f"{MODE_LABEL.get(mode, mode)}: mean and 95% t-band over seeds")
    left.legend(fontsize=8)
    for arm, d in res["differences"].items():
        x = np.asarray(d["flops"]) / scale
        right.plot(x, d["mean"], color=colors[arm], label=f"{label(arm)} - MLM (paired, n={d['n']})")
        right.fill_between(x, d["low"], d["high"], color=colors[arm], alpha=0.2)
        drawn["difference_final"][arm] = _last(d["mean"])
    right.axhline(0, color="black", lw=0.8)
    right.set_xlabel("training compute (PFLOP)")
    right.set_ylabel("loss difference to MLM (same seed)")
    right.set_title("difference to MLM, 95% paired t-band (below 0: lower loss)")
    right.legend(fontsize=8)
    save_figure(fig, path, title)
    return drawn


def _last(values: Any) -> float | None:
    arr = np.asarray(values, dtype=float)
    finite = arr[np.isfinite(arr)]
    return float(finite[-1]) if len(finite) else None


def plot_downstream(down: dict[str, Any], path: Path, order: list[str]) -> dict[str, Any]:
    """Per task: each row's mean and 95% interval, every fine-tuning seed, the majority class. Returns the means
    it drew."""
    tasks = list(down)
    colors = arm_colors([n for d in down.values() for n in d["scores"]])
    drawn: dict[str, Any] = {"path": Path(path), "means": {}}
    fig, axes = pyplot().subplots(1, max(len(tasks), 1), figsize=(6.2 * max(len(tasks), 1), 4.4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=False):
        d = down[task]
        names = [n for n in order if n in d["scores"]]
        for i, name in enumerate(names):
            vals = [v for v in d["scores"][name] if v is not None]
            s = d["summary"][name]
            ax.errorbar([i], [s["estimate"]], yerr=[[s["estimate"] - (s["low"] if s["low"] is not None else s["estimate"])],
                                                     [(s["high"] if s["high"] is not None else s["estimate"]) - s["estimate"]]],
                        fmt="o", color=colors[name], capsize=5, ms=7)
            drawn["means"][(task, name)] = float(s["estimate"])
            ax.scatter(np.full(len(vals), i) + np.linspace(-0.15, 0.15, len(vals)), vals, s=12,
                       color=colors[name], alpha=0.5)
        if d["majority"] is not None:
            ax.axhline(d["majority"], color="black", ls="--", lw=0.8, label="majority class")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(names)), [label(n) for n in names], rotation=15, fontsize=8)
        ax.set_ylabel(f"test {d['metric']}")
        ax.set_title(f"{task}: mean, 95% t-interval and each fine-tuning seed")
    save_figure(fig, path)
    return drawn


def bands_from_csv(path: Path, pre: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per mode, what `plot_curves` draws, read back from the committed ``pretrain_bands.csv`` (the run
    directories are not kept) and study.json's targets (``pre``: its ``pretraining``)."""
    import csv

    out: dict[str, dict[str, Any]] = {}
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            res = out.setdefault(r["mode"], {"bands": {}, "differences": {},
                                             "targets": (pre.get(r["mode"]) or {}).get("targets", {})})
            diff = r["kind"] == "paired difference"
            series = r["series"].removesuffix("-mlm") if diff else r["series"]
            b = res["differences" if diff else "bands"].setdefault(
                series, {"flops": [], "mean": [], "low": [], "high": [], "n": []})
            for key in ("flops", "mean", "low", "high"):
                value = r["train_flops" if key == "flops" else key]
                b[key].append(float(value) if value not in ("", None) else np.nan)
            b["n"].append(float(r["n"]) if r["n"] else np.nan)
    for res in out.values():
        for d in res["differences"].values():
            d["n"] = int(np.nanmax(d["n"])) if d["n"] else 0
    return out


def null_figure(j: dict[str, Any], where: str, out: Path, title: str) -> dict[str, Any] | None:
    """null_model_<where>.png drawn from null_model_<where>.csv (the analysis' figure code): intervals over whole
    sequences and only from enough of them, as the text beside it prints them. Returns what it drew."""
    from femlm.analysis.decomposition_figures import plot_null_model
    from femlm.study.tables import csv_table

    path = out / f"null_model_{where}.csv"
    summary = (j.get("null_model") or {}).get("summary")
    if not path.is_file() or not summary:
        return None
    return plot_null_model(csv_table(path), summary, out / f"null_model_{where}.png",
                           f"Covariance against Hamming distance beside the additive null model: {title}")
