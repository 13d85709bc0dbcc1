"""Figures as PNG (matplotlib, Agg backend: no display needed) with the CSV of the plotted numbers.

Each function returns a `Figure` record: written (with its files) or skipped (with the reason), so the
report's README can say plainly which figures the collected runs could not support.
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from femlm.report.build import arm_label, efficiency_series, split_series
from femlm.report.collect import Collection
from femlm.report.paper import TASK_HEADERS


@dataclass
class Figure:
    key: str
    title: str
    status: str  # written | skipped
    files: list[str] = field(default_factory=list)  # paths relative to the report's out_dir
    note: str = ""
    sources: dict[str, str] = field(default_factory=dict)  # analysis: copied folder name -> analysis.json


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def _write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(["" if v is None else v for v in row] for row in rows)


def _axes(plt: Any, panels: int) -> tuple[Any, list[Any]]:
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.8), squeeze=False)
    return fig, list(axes[0])


def efficiency_figure(collection: Collection, out_dir: Path) -> Figure:
    title = "Figure 4 (left): downstream score vs pre-training step, MLM vs FE-MLM"
    series = efficiency_series(collection)
    if not series:
        return Figure("efficiency", title, "skipped", note="no efficiency.json and no fine-tuning results of one "
                      "arm at two or more pre-training steps (run `femlm evaluate evaluate.sweep=true`)")
    plt = _plt()
    fig, axes = _axes(plt, len(series))
    rows: list[list[object]] = []
    for ax, (task, arms) in zip(axes, sorted(series.items()), strict=True):
        for masking, points in sorted(arms.items()):
            steps = [p[0] for p in points]
            means = [p[1] for p in points]
            ax.plot(steps, means, marker="o", label=arm_label(masking))
            stds = [p[2] or 0.0 for p in points]
            ax.fill_between(steps, [m - s for m, s in zip(means, stds, strict=True)],
                            [m + s for m, s in zip(means, stds, strict=True)], alpha=0.2)
            rows += [[task, masking, *p] for p in points]
        ax.set_xlabel("pre-training step")
        ax.set_ylabel(f"{TASK_HEADERS.get(task, task)} score (×100)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "figure4_efficiency.png", dpi=120)
    plt.close(fig)
    _write_csv(out_dir / "figure4_efficiency.csv", ["task", "masking", "step", "mean", "std"], rows)
    return Figure("efficiency", title, "written", ["figures/figure4_efficiency.png", "figures/figure4_efficiency.csv"])


def splits_figure(collection: Collection, out_dir: Path) -> Figure:
    title = "Figure 4 (right): effect of the split number K (FE-MLM)"
    series = split_series(collection)
    if not series:
        return Figure("splits", title, "skipped", note="no FE-MLM fine-tuning results from checkpoints that differ "
                      "in masking.splits (sweep: `femlm continual-pretrain -m masking.splits=2,4,6,8`)")
    plt = _plt()
    fig, axes = _axes(plt, 1)
    rows: list[list[object]] = []
    for task, points in sorted(series.items()):
        axes[0].errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] or 0.0 for p in points],
                         marker="o", capsize=3, label=TASK_HEADERS.get(task, task))
        rows += [[task, *p] for p in points]
    axes[0].set_xlabel("number of splits K")
    axes[0].set_ylabel("score (×100)")
    axes[0].set_xticks(sorted({p[0] for pts in series.values() for p in pts}))
    axes[0].grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "ablation_splits.png", dpi=120)
    plt.close(fig)
    _write_csv(out_dir / "ablation_splits.csv", ["task", "splits", "mean", "std", "n"], rows)
    return Figure("splits", title, "written", ["figures/ablation_splits.png", "figures/ablation_splits.csv"])


def loss_figure(collection: Collection, out_dir: Path) -> Figure:
    title = "Pre-training: held-out MLM loss vs step, one line per arm"
    runs = [r for r in collection.pretrain if r.eval_curve]
    if not runs:
        return Figure("pretrain_loss", title, "skipped", note="no pre-training run with eval_loss records in "
                      "metrics.jsonl")
    stages = sorted({str(r.summary.get("command") or "pretrain") for r in runs})
    plt = _plt()
    fig, axes = _axes(plt, len(stages))
    rows: list[list[object]] = []
    for ax, stage in zip(axes, stages, strict=True):
        for run in sorted((r for r in runs if str(r.summary.get("command") or "pretrain") == stage),
                          key=lambda r: (str(r.summary.get("masking")), str(r.dir))):
            label = f"{arm_label(run.summary.get('masking'))} ({run.summary.get('domain')}, {run.dir.name})"
            ax.plot([s for s, _ in run.eval_curve], [v for _, v in run.eval_curve], marker=".", label=label)
            rows += [[str(run.dir), stage, run.summary.get("masking"), run.summary.get("domain"), s, v]
                     for s, v in run.eval_curve]
        ax.set_title(stage, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("eval loss (fixed held-out masks)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "pretrain_loss.png", dpi=120)
    plt.close(fig)
    _write_csv(out_dir / "pretrain_loss.csv", ["run", "command", "masking", "domain", "step", "eval_loss"], rows)
    return Figure("pretrain_loss", title, "written", ["figures/pretrain_loss.png", "figures/pretrain_loss.csv"])


def analysis_figures(collection: Collection, out_dir: Path) -> Figure:
    """Figures 2-3 are drawn by `femlm analyze`; copy its PNGs and summary CSVs, one folder per run."""
    title = "Figures 2-3: gradient covariance vs Hamming distance; K-mask variance (femlm analyze)"
    if not collection.analysis:
        return Figure("analysis", title, "skipped", note="no analysis.json (run `femlm analyze both`)")
    files: list[str] = []
    used: set[str] = set()
    sources: dict[str, str] = {}
    for run in sorted(collection.analysis, key=lambda r: str(r.path)):
        name = run.path.parent.name
        while name in used:  # two runs with the same folder name (sweep subdirs 0, 1, ...)
            name = f"{run.path.parent.parent.name}_{name}"
        used.add(name)
        sources[name] = str(run.path)
        target = out_dir / "analysis" / name
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(run.files, key=lambda p: (p.suffix.lower() != ".png", p.name)):
            if source.name in ("covariance.csv",):
                continue  # one row per mask pair: large, and the summary CSV holds what the figure shows
            shutil.copy2(source, target / source.name)
            files.append(f"figures/analysis/{name}/{source.name}")
    if not files:
        return Figure("analysis", title, "skipped", note="analysis.json found but it lists no PNG/CSV files")
    return Figure("analysis", title, "written", files, sources=sources)


def write_figures(collection: Collection, out_dir: Path) -> list[Figure]:
    figures_dir = out_dir / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    return [efficiency_figure(collection, figures_dir), splits_figure(collection, figures_dir),
            loss_figure(collection, figures_dir), analysis_figures(collection, figures_dir)]
