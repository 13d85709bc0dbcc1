"""The GPU study's downstream part (secondary): each arm's checkpoint fine-tuned in process on the experiment's
tasks by `femlm finetune`'s own entry (femlm.eval.finetune.run_finetune: the per-seed loop, results.json), with
`finetune.seeds` fine-tuning runs per checkpoint averaged, so that the pre-training seed is the unit.

A fine-tuning run that predicts one class for every test example has collapsed to the majority (or another single)
class: it is counted per arm and task and stays in the mean, never dropped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from statistics import fmean
from typing import Any

from femlm.experiment.schema import Experiment
from femlm.study import gpu_configs as configs


def collapsed(run_dir: Path, seeds: list[int]) -> int:
    """Fine-tuning runs whose eval predictions are all one class."""
    count = 0
    for seed in seeds:
        path = run_dir / f"seed_{seed}" / "predictions.jsonl"
        if path.is_file():
            predicted = {json.loads(line)["prediction"] for line in path.read_text().splitlines() if line}
            count += len(predicted) <= 1
    return count


def finetune_arm(exp: Experiment, checkpoint: Path, mirror: Path, out: Path, deadline: float | None = None
                 ) -> tuple[dict[str, Any], dict[str, Path]]:
    """Every task from one checkpoint: per task the main metric's mean over the runs, each run's score, the
    collapsed runs and the majority baseline; and the run directories (results.json, per-run predictions). A
    `deadline` passed before a task raises femlm.train.loop.DeadlineReached (the seed is then no result)."""
    from femlm.config import command_config
    from femlm.eval.finetune import run_finetune
    from femlm.runs import start_run
    from femlm.train.loop import DeadlineReached

    scores: dict[str, Any] = {}
    dirs: dict[str, Path] = {}
    for task in exp.finetune.tasks:
        if deadline is not None and time.time() > deadline:
            raise DeadlineReached(f"fine-tuning {task} from {checkpoint}: the deadline passed")
        c = configs.finetune(exp, task, checkpoint, mirror)
        run_dir = out / task
        run = start_run(command_config(c.node, configs.FINETUNE), run_dir, configs.FINETUNE)
        results = run_finetune(c.cfg, run)
        split, key = results["eval_split"], results["main_metric"]
        values = [s[split][key] for s in results["seeds"] if s.get(split, {}).get(key) is not None]
        scores[task] = {"metric": f"{split} {key}", "mean": fmean(values) if values else None, "runs": values,
                        "collapsed": collapsed(run_dir, list(c.cfg.finetune.seeds)), "n": len(values),
                        "majority": (results.get("majority_baseline") or {}).get(split, {}).get(key)}
        dirs[task] = run_dir
    return scores, dirs
