"""Any Hugging Face encoder (issue 23, item 1): tiny random MPNet, DeBERTa-v2 (v3-style attention) and ModernBERT
checkpoints, built here and saved with save_pretrained (no download). For each: femlm's sparse FE-MLM loss equals
the model's own dense loss, a few FE-MLM steps run through the CLI with the attention implementation the class
supports, the final checkpoint loads in plain transformers, `analyze`, `finetune` and `evaluate` run on it, and
`pretrain-scratch` builds the architecture from `model.arch.model_type`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForMaskedLM

from femlm.data.config import DownloadConfig
from femlm.errors import UserError
from femlm.masking import MaskingConfig, build_masker
from femlm.masking.sampling import make_generator
from femlm.models.config import ModelConfig
from femlm.models.load import load_masked_lm
from femlm.models.resolve import resolve_masked_lm
from femlm.train.objective import MaskedLMObjective
from helpers.tiny import SPECIALS, synthetic_blocks, tiny_tokenizer

torch.set_num_threads(1)

SHAPE = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
         "max_position_embeddings": 64}
# Each architecture's own settings; special ids follow the tiny tokenizer ([PAD]=0, [CLS]=2, [SEP]=3).
ARCHS = {
    "mpnet": {"pad_token_id": 0},
    "deberta-v2": {"relative_attention": True, "position_buckets": 16, "max_relative_positions": -1,
                   "pos_att_type": ["p2c", "c2p"], "position_biased_input": False, "norm_rel_ebd": "layer_norm",
                   "share_att_key": True, "type_vocab_size": 0, "pad_token_id": 0},
    "modernbert": {"local_attention": 16, "global_attn_every_n_layers": 2, "pad_token_id": 0, "cls_token_id": 2,
                   "sep_token_id": 3, "bos_token_id": 2, "eos_token_id": 3},
}
ATTENTION = {"mpnet": "eager", "deberta-v2": "eager", "modernbert": "sdpa"}  # what each class supports
# analysis.parameters=null picks layer 0's attention and feed-forward matrices by structure (BY_STRUCTURE below; not
# DeBERTa's query_proj: with share_att_key it also projects the position embeddings shared by all rows, so its
# per-row gradient cannot be split by hooks; femlm.analysis.gradients refuses it)
DOWNLOAD = DownloadConfig(offline=True)


def tiny_config(model_type: str, vocab_size: int):
    return AutoConfig.for_model(model_type, vocab_size=vocab_size, **SHAPE, **ARCHS[model_type])


@pytest.fixture(scope="module", params=sorted(ARCHS))
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(model_type, directory): a tiny random masked LM with its tokenizer, as save_pretrained writes it."""
    return request.param, save_checkpoint(request.param, tmp_path_factory.mktemp(request.param))


def save_checkpoint(model_type: str, path: Path) -> Path:
    tokenizer = tiny_tokenizer(path)
    torch.manual_seed(0)
    config = tiny_config(model_type, len(tokenizer))
    AutoModelForMaskedLM.from_config(config, attn_implementation=ATTENTION[model_type]).save_pretrained(path)
    return path


def test_fe_mlm_loss_and_gradients_equal_the_models_own_dense_loss(checkpoint: tuple[str, Path]) -> None:
    model_type, path = checkpoint
    resolved = resolve_masked_lm(ModelConfig(name_or_path=str(path)), DOWNLOAD)
    assert resolved.attn_implementation == ATTENTION[model_type]
    assert len(resolved.notes) == (ATTENTION[model_type] == "eager")  # the fallback is said, once
    model = load_masked_lm(resolved, DOWNLOAD)[0].eval()  # no dropout: both paths see the same network
    objective = MaskedLMObjective(model)
    assert objective.prediction == "sparse head"  # found by structure; the sparse last layer stays BERT-only

    tokenizer = resolved.tokenizer
    masker = build_masker(MaskingConfig(name="fe", strategy="fully_explored", num_masks=4),
                          mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                          special_ids=tokenizer.all_special_ids)
    batch = masker(synthetic_blocks(3, 32, len(tokenizer)).long(), None, make_generator(0, 1, 0, 0))
    ids, attention, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    assert ids.shape[0] == 12  # 3 sequences x K=4 disjoint copies

    dense = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    dense.backward()
    dense_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss_sum, count, _ = objective(ids, attention, labels)
    (loss_sum / count).backward()
    assert count.item() == (labels != -100).sum().item()
    assert (loss_sum / count).item() == pytest.approx(dense.item(), abs=1e-5)
    for name, param in model.named_parameters():
        if name in dense_grads:
            torch.testing.assert_close(param.grad, dense_grads[name], atol=1e-6, rtol=1e-4, msg=name)


