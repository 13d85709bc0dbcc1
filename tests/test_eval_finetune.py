"""femlm.eval fine-tuning loop, results files, evaluate and sweep, on a tiny BERT and toy tasks.

The toy data stand in for femlm.data.load_task (monkeypatched), so these tests need neither the mirror nor
the data layer. A 1-layer, 16-wide BERT on a 19-word vocabulary keeps the file well under a minute.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import random
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset, DatasetDict
from transformers import BertConfig, BertForMaskedLM, BertTokenizer, DataCollatorWithPadding

from femlm.config import FemlmConfig
from femlm.data.config import TaskConfig
from femlm.errors import UserError
from femlm.eval import classifier as loop
from femlm.eval import evaluate, finetune
from femlm.eval.evaluate import run_evaluate
from femlm.eval.finetune import run_finetune
from femlm.eval.inputs import encode, label_spec
from femlm.models import checkpoints as checkpoints_module
from femlm.models.config import ModelConfig
from femlm.models.load import load_classifier
from femlm.models.resolve import resolve_classifier
from femlm.runs import Run

torch.set_num_threads(1)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
POSITIVE, NEGATIVE = ["good", "great"], ["bad", "awful"]
FILLER = ["the", "movie", "film", "is", "was", "plot", "a", "very", "and", "it", "this", "story"]
VOCAB = SPECIALS + POSITIVE + NEGATIVE + FILLER
MAX_POSITIONS = 64
RESULT_KEYS = {"kind", "task", "metric", "main_metric", "eval_split", "checkpoint", "pretrain", "seeds",
               "aggregate", "notes", "hardware", "git_commit", "scale", "majority_baseline"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pre-training checkpoint as femlm.train leaves one: MLM weights, tokenizer, femlm.json."""
    path = tmp_path_factory.mktemp("ckpt") / "final"
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=MAX_POSITIONS)
    BertForMaskedLM(config).save_pretrained(path)
    BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(path)
    (path / "femlm.json").write_text(json.dumps({"kind": "pretrain", "masking": "fe_subword", "step": 7}))
    return path


def sentence(rng: random.Random, word: str) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(3, 8))]
    words.insert(rng.randrange(len(words) + 1), word)
    return " ".join(words)


def toy_sentiment(seed: int = 0, sizes: tuple[int, int, int] = (60, 20, 20)) -> DatasetDict:
    """Label 0 (pos) when the sentence has good/great, 1 (neg) for bad/awful; 60% pos, so majority = pos."""
    rng = random.Random(seed)
    splits = {}
    for name, n in zip(("train", "dev", "test"), sizes, strict=True):
        labels = [0 if i % 5 < 3 else 1 for i in range(n)]
        texts = [sentence(rng, rng.choice(POSITIVE if y == 0 else NEGATIVE)) for y in labels]
        splits[name] = Dataset.from_dict({"text": texts, "label": labels})
    return DatasetDict(splits)


def toy_similarity(seed: int = 0) -> DatasetDict:
    """STS-B-like pairs: score = 5 when both sentences share the sentiment word's polarity, else 0."""
    rng = random.Random(seed)
    splits = {}
    for name, n in (("train", 60), ("dev", 20)):
        a, b, y = [], [], []
        for _ in range(n):
            same = rng.random() < 0.5
            first = rng.choice(POSITIVE)
            second = rng.choice(POSITIVE if same else NEGATIVE)
            a.append(sentence(rng, first))
            b.append(sentence(rng, second))
            y.append(5.0 if same else 0.0)
        splits[name] = Dataset.from_dict({"text": a, "text_pair": b, "label": y})
    return DatasetDict(splits)


def toy_task(**overrides: Any) -> TaskConfig:
    values: dict[str, Any] = dict(name="toy", dataset="toy", text_fields=["text"], labels=["pos", "neg"],
                                  metric="macro_f1", main_metric="macro_f1", eval_split="test", epochs=8,
                                  lr=3e-2, batch_size=8, patience=3, max_length=32, warmup_ratio=0.1,
                                  weight_decay=0.01)
    values.update(overrides)
    return TaskConfig(**values)


def make_cfg(checkpoint: Path, task: TaskConfig, evaluate: bool = False, **finetune: Any) -> Any:
    cfg = FemlmConfig(command="evaluate" if evaluate else "finetune")
    cfg.task = task
    cfg.model.name_or_path = str(checkpoint)
    cfg.logger.progress = False
    cfg.finetune.seeds = [1]
    for key, value in finetune.items():
        setattr(cfg.finetune, key, value)
    return cfg


