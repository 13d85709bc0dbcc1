"""`femlm analyze decomposition` end to end on a micro random-init BERT (CPU, seconds; data loading stubbed)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from femlm.errors import UserError
from helpers.analysis import analyze_config, blocks, make_run, micro_tokenizer

torch.set_num_threads(1)
SETTINGS = dict(kind="decomposition", pool=6, sequences=3, tau=4, num_masks=[2, 4], batch_rows=4, draws=2,
                check_batches=3, reference=3, budget=6, hamming_bins=3, null_groups=2, null_group_size=3,
                bootstrap=50, sketch_dim=64)


def test_analyze_decomposition_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from femlm.analysis import run as run_module

    tok_dir = tmp_path / "tok"
    micro_tokenizer(tok_dir)
    asked = []

    def fake_load(cfg, tok, count=None):
        asked.append(count)
        return blocks(count, 24), list(range(count))

    monkeypatch.setattr(run_module, "load_sequences", fake_load)
    cfg = analyze_config(tmp_path, str(tok_dir), **SETTINGS)
    cfg.analysis.validate()
    out = run_module.run_analyze(cfg, make_run(tmp_path))
    assert asked == [6]  # max(pool, sequences) validation blocks
    run_dir = tmp_path / "run"
    names = ("decomposition.csv", "decomposition.json", "decomposition.png", "decomposition.md", "null_model.csv",
             "null_model_pairs.csv", "null_model.png")
    for name in names:
        assert (run_dir / name).stat().st_size > 0, name
    saved = json.loads((run_dir / "decomposition.json").read_text())
    assert saved["analysis_kind"] == "decomposition" and saved["settings"]["tau"] == 4  # min(tau, 22 // 4)
    # terms 6 (3 + 2*2*4) + check 2*3*4*4 + null model 3 (3 + 2*6 + 2*3)
    assert saved["cost"]["passes"] == 6 * 19 + 96 + 3 * 21 == sum(saved["cost"]["planned_passes"].values())
    for name in ("sigma_d2", "sigma_m2", "c_fe", "c_iid"):
        assert math.isfinite(saved["terms"][name]["estimate"]) and all(map(math.isfinite, saved["terms"][name]["ci"]))
    assert set(saved["verdicts"]) == {"2", "4"} and set(saved["terms"]["c_fe_by_K"]) == {"2", "4"}
    assert all(isinstance(v["fe"]["verdict"], str) for v in saved["verdicts"].values())
    with (run_dir / "decomposition.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1 + 2 * 2 * 2  # MLM + {FE, iid} x {same rows, same sequences} x K
    for row in rows:
        for key in ("predicted_var", "predicted_var_ci_low", "measured_var", "measured_over_predicted",
                    "var_x_rows", "per_compute_vs_mlm"):
            assert math.isfinite(float(row[key])), (key, row)
    with (run_dir / "null_model.csv").open() as handle:
        bins = list(csv.DictReader(handle))
    assert len(bins) == 3 and all(math.isfinite(float(b["residual"])) for b in bins)
    assert "## Per K (equal compute)" in (run_dir / "decomposition.md").read_text()
    plan = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert plan["stage"] == "plan" and plan["passes"] == saved["cost"]["passes"]
    assert (Path(out["results_dir"]) / "decomposition.png").is_file()


def test_decomposition_rejects_settings_that_do_not_fit(tmp_path: Path) -> None:
    from test_analysis_pipeline import micro_model

    from femlm.analysis.run import analyze

    tok = micro_tokenizer(tmp_path / "tok")
    info = {"name": "micro", "panel": "initialisation", "slug": "init"}
    with pytest.raises(UserError, match="variance_tau=8 with K=4"):
        analyze(analyze_config(tmp_path, **{**SETTINGS, "variance_tau": 8}), make_run(tmp_path),
                micro_model(len(tok)), tok, blocks(6, 24), info)
    with pytest.raises(UserError, match=r"analysis.ratio=0.3 gives tau=7 of 22 .* K=4"):  # the ratio reaches it
        analyze(analyze_config(tmp_path, **{**SETTINGS, "ratio": 0.3}), make_run(tmp_path / "r"),
                micro_model(len(tok)), tok, blocks(6, 24), info)
    with pytest.raises(UserError, match="only 3 sequences"):
        analyze(analyze_config(tmp_path, **SETTINGS), make_run(tmp_path / "x"), micro_model(len(tok)), tok,
                blocks(3, 24), info)
