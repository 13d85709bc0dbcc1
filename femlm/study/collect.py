"""Read what the study's runs left behind, through report's collector (femlm.report.collect): pre-training summaries
with their evaluation curves, fine-tuning results; and the decomposition and passes analyses, which only the
study reads.

Runs still missing (a study cut short) are listed, and the statistics use the runs that finished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from femlm.experiment.step import Step
from femlm.report import collect as report


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def read(path: Path) -> report.Collection:
    """One result file read as `femlm report` reads it (a file it cannot use is listed in `skipped`)."""
    found = report.Collection()
    report.read_file(path, found)
    return found


def pretrain_entry(run_dir: Path) -> dict[str, Any] | None:
    runs = read(run_dir / "summary.json").pretrain
    return {"summary": runs[0].summary, "curve": runs[0].evals, "dir": str(run_dir)} if runs else None


def collect(plan: dict[str, Any], steps: list[Step], runs: Path) -> dict[str, Any]:
    data: dict[str, Any] = {"missing": [], "optional_missing": [], "pretrain": [], "finetune": [], "decomposition": {},
                            "passes": {}}
    for step in steps:
        if step.part in ("encoder", "results", "download"):
            continue
        entry: dict[str, Any] | None = None
        if step.done():
            if step.part in ("head_warmup", "warmup", "pretrain"):
                entry = pretrain_entry(step.run_dir)
            elif step.part == "finetune":
                results = read(step.run_dir / "results.json").finetune
                entry = {"results": results[0].raw, "dir": str(step.run_dir)} if results else None
            elif step.part in ("decomposition", "passes"):
                entry = {"json": read_json(step.run_dir / step.output), "dir": str(step.run_dir)}
        if entry is None:
            data["optional_missing" if step.optional else "missing"].append(step.name)
        elif step.part in ("head_warmup", "warmup"):
            data[step.part] = entry
        elif step.part in ("pretrain", "finetune"):
            data[step.part].append({**step.meta, **entry})
        else:
            data[step.part][step.meta.get("key", step.meta["checkpoint"])] = {**entry, **step.meta}
    data["encoder"] = read_json(runs / "encoder_check" / "encoder.json")
    return data


def arm_runs(data: dict[str, Any], arm: str, mode: str, reference: str) -> list[dict[str, Any]]:
    want = "any" if arm == reference else mode
    return sorted((r for r in data["pretrain"] if r["arm"] == arm and r["mode"] == want), key=lambda r: r["seed"])


def run_config(run_dir: str | Path | None) -> dict[str, Any]:
    """The resolved config a run recorded (config.yaml): what it actually ran with."""
    return report.run_config(run_dir) if run_dir else {}


def part_walls(timings: dict[str, Any]) -> dict[str, float]:
    walls: dict[str, float] = {}
    for entry in timings.values():
        walls[entry.get("part", "?")] = walls.get(entry.get("part", "?"), 0.0) + float(entry.get("wall_s", 0.0))
    return walls


def arms_read(plan: dict[str, Any], data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per mode and arm: the K (masks per sequence) a run used, from its final checkpoint's femlm.json (its
    config where that is missing), and the rows and sequences one run read (its summary's ``seen``)."""
    p = plan.get("pretrain") or {}
    out: dict[str, dict[str, Any]] = {}
    for mode in p.get("modes", []):
        for arm in p.get("arms", []):
            rs = [r for r in arm_runs(data, arm, mode, p["reference"]) if r.get("summary")]
            if not rs:
                continue
            prov = read_json(Path(rs[0]["dir"]) / "checkpoints" / "final" / "femlm.json") or {}
            k = prov.get("num_masks") or (run_config(rs[0]["dir"]).get("masking") or {}).get("num_masks")
            seen = rs[0]["summary"].get("seen") or {}
            out.setdefault(mode, {})[arm] = {"K": k, "rows": seen.get("rows"), "sequences": seen.get("sequences")}
    return out
