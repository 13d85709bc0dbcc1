"""`femlm finetune`: one checkpoint, one task, several seeds -> per-seed files and results.json.

On a stop request (SIGTERM, SIGUSR1/2, Ctrl-C: femlm.stop) the seed in progress is dropped at its next step or
scored batch; results.json keeps the seeds already finished with ``"complete": false`` (what the experiment runner
and a reader check), each finished seed keeps its seed_<s>/ files, and the same command run again does every seed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase, set_seed

from femlm import provenance
from femlm.data.tasks import load_task, task_data_notes
from femlm.errors import UserError
from femlm.eval import classifier as loop
from femlm.eval.inputs import (
    Encoded,
    LabelSpec,
    encode,
    label_spec,
    select,
    split_labels,
    stratified_subsample,
)
from femlm.eval.metrics import majority_label, majority_scores
from femlm.eval.results import aggregate_seeds, format_score, write_predictions
from femlm.models.load import load_classifier
from femlm.models.resolve import ResolvedModel, resolve_classifier
from femlm.outputs import finite
from femlm.paper import reported_for_task
from femlm.runs import git_commit, hardware
from femlm.runtime.device import configure_process, pick_device
from femlm.stop import check


@dataclass
class Prepared:
    """A task's data tokenized for one checkpoint's tokenizer: reused by every seed."""

    spec: LabelSpec
    recipe: loop.Recipe
    tokenizer: PreTrainedTokenizerBase
    splits: dict[str, Encoded]
    full_train: int
    notes: list[str]


def prepare(cfg: Any, resolved: ResolvedModel) -> Prepared:
    """The task's data read, checked and tokenized with the resolved checkpoint's tokenizer."""
    task, ft = cfg.task, cfg.finetune
    spec = label_spec(task)
    tokenizer = resolved.tokenizer
    recipe, notes = loop.make_recipe(task, ft, cfg.runtime, resolved.position_limit, pick_device(cfg.runtime.device))
    data = load_task(task, cfg.download)
    notes = list(task_data_notes(task, cfg.download)) + notes
    if "train" not in data:
        raise UserError(f"task {task.name}: no train split to fine-tune on")
    if task.eval_split not in data:
        raise UserError(f"task.eval_split={task.eval_split!r} (task {task.name}): the data has splits "
                        f"{', '.join(data)}")
    train = data["train"]
    full_train = len(train)
    if ft.max_train_examples is not None and ft.max_train_examples < full_train:
        # Seeded by the command's seed, not the fine-tuning seed: every seed sees the same subsample, so
        # the spread over seeds measures fine-tuning variance only.
        labels = split_labels(train, spec, task.name, "train")
        keep = stratified_subsample(labels, ft.max_train_examples, cfg.seed, spec.regression)
        train = select(train, keep)
        how = "random" if spec.regression else "stratified by label"
        notes.append(f"train subsampled to {len(keep)} of {full_train} examples (finetune.max_train_examples="
                     f"{ft.max_train_examples}, {how}, seed {cfg.seed}): not the paper's scale")
    pair = len(task.text_fields) == 2
    splits = {"train": encode(train, tokenizer, spec, recipe.max_length, pair, task.name, "train")}
    for name in data:  # dev/test; MNLI: dev_matched/dev_mismatched
        if name != "train":
            splits[name] = encode(data[name], tokenizer, spec, recipe.max_length, pair, task.name, name)
    cut = {k: (v.truncated, len(v)) for k, v in splits.items() if v.truncated}
    if cut:
        notes.append(f"inputs truncated to max_length={recipe.max_length} tokens (as DAPT did): " + ", ".join(
            f"{k} {n} of {total}" for k, (n, total) in cut.items()))
    if recipe.patience is not None and monitor_split(splits, task.eval_split) == "test":
        raise UserError(f"task {task.name}: early stopping (task.patience={recipe.patience}) needs a dev split "
                        "and this data has none; selecting on test would be optimistic: set task.patience=null")
    if recipe.patience is not None and monitor_split(splits, task.eval_split) == task.eval_split:
        notes.append(f"early stopping selects on {task.eval_split}, which is also the reported eval split "
                     "(optimistic)")
    return Prepared(spec, recipe, tokenizer, splits, full_train, notes)


def monitor_split(splits: Any, eval_split: str) -> str:
    """The split early stopping watches: dev when the task has one (DAPT), else the eval split (GLUE)."""
    return "dev" if "dev" in splits else eval_split


def scored_splits(prep: Prepared) -> list[str]:
    """Every labelled split but train, with dev and test first (results.json always has both keys)."""
    rest = [k for k in prep.splits if k not in ("train", "dev", "test")]
    return ["dev", "test", *rest]


def majority_baseline(prep: Prepared, metric: str) -> dict[str, Any]:
    """Always predict the most frequent training label (train mean for regression): what a model must beat."""
    constant = majority_label(prep.splits["train"].labels, prep.spec.regression)
    out: dict[str, Any] = {"prediction": constant if prep.spec.regression else prep.spec.id2label[constant]}
    for name in scored_splits(prep):
        out[name] = (majority_scores(metric, constant, prep.splits[name].labels, prep.spec.num_labels)
                     if name in prep.splits else {})
    return out


def run_seeds(cfg: Any, resolved: ResolvedModel, prep: Prepared, out_dir: Path, run: Any,
              extra_log: dict[str, Any] | None = None,
              on_seed: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Fine-tune a fresh copy of the resolved checkpoint per seed; write each seed's predictions and scores."""
    task, ft = cfg.task, cfg.finetune
    device = pick_device(cfg.runtime.device)
    collator = DataCollatorWithPadding(prep.tokenizer)
    names = None if prep.spec.regression else prep.spec.id2label
    monitor = prep.splits[monitor_split(prep.splits, task.eval_split)]
    rows = []
    for seed in ft.seeds:
        check(f"fine-tuning, before seed {seed}")
        set_seed(seed)  # the new head's init, dropout and the shuffling all follow the seed
        model, fresh = load_classifier(resolved, prep.spec, cfg.download)
        if fresh and not rows:
            prep.notes.append("newly initialized on top of the checkpoint (trained from scratch on the task): "
                              + ", ".join(fresh))
        start = time.time()
        result = loop.train_seed(
            model, prep.splits["train"], monitor, prep.recipe, prep.spec, task.metric, task.main_metric, seed,
            device, collator, lambda **r: run.log(**(extra_log or {}), **r), progress=cfg.logger.progress)
        row: dict[str, Any] = {"seed": seed, "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
                               "train_s": round(time.time() - start, 1)}
        seed_dir = out_dir / f"seed_{seed}"
        eval_preds: list[Any] = []
        for name in scored_splits(prep):
            row[name] = {}
            if name not in prep.splits:
                continue
            # The kept model (best dev epoch, or the last) scored on every labelled split.
            scores, preds = loop.score_split(model, prep.splits[name], prep.spec, task.metric,
                                             prep.recipe.eval_batch_size, device, collator, prep.recipe.precision)
            row[name] = scores
            if name == task.eval_split:
                eval_preds = preds
        if run.is_main:  # written once every split is scored: a stop while scoring leaves no file of this seed
            write_predictions(seed_dir / "predictions.jsonl", prep.splits[task.eval_split].labels, eval_preds, names)
            seed_dir.mkdir(parents=True, exist_ok=True)
            payload = finite({**row, "history": result.history})
            (seed_dir / "scores.json").write_text(json.dumps(payload, indent=2) + "\n")
            if ft.save_model:
                save_finetuned(model, prep.tokenizer, seed_dir / "model", task.name, seed, str(resolved.source),
                               resolved.femlm, result.best_epoch, prep.recipe.max_length)
        run.log(**(extra_log or {}), seed=seed, event="seed_done", best_epoch=result.best_epoch,
                **{f"{k}_{m}": v for k in scored_splits(prep) for m, v in row[k].items()})
        rows.append(row)
        if on_seed is not None:
            on_seed(rows)
        del model
    return rows


