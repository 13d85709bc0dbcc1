"""`femlm evaluate`: score fine-tuned checkpoints, or sweep a pre-training run's checkpoints.

- ``evaluate.checkpoints=<fine-tuned model dir, or a directory of them>`` (e.g. a finetune run with
  ``finetune.save_model=true``: its ``seed_<s>/model``): score each on ``evaluate.split`` without training;
  ``results.json`` holds every checkpoint's scores and their mean ± std, each checkpoint's ``encoder`` (architecture,
  directory, weights file and sha256: ``ResolvedModel.describe``) and the ``precision`` scored under.
- ``evaluate.sweep=true evaluate.checkpoints=<pre-training run dir>``: fine-tune and score every
  ``checkpoints/step_<N>`` (and ``final``) with ``finetune.seeds``; ``sweep/<name>/results.json`` per
  checkpoint and ``efficiency.json`` (main metric vs pre-training step) for the efficiency figure.

A stop request (femlm.stop) is polled per checkpoint and per scored batch (and, in a sweep, per fine-tuning step):
scoring writes results.json only once every checkpoint is scored; a sweep rewrites efficiency.json after every
point with ``"complete": false`` until the last, so a stopped sweep keeps its finished points and is never taken
for a finished one (the experiment runner runs it again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import DataCollatorWithPadding

from femlm.data.tasks import load_task, task_data_notes
from femlm.errors import UserError
from femlm.eval import classifier as loop
from femlm.eval import finetune
from femlm.eval.checkpoints import find_finetuned, pretraining_checkpoints
from femlm.eval.inputs import encode, label_spec, split_labels
from femlm.eval.metrics import majority_label, majority_scores
from femlm.eval.results import aggregate, efficiency_point, format_score, write_predictions
from femlm.models.load import load_finetuned, tokenizer_for
from femlm.models.resolve import resolve_finetuned
from femlm.outputs import finite
from femlm.runs import git_commit, hardware
from femlm.runtime.device import configure_process, pick_device
from femlm.stop import check


def score_checkpoints(cfg: Any, run: Any) -> dict[str, Any]:
    task = cfg.task
    split = cfg.evaluate.split or task.eval_split
    root = Path(cfg.evaluate.checkpoints).expanduser()
    checkpoints = find_finetuned(root)
    spec = label_spec(task)
    data = load_task(task, cfg.download)
    if split not in data:
        raise UserError(f"evaluate.split={split!r} (task {task.name}): the data has splits {', '.join(data)}")
    device = pick_device(cfg.runtime.device)
    precision = loop.resolve_precision(cfg.runtime.precision, device)
    notes = list(task_data_notes(task, cfg.download))
    gold = split_labels(data[split], spec, task.name, split)
    baseline: dict[str, Any] = {}
    if "train" in data:
        constant = majority_label(split_labels(data["train"], spec, task.name, "train"), spec.regression)
        baseline = {"prediction": constant if spec.regression else spec.id2label[constant],
                    split: majority_scores(task.metric, constant, gold, spec.num_labels)}
    rows = []
    for checkpoint, located in checkpoints:
        check(f"evaluate, before {checkpoint} ({len(rows)} of {len(checkpoints)} scored; results.json is written "
              "once all are)")
        info = located.femlm or {}
        tokenizer, tokenizer_source = tokenizer_for(cfg.model, cfg.download, located)
        model = load_finetuned(checkpoint, spec, task.name).to(device)
        resolved = resolve_finetuned(located, model.config, tokenizer, tokenizer_source, cfg.model)
        limit = resolved.position_limit
        # Score with the input length the model was fine-tuned with unless finetune.max_length says otherwise.
        max_length = min(cfg.finetune.max_length or info.get("max_length") or task.max_length, limit)
        encoded = encode(data[split], tokenizer, spec, max_length, len(task.text_fields) == 2, task.name, split)
        if encoded.truncated:
            notes.append(f"{checkpoint}: {encoded.truncated} of {len(encoded)} {split} examples truncated to "
                         f"{max_length} tokens")
        scores, preds = loop.score_split(model, encoded, spec, task.metric, cfg.runtime.eval_batch_size or 64, device,
                                         DataCollatorWithPadding(tokenizer), precision)
        name = "checkpoint" if checkpoint == root else str(checkpoint.relative_to(root)).replace("/", "__")
        if run.is_main:
            write_predictions(Path(run.dir) / name / "predictions.jsonl", gold, preds,
                              None if spec.regression else spec.id2label)
        rows.append({"checkpoint": str(checkpoint), "name": name, "seed": info.get("seed"), "scores": scores,
                     "encoder": resolved.describe(), "finetune": info or None})
        run.log(event="scored", checkpoint=str(checkpoint), **{f"{split}_{k}": v for k, v in scores.items()})
    results = {
        "kind": "evaluate", "task": task.name, "metric": task.metric, "main_metric": task.main_metric,
        "eval_split": split, "precision": precision, "checkpoints": rows, "aggregate": {split: aggregate(r["scores"] for r in rows)},
        "majority_baseline": baseline, "notes": notes, "hardware": hardware(), "git_commit": git_commit(),
    }
    results = finite(results)
    run.write_json("results.json", results)
    stats = results["aggregate"][split].get(task.main_metric, {})
    print(f"{task.name} {split} {task.main_metric} over {len(rows)} checkpoint(s): {format_score(stats)}",
          flush=True)
    return results


def sweep(cfg: Any, run: Any) -> dict[str, Any]:
    """Fine-tune + score each intermediate checkpoint: the training-efficiency curve (paper Figure 3 left)."""
    root = Path(cfg.evaluate.checkpoints).expanduser()
    task = cfg.task
    payload: dict[str, Any] = {"kind": "efficiency", "task": task.name, "main_metric": task.main_metric,
                               "eval_split": task.eval_split, "pretrain_run": str(root),
                               "seeds": list(cfg.finetune.seeds), "points": [], "complete": False}
    found = pretraining_checkpoints(root)
    for name, path, step, info in found:
        results = finetune.finetune_checkpoint(cfg, str(path), Path(run.dir) / "sweep" / name, run,
                                               extra_log={"checkpoint": name, "pretrain_step": step},
                                               write_as=f"sweep/{name}/results.json")
        payload["points"].append(efficiency_point(step, (info or {}).get("masking"), results))
        payload["majority_baseline"] = results["majority_baseline"].get(task.eval_split, {}).get(task.main_metric)
        payload["complete"] = len(payload["points"]) == len(found)
        run.write_json("efficiency.json", payload)  # after every point: a stopped sweep keeps what it has
        print(f"[{name}] {finetune.summary_line(results)}", flush=True)
    return payload


def plan_evaluate(cfg: Any, run: Any) -> dict[str, Any]:
    """The checkpoints an evaluation would score (or, with evaluate.sweep, fine-tune), and the task's data."""
    root = Path(cfg.evaluate.checkpoints).expanduser()
    if cfg.evaluate.sweep:
        found = [str(path) for _, path, _, _ in pretraining_checkpoints(root)]
    else:
        found = [str(path) for path, _ in find_finetuned(root)]
    data = load_task(cfg.task, cfg.download)
    split = cfg.evaluate.split or cfg.task.eval_split
    if split not in data:
        raise UserError(f"evaluate.split={split!r} (task {cfg.task.name}): the data has splits {', '.join(data)}")
    return {"task": cfg.task.name, "split": split, "sweep": cfg.evaluate.sweep, "checkpoints": found}


def run_evaluate(cfg: Any, run: Any) -> dict[str, Any]:
    configure_process(cfg.runtime)
    return sweep(cfg, run) if cfg.evaluate.sweep else score_checkpoints(cfg, run)
