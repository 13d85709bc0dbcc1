"""A stop request (SIGTERM, SIGUSR2, ...) outside pre-training's step loop: `femlm analyze` (every kind),
`femlm finetune` (mid-step, between epochs, while scoring) and `femlm evaluate`'s checkpoint sweep stop at their
next poll, exit as the training path does (128 + the signal's number, through femlm.cli), leave no file a later
run takes as complete, and the same command run again ends with the numbers of an uninterrupted run. Data
preparation: tests/test_preemption_prepare.py; a signal during a save of pre-training state: tests/test_preemption.py.

The signal is real: the test sends it to this process from inside the loop (femlm.stop's handler sets the flag,
the loop polls it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from femlm.analysis.gradients import MaskedLMGradients
from femlm.runs import Run
from helpers.analysis import analyze_config, blocks, micro_tokenizer
from helpers.stopping import mkdir, run_stopped, said_interrupted, without

torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------- analyze
DECOMPOSITION = dict(kind="decomposition", pool=6, sequences=3, tau=4, num_masks=[2, 4], batch_rows=4, draws=2,
                     check_batches=3, reference=3, budget=6, hamming_bins=3, null_groups=2, null_group_size=3,
                     bootstrap=20, sketch_dim=64)
PASSES = dict(kind="passes", pool=4, draws=2, reference=3, num_masks=[2, 3], ratio=0.15, bootstrap=20, sketch_dim=64)
ANALYSES = {"both": ({"bootstrap": 20}, "analysis.json"), "decomposition": (DECOMPOSITION, "decomposition.json"),
            "passes": (PASSES, "passes.json")}
VARYING = {"wall_s", "hardware", "results_dir"}


@pytest.mark.parametrize("kind", list(ANALYSES))
def test_analysis_stops_at_the_next_gradient_chunk(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    from femlm.analysis import run as run_module

    settings, marker = ANALYSES[kind]
    micro_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(run_module, "load_sequences",
                        lambda cfg, tok, count=None: (blocks(count or cfg.analysis.sequences, 24),
                                                      list(range(count or cfg.analysis.sequences))))

    def config(name: str) -> Any:
        cfg = analyze_config(tmp_path / name, str(tmp_path / "tok"), **settings)
        cfg.analysis.validate()
        return cfg

    reference = run_module.run_analyze(config("reference"), Run(dir=mkdir(tmp_path / "reference"), command="analyze"))
    chunks: list[int] = []
    real = MaskedLMGradients._rows

    def rows(self: MaskedLMGradients, seq_idx: torch.Tensor, masks: torch.Tensor) -> Any:
        chunks.append(len(masks))
        if len(chunks) == 3:  # inside the third gradient chunk
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, seq_idx, masks)

    monkeypatch.setattr(MaskedLMGradients, "_rows", rows)
    assert run_stopped("analyze", config("stopped"), tmp_path / "stopped") == 128 + signal.SIGTERM
    assert len(chunks) == 3  # the chunk in flight finished, no other started
    assert not (tmp_path / "stopped" / marker).exists() and not (tmp_path / "stopped" / "results").exists()
    said_interrupted(capsys, signal.SIGTERM, "stopped during the analysis", "the same command run again completes it")
    again = run_module.run_analyze(config("again"), Run(dir=mkdir(tmp_path / "again"), command="analyze"))
    assert json.loads((tmp_path / "again" / marker).read_text())["cost"]["passes"] == reference["cost"]["passes"]
    same = lambda d: json.dumps(without(d, VARYING), sort_keys=True, default=str)  # noqa: E731 (NaN == NaN)
    assert same(again) == same(reference)


# ----------------------------------------------------------------------------------------------- fine-tuning
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "great", "bad", "awful", "the", "movie", "is",
         "was", "a", "very", "plot"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    path = tmp_path_factory.mktemp("ckpt") / "final"
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=32)).save_pretrained(path)
    BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(path)
    (path / "femlm.json").write_text(json.dumps({"kind": "pretrain", "masking": "fe_subword", "step": 7}))
    return path


@pytest.fixture
def toy_task(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`femlm.data.load_task` answering a toy sentiment task (40 train, 16 dev, 16 test examples)."""
    import random

    from datasets import Dataset, DatasetDict

    from femlm.data.config import TaskConfig
    from femlm.eval import evaluate, finetune

    rng = random.Random(0)
    splits = {}
    for name, n in (("train", 40), ("dev", 16), ("test", 16)):
        labels = [i % 2 for i in range(n)]
        texts = [" ".join([*rng.choices(VOCAB[9:], k=4), rng.choice(VOCAB[5:7] if y == 0 else VOCAB[7:9])])
                 for y in labels]
        splits[name] = Dataset.from_dict({"text": texts, "label": labels})
    for module in (finetune, evaluate):
        monkeypatch.setattr(module, "load_task", lambda task, download: DatasetDict(splits))
        monkeypatch.setattr(module, "task_data_notes", lambda task, download=None: [])
    return TaskConfig(name="toy", dataset="toy", text_fields=["text"], labels=["pos", "neg"], metric="macro_f1",
                      main_metric="macro_f1", eval_split="test", epochs=2, lr=3e-2, batch_size=8, patience=None,
                      max_length=16, warmup_ratio=0.1, weight_decay=0.01)


def finetune_config(checkpoint: Path, task: Any, command: str = "finetune", seeds: tuple[int, ...] = (1, 2)) -> Any:
    from femlm.config import FemlmConfig

    cfg = FemlmConfig(command=command)
    cfg.task, cfg.model.name_or_path, cfg.logger.progress = task, str(checkpoint), False
    cfg.finetune.seeds = list(seeds)
    return cfg