@pytest.fixture
def toy_data(monkeypatch: pytest.MonkeyPatch) -> dict[str, DatasetDict]:
    """Route femlm.data.load_task to in-memory toy splits, keyed by task name."""
    nodev = toy_sentiment()
    data = {"toy": toy_sentiment(), "toysts": toy_similarity(),
            "nodev": DatasetDict({"train": nodev["train"], "test": nodev["test"]})}
    for module in (finetune, evaluate):
        monkeypatch.setattr(module, "load_task", lambda task, download: data[task.name])
        monkeypatch.setattr(module, "task_data_notes", lambda task, download=None: ["toy data note"])
    return data


def new_run(path: Path, command: str = "finetune") -> Run:
    path.mkdir(parents=True, exist_ok=True)
    return Run(dir=path, command=command)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_finetune_writes_seeds_aggregate_and_beats_majority(checkpoint: Path, toy_data: Any,
                                                            tmp_path: Path) -> None:
    cfg = make_cfg(checkpoint, toy_task(), seeds=[1, 2], save_model=True)
    run = new_run(tmp_path / "ft")
    results = run_finetune(cfg, run)
    on_disk = json.loads((run.dir / "results.json").read_text())
    assert set(on_disk) >= RESULT_KEYS
    assert on_disk["pretrain"] == {"kind": "pretrain", "masking": "fe_subword", "step": 7}
    assert [s["seed"] for s in on_disk["seeds"]] == [1, 2] and on_disk["complete"] is True
    assert on_disk["aggregate"]["test"]["macro_f1"]["n"] == 2
    assert on_disk["majority_baseline"]["prediction"] == "pos"
    # Majority on test (12 pos, 8 neg): accuracy 0.6, macro-F1 = (F1_pos 0.75 + 0) / 2.
    assert on_disk["majority_baseline"]["test"] == {"accuracy": pytest.approx(0.6), "macro_f1": pytest.approx(0.375)}
    assert results["aggregate"]["test"]["macro_f1"]["mean"] > 0.375  # the toy task is learnable
    assert "toy data note" in on_disk["notes"]
    assert any("newly initialized" in n and "classifier.weight" in n for n in on_disk["notes"])
    for seed in (1, 2):
        preds = read_jsonl(run.dir / f"seed_{seed}" / "predictions.jsonl")
        assert [p["index"] for p in preds] == list(range(20))
        assert {p["label"] for p in preds} == {"pos", "neg"}
        assert (run.dir / f"seed_{seed}" / "scores.json").is_file()
        assert (run.dir / f"seed_{seed}" / "model" / "config.json").is_file()
    epochs = [r for r in read_jsonl(run.metrics_path) if "epoch" in r]
    assert {"seed", "epoch", "train_loss", "dev_macro_f1", "dev_accuracy"} <= set(epochs[0])
    assert {r["seed"] for r in epochs} == {1, 2}

    # `femlm evaluate` on the saved models reproduces the fine-tuning run's test scores exactly (with the
    # max_length recorded at fine-tuning, 32, not this task config's 8).
    ev = make_cfg(checkpoint, toy_task(max_length=8), evaluate=True)
    ev.evaluate.checkpoints = str(run.dir)
    scored = run_evaluate(ev, new_run(tmp_path / "ev", "evaluate"))
    assert [r["seed"] for r in scored["checkpoints"]] == [1, 2]
    for row, seed_row in zip(scored["checkpoints"], results["seeds"], strict=True):
        assert row["scores"] == pytest.approx(seed_row["test"])
    assert (tmp_path / "ev" / "seed_1__model" / "predictions.jsonl").is_file()
    assert scored["majority_baseline"]["test"]["accuracy"] == pytest.approx(0.6)


