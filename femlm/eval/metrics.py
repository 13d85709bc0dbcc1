"""Task metrics, computed as the papers report them (scikit-learn / scipy), and the majority baseline.

Metric families (``task.metric``) and the keys they report:

- ``macro_f1``: ``macro_f1`` (unweighted mean of per-label F1, DAPT's ``f1``) and ``accuracy``
  (ACL-ARC, SciERC, HyperPartisan, AG News).
- ``micro_f1``: ``micro_f1`` and ``accuracy`` (ChemProt, RCT). For single-label classification over all
  labels micro-F1 equals accuracy; both are kept because the papers name them differently.
- ``accuracy``: ``accuracy`` (MNLI, QNLI, SST-2, RTE, WNLI).
- ``accuracy_f1``: ``accuracy`` and ``f1`` of the positive class, label index 1 (MRPC, QQP).
- ``matthews``: ``mcc`` (CoLA), plus ``accuracy``.
- ``pearson_spearman``: ``pearson`` and ``spearman`` (STS-B, regression).

Every classification family also reports ``accuracy`` so runs are comparable across tasks. Scores are
fractions in [0, 1] (correlations in [-1, 1]); tables multiply by 100.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from femlm.errors import UserError

FAMILIES = ("macro_f1", "micro_f1", "accuracy", "accuracy_f1", "matthews", "pearson_spearman")


def compute_metrics(family: str, labels: Sequence[Any], predictions: Sequence[Any],
                    num_labels: int | None = None) -> dict[str, float]:
    """Scores of ``predictions`` against gold ``labels`` (label indices, or floats for regression).

    ``num_labels``: for macro-F1, average over every label of the task (a label never predicted and never
    gold scores F1 0 there, as in DAPT's F1 over the whole vocabulary), not only the ones seen here.
    """
    if family not in FAMILIES:
        raise UserError(f"task.metric={family!r}: allowed {', '.join(FAMILIES)}")
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    if len(labels) == 0:
        raise UserError("cannot score an empty split: the evaluation file has no examples")
    if family == "pearson_spearman":
        return correlations(np.asarray(labels, dtype=float), np.asarray(predictions, dtype=float))
    y = np.asarray(labels, dtype=int)
    p = np.asarray(predictions, dtype=int)
    scores = {"accuracy": float(accuracy_score(y, p))}
    if family == "macro_f1":
        # zero_division=0: a label with no gold and no predicted example counts F1 = 0, as DAPT does.
        label_ids = list(range(num_labels)) if num_labels else sorted(set(y) | set(p))
        scores["macro_f1"] = float(f1_score(y, p, labels=label_ids, average="macro", zero_division=0))
    elif family == "micro_f1":
        scores["micro_f1"] = float(f1_score(y, p, average="micro", zero_division=0))
    elif family == "accuracy_f1":
        scores["f1"] = float(f1_score(y, p, pos_label=1, average="binary", zero_division=0))
    elif family == "matthews":
        scores["mcc"] = float(matthews_corrcoef(y, p))
    return scores


def correlations(gold: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """Pearson and Spearman correlation. A constant side has no correlation: report 0 (like sklearn's MCC)
    rather than NaN, so a degenerate model scores as chance instead of breaking the mean over seeds."""
    if len(gold) < 2 or np.ptp(gold) == 0 or np.ptp(predicted) == 0:
        return {"pearson": 0.0, "spearman": 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pearson = float(stats.pearsonr(gold, predicted)[0])
        spearman = float(stats.spearmanr(gold, predicted)[0])
    return {"pearson": pearson, "spearman": spearman}


def majority_label(train_labels: Sequence[Any], regression: bool) -> Any:
    """The baseline's constant prediction: the most frequent training label (lowest index on ties), or
    the training mean for regression."""
    if len(train_labels) == 0:
        raise UserError("the train split is empty: nothing to fine-tune on")
    if regression:
        return float(np.mean(np.asarray(train_labels, dtype=float)))
    counts = Counter(int(v) for v in train_labels)
    best = max(counts.values())
    return min(label for label, count in counts.items() if count == best)


def majority_scores(family: str, constant: Any, labels: Sequence[Any],
                    num_labels: int | None = None) -> dict[str, float]:
    """Scores of predicting ``constant`` for every example of a split."""
    return compute_metrics(family, labels, [constant] * len(labels), num_labels=num_labels)