# Heads of other shapes: DeBERTa's non-legacy head takes the word embeddings as a second argument, DistilBERT's
# is four loose modules, ELECTRA's generator two; each must be found (names in call order) and equal the dense loss.
OTHER_HEADS = {
    "deberta-v2": ({"legacy": False, **SHAPE}, ["lm_predictions"]),
    "distilbert": ({"dim": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 32},
                   ["vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"]),
    "electra": ({"embedding_size": 16, **SHAPE}, ["generator_predictions", "generator_lm_head"]),
}


@pytest.mark.parametrize("model_type", sorted(OTHER_HEADS))
def test_heads_of_other_shapes_are_found_by_structure(model_type: str) -> None:
    from femlm.models.heads import find_mlm_head

    settings, names = OTHER_HEADS[model_type]
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=99, **settings)
    model = AutoModelForMaskedLM.from_config(config, attn_implementation="eager").eval()
    assert find_mlm_head(model).names == names
    ids = torch.randint(5, 99, (2, 12), generator=torch.Generator().manual_seed(1))
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    loss_sum, count, _ = MaskedLMObjective(model)(ids, None, labels)
    assert (loss_sum / count).item() == pytest.approx(model(input_ids=ids, labels=labels).loss.item(), abs=1e-5)


STUDY_PATTERNS = ["*layer.0.attention.attn.q.weight", "*layer.0.intermediate.dense.weight"]  # study_base.yaml (MPNet)
OLD_BERT_DEFAULT = ["*layer.0.attention.self.query.weight", "*layer.0.intermediate.dense.weight"]
BY_STRUCTURE = {  # (attention, feed-forward) matrix of layer 0 that analysis.parameters=null must find
    "bert": ("bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.0.intermediate.dense"),
    "roberta": ("roberta.encoder.layer.0.attention.self.query", "roberta.encoder.layer.0.intermediate.dense"),
    "mpnet": ("mpnet.encoder.layer.0.attention.attn.q", "mpnet.encoder.layer.0.intermediate.dense"),
    "deberta-v2": ("deberta.encoder.layer.0.attention.self.value_proj", "deberta.encoder.layer.0.intermediate.dense"),
    "modernbert": ("model.layers.0.attn.Wqkv", "model.layers.0.mlp.Wi"),
}


@pytest.mark.parametrize("model_type", sorted(BY_STRUCTURE))
def test_analysis_parameters_default_is_found_by_structure(model_type: str) -> None:
    """analysis.parameters=null: one attention and one feed-forward matrix of layer 0, for any encoder; the same as
    the study's MPNet patterns on MPNet and the old BERT default on BERT; per-row gradients computable by hooks."""
    from femlm.analysis.config import AnalysisConfig
    from femlm.analysis.gradients import MaskedLMGradients, select_parameters
    from femlm.analysis.parameters import default_parameters

    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=40, **SHAPE, **ARCHS.get(model_type, {"pad_token_id": 0}))
    model = AutoModelForMaskedLM.from_config(config, attn_implementation=ATTENTION.get(model_type, "eager"))
    names = default_parameters(model)
    assert names == [f"{module}.weight" for module in BY_STRUCTURE[model_type]]
    attention, ffn = (model.get_submodule(n.rsplit(".", 1)[0]) for n in names)
    assert attention.in_features == ffn.in_features == SHAPE["hidden_size"]
    assert ffn.out_features >= SHAPE["intermediate_size"]  # the up projection (ModernBERT's GLU: 2x)
    if model_type == "mpnet":
        assert names == select_parameters(model, STUDY_PATTERNS)
    if model_type == "bert":
        assert names == select_parameters(model, OLD_BERT_DEFAULT)
    assert AnalysisConfig().parameters is None
    ids = torch.randint(5, 40, (3, 10), generator=torch.Generator().manual_seed(1))
    masks = torch.zeros(3, 10, dtype=torch.bool)
    masks[:, 2:5] = True
    grads = MaskedLMGradients(model, ids, None, 4, None, "auto", chunk=2)
    assert grads.method == "hooks" and grads.names == names
    assert grads.describe() == {"patterns": None, "chosen_by": "structure", "names": names, "numel": grads.numel}
    out = grads(torch.arange(3), masks)
    assert out.shape == (3, attention.weight.numel() + ffn.weight.numel()) and bool(out.abs().sum(dim=1).gt(0).all())
    explicit = MaskedLMGradients(model, ids, None, 4, [f"*{n}" for n in names], "hooks", chunk=3)
    assert explicit.describe()["chosen_by"] == "patterns" and explicit.names == names
    torch.testing.assert_close(explicit(torch.arange(3), masks), out)
    # Row 0 against one plain backward through the model's own dense logits.
    inputs = ids[:1].masked_fill(masks[:1], 4)
    loss = torch.nn.functional.cross_entropy(model(input_ids=inputs).logits[0][masks[0]], ids[0][masks[0]])
    params = dict(model.named_parameters())
    plain = torch.cat([g.flatten() for g in torch.autograd.grad(loss, [params[n] for n in names])])
    torch.testing.assert_close(out[0], plain, rtol=1e-4, atol=1e-6)