def seed_scores(results: dict[str, Any]) -> list[tuple]:
    return [(s["seed"], s["best_epoch"], s["dev"], s["test"]) for s in results["seeds"]]


@pytest.mark.parametrize("where", ["step", "epoch", "scoring"])
def test_finetune_drops_the_seed_in_progress_and_keeps_the_finished_ones(
        where: str, checkpoint: Path, toy_task: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """SIGUSR2 in seed 2: at its 3rd training step, after its first epoch (before the second), or while its kept
    model is scored. results.json keeps seed 1 (complete: false), nothing of seed 2 is written; run again, the
    command gives an uninterrupted run's numbers."""
    from femlm.eval import classifier
    from femlm.eval.finetune import run_finetune

    reference = run_finetune(finetune_config(checkpoint, toy_task), Run(dir=mkdir(tmp_path / "ref"),
                                                                        command="finetune"))
    state = {"seed": 0, "steps": 0, "fired": False}
    real_train, real_score, real_autocast = classifier.train_seed, classifier.score_split, classifier.autocast

    def fire() -> None:
        if not state["fired"]:
            state["fired"] = True
            os.kill(os.getpid(), signal.SIGUSR2)

    def train_seed(*args: Any, **kwargs: Any) -> Any:
        state["seed"], state["steps"] = args[7], 0
        log = args[10]

        def logged(**record: Any) -> None:
            log(**record)
            if where == "epoch" and state["seed"] == 2 and record["epoch"] == 1:
                fire()

        result = real_train(*args[:10], logged, *args[11:], **kwargs)
        state["seed"] = -state["seed"]  # trained: what is scored now is its kept model
        return result

    def autocast(device: Any, precision: str) -> Any:
        if state["seed"] == 2 and classifier.torch.is_grad_enabled():  # a training step of seed 2
            state["steps"] += 1
            if where == "step" and state["steps"] == 3:
                fire()
        return real_autocast(device, precision)

    def score_split(*args: Any, **kwargs: Any) -> Any:
        if where == "scoring" and state["seed"] == -2:
            fire()
        return real_score(*args, **kwargs)

    monkeypatch.setattr(classifier, "train_seed", train_seed)
    monkeypatch.setattr(classifier, "autocast", autocast)
    monkeypatch.setattr(classifier, "score_split", score_split)
    stopped = tmp_path / "stopped"
    assert run_stopped("finetune", finetune_config(checkpoint, toy_task), stopped) == 128 + signal.SIGUSR2
    assert state["fired"] and (where != "step" or state["steps"] == 3)
    kept = json.loads((stopped / "results.json").read_text())
    assert kept["complete"] is False and seed_scores(kept) == seed_scores(reference)[:1]
    assert (stopped / "seed_1" / "scores.json").is_file() and not (stopped / "seed_2").exists()
    said_interrupted(capsys, signal.SIGUSR2, "seed 2" if where != "scoring" else "scoring")
    epochs = [json.loads(line) for line in (stopped / "metrics.jsonl").read_text().splitlines()]
    assert not any(r.get("event") == "seed_done" and r["seed"] == 2 for r in epochs)
    if where == "step":  # once is enough: the same command again ends as the uninterrupted run did
        again = run_finetune(finetune_config(checkpoint, toy_task), Run(dir=mkdir(tmp_path / "again"),
                                                                        command="finetune"))
        assert again["complete"] is True and seed_scores(again) == seed_scores(reference)


def test_evaluate_sweep_keeps_finished_points_and_is_not_taken_for_complete(
        checkpoint: Path, toy_task: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """SIGTERM while the sweep fine-tunes its second checkpoint: efficiency.json keeps the first point with
    complete: false, so the experiment runner's rule runs the step again; the same command then completes it."""
    from femlm.eval import classifier
    from femlm.eval.evaluate import run_evaluate
    from femlm.experiment.step import Step

    pretrain = tmp_path / "pretrain"
    for name, step in (("step_2", 2), ("step_5", 5)):
        shutil.copytree(checkpoint, pretrain / "checkpoints" / name)
        (pretrain / "checkpoints" / name / "femlm.json").write_text(json.dumps({"kind": "pretrain", "step": step}))
    task = toy_task
    task.epochs = 1

    def config() -> Any:
        cfg = finetune_config(checkpoint, task, command="evaluate", seeds=(1,))
        cfg.evaluate.checkpoints, cfg.evaluate.sweep = str(pretrain), True
        return cfg

    trained: list[str] = []
    real = classifier.train_seed

    def train_seed(*args: Any, **kwargs: Any) -> Any:
        trained.append("x")
        if len(trained) == 2:  # the second checkpoint's fine-tuning is under way
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(classifier, "train_seed", train_seed)
    stopped = tmp_path / "stopped"
    assert run_stopped("evaluate", config(), stopped) == 128 + signal.SIGTERM
    kept = json.loads((stopped / "efficiency.json").read_text())
    assert kept["complete"] is False and [p["step"] for p in kept["points"]] == [2]
    assert not (stopped / "sweep" / "step_5" / "results.json").exists()
    assert not Step("sweep", "efficiency", stopped, output="efficiency.json").done()
    said_interrupted(capsys, signal.SIGTERM, "fine-tuning seed 1")
    again = run_evaluate(config(), Run(dir=mkdir(tmp_path / "again"), command="evaluate"))
    assert again["complete"] is True and [p["step"] for p in again["points"]] == [2, 5]
    assert again["points"][0] == kept["points"][0]
    assert Step("sweep", "efficiency", tmp_path / "again", output="efficiency.json").done()
