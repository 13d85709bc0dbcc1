"""Downstream tasks as `datasets.DatasetDict`s: columns ``text``, ``text_pair`` (pairs only), ``label``.

``label`` is the index into ``task.labels`` (a `ClassLabel`), or a float for regression (STS-B). Splits
are whatever the task has: train/dev/test for DAPT tasks, train/dev for GLUE (the GLUE test sets have no
labels), train/dev_matched/dev_mismatched for MNLI. Imperfections of the local data (AG News carve,
HyperPartisan overlap rule, CoLA v1.1 train) are returned by `task_data_notes`, which every output that
reports task numbers must print, and are also in each split's ``info.description``.

``task.dataset`` may also be a local directory (a path: ``/abs``, ``./rel``, ``../rel``, ``~/...`` or anything
with a ``/``) holding ``train``/``dev``[/``test``] ``.jsonl``, ``.tsv`` or ``.csv`` files; see
`femlm.data.local`. Such tasks skip the registry, downloads and checksums.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from femlm.data.config import DownloadConfig, TaskConfig
from femlm.data.fetch import resolve_files
from femlm.data.local import is_local_task, local_task_notes, read_local_task
from femlm.data.readers import (
    Rows,
    read_ag_news_csv,
    read_dapt_jsonl,
    read_glue_tsv,
    read_hyperpartisan,
    read_lines,
)
from femlm.data.registry import ALIASES, REGISTRY, get_entry
from femlm.errors import UserError

AG_CARVE_SEED = 0  # fixed, so the carved test set is the same for every fine-tuning seed
AG_CARVE = {"train": 0.7, "dev": 0.1, "test": 0.2}  # per class, when only the test CSV is available
AG_DEV_FROM_TRAIN = 5000  # DAPT's AG dev size, carved from the 120k training rows


def _stratified(labels: list[str], fractions: dict[str, float], seed: int) -> dict[str, list[int]]:
    """Split row indices per class by `fractions` (the first part takes the rounding remainder)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[int]] = {name: [] for name in fractions}
    names = list(fractions)
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_class.setdefault(label, []).append(i)
    for label in sorted(by_class):
        idx = rng.permutation(by_class[label])
        counts = [round(fractions[n] * len(idx)) for n in names[1:]]
        start = len(idx) - sum(counts)
        out[names[0]].extend(idx[:start].tolist())
        for name, count in zip(names[1:], counts, strict=True):
            out[name].extend(idx[start:start + count].tolist())
            start += count
    return {name: sorted(ids) for name, ids in out.items()}


def _subset(rows: Rows, ids: list[int]) -> Rows:
    out = Rows(rows.path)
    for i in ids:
        out.add(rows.text[i], rows.text_pair[i], rows.label[i], rows.line[i])
    return out


def _ag_rows(paths: dict[str, Path]) -> dict[str, Rows]:
    classes = read_lines(paths["classes"])
    test = read_ag_news_csv(paths["test"], classes)
    if "train" in paths:
        train = read_ag_news_csv(paths["train"], classes)
        total = len(train)
        parts = _stratified(train.label, {"train": 1 - AG_DEV_FROM_TRAIN / total, "dev": AG_DEV_FROM_TRAIN / total},
                            AG_CARVE_SEED)
        return {"train": _subset(train, parts["train"]), "dev": _subset(train, parts["dev"]), "test": test}
    parts = _stratified(test.label, AG_CARVE, AG_CARVE_SEED)
    return {split: _subset(test, ids) for split, ids in parts.items()}


def _read_rows(task: TaskConfig, download: DownloadConfig) -> dict[str, Rows]:
    if is_local_task(task.dataset):
        return read_local_task(task)
    if task.dataset not in REGISTRY and task.dataset not in ALIASES and Path(task.dataset).is_dir():
        raise UserError(f"task.dataset={task.dataset!r} (task {task.name}) is not a registry dataset; for the "
                        f"local directory write task.dataset=./{task.dataset}")
    entry = get_entry(task.dataset)
    paths = resolve_files(entry.name, download)
    if entry.format == "dapt_jsonl":
        return {split: read_dapt_jsonl(p) for split, p in paths.items()}
    if entry.format.startswith("glue_"):
        return {split: read_glue_tsv(p, entry.name) for split, p in paths.items()}
    if entry.format == "ag_news_csv":
        return _ag_rows(paths)
    if entry.format == "semeval_hyperpartisan":
        return read_hyperpartisan(paths["articles"], paths["ground_truth"], paths["splits"])
    raise UserError(f"task.dataset={task.dataset!r} (task {task.name}) is a {entry.kind}, not a labelled "
                    "task dataset; use one of the dapt or glue registry datasets")


