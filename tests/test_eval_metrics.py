"""femlm.eval metrics, majority baseline, aggregation over seeds, label mapping and subsampling.

Every expected number is computed by hand in the comments, not by the library under test.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from femlm.errors import UserError
from femlm.eval.config import FinetuneConfig
from femlm.eval.inputs import label_spec, split_labels, stratified_subsample
from femlm.eval.metrics import compute_metrics, majority_label, majority_scores
from femlm.eval.results import aggregate, aggregate_seeds, mean_std
from femlm.runtime.config import RuntimeConfig
from helpers.configs import TASK_NAMES, task

# Three classes: gold 0 0 1 1 2 2, predicted 0 1 1 1 2 0.
#   class 0: TP 1, FP 1 (ex 5), FN 1 (ex 1) -> P 1/2, R 1/2, F1 1/2
#   class 1: TP 2, FP 1 (ex 1), FN 0        -> P 2/3, R 1,   F1 4/5
#   class 2: TP 1, FP 0, FN 1 (ex 5)        -> P 1,   R 1/2, F1 2/3
GOLD3 = [0, 0, 1, 1, 2, 2]
PRED3 = [0, 1, 1, 1, 2, 0]


def test_macro_f1_by_hand() -> None:
    scores = compute_metrics("macro_f1", GOLD3, PRED3, num_labels=3)
    assert scores["macro_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)
    assert scores["accuracy"] == pytest.approx(4 / 6)


def test_macro_f1_counts_labels_absent_from_the_split() -> None:
    # A 4th label that is neither gold nor predicted scores F1 0 and still counts in the mean (DAPT's F1).
    scores = compute_metrics("macro_f1", GOLD3, PRED3, num_labels=4)
    assert scores["macro_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3 + 0) / 4)


def test_micro_f1_is_accuracy_for_single_label() -> None:
    scores = compute_metrics("micro_f1", GOLD3, PRED3, num_labels=3)
    assert scores["micro_f1"] == pytest.approx(4 / 6)
    assert scores["accuracy"] == pytest.approx(4 / 6)


def test_accuracy_only() -> None:
    assert compute_metrics("accuracy", [1, 0, 1, 1], [1, 1, 1, 0]) == {"accuracy": pytest.approx(0.5)}


def test_accuracy_and_f1_positive_class() -> None:
    # gold 1 1 0 0 1, pred 1 0 0 1 1: TP 2, FP 1, FN 1 -> F1 = 2*2 / (2*2 + 1 + 1) = 2/3; accuracy 3/5.
    scores = compute_metrics("accuracy_f1", [1, 1, 0, 0, 1], [1, 0, 0, 1, 1])
    assert scores["f1"] == pytest.approx(2 / 3)
    assert scores["accuracy"] == pytest.approx(3 / 5)


def test_matthews_by_hand() -> None:
    # gold 1 1 0 0, pred 1 0 0 0: TP 1, TN 2, FP 0, FN 1 -> (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3) = 2 / sqrt(12).
    scores = compute_metrics("matthews", [1, 1, 0, 0], [1, 0, 0, 0])
    assert scores["mcc"] == pytest.approx(2 / math.sqrt(12))
    assert scores["accuracy"] == pytest.approx(3 / 4)


def test_pearson_spearman_by_hand() -> None:
    # x 1 2 3 4, y 2 4 5 9: dx -1.5 -.5 .5 1.5, dy -3 -1 0 4; sum dx*dy 11, sum dx^2 5, sum dy^2 26.
    scores = compute_metrics("pearson_spearman", [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 9.0])
    assert scores["pearson"] == pytest.approx(11 / math.sqrt(5 * 26))
    assert scores["spearman"] == pytest.approx(1.0)  # same ranks


def test_constant_predictions_score_zero_correlation() -> None:
    assert compute_metrics("pearson_spearman", [1.0, 2.0, 3.0], [2.5, 2.5, 2.5]) == {"pearson": 0.0, "spearman": 0.0}


def test_unknown_metric_and_empty_split() -> None:
    with pytest.raises(UserError, match="task.metric"):
        compute_metrics("bleu", [0], [0])
    with pytest.raises(UserError, match="empty"):
        compute_metrics("accuracy", [], [])


def test_majority_baseline() -> None:
    assert majority_label([2, 1, 1, 2, 0], regression=False) == 1  # tie 1/2: lowest index
    assert majority_label([1.0, 2.0, 6.0], regression=True) == pytest.approx(3.0)
    # Always class 0 on gold 0 0 1 2: accuracy 1/2; F1 class0 = 2/3 (P 1/2, R 1), classes 1, 2: 0.
    scores = majority_scores("macro_f1", 0, [0, 0, 1, 2], num_labels=3)
    assert scores == {"accuracy": pytest.approx(0.5), "macro_f1": pytest.approx((2 / 3) / 3)}
    assert majority_scores("matthews", 1, [1, 0, 1])["mcc"] == 0.0


def test_mean_std_sample_std() -> None:
    # 0.8, 0.9, 1.0: mean 0.9, squared deviations .01 + 0 + .01 = .02, / (n-1) = .01, sqrt = 0.1.
    stats = mean_std([0.8, 0.9, 1.0])
    assert stats["mean"] == pytest.approx(0.9)
    assert stats["std"] == pytest.approx(0.1)
    assert stats["n"] == 3
    assert mean_std([0.7]) == {"mean": pytest.approx(0.7), "std": 0.0, "n": 1}
    assert mean_std([]) == {"mean": None, "std": None, "n": 0}


def test_aggregate_over_seeds() -> None:
    seeds = [{"seed": 1, "dev": {"accuracy": 0.5, "macro_f1": 0.2}, "test": {"accuracy": 0.6}},
             {"seed": 2, "dev": {"accuracy": 0.7, "macro_f1": 0.4}, "test": {"accuracy": 0.8}},
             {"seed": 3, "dev": {"accuracy": 0.9, "macro_f1": 0.6}, "test": {}}]
    agg = aggregate_seeds(seeds)
    assert agg["dev"]["accuracy"]["mean"] == pytest.approx(0.7)
    assert agg["dev"]["accuracy"]["std"] == pytest.approx(0.2)  # deviations .2, 0, .2 -> sqrt(.08/2)
    assert agg["dev"]["macro_f1"]["mean"] == pytest.approx(0.4)
    assert agg["test"]["accuracy"] == {"mean": pytest.approx(0.7), "std": pytest.approx(math.sqrt(0.02)), "n": 2}
    assert aggregate([]) == {}


def test_seeds_empty_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"finetune.seeds=\[\]"):
        FinetuneConfig(seeds=[]).validate()
    with pytest.raises(UserError, match="distinct"):
        FinetuneConfig(seeds=[1, 1]).validate()
    with pytest.raises(UserError, match="runtime.device"):
        RuntimeConfig(device="tpu").validate()


def test_stratified_subsample_keeps_every_class() -> None:
    labels = [0] * 80 + [1] * 15 + [2] * 5
    picked = stratified_subsample(labels, 20, seed=3)
    assert len(picked) == 20 and len(set(picked)) == 20
    counts = [sum(1 for i in picked if labels[i] == c) for c in range(3)]
    assert counts == [16, 3, 1]  # 80%, 15%, 5% of 20
    assert picked == stratified_subsample(labels, 20, seed=3)  # seeded
    assert picked != stratified_subsample(labels, 20, seed=4)
    # A rare class keeps one example even when its share rounds to zero.
    skewed = [0] * 98 + [1, 2]
    rare = stratified_subsample(skewed, 5, seed=0)
    assert len(rare) == 5 and {skewed[i] for i in rare} == {0, 1, 2}
    assert stratified_subsample(labels, 500, seed=0) == list(range(100))


class _Task:
    def __init__(self, name: str, labels: list[str] | None) -> None:
        self.name, self.labels = name, labels


def test_label_spec_classification_and_regression() -> None:
    spec = label_spec(_Task("rte", ["entailment", "not_entailment"]))
    assert (spec.num_labels, spec.problem_type) == (2, "single_label_classification")
    assert spec.id2label == {0: "entailment", 1: "not_entailment"}
    assert spec.label2id == {"entailment": 0, "not_entailment": 1}
    reg = label_spec(_Task("stsb", None))
    assert (reg.num_labels, reg.problem_type, reg.regression) == (1, "regression", True)
    with pytest.raises(UserError, match="at least 2"):
        label_spec(_Task("x", ["only"]))


def test_split_labels_checked_against_the_label_set() -> None:
    spec = label_spec(_Task("rte", ["entailment", "not_entailment"]))
    assert split_labels({"label": [0, 1, "entailment"]}, spec, "rte", "dev") == [0, 1, 0]
    with pytest.raises(UserError, match="outside task.labels"):
        split_labels({"label": [0, 2]}, spec, "rte", "dev")
    with pytest.raises(UserError, match="not in task.labels"):
        split_labels({"label": ["contradiction"]}, spec, "rte", "dev")
    reg = label_spec(_Task("stsb", None))
    assert split_labels({"label": [1, 4.5]}, reg, "stsb", "dev") == [1.0, 4.5]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_label_mapping_for_every_task_config(name: str) -> None:
    cfg = dataclasses.asdict(task(name))
    spec = label_spec(_Task(cfg["name"], cfg["labels"]))
    if cfg["labels"] is None:
        assert cfg["metric"] == "pearson_spearman"
        assert (spec.num_labels, spec.problem_type) == (1, "regression")
    else:
        assert spec.num_labels == len(cfg["labels"]) >= 2
        assert [spec.id2label[i] for i in range(spec.num_labels)] == [str(x) for x in cfg["labels"]]
        assert all(spec.label2id[spec.id2label[i]] == i for i in range(spec.num_labels))
    # Every metric family scores its main metric on a perfect prediction.
    gold = [0.0, 1.0, 2.0] if spec.regression else [0, 1] * 2
    assert cfg["main_metric"] in compute_metrics(cfg["metric"], gold, gold, num_labels=spec.num_labels)
