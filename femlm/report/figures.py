"""Figures as PNG (matplotlib, Agg backend: no display needed) with the CSV of the plotted numbers.

Each function returns a `Figure` record: written (with its files) or skipped (with the reason), so the
report's README can say plainly which figures the collected runs could not support.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from femlm.outputs import arm_colors, pyplot, save_figure, write_csv
from femlm.paper import TASK_HEADERS
from femlm.report.build import arm_label, efficiency_series, split_series
from femlm.report.collect import Collection


@dataclass
class Figure:
    key: str
    title: str
    status: str  # written | skipped
    files: list[str] = field(default_factory=list)  # paths relative to the report's out_dir
    note: str = ""
    sources: dict[str, str] = field(default_factory=dict)  # analysis: copied folder name -> analysis.json


# Each figure's title, and why it is skipped when the collected runs cannot support it.
TITLES = {
    "efficiency": "Figure 4 (left): downstream score vs pre-training step, MLM vs FE-MLM",
    "splits": "Figure 4 (right): effect of the split number K (FE-MLM)",
    "pretrain_loss": "Pre-training: held-out MLM loss vs step, one line per arm",
    "analysis": "Figures 2-3: gradient covariance vs Hamming distance; K-mask variance (femlm analyze)",
}
SKIPPED = {
    "efficiency": "no efficiency.json and no fine-tuning results of one arm at two or more pre-training steps "
                  "(run `femlm evaluate evaluate.sweep=true`)",
    "splits": "no FE-MLM fine-tuning results from checkpoints that differ in masking.num_masks (sweep: "
              "`femlm continual-pretrain -m masking.num_masks=2,4,6,8`)",
    "pretrain_loss": "no pre-training run with eval_loss records in metrics.jsonl",
    "analysis": "no analysis.json (run `femlm analyze both`)",
}


def _skipped(key: str, note: str | None = None) -> Figure:
    return Figure(key, TITLES[key], "skipped", note=note or SKIPPED[key])


def _canvas(panels: int) -> tuple[Any, Any, list[Any]]:
    """(pyplot, figure, its `panels` axes side by side)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.8), squeeze=False)
    return plt, fig, list(axes[0])


def _label(ax: Any, xlabel: str, ylabel: str, legend_size: int = 8) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def _written(key: str, plt: Any, fig: Any, out_dir: Path, stem: str, header: list[str],
             rows: list[list[object]]) -> Figure:
    """Save `fig` as <stem>.png and the plotted numbers as <stem>.csv; the Figure record of both."""
    title = TITLES[key]
    save_figure(fig, out_dir / f"{stem}.png", title)
    write_csv(out_dir / f"{stem}.csv", rows, header)
    return Figure(key, title, "written", [f"figures/{stem}.png", f"figures/{stem}.csv"])


def efficiency_figure(collection: Collection, out_dir: Path) -> Figure:
    series = efficiency_series(collection)
    if not series:
        return _skipped("efficiency")
    plt, fig, axes = _canvas(len(series))
    rows: list[list[object]] = []  # the plotted numbers, for the CSV
    colors = arm_colors(m for arms in series.values() for m in arms)
    for ax, (task, arms) in zip(axes, sorted(series.items()), strict=True):
        for masking, points in sorted(arms.items()):
            steps = [p[0] for p in points]
            means = [p[1] for p in points]
            ax.plot(steps, means, marker="o", label=arm_label(masking), color=colors[str(masking)])
            stds = [p[2] or 0.0 for p in points]
            ax.fill_between(steps, [m - s for m, s in zip(means, stds, strict=True)],
                            [m + s for m, s in zip(means, stds, strict=True)], alpha=0.2, color=colors[str(masking)])
            rows += [[task, masking, *p] for p in points]
        _label(ax, "pre-training step", f"{TASK_HEADERS.get(task, task)} score (×100)")
    return _written("efficiency", plt, fig, out_dir, "figure4_efficiency",
                    ["task", "masking", "step", "mean", "std"], rows)


def splits_figure(collection: Collection, out_dir: Path) -> Figure:
    series = split_series(collection)
    if not series:
        return _skipped("splits")
    plt, fig, axes = _canvas(1)
    rows: list[list[object]] = []
    for task, points in sorted(series.items()):
        axes[0].errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] or 0.0 for p in points],
                         marker="o", capsize=3, label=TASK_HEADERS.get(task, task))
        rows += [[task, *p] for p in points]
    axes[0].set_xticks(sorted({p[0] for pts in series.values() for p in pts}))
    _label(axes[0], "number of masks K (the paper's number of splits)", "score (×100)")
    return _written("splits", plt, fig, out_dir, "ablation_splits", ["task", "num_masks", "mean", "std", "n"],
                    rows)


def loss_figure(collection: Collection, out_dir: Path) -> Figure:
    runs = [r for r in collection.pretrain if r.eval_curve]
    if not runs:
        return _skipped("pretrain_loss")
    stages = sorted({str(r.summary.get("command") or "pretrain") for r in runs})
    plt, fig, axes = _canvas(len(stages))
    rows: list[list[object]] = []
    colors = arm_colors(r.summary.get("masking") for r in runs)
    for ax, stage in zip(axes, stages, strict=True):
        for run in sorted((r for r in runs if str(r.summary.get("command") or "pretrain") == stage),
                          key=lambda r: (str(r.summary.get("masking")), str(r.dir))):
            label = f"{arm_label(run.summary.get('masking'))} K={run.num_masks} ({run.summary.get('domain')}, {run.dir.name})"
            ax.plot([s for s, _ in run.eval_curve], [v for _, v in run.eval_curve], marker=".", label=label,
                    color=colors[str(run.summary.get("masking"))])
            rows += [[str(run.dir), stage, run.summary.get("masking"), run.summary.get("domain"), s, v]
                     for s, v in run.eval_curve]
        ax.set_title(stage, fontsize=9)
        _label(ax, "step", "eval loss (fixed held-out masks)", legend_size=7)
    return _written("pretrain_loss", plt, fig, out_dir, "pretrain_loss",
                    ["run", "command", "masking", "domain", "step", "eval_loss"], rows)


def analysis_figures(collection: Collection, out_dir: Path) -> Figure:
    """Figures 2-3 are drawn by `femlm analyze`; copy its PNGs and summary CSVs, one folder per run."""
    if not collection.analysis:
        return _skipped("analysis")
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
        return _skipped("analysis", "analysis.json found but it lists no PNG/CSV files")
    return Figure("analysis", TITLES["analysis"], "written", files, sources=sources)


def write_figures(collection: Collection, out_dir: Path) -> list[Figure]:
    figures_dir = out_dir / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    return [efficiency_figure(collection, figures_dir), splits_figure(collection, figures_dir),
            loss_figure(collection, figures_dir), analysis_figures(collection, figures_dir)]
