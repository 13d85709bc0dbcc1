"""Read what the study's runs left behind: summaries, evaluation curves, fine-tuning results, decompositions.

Runs still missing (a study cut short) are listed, and the statistics use the runs that finished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from femlm.runs import read_metrics
from femlm.study.plan import Step


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None



def eval_curve(run_dir: Path) -> list[dict[str, Any]]:
    """The eval records of a pre-training run: step, train_flops, eval_loss, eval_accuracy and the counts."""
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("eval_loss") is not None]


def collect(plan: dict[str, Any], steps: list[Step], runs: Path) -> dict[str, Any]:
    data: dict[str, Any] = {"missing": [], "optional_missing": [], "pretrain": [], "finetune": [], "decomposition": {}}
    for step in steps:
        if step.part in ("encoder", "results", "download"):
            continue
        if not step.done():
            data["optional_missing" if step.optional else "missing"].append(step.name)
            continue
        if step.part == "head_warmup":
            data["head_warmup"] = {"summary": read_json(step.run_dir / "summary.json"),
                                   "curve": eval_curve(step.run_dir), "dir": str(step.run_dir)}
        elif step.part == "warmup":
            data["warmup"] = {"summary": read_json(step.run_dir / "summary.json"), "curve": eval_curve(step.run_dir),
                              "dir": str(step.run_dir)}
        elif step.part == "pretrain":
            data["pretrain"].append({**step.meta, "summary": read_json(step.run_dir / "summary.json"),
                                     "curve": eval_curve(step.run_dir), "dir": str(step.run_dir)})
        elif step.part == "finetune":
            data["finetune"].append({**step.meta, "results": read_json(step.run_dir / "results.json"),
                                     "dir": str(step.run_dir)})
        elif step.part == "decomposition":
            data["decomposition"][step.meta.get("key", step.meta["checkpoint"])] = {
                "json": read_json(step.run_dir / "decomposition.json"), "dir": str(step.run_dir), **step.meta}
    data["encoder"] = read_json(runs / "encoder_check" / "encoder.json")
    return data


def arm_runs(data: dict[str, Any], arm: str, mode: str, reference: str) -> list[dict[str, Any]]:
    want = "any" if arm == reference else mode
    return sorted((r for r in data["pretrain"] if r["arm"] == arm and r["mode"] == want), key=lambda r: r["seed"])


def run_config(run_dir: str | Path | None) -> dict[str, Any]:
    """The resolved config a run recorded (config.yaml): what it actually ran with."""
    import yaml

    path = Path(run_dir or "") / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if run_dir and path.is_file() else {}


def part_walls(timings: dict[str, Any]) -> dict[str, float]:
    walls: dict[str, float] = {}
    for entry in timings.values():
        walls[entry.get("part", "?")] = walls.get(entry.get("part", "?"), 0.0) + float(entry.get("wall_s", 0.0))
    return walls
