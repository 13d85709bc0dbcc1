"""`femlm analyze analysis.kind=passes`: the variance of a cycle's summed gradient, disjoint vs independent visits.

On the enumerable masked LM (every per-mask gradient tabulated) the per-sequence variances of a cycle's sum are
known exactly: the direct estimator must converge to them without bias, and the decomposition's formula
1 + (K - 1) c_FE / sigma_m2 must equal their ratio exactly. End to end on a micro random BERT (seconds).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from femlm.analysis.config import AnalysisConfig
from femlm.analysis.intervals import MIN_UNITS
from femlm.analysis.passes import cycle_variances, passes_cost, passes_study
from femlm.errors import UserError
from femlm.masking import make_generator
from helpers.analysis import analyze_config, blocks, make_run, micro_tokenizer
from helpers.enumerated import Enumerated

torch.set_num_threads(1)


def exact_cycle_var(model: Enumerated, k: int, strategy: str) -> float:
    """Var of the sum of K visits' gradients = K^2 x Var of their mean, per sequence, averaged over sequences."""
    return k * k * model.exact_kmask_var(k, strategy)


@pytest.mark.parametrize("k", [2, 3])
def test_the_predicted_ratio_is_exact_on_the_enumerated_model(k: int) -> None:
    model = Enumerated(seqs=3, seed=2)  # n 6, tau 2: K <= 3 disjoint masks
    ratio = exact_cycle_var(model, k, "fe") / exact_cycle_var(model, k, "iid")
    assert ratio < 1  # disjoint visits: anti-correlated gradients
    assert ratio == pytest.approx(1 + (k - 1) * model.exact_c("fe") / model.exact_sigma_m2(), rel=1e-9)


@pytest.mark.parametrize(("strategy", "name"), [("fully_explored", "fe"), ("iid", "iid")])
def test_the_direct_estimate_is_unbiased(strategy: str, name: str) -> None:
    model = Enumerated(seqs=2, seed=3)
    estimates = np.stack([cycle_variances(model.grad_fn, model.valid, [2, 3], 2, 24, strategy,
                                          make_generator(seed, 0), chunk=12) for seed in range(30)])  # [R, S, K]
    mean = estimates.mean(axis=(0, 1))
    sem = estimates.mean(axis=1).std(axis=0, ddof=1) / math.sqrt(len(estimates))
    for j, k in enumerate([2, 3]):
        exact = exact_cycle_var(model, k, name)
        assert abs(mean[j] - exact) < 4 * sem[j], (k, mean[j], exact, sem[j])


def test_the_study_reports_measured_and_predicted_ratios_with_sequence_intervals() -> None:
    model = Enumerated(seqs=MIN_UNITS, seed=4)
    res = passes_study(model.grad_fn, model.valid, [2, 3], 2, draws=60, reference=40, seed=0, chunk=12,
                       n_boot=200, sketch_dim=0)
    for row in res.rows:
        exact = exact_cycle_var(model, row["K"], "fe") / exact_cycle_var(model, row["K"], "iid")
        low, high = row["measured_ratio_ci"]
        assert low < row["measured_ratio"] < high and low < exact < high, (row, exact)
        assert row["predicted_ratio_ci"][0] < exact < row["predicted_ratio_ci"][1], (row, exact)
        assert row["sequences"] == MIN_UNITS and res.stats["unit"] == "sequences"
        assert row["c_fe"] < 0 and row["c_fe_measured"] < 0
        assert row["gates"] == [] and row["prediction_gates"] == []
        assert math.isfinite(row["measured_ratio_median_of_means"])
    assert "parameter drift" in res.stats["note"]
    assert res.stats["interval"]["count"] == MIN_UNITS and res.stats["interval"]["enough"]


def test_fewer_sequences_than_an_interval_needs_give_no_interval_and_no_verdict() -> None:
    model = Enumerated(seqs=MIN_UNITS - 4, seed=4)
    res = passes_study(model.grad_fn, model.valid, [2], 2, draws=8, reference=8, seed=0, chunk=12,
                       n_boot=100, sketch_dim=0)
    (row,) = res.rows
    assert all(math.isnan(x) for x in (*row["measured_ratio_ci"], *row["predicted_ratio_ci"]))
    assert math.isfinite(row["measured_ratio"])  # the number is still printed
    assert any("too few units: 8 sequences" in g for g in row["gates"])
    assert any("too few units" in g for g in row["prediction_gates"])
    assert not res.stats["interval"]["enough"]


SETTINGS = dict(kind="passes", pool=4, draws=2, reference=3, num_masks=[2, 3], ratio=0.15, bootstrap=50,
                sketch_dim=64)


def test_analyze_passes_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
    assert asked == [4]
    run_dir = tmp_path / "run"
    for name in ("passes.csv", "passes_sequences.csv", "passes.md", "passes.json"):
        assert (run_dir / name).stat().st_size > 0, name
    saved = json.loads((run_dir / "passes.json").read_text())
    assert saved["analysis_kind"] == "passes" and saved["settings"]["tau"] == 3  # round(0.15 x 22)
    assert saved["cost"]["passes"] == passes_cost(4, 3, 2, 3)["measured"] + passes_cost(4, 3, 2, 3)["predicted"] \
        == 4 * 2 * 2 * 3 + 4 * (3 + 2 * 2 * 3)
    with (run_dir / "passes.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["K"]) for r in rows] == [2, 3]
    for row in rows:
        for key in ("var_independent", "var_disjoint", "measured_ratio", "predicted_ratio",
                    "measured_over_predicted"):
            assert math.isfinite(float(row[key])), (key, row)
        assert row["measured_ratio_ci_low"] in ("", "nan", "None")  # 4 sequences: no interval
    text = (run_dir / "passes.md").read_text()
    assert "parameter drift between passes is left out" in text and "4 validation blocks" in text
    assert "no intervals: 4 sequences" in text and "too few units" in text
    assert (Path(out["results_dir"]) / "passes.csv").is_file()


def test_passes_settings_are_checked_in_one_line() -> None:
    with pytest.raises(UserError, match="analysis.draws=1"):
        AnalysisConfig(kind="passes", draws=1).validate()
    with pytest.raises(UserError, match="analysis.pool=1"):
        AnalysisConfig(kind="passes", pool=1).validate()
