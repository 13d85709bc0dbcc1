"""Models for pre-training: sparse prediction equals HF's loss, checkpoints load with plain transformers,
and every bad model/tokenizer/block-size combination is a one-line UserError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification

from femlm.data.config import DownloadConfig
from femlm.errors import UserError
from femlm.models.checkpoints import position_limit
from femlm.models.config import ModelConfig
from femlm.models.heads import find_mlm_head
from femlm.models.load import check_compatible, load_masked_lm
from femlm.models.resolve import resolve_masked_lm
from femlm.train.objective import MaskedLMObjective
from helpers.tiny import tiny_tokenizer

torch.set_num_threads(1)

ARCHS = {
    "bert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
    "roberta": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "pad_token_id": 1},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
}


def make_model(model_type: str, vocab: int = 99, positions: int = 64, cls=AutoModelForMaskedLM):
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=vocab, max_position_embeddings=positions,
                                  **ARCHS[model_type])
    return cls.from_config(config)


def masked_batch(vocab: int = 99) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (4, 24), generator=gen)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, generator=gen) < 0.2
    labels[chosen] = ids[chosen]
    attention = torch.ones_like(ids)
    attention[0, 18:] = 0  # one padded row: padding never carries a label
    labels[0, 18:] = -100
    return ids, attention, labels


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_sparse_loss_and_gradients_equal_hf_full_loss(model_type: str, attn: str) -> None:
    model = make_model(model_type)
    model.config._attn_implementation = attn
    model.eval()  # no dropout: both paths must see the same network
    ids, attention, labels = masked_batch()
    labels[2] = -100  # a row without labels: the sparse last layer packs no query for it
    objective = MaskedLMObjective(model, sparse=True)
    assert objective.sparse and find_mlm_head(model) is not None
    # BERT and RoBERTa also run their last layer at the labelled rows only; DistilBERT keeps it dense.
    assert (objective.last_layer is not None) == (model_type != "distilbert")

    full = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    full.backward()
    full_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss_sum, count, _ = objective(ids, attention, labels)
    sparse = loss_sum / count
    sparse.backward()
    assert count.item() == (labels != -100).sum().item()
    assert abs(full.item() - sparse.item()) < 1e-5
    for name, param in model.named_parameters():
        if name in full_grads:
            torch.testing.assert_close(param.grad, full_grads[name], atol=1e-6, rtol=1e-5, msg=name)


def test_unknown_head_falls_back_to_the_full_projection() -> None:
    model = make_model("bert").eval()
    model.get_output_embeddings = lambda: None  # a model whose head cannot be found by structure
    with pytest.warns(UserWarning, match="MLM head not found .*no output embeddings.*sparse prediction is off"):
        objective = MaskedLMObjective(model, sparse=True)
    assert objective.prediction.startswith("dense (the model has no output embeddings")
    ids, attention, labels = masked_batch()
    loss_sum, count, _ = objective(ids, attention, labels)
    full = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    assert abs(full.item() - (loss_sum / count).item()) < 1e-5


def load_checkpoint_model(name: str, new_mlm_head: bool = False):
    download = DownloadConfig(offline=True)
    return load_masked_lm(resolve_masked_lm(ModelConfig(name_or_path=name, new_mlm_head=new_mlm_head), download),
                          download)[0]


def test_checkpoint_round_trip_and_errors(tmp_path: Path) -> None:
    model = make_model("bert")
    model.save_pretrained(tmp_path / "mlm")
    loaded = load_checkpoint_model(str(tmp_path / "mlm"))
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name

    make_model("roberta", cls=AutoModelForSequenceClassification).save_pretrained(tmp_path / "clf")
    with pytest.raises(UserError, match="RobertaForSequenceClassification checkpoint"):
        load_checkpoint_model(str(tmp_path / "clf"))
    with pytest.raises(UserError, match="no such checkpoint directory"):
        load_checkpoint_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load_checkpoint_model(str(tmp_path / "empty"))


def test_hub_id_offline_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="Hub is unreachable .* give a local checkpoint directory"):
        load_checkpoint_model("someone/not-cached-model")


def test_vocab_and_block_size_checks(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer(tmp_path / "tok")  # 128 tokens
    small = make_model("bert", vocab=100, positions=64)
    with pytest.raises(UserError, match="tokenizer has 128 tokens but the model's vocabulary has 100"):
        check_compatible(small.config, tokenizer, 32, "model.name_or_path=x")
    bert = make_model("bert", vocab=128, positions=64)
    check_compatible(bert.config, tokenizer, 64, "m")
    with pytest.raises(UserError, match="data.block_size=65 is beyond"):
        check_compatible(bert.config, tokenizer, 65, "m")
    # RoBERTa: positions start after the padding index, 66 positions hold 64 tokens (514 -> 512).
    roberta = make_model("roberta", vocab=128, positions=66)
    assert position_limit(roberta.config) == 64
    check_compatible(roberta.config, tokenizer, 64, "m")
    with pytest.raises(UserError, match="data.block_size=65"):
        check_compatible(roberta.config, tokenizer, 65, "m")


def test_trained_checkpoint_loads_with_plain_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from femlm.runs import Run
    from femlm.train import inputs
    from femlm.train.loop import run_pretrain
    from helpers.tiny import fake_load_blocks, tiny_config

    tiny_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    cfg = tiny_config(tmp_path / "tok", max_steps=4, save_every=2)
    run = Run(dir=tmp_path / "run", command="pretrain-scratch")
    run.dir.mkdir()
    summary = run_pretrain(cfg, run)
    final = tmp_path / "run" / "checkpoints" / "final"
    model = AutoModelForMaskedLM.from_pretrained(final)
    assert type(model).__name__ == "BertForMaskedLM"
    info = json.loads((final / "femlm.json").read_text())
    assert info["kind"] == "pretrain" and info["step"] == 4 and info["masking"] == "mlm_subword"
    assert (tmp_path / "run" / "checkpoints" / "step_2" / "femlm.json").is_file()
    assert (tmp_path / "run" / "loss_curve.png").is_file()
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("kind", "command", "masking", "domain", "model", "steps", "final_eval_loss", "first_eval_loss",
                "row_tokens_per_s", "seen", "equal_compute", "wall_s", "hardware"):
        assert key in saved
    assert summary["steps"] == 4

    # continual pre-training from that checkpoint (its own tokenizer), one more short run
    cfg2 = tiny_config(tmp_path / "tok", max_steps=2)
    cfg2.command = "continual-pretrain"
    cfg2.model.name_or_path, cfg2.model.tokenizer = str(final), None
    run2 = Run(dir=tmp_path / "run2", command="continual-pretrain")
    run2.dir.mkdir()
    out = run_pretrain(cfg2, run2)
    assert json.loads((tmp_path / "run2/checkpoints/final/femlm.json").read_text())["init_from"] == str(final)
    assert out["first_eval_loss"] == pytest.approx(saved["final_eval_loss"], abs=1e-6)


def test_fe_masking_accumulation_and_variance_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from femlm.masking import MaskingConfig
    from femlm.runs import Run
    from femlm.train import inputs
    from femlm.train.loop import run_pretrain
    from helpers.tiny import fake_load_blocks, tiny_config

    tiny_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    cfg = tiny_config(tmp_path / "tok", max_steps=2, micro_batch_size=4)
    cfg.masking = MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4)
    cfg.logger.variance_probe.enabled, cfg.logger.variance_probe.every = True, 1
    cfg.logger.variance_probe.parameters = ["*layer.0.*"]
    run = Run(dir=tmp_path / "run", command="pretrain-scratch")
    run.dir.mkdir()
    run_pretrain(cfg, run)
    records = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    train = [r for r in records if "loss" in r]
    # equal compute: 8 rows = 2 sequences x K=4 disjoint copies, 15% of 30 maskable tokens each (tau = 5)
    assert [r["rows"] for r in train] == [8, 8] and [r["masked_tokens"] for r in train] == [40, 40]
    assert [r["label_chunks"] for r in train] == [2, 2]  # two micro-batches of 4 rows a step, one chunk each
    probes = [r for r in records if "probe_grad_var" in r]
    assert len(probes) == 2 and all(r["probe_grad_var"] > 0 and r["probe_remasks"] == 4 for r in probes)
    assert probes[0]["probe_params"] < sum(p.numel() for p in AutoModelForMaskedLM.from_pretrained(
        tmp_path / "run" / "checkpoints" / "final").parameters())


def test_sparse_last_layer_trains_under_bf16_autocast() -> None:
    model = make_model("bert")
    model.train()
    ids, attention, labels = masked_batch()
    objective = MaskedLMObjective(model, sparse=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_sum, count, _ = objective(ids, attention, labels)
    (loss_sum / count).backward()
    assert torch.isfinite(loss_sum) and loss_sum.dtype == torch.float32
    last = objective.last_layer
    assert last is not None and all(p.grad is not None for p in last.parameters())
