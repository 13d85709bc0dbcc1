"""The study's figures: loss against compute with seed bands, and downstream scores per seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from femlm.outputs import arm_color, pyplot, save_figure
from femlm.study.text import MODE_LABEL, label


def plot_curves(mode: str, res: dict[str, Any], path: Path, title: str) -> Path:
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(13, 4.6))
    scale = 1e15
    for arm, b in res["bands"].items():
        x = np.asarray(b["flops"]) / scale
        left.plot(x, b["mean"], color=arm_color(arm), label=f"{label(arm)} (n={int(np.nanmax(b['n']))})")
        left.fill_between(x, b["low"], b["high"], color=arm_color(arm), alpha=0.2)
    for key, t in res["targets"].items():
        left.axhline(t["loss"], color="grey", lw=0.6, ls=":")
        left.text(left.get_xlim()[0], t["loss"], f" target {key}", va="bottom", fontsize=7, color="grey")
    left.set_xlabel("training compute (PFLOP, model FLOPs)")
    left.set_ylabel("held-out masked-LM loss")
    left.set_title(f"{MODE_LABEL.get(mode, mode)}: mean and 95% t-band over seeds")
    left.legend(fontsize=8)
    for arm, d in res["differences"].items():
        x = np.asarray(d["flops"]) / scale
        right.plot(x, d["mean"], color=arm_color(arm), label=f"{label(arm)} - MLM (paired, n={d['n']})")
        right.fill_between(x, d["low"], d["high"], color=arm_color(arm), alpha=0.2)
    right.axhline(0, color="black", lw=0.8)
    right.set_xlabel("training compute (PFLOP)")
    right.set_ylabel("loss difference to MLM (same seed)")
    right.set_title("difference to MLM, 95% paired t-band (below 0: better)")
    right.legend(fontsize=8)
    return save_figure(fig, path, title)


def plot_downstream(down: dict[str, Any], path: Path, order: list[str]) -> Path:
    tasks = list(down)
    fig, axes = pyplot().subplots(1, max(len(tasks), 1), figsize=(6.2 * max(len(tasks), 1), 4.4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=False):
        d = down[task]
        names = [n for n in order if n in d["scores"]]
        for i, name in enumerate(names):
            vals = [v for v in d["scores"][name] if v is not None]
            s = d["summary"][name]
            ax.errorbar([i], [s["estimate"]], yerr=[[s["estimate"] - (s["low"] if s["low"] is not None else s["estimate"])],
                                                     [(s["high"] if s["high"] is not None else s["estimate"]) - s["estimate"]]],
                        fmt="o", color=arm_color(name), capsize=5, ms=7)
            ax.scatter(np.full(len(vals), i) + np.linspace(-0.15, 0.15, len(vals)), vals, s=12,
                       color=arm_color(name), alpha=0.5)
        if d["majority"] is not None:
            ax.axhline(d["majority"], color="black", ls="--", lw=0.8, label="majority class")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(names)), [label(n) for n in names], rotation=15, fontsize=8)
        ax.set_ylabel(f"test {d['metric']}")
        ax.set_title(f"{task}: mean, 95% t-interval and each fine-tuning seed")
    return save_figure(fig, path)


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