def save_finetuned(model: Any, tokenizer: PreTrainedTokenizerBase, path: Path, task: str, seed: int,
                   checkpoint: str, pretrain: dict[str, Any] | None, best_epoch: int, max_length: int) -> None:
    """A save_pretrained classifier that `femlm evaluate` can score, with where it came from and the
    input length it was trained with (evaluate uses the same by default)."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    provenance.write(path, provenance.finetune_record(task=task, seed=seed, checkpoint=checkpoint,
                                                      best_epoch=best_epoch, max_length=max_length, pretrain=pretrain))


def finetune_checkpoint(cfg: Any, checkpoint: str, out_dir: Path, run: Any,
                        extra_log: dict[str, Any] | None = None, write_as: str | None = None) -> dict[str, Any]:
    """Fine-tune and score one checkpoint with every seed; return the results.json payload.

    ``write_as``: a path in the run directory rewritten after every seed (``"complete": false`` until the
    last), so a run stopped part-way keeps the seeds it finished, aggregated.
    """
    if not cfg.finetune.seeds:
        raise UserError("finetune.seeds=[]: give at least one seed, e.g. finetune.seeds=[1,2,3]")
    task = cfg.task
    resolved = resolve_classifier(checkpoint, cfg.model, cfg.download)
    resolved.announce()
    configure_process(cfg.runtime)
    start = time.time()
    prep = prepare(cfg, resolved)
    baseline = majority_baseline(prep, task.metric)

    def payload(seeds: list[dict[str, Any]]) -> dict[str, Any]:
        notes = list(prep.notes)
        if task.eval_split != "test":
            notes.append(f"task {task.name} is scored on {task.eval_split} (GLUE: the test labels are not public)")
        return finite({
            "kind": "finetune", "task": task.name, "metric": task.metric, "main_metric": task.main_metric,
            "eval_split": task.eval_split, "checkpoint": resolved.source, "pretrain": resolved.femlm,
            "encoder": resolved.describe(),
            "seeds": seeds, "aggregate": aggregate_seeds(seeds, scored_splits(prep)),
            "majority_baseline": baseline, "notes": notes, "hardware": hardware(), "git_commit": git_commit(),
            "scale": {"train_examples": len(prep.splits["train"]), "full_train_examples": prep.full_train,
                      "max_train_examples": cfg.finetune.max_train_examples, "epochs": prep.recipe.epochs,
                      "max_length": prep.recipe.max_length, "eval_examples": len(prep.splits[task.eval_split])},
            "recipe": prep.recipe.as_dict(), "labels": list(prep.spec.id2label.values()),
            "paper": reported_for_task(task.name), "complete": len(seeds) == len(cfg.finetune.seeds),
            "wall_s": round(time.time() - start, 1),
        })

    def on_seed(seeds: list[dict[str, Any]]) -> None:
        if write_as is not None:
            run.write_json(write_as, payload(seeds))

    return payload(run_seeds(cfg, resolved, prep, out_dir, run, extra_log, on_seed))


def summary_line(results: dict[str, Any]) -> str:
    split, key = results["eval_split"], results["main_metric"]
    stats = results["aggregate"][split].get(key, {})
    base = results["majority_baseline"].get(split, {}).get(key)
    base_text = f"{base * 100:.2f}" if base is not None else "n/a"
    return (f"{results['task']} {split} {key}: {format_score(stats)}; majority baseline {base_text} "
            f"({results['wall_s']} s)")


def plan_finetune(cfg: Any, run: Any) -> dict[str, Any]:
    """Every check of a fine-tuning run without training: checkpoint, tokenizer, recipe, the task's data
    (read, labels checked, tokenized)."""
    resolved = resolve_classifier(cfg.model.name_or_path, cfg.model, cfg.download)
    prep = prepare(cfg, resolved)
    return {"checkpoint": resolved.source, "encoder": resolved.describe(), "task": cfg.task.name,
            "seeds": list(cfg.finetune.seeds),
            "recipe": prep.recipe.as_dict(), "examples": {k: len(v) for k, v in prep.splits.items()},
            "notes": prep.notes}


def run_finetune(cfg: Any, run: Any) -> dict[str, Any]:
    """`femlm finetune task=<name> model.name_or_path=<checkpoint>`: results.json in the run directory."""
    results = finetune_checkpoint(cfg, cfg.model.name_or_path, Path(run.dir), run, write_as="results.json")
    print(summary_line(results), flush=True)
    return results
