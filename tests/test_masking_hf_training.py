"""The drop-in where people train: a real `transformers.Trainer` (default remove_unused_columns), a plain
`accelerate` loop, and the two examples/ scripts on the data mirror. Tiny models, CPU, seconds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from femlm import DataCollatorForFullyExploredLM
from femlm.train.objective import MaskedLMObjective
from helpers.processes import child_env
from helpers.tiny import synthetic_blocks, tiny_tokenizer

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
K, SEQUENCES, STEPS = 4, 4, 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """A tokenizer, a datasets.Dataset of 32-token blocks (with a special_tokens_mask column the model's
    forward does not take), and a factory of identical tiny BERTs without dropout."""
    from datasets import Dataset
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = tiny_tokenizer(tmp_path_factory.mktemp("tok"))
    blocks = synthetic_blocks(64, 32, len(tokenizer)).tolist()
    dataset = Dataset.from_dict({"input_ids": blocks,
                                 "special_tokens_mask": [[1] + [0] * 30 + [1] for _ in blocks]})

    def model():
        torch.manual_seed(0)
        return BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))

    return tokenizer, dataset, model


class Recording(DataCollatorForFullyExploredLM):
    """The drop-in, keeping a copy of every batch it hands out (in order)."""

    def __call__(self, features):
        out = super().__call__(features)
        self.batches = [*getattr(self, "batches", []), {k: v.clone() for k, v in out.items()}]
        return out


@torch.no_grad()
def k_copy_losses(model, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(the paper's K-copy mean: the mean over copies of each copy's token-mean loss, femlm's training loss)."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    ce = F.cross_entropy(model(**inputs).logits.transpose(1, 2), batch["labels"], reduction="none")
    chosen = batch["labels"] != -100
    per_copy = torch.stack([ce[c::K][chosen[c::K]].mean() for c in range(K)])  # row b*K + c is copy c
    loss_sum, count, _ = MaskedLMObjective(model)(batch["input_ids"], batch["attention_mask"], batch["labels"])
    return per_copy.mean().item(), (loss_sum / count).item()


def test_trainer_with_defaults_trains_and_its_loss_is_the_k_copy_mean(setup, tmp_path: Path) -> None:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    tokenizer, dataset, make_model = setup
    model = make_model()
    collator = Recording(tokenizer, num_masks=K, seed=0)
    expected: list[tuple[float, float]] = []

    class KCopyMean(TrainerCallback):  # before each update: the K-copy mean of that step's batch
        def on_step_begin(self, args, state, control, **kwargs):
            model.eval()
            expected.append(k_copy_losses(model, collator.batches[state.global_step]))
            model.train()

    args = TrainingArguments(str(tmp_path), max_steps=STEPS, per_device_train_batch_size=SEQUENCES, logging_steps=1,
                             learning_rate=1e-2, save_strategy="no", report_to=[], use_cpu=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator, callbacks=[KCopyMean()])
    trainer.train()
    logged = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    print(f"\nTrainer losses per step: {logged}\nK-copy means, femlm losses: {expected}")
    assert len(logged) == len(expected) == STEPS and trainer.state.global_step == STEPS
    embeddings = model.bert.embeddings.word_embeddings.weight
    assert not torch.equal(embeddings, make_model().bert.embeddings.word_embeddings.weight)  # it trained
    assert all(b["input_ids"].shape[0] == SEQUENCES * K for b in collator.batches)
    for got, (k_copy, femlm_loss) in zip(logged, expected, strict=True):
        assert got == pytest.approx(k_copy, rel=1e-5) and femlm_loss == pytest.approx(k_copy, rel=1e-5)


def test_accelerate_loop_trains_with_the_k_copy_mean(setup) -> None:
    from accelerate import Accelerator

    tokenizer, dataset, make_model = setup
    collator = DataCollatorForFullyExploredLM(tokenizer, num_masks=K, seed=0)
    loader = torch.utils.data.DataLoader(dataset.remove_columns(["special_tokens_mask"]), batch_size=SEQUENCES,
                                         shuffle=True, collate_fn=collator, generator=torch.Generator().manual_seed(0))
    accelerator = Accelerator(cpu=True)
    model = make_model()
    model, optimizer, loader = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2), loader)
    accelerator.register_for_checkpointing(collator)
    losses, expected = [], []
    for step, batch in enumerate(loader, 1):
        model.eval()
        expected.append(k_copy_losses(model, batch))
        model.train()
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if step == STEPS:
            break
    print(f"\naccelerate losses per step: {losses}\nK-copy means, femlm losses: {expected}")
    assert collator.micro_step >= STEPS
    trained = accelerator.unwrap_model(model).bert.embeddings.word_embeddings.weight
    assert not torch.equal(trained, make_model().bert.embeddings.word_embeddings.weight)
    for got, (k_copy, femlm_loss) in zip(losses, expected, strict=True):
        assert got == pytest.approx(k_copy, rel=1e-5) and femlm_loss == pytest.approx(k_copy, rel=1e-5)


@pytest.mark.mirror
# Both examples run whole in the slow tier (~12 s each: a Python start-up, a tokenizer and a dataset); the fast tier
# trains the same Trainer and the same accelerate loop in-process (the two tests above).
@pytest.mark.slow
@pytest.mark.parametrize("script", ["hf_trainer_fe.py", "accelerate_fe.py"])
def test_example_runs_offline_on_the_mirror(script: str, mirror: Path, tmp_path: Path) -> None:
    env = child_env(FEMLM_MIRROR=str(mirror), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                    HF_DATASETS_CACHE=str(tmp_path / "datasets"))
    proc = subprocess.run([sys.executable, str(REPO / "examples" / script), "--max-steps", "3", "--max-lines", "200",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = [float(x) for x in re.search(r"losses per step: (.*)", proc.stdout).group(1).split()]
    print(f"\n{script}: {losses}")
    assert len(losses) == 3 and all(0 < x < 20 for x in losses)