def command(name: str, root: Path, *overrides: str) -> dict:
    """`femlm <name> <overrides>` in this process (the CLI's composition and run function, no start-up cost)."""
    from femlm.commands import COMMANDS
    from femlm.runs import Run
    from helpers.configs import composed

    cfg = composed(name, *overrides)
    run = Run(dir=root / name, command=name)
    run.dir.mkdir(parents=True)
    return COMMANDS[name].load("run")(cfg, run)


# One architecture through the CLI in the fast tier (deberta-v2: eager attention, relative positions); the others,
# ~20 s each, in the slow tier; each is trained in-process in the fast tier above and below.
@pytest.mark.parametrize("model_type", [pytest.param(t, marks=pytest.mark.slow) if t != "deberta-v2" else t
                                        for t in sorted(ARCHS)])
def test_cli_fe_mlm_steps_then_plain_transformers_analyze_finetune_evaluate(
        model_type: str, cli_in_process_with_hydra, local_inputs: dict[str, Path], tmp_path: Path) -> None:
    cli = cli_in_process_with_hydra  # the CLI's whole run in this process (no Python start-up per call)
    path = save_checkpoint(model_type, tmp_path / "checkpoint")
    data = [f"domain.sources=[file:{local_inputs['corpus']}]", "data.block_size=32", "runtime.threads=1",
            "logger.progress=false", "logger.wandb.mode=disabled"]
    out = cli("continual-pretrain", "preset=tiny", f"model.name_or_path={path}", "model.tokenizer=null", *data,
              "masking=fe_subword", "trainer.max_steps=3", "trainer.batch_size=8", "data.eval_blocks=4",
              "runtime.eval_every=3", "runtime.save_every=3", "trainer.max_passes=null")
    assert out.code == 0, out.stderr[-3000:]
    notices = [line for line in out.stdout.splitlines() if line.startswith("notice: model.attn_implementation")]
    assert len(notices) == (ATTENTION[model_type] == "eager")
    (run,) = (tmp_path / "runs" / "continual-pretrain").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["encoder"]["attn_implementation"] == ATTENTION[model_type]
    assert summary["encoder"]["prediction"] == "sparse head" and summary["final_eval_loss"] is not None
    final = run / "checkpoints" / "final"
    assert json.loads((final / "femlm.json").read_text())["attn_implementation"] == ATTENTION[model_type]

    loaded, loading = AutoModelForMaskedLM.from_pretrained(final, output_loading_info=True)  # plain transformers
    assert type(loaded).__name__ == summary["encoder"]["class"] and not loading["missing_keys"]

    analysis = command("analyze", tmp_path, "preset=tiny", f"model.name_or_path={final}", "model.tokenizer=null",
                       *data, "analysis.sequences=2", "analysis.tau=4", "analysis.budget=4", "analysis.reference=3",
                       "analysis.num_masks=[2,4]", "analysis.bootstrap=20", "analysis.hamming_bins=2")
    assert analysis["model"]["encoder"]["model_type"] == model_type
    assert analysis["parameters"]["chosen_by"] == "structure" and analysis["parameters"]["patterns"] is None
    assert analysis["parameters"]["names"] == [f"{m}.weight" for m in BY_STRUCTURE[model_type]]

    task = ["preset=tiny", "task.name=toy", "task.labels=[pos,neg]", "task.eval_split=test",
            f"task.dataset={local_inputs['task']}", "finetune.max_length=32", "runtime.threads=1",
            "logger.progress=false", "logger.wandb.mode=disabled"]
    results = command("finetune", tmp_path, *task, f"model.name_or_path={final}", "finetune.seeds=[1]",
                      "finetune.epochs=1", "finetune.batch_size=8", "finetune.save_model=true")
    assert results["complete"] and results["encoder"]["attn_implementation"] == ATTENTION[model_type]
    scored = command("evaluate", tmp_path, *task, f"evaluate.checkpoints={tmp_path / 'finetune' / 'seed_1' / 'model'}")
    assert scored["checkpoints"][0]["scores"] == pytest.approx(results["seeds"][0]["test"])


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_pretrain_scratch_builds_the_architecture_from_model_type(model_type: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from femlm.runs import Run
    from femlm.train import inputs
    from femlm.train.loop import run_pretrain
    from helpers.tiny import fake_load_blocks
    from helpers.tiny import tiny_config as pretrain_config

    tiny_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    cfg = pretrain_config(tmp_path / "tok", max_steps=2, save_every=2, eval_every=2)
    # Only the shape: the special ids (pad, cls, sep, ...) must follow the tokenizer, not the class defaults.
    cfg.model.arch = {"model_type": model_type, **SHAPE,
                      **{k: v for k, v in ARCHS[model_type].items() if not k.endswith("token_id")}}
    run = Run(dir=tmp_path / "run", command="pretrain-scratch")
    run.dir.mkdir()
    summary = run_pretrain(cfg, run)
    assert summary["encoder"]["model_type"] == model_type and summary["encoder"]["origin"] == "scratch"
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "checkpoints" / "final")
    assert model.config.model_type == model_type and model.config.pad_token_id == SPECIALS.index("[PAD]")


