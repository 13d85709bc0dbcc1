"""Task data -> model inputs: label mapping, stratified subsampling, tokenization, batching.

A split is anything with columns ``text`` (and ``text_pair`` for pair tasks) and ``label`` (an index into
``task.labels``, or a float for regression): a `datasets.Dataset` from `femlm.data.load_task`, or a dict of
lists in tests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from femlm.errors import UserError


@dataclass(frozen=True)
class LabelSpec:
    """What the classifier head needs to know about a task's labels."""

    num_labels: int
    problem_type: str  # single_label_classification | regression
    id2label: dict[int, str]
    label2id: dict[str, int]

    @property
    def regression(self) -> bool:
        return self.problem_type == "regression"


def label_spec(task: Any) -> LabelSpec:
    """Head shape for a task: one output per label, or a single regression output (STS-B)."""
    if task.labels is None:
        return LabelSpec(1, "regression", {0: "score"}, {"score": 0})
    labels = [str(x) for x in task.labels]
    if len(labels) < 2:
        raise UserError(f"task.labels={labels} (task {task.name}): a classifier needs at least 2 labels")
    return LabelSpec(len(labels), "single_label_classification", dict(enumerate(labels)),
                     {name: i for i, name in enumerate(labels)})


def column(split: Any, name: str) -> list[Any]:
    return list(split[name])


def has_column(split: Any, name: str) -> bool:
    names = getattr(split, "column_names", None)
    return name in (names if names is not None else split)


def split_labels(split: Any, spec: LabelSpec, task_name: str, split_name: str) -> list[Any]:
    """Gold labels of a split, checked against the label set (a wrong index would train silently)."""
    values = column(split, "label")
    if spec.regression:
        return [float(v) for v in values]
    out = []
    for i, value in enumerate(values):
        if isinstance(value, str):  # a reader that kept label strings: map them
            if value not in spec.label2id:
                raise UserError(f"task {task_name}, {split_name} example {i}: label {value!r} is not in "
                                f"task.labels ({', '.join(spec.label2id)})")
            value = spec.label2id[value]
        if not 0 <= int(value) < spec.num_labels:
            raise UserError(f"task {task_name}, {split_name} example {i}: label index {value} is outside "
                            f"task.labels (0..{spec.num_labels - 1})")
        out.append(int(value))
    return out


def stratified_subsample(labels: Sequence[Any], n: int, seed: int, regression: bool = False) -> list[int]:
    """Indices of a seeded subsample of size ``n`` that keeps the label proportions.

    Per-class quotas by largest remainder, at least one example of every class when ``n`` allows, so rare
    classes (ACL-ARC's Future, Extends) stay in the subsample. Regression: a plain seeded sample.
    """
    total = len(labels)
    if n >= total:
        return list(range(total))
    rng = np.random.default_rng(seed)
    if regression:
        return sorted(rng.choice(total, size=n, replace=False).tolist())
    by_class: dict[Any, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_class[label].append(i)
    classes = sorted(by_class)
    exact = {c: n * len(by_class[c]) / total for c in classes}
    quota = {c: int(exact[c]) for c in classes}
    if n >= len(classes):
        for c in classes:
            quota[c] = max(quota[c], 1)
    # Hand out what is left by largest remainder, then take back from the largest classes if the
    # at-least-one rule overshot.
    for c in sorted(classes, key=lambda c: exact[c] - int(exact[c]), reverse=True):
        if sum(quota.values()) >= n:
            break
        if quota[c] < len(by_class[c]):
            quota[c] += 1
    while sum(quota.values()) > n:
        c = max(classes, key=lambda c: quota[c])
        quota[c] -= 1
    chosen: list[int] = []
    for c in classes:
        chosen += rng.choice(by_class[c], size=quota[c], replace=False).tolist()
    return sorted(chosen)


def select(split: Any, indices: list[int]) -> Any:
    if hasattr(split, "select"):
        return split.select(indices)
    return {k: [v[i] for i in indices] for k, v in split.items()}


@dataclass
class Encoded:
    """One tokenized split: features for the collator, gold labels, and how many were truncated."""

    features: list[dict[str, Any]]
    labels: list[Any]
    truncated: int = 0
    lengths: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.features)


def encode(split: Any, tokenizer: PreTrainedTokenizerBase, spec: LabelSpec, max_length: int, pair: bool,
           task_name: str = "?", split_name: str = "?") -> Encoded:
    """Tokenize a split (pairs as ``tokenizer(text, text_pair)``: separator + segment ids) with truncation
    to ``max_length``, as DAPT truncated long documents; count the examples that lost tokens."""
    texts = [str(t) for t in column(split, "text")]
    if pair and not has_column(split, "text_pair"):
        raise UserError(f"task {task_name}: a pair task needs a text_pair column in its {split_name} split")
    pairs = [str(t) for t in column(split, "text_pair")] if pair else None
    labels = split_labels(split, spec, task_name, split_name)
    enc = tokenizer(texts, pairs, truncation=True, max_length=max_length)
    # A second pass without truncation only measures the full lengths (for the truncation note).
    full = tokenizer(texts, pairs, truncation=False, verbose=False)["input_ids"]
    truncated = sum(1 for ids in full if len(ids) > max_length)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    features = []
    for i, label in enumerate(labels):
        row = {k: enc[k][i] for k in keys}
        row["labels"] = float(label) if spec.regression else int(label)
        features.append(row)
    return Encoded(features, labels, truncated, [len(ids) for ids in enc["input_ids"]])


GROUP_SPAN = 50  # batches per length-sorted group (HF Trainer's group_by_length uses the same span)


def batches(data: Encoded, batch_size: int, collator: DataCollatorWithPadding, shuffle: bool,
            generator: torch.Generator | None = None, sort_by_length: bool = False, group_by_length: bool = False
            ) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Padded batches with the example indices they hold. Evaluation sorts by length (less padding);
    the indices put predictions back in file order. `group_by_length` (training): shuffle, sort each span of
    GROUP_SPAN batches by length, then shuffle the batches, so a batch holds examples of similar length and
    pads less (about half the tokens on DAPT sentence tasks) while the order stays random."""
    if shuffle:
        order = torch.randperm(len(data), generator=generator).tolist()
    elif sort_by_length:
        order = sorted(range(len(data)), key=lambda i: data.lengths[i])
    else:
        order = list(range(len(data)))
    groups = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    if shuffle and group_by_length:
        span = batch_size * GROUP_SPAN
        ordered = [i for start in range(0, len(order), span)
                   for i in sorted(order[start:start + span], key=lambda i: data.lengths[i])]
        groups = [ordered[start:start + batch_size] for start in range(0, len(ordered), batch_size)]
        groups = [groups[j] for j in torch.randperm(len(groups), generator=generator).tolist()]
    for idx in groups:
        batch = collator([data.features[i] for i in idx])
        if "labels" in batch and batch["labels"].is_floating_point():
            batch["labels"] = batch["labels"].float()  # MSE needs float32 targets
        yield idx, batch


def n_batches(n: int, batch_size: int) -> int:
    return (n + batch_size - 1) // batch_size
