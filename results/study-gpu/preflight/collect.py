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
# The warm-ups in the order they were declared (README: A, then amendments 1 and 2), and the order the continual
# phase picks from (the first whose gate passed, post-LN first).
WARMUPS = {"warmup": "A: post-LN BERT, dropout 0.1", "warmup_postln_nodrop": "B1: post-LN BERT, dropout 0",
           "warmup_preln_nodrop": "B2: pre-LN (roberta-prelayernorm), dropout 0",
           "warmup_modernbert": "C1: ModernBERT layers (rotary, pre-LN, GeGLU, no dropout)",
           "warmup_postln_nodrop_mask40": "C2: post-LN BERT, dropout 0, 40% masking in training"}
CHOICE = ("warmup_postln_nodrop", "warmup_preln_nodrop", "warmup_postln_nodrop_mask40", "warmup_modernbert",
          "warmup")
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
    if (runs / "run.log").is_file():  # run.sh's own log: what started and ended when
        shutil.copy2(runs / "run.log", out / "raw" / "run.log")


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
    numbers["warmups"], rows = {}, []
    for name, what in WARMUPS.items():
        evals, summary = _evals(runs / name), _json(runs / name / "summary.json")
        rows += [{"warmup": name, "step": s, "eval_loss": loss, "eval_accuracy": acc, "context_free_baseline": base,
                  "declared_gate": base - MARGIN} for s, loss, acc in evals]
        if evals and summary is not None:
            final = evals[-1][1]
            numbers["warmups"][name] = {
                "what": what, "final_eval_loss": final, "final_eval_accuracy": evals[-1][2],
                "below_baseline": base - final, "gate": bool(final <= base - MARGIN), "unit": _unit(summary),
                "corpus": summary.get("corpus", {}).get("splits", {}).get("train")}
    numbers["context_free_baseline"] = base
    numbers["continual_from"] = choose(runs, list(CHOICE)) if numbers["warmups"] else None
    write_csv(out / "warmup_curves.csv", rows)
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
    _plot(rows, base, numbers, curve_rows, acl["baseline"]["loss"], out)
    (out / "numbers.json").write_text(json.dumps(numbers, indent=1) + "\n")
    _copy_raw(runs, out)
    return numbers


def _plot(rows: list, base: float, numbers: dict, curve_rows: list, acl_base: float, out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for name, what in WARMUPS.items():
        pts = [(r["step"], r["eval_loss"]) for r in rows if r["warmup"] == name]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", ms=2, lw=1.2, label=what)
    ax.axhline(base, color="k", ls="--", lw=1, label=f"context-free baseline {base:.3f}")
    ax.axhline(base - MARGIN, color="r", ls=":", lw=1, label=f"declared gate {base - MARGIN:.3f}")
    ax.set(xlabel="step (32 rows x 128 tokens)", ylabel="Wikipedia held-out loss (nats per masked token)",
           ylim=(3.8, 8.0))
    ax.legend(fontsize=7)
    save_figure(fig, out / "warmup_curves.png", "Warm-ups on Wikipedia from scratch (4 x 256, CPU)")
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for arm in ARMS:
        pts = [(r["step"], r["eval_loss"]) for r in curve_rows if r["arm"] == arm]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=arm)
    step0 = [c["step0_eval_loss"] for c in numbers["continual"].values()]
    if step0:
        ax.axhline(step0[0], color="grey", ls="--", lw=1, label=f"warm-up checkpoint (step 0) {step0[0]:.3f}")
    ax.axhline(acl_base, color="k", ls=":", lw=1, label=f"ACL context-free baseline {acl_base:.3f}")
    ax.set(xlabel="step (32 rows x 128 tokens)", ylabel="ACL held-out loss (nats per masked token)")
    ax.legend(loc="center right", fontsize=8)
    save_figure(fig, out / "continual_curves.png",
                f"Continual pre-training on 20 ACL papers from {numbers['continual_from']} (CPU)")


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
    print(json.dumps({k: result[k] for k in ("warmups", "continual_from", "continual", "finetune")}, indent=1))
