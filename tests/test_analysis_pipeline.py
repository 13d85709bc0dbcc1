"""Per-example gradients of a real (micro) BERT, and `femlm analyze` end to end on CPU in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from femlm.analysis.config import AnalysisConfig
from femlm.analysis.gradients import MaskedLMGradients, select_parameters
from femlm.analysis.masks import sample_uniform, valid_positions
from femlm.errors import UserError
from helpers.analysis import WORDS, analyze_config, blocks, make_run, micro_model, micro_tokenizer

torch.set_num_threads(1)
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return micro_tokenizer(tmp_path_factory.mktemp("tok"))


def loop_grads(model, ids, masks, names, mask_id) -> torch.Tensor:
    """Reference: one plain backward per row through the full HF forward."""
    params = dict(model.named_parameters())
    rows = []
    for x, m in zip(ids, masks, strict=True):
        logits = model(input_ids=x.masked_fill(m, mask_id)[None]).logits[0]
        loss = torch.nn.functional.cross_entropy(logits[m], x[m])
        grads = torch.autograd.grad(loss, [params[n] for n in names])
        rows.append(torch.cat([g.flatten() for g in grads]))
    return torch.stack(rows)


@pytest.mark.parametrize("patterns,method", [
    (["*layer.0.attention.self.query.weight", "*intermediate.dense.bias"], "hooks"),
    (["*layer.0.attention.self.query.weight", "*intermediate.dense.bias"], "vmap"),
    (["*layer.0.output.LayerNorm.weight", "*attention.self.key.weight"], "auto"),
])
def test_per_example_gradients_match_a_plain_loop(patterns: list[str], method: str) -> None:
    model = micro_model(5 + WORDS)
    ids = blocks(3, 12)
    valid = valid_positions(ids, None, [0, 1, 2, 3, 4])
    masks = sample_uniform(valid, 3, 2, torch.Generator().manual_seed(0)).reshape(6, 12)
    seq_idx = torch.arange(3).repeat_interleave(2)
    grads = MaskedLMGradients(model, ids, None, 4, patterns, method=method, chunk=4)
    assert grads.method == ("vmap" if method == "auto" else method)
    got = grads(seq_idx, masks)
    for p in model.parameters():
        p.requires_grad_(True)
    want = loop_grads(model, ids[seq_idx], masks, grads.names, 4)
    assert got.shape == (6, grads.numel) and grads.passes == 6
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_parameter_selection_errors() -> None:
    model = micro_model(5 + WORDS)
    with pytest.raises(UserError, match="matches no parameter"):
        select_parameters(model, ["*no_such_layer*"])
    with pytest.raises(UserError, match="nn.Linear"):
        MaskedLMGradients(model, blocks(1, 8), None, 4, ["*LayerNorm.weight"], method="hooks")


@pytest.mark.parametrize("bad,match", [
    ({"kind": "spectrum"}, "analysis.kind"), ({"reference": 1}, "analysis.reference"),
    ({"num_masks": [1, 2]}, "analysis.num_masks"), ({"method": "magic"}, "analysis.method"),
    ({"variance_tau": 0}, "analysis.variance_tau"),
])
def test_config_validation(bad: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        AnalysisConfig(**bad).validate()


# ---------------------------------------------------------------------------------------------- end to end
def test_run_analyze_end_to_end(tmp_path: Path, tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Initialisation panel, then a saved checkpoint, through run_analyze (data loading stubbed)."""
    from femlm.analysis import run as run_module

    tok_dir = tmp_path / "tok"
    tokenizer.save_pretrained(str(tok_dir))
    monkeypatch.setattr(run_module, "load_sequences", lambda cfg, tok: (blocks(2, 24), [0, 1]))
    cfg = analyze_config(tmp_path, str(tok_dir))
    out = run_module.run_analyze(cfg, make_run(tmp_path))
    run_dir = tmp_path / "run"
    for name in ("covariance.csv", "covariance_summary.csv", "variance.csv", "variance.md", "analysis.json",
                 "covariance_distribution.png", "covariance_vs_hamming.png", "variance.png"):
        assert (run_dir / name).stat().st_size > 0, name
    saved = json.loads((run_dir / "analysis.json").read_text())
    assert saved["model"]["panel"] == "initialisation"
    assert set(saved["variance"]["ratios"]) == {"2", "4"}
    assert saved["settings"]["variance_tau"] == 4  # min(tau, n // max K) = min(4, 22 // 4)
    # covariance: 2 * (4 + 2 * 6) = 32 rows; variance reuses the tau-4 reference: 2 * 2 * 6 * 4 = 96 rows
    assert saved["cost"]["passes"] == 32 + 96 == out["cost"]["passes"]
    assert -1 <= saved["covariance"]["spearman"]["rho_bins"] <= 1
    lines = (run_dir / "covariance.csv").read_text().splitlines()
    assert lines[0].startswith("pair,bin,hamming,overlap,cov") and len(lines) == 7
    copied = Path(out["results_dir"])
    assert copied.name == "analysis_cs_micro_init" and (copied / "variance.png").is_file()

    ckpt = tmp_path / "ckpt"
    micro_model(len(tokenizer), seed=1).save_pretrained(str(ckpt))
    tokenizer.save_pretrained(str(ckpt))
    (ckpt / "femlm.json").write_text(json.dumps({"masking": "fe_subword", "step": 7}))
    cfg = analyze_config(tmp_path, None, kind="variance", variance_tau=2)
    cfg.model.name_or_path = str(ckpt)
    (tmp_path / "run2").mkdir()
    from femlm.runs import Run

    out = run_module.run_analyze(cfg, Run(dir=tmp_path / "run2", command="analyze"))
    assert out["model"]["panel"] == "pretrained" and out["model"]["slug"] == "fe_subword_step7"
    assert "covariance" not in out and out["settings"]["variance_tau"] == 2
    assert not (tmp_path / "run2" / "covariance.csv").exists()


def test_analyze_rejects_settings_that_do_not_fit(tmp_path: Path, tokenizer) -> None:
    from femlm.analysis.run import analyze

    model = micro_model(len(tokenizer))
    info = {"name": "micro", "panel": "initialisation", "slug": "init"}
    with pytest.raises(UserError, match="analysis.tau=30"):
        analyze(analyze_config(tmp_path, tau=30), make_run(tmp_path), model, tokenizer, blocks(2, 24), info)
    with pytest.raises(UserError, match="variance_tau=8 with K=4"):
        analyze(analyze_config(tmp_path, kind="variance", variance_tau=8), make_run(tmp_path / "x"), model,
                tokenizer, blocks(2, 24), info)


def test_initialisation_panel_needs_a_tokenizer(tmp_path: Path) -> None:
    from femlm.analysis.run import load_model

    with pytest.raises(UserError, match="model.tokenizer is not set"):
        load_model(analyze_config(tmp_path, None))

