"""Collect the pre-flight's runs (run.sh) into this folder: curves (CSV + PNG), numbers.json, results.md and raw/
(each run's small files: summary, metrics, config, fine-tuning results and predictions).

    .venv/bin/python results/study-gpu/preflight/collect.py runs/preflight results/study-gpu/preflight

Reads only what the femlm commands wrote; the gates and the declared margin are the README's (restated here as
constants so a changed declaration shows in the diff).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from femlm.outputs import pyplot, save_figure, write_csv

ARMS = ("mlm_subword", "fe_passes_subword", "fe_subword")
MARGIN = 0.40  # declared: the warm-up's final held-out loss at least this far below the context-free baseline
RAW_FILES = ("summary.json", "metrics.jsonl", "config.yaml", "run.json", "corpus.json", "results.json")


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _records(run: Path) -> list[dict[str, Any]]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _evals(run: Path) -> list[tuple[int, float, float]]:
    return [(r["step"], r["eval_loss"], r.get("eval_accuracy")) for r in _records(run) if "eval_loss" in r]


def _unit(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if not summary:
        return None
    return {"steps": summary["steps"], "train_s": summary["train_s"], "wall_s": summary["wall_s"],
            "s_per_step": round(summary["train_s"] / summary["steps"], 3),
            "row_tokens_per_s": summary["row_tokens_per_s"], "precision": summary.get("precision")}


def _copy_raw(runs: Path, out: Path) -> None:
    for run in sorted(p for p in runs.iterdir() if p.is_dir() and ".incomplete-" not in p.name):
        for name in RAW_FILES:
            if (run / name).is_file():
                (out / "raw" / run.name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(run / name, out / "raw" / run.name / name)
        for pred in sorted(run.glob("seed_*/predictions.jsonl")):
            dest = out / "raw" / run.name / pred.parent.name
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pred, dest / pred.name)
        if (run.parent / f"{run.name}.log").is_file():
            shutil.copy2(run.parent / f"{run.name}.log", out / "raw" / f"{run.name}.log")


def _finetune(run: Path) -> dict[str, Any] | None:
    results = _json(run / "results.json")
    if results is None:
        return None
    seeds = []
    for s in results["seeds"]:
        preds = [json.loads(line)["prediction"] for line in
                 (run / f"seed_{s['seed']}" / "predictions.jsonl").read_text().splitlines() if line.strip()]
        seeds.append({"seed": s["seed"], "test_macro_f1": s["test"].get("macro_f1"),
                      "test_accuracy": s["test"].get("accuracy"), "predicted_classes": len(set(preds)),
                      "collapsed": len(set(preds)) == 1})
    return {"seeds": seeds, "collapsed": sum(s["collapsed"] for s in seeds), "runs": len(seeds),
            "majority_baseline": results.get("majority_baseline"), "task": results.get("task")}


def collect(runs: Path, out: Path) -> dict[str, Any]:
    wiki, acl = _json(runs / "prepare_wikipedia" / "corpus.json"), _json(runs / "prepare_acl" / "corpus.json")
    base = wiki["baseline"]["loss"]
    numbers: dict[str, Any] = {
        "vocabulary_sha256": wiki["baseline"]["vocabulary_sha256"],
        "corpora": {name: {"train": c["corpus"]["train"], "validation": c["corpus"]["validation"],
                           "sha256": c["corpus"]["sha256"], "baseline": c["baseline"]}
                    for name, c in (("wikipedia", wiki), ("acl", acl))},
        "declared_margin": MARGIN}
    warm = runs / "warmup"
    warm_evals = _evals(warm)
    warm_summary = _json(warm / "summary.json")
    final = warm_evals[-1][1] if warm_evals else None
    numbers["warmup"] = {"final_eval_loss": final, "baseline": base, "below_baseline": None if final is None else
                         base - final, "gate": None if final is None or warm_summary is None else
                         bool(final <= base - MARGIN), "unit": _unit(warm_summary),
                         "corpus": (warm_summary or {}).get("corpus", {}).get("splits", {}).get("train")}
    rows = [{"step": s, "eval_loss": loss, "eval_accuracy": acc, "context_free_baseline": base,
             "declared_gate": base - MARGIN} for s, loss, acc in warm_evals]
    write_csv(out / "warmup_curve.csv", rows)
    numbers["continual"] = {}
    curve_rows = []
    for arm in ARMS:
        run = runs / f"continual_{arm}"
        evals, summary = _evals(run), _json(run / "summary.json")
        curve_rows += [{"arm": arm, "step": s, "eval_loss": loss, "eval_accuracy": acc} for s, loss, acc in evals]
        if evals:
            numbers["continual"][arm] = {
                "step0_eval_loss": evals[0][1], "final_eval_loss": evals[-1][1], "steps": evals[-1][0],
                "gate": None if summary is None else bool(evals[-1][1] < evals[0][1]), "unit": _unit(summary),
                "passes": (summary or {}).get("corpus", {}).get("passes"),
                "corpus": (summary or {}).get("corpus", {}).get("splits", {}).get("train")}
    write_csv(out / "continual_curves.csv", curve_rows)
    numbers["finetune"] = {arm: _finetune(runs / f"finetune_{arm}") for arm in ARMS}
    _plot(warm_evals, base, numbers, curve_rows, acl["baseline"]["loss"], out)
    (out / "numbers.json").write_text(json.dumps(numbers, indent=1) + "\n")
    _copy_raw(runs, out)
    return numbers


def _plot(warm_evals: list, base: float, numbers: dict, curve_rows: list, acl_base: float, out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    if warm_evals:
        ax.plot([s for s, _, _ in warm_evals], [v for _, v, _ in warm_evals], marker="o", ms=3,
                label="warm-up held-out MLM loss")
    ax.axhline(base, color="k", ls="--", lw=1, label=f"context-free baseline {base:.3f}")
    ax.axhline(base - MARGIN, color="r", ls=":", lw=1, label=f"declared gate {base - MARGIN:.3f}")
    ax.set(xlabel="step", ylabel="held-out loss (nats per masked token)", ylim=(None, 8.0))
    ax.legend()
    save_figure(fig, out / "warmup_curve.png", "Warm-up on Wikipedia (4x256 post-LN BERT, CPU)")
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for arm in ARMS:
        pts = [(r["step"], r["eval_loss"]) for r in curve_rows if r["arm"] == arm]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=arm)
    step0 = [c["step0_eval_loss"] for c in numbers["continual"].values()]
    if step0:
        ax.axhline(step0[0], color="grey", ls="--", lw=1, label=f"warm-up checkpoint (step 0) {step0[0]:.3f}")
    ax.axhline(acl_base, color="k", ls=":", lw=1, label=f"ACL context-free baseline {acl_base:.3f}")
    ax.set(xlabel="step", ylabel="ACL held-out loss (nats per masked token)")
    ax.legend()
    save_figure(fig, out / "continual_curves.png", "Continual pre-training on 20 ACL papers (CPU)")


def choose(runs: Path, names: list[str]) -> str:
    """The warm-up the continual phase starts from (README, amendment 1): the first of `names` whose final held-out
    loss passed the declared gate, else the one with the lowest."""
    base = _json(runs / "prepare_wikipedia" / "corpus.json")["baseline"]["loss"]
    finals = {name: _evals(runs / name)[-1][1] for name in names}
    passed = [name for name in names if finals[name] <= base - MARGIN]
    return passed[0] if passed else min(finals, key=finals.get)


if __name__ == "__main__":
    if sys.argv[1] == "--choose":
        print(choose(Path(sys.argv[2]), sys.argv[3:]))
        sys.exit(0)
    result = collect(Path(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({k: result[k] for k in ("warmup", "continual")}, indent=1))