def _to_dataset(task: TaskConfig, split: str, rows: Rows, pair: bool, description: str) -> Dataset:
    columns: dict[str, list] = {"text": rows.text}
    feats: dict[str, object] = {"text": Value("string")}
    if pair:
        missing = [rows.line[i] for i, p in enumerate(rows.text_pair) if p is None]
        if missing:
            raise UserError(f"{rows.path}:{missing[0]}: task {task.name} has two text fields "
                            f"{task.text_fields}, but the {split} file has only one text column")
        columns["text_pair"] = rows.text_pair
        feats["text_pair"] = Value("string")
    if task.labels is None:
        try:
            columns["label"] = [float(x) for x in rows.label]
        except ValueError:
            bad = next(i for i, x in enumerate(rows.label) if not _is_float(x))
            raise UserError(f"{rows.path}:{rows.line[bad]}: label {rows.label[bad]!r} is not a number; task "
                            f"{task.name} is a regression (task.labels: null)") from None
        feats["label"] = Value("float32")
    else:
        index = {label: i for i, label in enumerate(task.labels)}
        labels = []
        for raw, line in zip(rows.label, rows.line, strict=True):
            if raw not in index:
                raise UserError(f"{rows.path}:{line}: label {raw!r} is not in task.labels of task {task.name}; "
                                f"allowed {list(task.labels)}")
            labels.append(index[raw])
        columns["label"] = labels
        feats["label"] = ClassLabel(names=list(task.labels))
    ds = Dataset.from_dict(columns, features=Features(feats))
    ds.info.description = description
    return ds


def _is_float(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def load_task(task: TaskConfig, download: DownloadConfig) -> DatasetDict:
    """Read a task's splits from the mirror/cache/network (see `femlm.data.fetch`), or from a local
    directory (`femlm.data.local`), into a DatasetDict."""
    if len(task.text_fields) not in (1, 2):
        raise UserError(f"task.text_fields={list(task.text_fields)} (task {task.name}): give 1 or 2 fields")
    rows = _read_rows(task, download)
    if task.eval_split not in rows:
        raise UserError(f"task.eval_split={task.eval_split!r} (task {task.name}): dataset {task.dataset} has "
                        f"splits {', '.join(rows)}")
    if "train" not in rows:
        raise UserError(f"task {task.name}: dataset {task.dataset} has no train split (has {', '.join(rows)})")
    description = " ".join(task_data_notes(task, download))
    pair = len(task.text_fields) == 2
    return DatasetDict({split: _to_dataset(task, split, r, pair, description) for split, r in rows.items()})


def _locally_available(dataset: str, role: str, download: DownloadConfig | None) -> bool:
    rel = get_entry(dataset).file(role).path
    download = download or DownloadConfig()
    mirror = download.mirror_dir()
    return bool((mirror is not None and (mirror / rel).is_file()) or (download.cache_path() / rel).is_file())


def task_data_notes(task: TaskConfig, download: DownloadConfig | None = None) -> list[str]:
    """Caveats about the data a task was evaluated on; outputs that report task numbers print them."""
    if is_local_task(task.dataset):
        return local_task_notes(task)
    entry = get_entry(task.dataset)
    notes: list[str] = []
    if entry.name == "ag":
        if _locally_available("ag", "train", download):
            notes.append(f"AG News: dev = {AG_DEV_FROM_TRAIN} examples carved (seed {AG_CARVE_SEED}, stratified) "
                         "from the 120,000 training rows, as in DAPT; test = the 7,600 official test rows.")
        else:
            notes.append("AG News: the training CSV is not available locally, so the 7,600-row official test "
                         f"set was carved (seed {AG_CARVE_SEED}, stratified per class 70/10/20%) into train "
                         "5,320 / dev 760 / test 1,520: a small-run stand-in, not comparable with the paper's "
                         "AGNews numbers.")
    elif entry.name == "hyperpartisan_news":
        notes.append("HyperPartisan: hp-splits.json lists 51 ids in train and test, 7 in dev and test, and "
                     "leaves 58 unassigned; rule: test > dev > train, unassigned dropped -> train 465 / dev "
                     "57 / test 65 (DAPT/Longformer used 516/64/65 with the overlaps).")
    elif entry.name == "cola":
        notes.append("CoLA: train.tsv is CoLA v1.1 in_domain_train.tsv (one sentence differs from GLUE's).")
    elif entry.format == "dapt_jsonl" and entry.name != "rct":
        notes.append(f"{entry.title}: SciBERT's copy of the split (DAPT's sizes and labels; not byte-compared "
                     "with DAPT's S3 jsonl).")
    return notes