def test_encoder_saved_without_its_head_needs_new_mlm_head(tmp_path: Path) -> None:
    """Like all-mpnet-base-v2: an MPNetModel without the masked-LM head."""
    from transformers import MPNetModel

    tokenizer = tiny_tokenizer(tmp_path)
    MPNetModel(tiny_config("mpnet", len(tokenizer)), add_pooling_layer=False).save_pretrained(tmp_path)
    with pytest.raises(UserError, match="MPNetModel checkpoint without masked-LM head weights.*new_mlm_head=true"):
        resolve_masked_lm(ModelConfig(name_or_path=str(tmp_path)), DOWNLOAD)
    resolved = resolve_masked_lm(ModelConfig(name_or_path=str(tmp_path), new_mlm_head=True), DOWNLOAD)
    model, fresh = load_masked_lm(resolved, DOWNLOAD)
    assert resolved.head == "new" and fresh and all(name.startswith("lm_head.") for name in fresh)
    assert MaskedLMObjective(model).prediction == "sparse head"

    # all-mpnet-base-v2's config.json names MPNetForMaskedLM over head-less weights: found when loading.
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["MPNetForMaskedLM"]}))
    resolved = resolve_masked_lm(ModelConfig(name_or_path=str(tmp_path)), DOWNLOAD)
    with pytest.raises(UserError, match="without masked-LM head weights .missing lm_head.*new_mlm_head=true"):
        load_masked_lm(resolved, DOWNLOAD)
    resolved = resolve_masked_lm(ModelConfig(name_or_path=str(tmp_path), new_mlm_head=True), DOWNLOAD)
    assert resolved.head == "checkpoint" and load_masked_lm(resolved, DOWNLOAD)[1] == fresh and resolved.head == "new"


# Published sizes (millions of parameters, the encoder without MLM head): MPNet-base 110M (with its pooler),
# ModernBERT-base 149M, DeBERTa-v3-base 184M (86M backbone + 98M embedding).
PUBLISHED = {"mpnet_base": ("mpnet", 110, "eager"), "modernbert_base": ("modernbert", 149, "sdpa"),
             "deberta_v3_base": ("deberta-v2", 184, "eager")}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_model_files_have_the_hubs_shapes(name: str) -> None:
    """model=<name>'s arch builds the published model (on the meta device: no memory, no weights)."""
    from femlm.models.resolve import attention_for, model_class
    from helpers.configs import composed

    model_type, millions, attention = PUBLISHED[name]
    arch = dict(composed("pretrain-scratch", f"model={name}").model.arch)
    assert arch.pop("model_type") == model_type
    config = AutoConfig.for_model(model_type, **arch)
    cls = model_class(config, "masked_lm", name)
    implementation, _ = attention_for(cls, "sdpa")
    assert implementation == attention
    with torch.device("meta"):
        model = cls._from_config(config, attn_implementation=implementation)
    assert sum(p.numel() for p in model.base_model.parameters()) / 1e6 == pytest.approx(millions, rel=0.02)