def test_regression_pairs_like_stsb(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    task = toy_task(name="toysts", text_fields=["sentence1", "sentence2"], labels=None,
                    metric="pearson_spearman", main_metric="pearson", eval_split="dev", patience=None, epochs=2)
    spec = label_spec(task)
    model, fresh = load_classifier(resolve_classifier(str(checkpoint), ModelConfig(), None), spec, None)
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    assert "classifier.weight" in fresh
    results = run_finetune(make_cfg(checkpoint, task), new_run(tmp_path / "sts"))
    assert set(results["seeds"][0]["dev"]) == {"pearson", "spearman"}
    assert results["seeds"][0]["test"] == {} and results["aggregate"]["test"] == {}
    assert results["seeds"][0]["best_epoch"] == results["seeds"][0]["epochs_run"] == 2  # no early stopping
    assert results["majority_baseline"]["dev"] == {"pearson": 0.0, "spearman": 0.0}
    preds = read_jsonl(tmp_path / "sts" / "seed_1" / "predictions.jsonl")
    assert all(isinstance(p["prediction"], float) and p["label"] in (0.0, 5.0) for p in preds)
    assert any("scored on dev" in n for n in results["notes"])


def test_pair_encoding_has_separator_and_segments(checkpoint: Path) -> None:
    tokenizer = BertTokenizer.from_pretrained(checkpoint)
    spec = label_spec(toy_task())
    sep = tokenizer.sep_token_id
    pair = encode({"text": ["the movie"], "text_pair": ["is good"], "label": [0]}, tokenizer, spec, 32, pair=True)
    row = pair.features[0]
    assert row["input_ids"].count(sep) == 2 and row["input_ids"][0] == tokenizer.cls_token_id
    assert set(row["token_type_ids"]) == {0, 1}  # second segment marked
    assert row["token_type_ids"].index(1) == row["input_ids"].index(sep) + 1
    single = encode({"text": ["the movie"], "label": [1]}, tokenizer, spec, 32, pair=False).features[0]
    assert single["input_ids"].count(sep) == 1 and set(single["token_type_ids"]) == {0}
    with pytest.raises(UserError, match="text_pair"):
        encode({"text": ["a"], "label": [0]}, tokenizer, spec, 32, pair=True)


def test_truncation_is_counted_and_noted(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    tokenizer = BertTokenizer.from_pretrained(checkpoint)
    enc = encode({"text": ["good " * 20, "bad"], "label": [0, 1]}, tokenizer, label_spec(toy_task()), 8, pair=False)
    assert enc.truncated == 1 and len(enc.features[0]["input_ids"]) == 8
    cfg = make_cfg(checkpoint, toy_task(epochs=1), max_length=8)
    results = run_finetune(cfg, new_run(tmp_path / "trunc"))
    assert any("truncated to max_length=8" in n for n in results["notes"])
    assert results["scale"]["max_length"] == 8


def test_early_stopping_restores_best_epoch(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dev peaks at epoch 1 (scripted scores): training stops after `patience` worse epochs and the
    weights are the epoch-1 weights, not the last epoch's."""
    task = toy_task(patience=2)
    spec = label_spec(task)
    tokenizer = BertTokenizer.from_pretrained(checkpoint)
    data = toy_sentiment()
    train = encode(data["train"], tokenizer, spec, 32, pair=False)
    dev = encode(data["dev"], tokenizer, spec, 32, pair=False)
    snapshots: list[dict[str, torch.Tensor]] = []
    scripted = iter([0.9, 0.5, 0.4, 0.95, 0.99])

    def fake_score(model: Any, *args: Any, **kwargs: Any) -> tuple[dict[str, float], list[int]]:
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return {"macro_f1": next(scripted), "accuracy": 0.5}, []

    monkeypatch.setattr(loop, "score_split", fake_score)
    model, _ = load_classifier(resolve_classifier(str(checkpoint), ModelConfig(), None), spec, None)
    recipe = loop.Recipe(epochs=10, lr=1e-2, batch_size=8, max_length=32, patience=2, warmup_ratio=0.0,
                         weight_decay=0.0)
    logged: list[dict[str, Any]] = []
    result = loop.train_seed(model, train, dev, recipe, spec, "macro_f1", "macro_f1", 1, torch.device("cpu"),
                             DataCollatorWithPadding(tokenizer), lambda **r: logged.append(r), progress=False)
    assert (result.best_epoch, result.epochs_run) == (1, 3)  # epoch 1 best, 2 and 3 worse -> stop
    assert result.dev == {"macro_f1": 0.9, "accuracy": 0.5}
    assert [r["epoch"] for r in logged] == [1, 2, 3]
    final = model.state_dict()
    assert all(torch.equal(final[k], snapshots[0][k]) for k in final)
    assert not all(torch.equal(final[k], snapshots[-1][k]) for k in final)  # it did train past epoch 1


def test_stopped_run_keeps_finished_seeds(checkpoint: Path, toy_data: Any, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real = loop.train_seed

    def stop_at_seed_2(*args: Any, **kwargs: Any) -> Any:
        if args[7] == 2:  # the seed argument
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_seed", stop_at_seed_2)
    run = new_run(tmp_path / "stopped")
    with pytest.raises(KeyboardInterrupt):
        run_finetune(make_cfg(checkpoint, toy_task(epochs=1), seeds=[1, 2]), run)
    partial = json.loads((run.dir / "results.json").read_text())
    assert partial["complete"] is False and [s["seed"] for s in partial["seeds"]] == [1]
    assert partial["aggregate"]["test"]["macro_f1"]["n"] == 1


def test_user_errors(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such checkpoint directory"):
        run_finetune(make_cfg(tmp_path / "missing", toy_task()), new_run(tmp_path / "a"))
    with pytest.raises(UserError, match=r"finetune.seeds=\[\]"):
        run_finetune(make_cfg(checkpoint, toy_task(), seeds=[]), new_run(tmp_path / "b"))
    with pytest.raises(UserError, match=f"at most {MAX_POSITIONS} positions"):
        run_finetune(make_cfg(checkpoint, toy_task(), max_length=MAX_POSITIONS + 1), new_run(tmp_path / "c"))
    with pytest.raises(UserError, match="give a local checkpoint"):
        resolve_classifier("no-such-org/no-such-model", ModelConfig(), type("D", (), {"offline": True})())
    with pytest.raises(UserError, match="needs a dev split"):  # never select epochs on test
        run_finetune(make_cfg(checkpoint, toy_task(name="nodev")), new_run(tmp_path / "e"))
    ev = make_cfg(checkpoint, toy_task(), evaluate=True)
    ev.evaluate.checkpoints = str(checkpoint)
    with pytest.raises(UserError, match="pre-training checkpoint"):
        run_evaluate(ev, new_run(tmp_path / "d", "evaluate"))


def test_task_max_length_clamped_to_model(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    # DAPT's 512 on a 64-position model: the recipe truncates to what the model embeds, and says so.
    results = run_finetune(make_cfg(checkpoint, toy_task(max_length=512, epochs=1)), new_run(tmp_path / "r"))
    assert results["scale"]["max_length"] == MAX_POSITIONS
    assert any("exceeds the model's 64 positions" in n for n in results["notes"])


def test_subsample_recorded(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    results = run_finetune(make_cfg(checkpoint, toy_task(epochs=1), max_train_examples=20), new_run(tmp_path / "s"))
    assert results["scale"]["train_examples"] == 20 and results["scale"]["full_train_examples"] == 60
    assert any("subsampled to 20 of 60" in n for n in results["notes"])


def test_sweep_writes_efficiency(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    pretrain_run = tmp_path / "pretrain"
    for name, step in (("step_10", 10), ("step_2", 2), ("final", 10)):
        target = pretrain_run / "checkpoints" / name
        shutil.copytree(checkpoint, target)
        (target / "femlm.json").write_text(json.dumps({"kind": "pretrain", "masking": "fe_subword", "step": step}))
    cfg = make_cfg(checkpoint, toy_task(epochs=1), evaluate=True)
    cfg.evaluate.checkpoints, cfg.evaluate.sweep = str(pretrain_run), True
    run = new_run(tmp_path / "sweep", "evaluate")
    payload = run_evaluate(cfg, run)
    on_disk = json.loads((run.dir / "efficiency.json").read_text())
    assert on_disk["kind"] == "efficiency" and on_disk["main_metric"] == "macro_f1"
    # Sorted by step; final repeats step 10 so it is not fine-tuned twice.
    assert [(p["step"], p["masking"], p["n"]) for p in payload["points"]] == [(2, "fe_subword", 1),
                                                                             (10, "fe_subword", 1)]
    assert all(p["mean"] is not None and p["std"] == 0.0 for p in on_disk["points"])
    assert (run.dir / "sweep" / "step_2" / "results.json").is_file()
    assert (run.dir / "sweep" / "step_10" / "seed_1" / "predictions.jsonl").is_file()


def test_group_by_length_batches_cover_every_example_once_with_less_padding(checkpoint: Path) -> None:
    from femlm.eval.inputs import Encoded, batches

    tokenizer = BertTokenizer.from_pretrained(str(checkpoint))
    rng = random.Random(0)
    lengths = [rng.randint(3, 60) for _ in range(300)]
    data = Encoded(features=[{"input_ids": [5] * n, "attention_mask": [1] * n} for n in lengths],
                   labels=[0] * 300, lengths=lengths)
    collator = DataCollatorWithPadding(tokenizer)

    def epoch(group: bool, seed: int) -> list[tuple[list[int], int]]:
        gen = torch.Generator().manual_seed(seed)
        return [(idx, b["input_ids"].numel()) for idx, b in batches(data, 8, collator, shuffle=True, generator=gen,
                                                                   group_by_length=group)]

    grouped, plain = epoch(True, 1), epoch(False, 1)
    assert sorted(i for idx, _ in grouped for i in idx) == list(range(300))
    padded = lambda run: sum(n for _, n in run)  # noqa: E731
    assert padded(grouped) < 0.8 * padded(plain)  # similar lengths share a batch
    assert epoch(True, 1) == grouped and epoch(True, 2) != grouped  # seeded, and shuffled per seed
    spreads = [max(lengths[i] for i in idx) - min(lengths[i] for i in idx) for idx, _ in grouped]
    assert sorted(spreads)[len(spreads) // 2] <= 5


@contextlib.contextmanager
def entries_into(module: Any) -> Iterator[list[str]]:
    """The names of the module-level functions of `module` called from outside it while the block runs
    (however the caller imported them; calls inside the module are its own business)."""
    codes = {f.__code__: name for name, f in vars(module).items()
             if inspect.isfunction(f) and f.__module__ == module.__name__}
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes and frame.f_back is not None \
                and frame.f_back.f_code.co_filename != module.__file__:
            calls.append(codes[frame.f_code])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


def test_finetune_and_evaluate_locate_each_checkpoint_once(checkpoint: Path, toy_data: Any, tmp_path: Path) -> None:
    """Following cfg from run_finetune, femlm/models/checkpoints.py is entered at most twice (locate, then the
    position limit), whatever the number of seeds; `femlm evaluate` enters it at most twice per checkpoint."""
    cfg = make_cfg(checkpoint, toy_task(epochs=1), seeds=[1, 2], save_model=True)
    run = new_run(tmp_path / "ft")
    with entries_into(checkpoints_module) as calls:
        run_finetune(cfg, run)
    assert len(calls) <= 2 and calls.count("locate") == 1, calls

    one = make_cfg(checkpoint, toy_task(), evaluate=True)
    one.evaluate.checkpoints = str(run.dir / "seed_1" / "model")
    with entries_into(checkpoints_module) as calls:
        run_evaluate(one, new_run(tmp_path / "ev1", "evaluate"))
    assert len(calls) <= 2 and calls.count("locate") == 1, calls

    both = make_cfg(checkpoint, toy_task(), evaluate=True)
    both.evaluate.checkpoints = str(run.dir)  # the run directory itself is looked at once, then each model
    with entries_into(checkpoints_module) as calls:
        scored = run_evaluate(both, new_run(tmp_path / "ev2", "evaluate"))
    assert len(scored["checkpoints"]) == 2
    assert calls.count("locate") == 1 + 2 and len(calls) <= 1 + 2 * 2, calls



def test_fine_tuning_steps_never_run_cudnn_with_attention_dropout(checkpoint: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime.sdpa_backend=auto and BERT's attention dropout 0.1: every attention call of a fine-tuning step runs
    with cuDNN off (femlm/runtime/attention.py; enforced here on the CPU as on CUDA); scoring is untouched."""
    import functools

    import torch.nn.functional as F

    from femlm.runtime.attention import plan_kernels

    task = toy_task()
    spec = label_spec(task)
    tokenizer = BertTokenizer.from_pretrained(checkpoint)
    train = encode(toy_sentiment()["train"], tokenizer, spec, 32, pair=False)
    seen: list[tuple[bool, bool]] = []
    sdpa = F.scaled_dot_product_attention

    def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append((torch.is_grad_enabled(), torch.backends.cuda.cudnn_sdp_enabled()))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    monkeypatch.setattr(loop, "plan_kernels", functools.partial(plan_kernels, enforce=True))
    model, _ = load_classifier(resolve_classifier(str(checkpoint), ModelConfig(), None), spec, None)
    assert model.config.attention_probs_dropout_prob > 0
    recipe = loop.Recipe(epochs=1, lr=1e-3, batch_size=8, max_length=32, patience=None, warmup_ratio=0.0,
                         weight_decay=0.0)
    loop.train_seed(model, train, train, recipe, spec, "macro_f1", "macro_f1", 1, torch.device("cpu"),
                    DataCollatorWithPadding(tokenizer), lambda **r: None, progress=False)
    training, scoring = [c for g, c in seen if g], [c for g, c in seen if not g]
    assert training and not any(training) and scoring and all(scoring)
