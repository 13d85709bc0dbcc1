"""The in-process GPU study (issue 39): its plan from unit costs and the power rule (fast), its results writer on
synthetic seeds (fast), and, marked slow, the smoke study run twice through the runner on the CPU."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from femlm.errors import UserError
from femlm.experiment.schema import load
from femlm.study.gpu_plan import bert_flops, make_plan, seeds_for_power

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("FEMLM_MIRROR") or REPO.parent / "shared" / "data")


def raw(smoke: bool = False) -> dict:
    return copy.deepcopy(load("study_gpu", smoke=smoke).raw)


def test_the_h100_plan_fits_eight_minutes_with_the_seeds_the_power_rule_and_budget_allow() -> None:
    plan = raw()
    gp = make_plan(plan, REPO)
    assert gp.total_s <= gp.budget_s == 8 * 60
    assert [p.name for p in gp.parts] == ["start-up", "compile", "training", "evaluation", "fine-tuning", "results"]
    fine_tuning = next(p for p in gp.parts if p.name == "fine-tuning")
    assert fine_tuning.skipped and "skipped" in fine_tuning.note
    # One more seed would not fit: the budget, not a constant, set the count (the rule asks for more here).
    assert len(gp.seeds) >= 3 and gp.total_s + gp.seed_seconds > gp.budget_s - 15
    assert "the power rule asks for" in gp.text() and f"running {len(gp.seeds)}" in gp.text()
    # Equal compute: the same steps of the same rows for every arm; the K-copy arm reads K times fewer sequences.
    assert len(set(gp.steps.values())) == 1 and gp.rows_per_step == 256
    assert gp.passes["fe_subword"] == pytest.approx(gp.passes["mlm_subword"] / 4)
    assert 10 <= gp.passes["mlm_subword"] <= 30


def test_a_larger_budget_runs_what_the_power_rule_asks_for_and_no_more() -> None:
    plan = raw()
    plan["estimate"]["budget_minutes"] = 600
    gp = make_plan(plan, REPO)
    wanted = int(gp.text().split("the power rule asks for ")[1].split()[0])
    assert len(gp.seeds) == wanted


def test_seeds_for_power_matches_the_paired_t_test_sample_size() -> None:
    assert seeds_for_power(1.0, 0.5, 0.05, 0.8) == 34  # G*Power's paired t-test: d = 0.5, two-sided 0.05, 80%
    assert seeds_for_power(2.0, 0.5, 0.05, 0.8) > 3.5 * seeds_for_power(1.0, 0.5, 0.05, 0.8)
    assert seeds_for_power(1.0, 0.5, 0.025, 0.8) > seeds_for_power(1.0, 0.5, 0.05, 0.8)


def test_the_plan_refuses_what_cannot_run() -> None:
    tight = raw()
    tight["estimate"]["budget_minutes"] = 0.5
    with pytest.raises(UserError, match="seeds fit"):
        make_plan(tight, REPO)
    many = raw()
    many["gpu"]["passes"] = 40
    with pytest.raises(UserError, match="max_passes"):
        make_plan(many, REPO)
    unsized = raw()
    unsized["common"] = [o for o in unsized["common"] if not o.startswith("trainer.batch_size")]
    with pytest.raises(UserError, match="trainer.batch_size"):
        make_plan(unsized, REPO)


def test_the_plans_flops_formula_counts_the_built_model() -> None:
    from transformers import BertConfig, BertForMaskedLM

    from femlm.train.flops import flop_counts

    arch = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    model = BertForMaskedLM(BertConfig(vocab_size=100, **arch))
    assert bert_flops(arch, 100) == flop_counts(model)


def test_every_arm_composes_with_the_same_rows_per_step() -> None:
    from femlm.study.gpu import arm_config

    plan = raw()
    cfgs = {arm: arm_config(plan, arm, 10) for arm in plan["pretrain"]["arms"]}
    assert {c.masking.name for c in cfgs.values()} == set(plan["pretrain"]["arms"])
    assert {c.trainer.batch_size for c in cfgs.values()} == {256}
    assert {c.trainer.equal_compute for c in cfgs.values()} == {"same_rows"}
    assert {c.runtime.compile for c in cfgs.values()} == {False}


def _fake_run(folder: Path, arm: str, seed: int, shift: float) -> None:
    folder.mkdir(parents=True)
    records = [{"step": s, "eval_loss": 7.0 - 0.4 * s + shift + 0.01 * ((seed * 7 + s) % 3), "train_flops": 1e12 * s}
               for s in range(6)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"kind": "pretrain", "command": "pretrain-scratch", "masking": arm, "seed": seed, "steps": 5,
               "rows_per_step": 256, "sequences_per_step": 64 if arm == "fe_subword" else 256, "passes": 12.0,
               "final_eval_loss": records[-1]["eval_loss"], "row_tokens_per_s": 1.0e6}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_results_use_complete_seeds_only_and_read_each_comparison_from_its_interval(tmp_path: Path) -> None:
    from femlm.study.gpu_results import write_results

    plan = raw()
    gp = make_plan(plan, REPO)
    shifts = {"mlm_subword": 0.0, "fe_passes_subword": 0.0, "fe_subword": 0.2}  # K-copy clearly worse, passes tied
    runs = tmp_path / "runs"
    for seed in (1, 2, 3, 4):
        for arm, shift in shifts.items():
            _fake_run(runs / f"seed_{seed}" / arm, arm, seed, shift)
    _fake_run(runs / "seed_5.partial" / "mlm_subword", "mlm_subword", 5, 0.0)  # a seed cut before its other arms
    readme = write_results(plan, gp, runs, tmp_path / "out").read_text()
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert study["seeds_complete"] == [1, 2, 3, 4]
    comps = {c["key"]: c for c in study["comparisons"]}
    worse = comps["training_loss/same_rows/fe_subword/final_loss"]  # K-copy's loss is 0.2 higher in every seed
    assert (worse["family"], worse["reading"]) == ("confirmatory", "against FE") and worse["low"] > 0
    assert worse["p_adjusted"] >= worse["p"]  # Holm over the two confirmatory comparisons
    tied = comps["training_loss/same_rows/fe_passes_subword/final_loss"]
    assert (tied["family"], tied["reading"]) == ("confirmatory", "not decided") and tied["low"] <= 0 <= tied["high"]
    assert {c["family"] for k, c in comps.items() if not k.endswith("/final_loss") or "vs" in k} == {"exploratory"}
    assert (tmp_path / "out" / "comparisons.csv").is_file() and "### The declared family: confirmatory" in readme
    # the writer edits nothing outside its output folder (README.md's block is the runner's last step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "runs"]


def _four_seeds(runs: Path, plan: dict) -> None:
    for seed in (1, 2, 3, 4):
        for arm in plan["pretrain"]["arms"]:
            _fake_run(runs / f"seed_{seed}" / arm, arm, seed, 0.2 if arm == "fe_subword" else 0.0)


@pytest.mark.parametrize("unigram_loss, gated", [(5.5, False), (5.1, True)])
def test_no_loss_comparison_is_read_while_every_arm_sits_at_the_unigram_plateau(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unigram_loss: float, gated: bool) -> None:
    from femlm.study import gpu_results

    plan = raw()
    _four_seeds(tmp_path / "runs", plan)  # final held-out losses 5.0-5.22
    base = {"loss": unigram_loss, "top_token": "the", "top_share": 0.044, "held_out_tokens": 1000,
            "sha256": {"train.pt": "0" * 64}}
    monkeypatch.setattr(gpu_results, "unigram_baseline", lambda data_dir: base)
    readme = gpu_results.write_results(plan, make_plan(plan, REPO), tmp_path / "runs", tmp_path / "out").read_text()
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    readings = {c["key"]: c["reading"] for c in study["comparisons"]}
    assert bool(study["gated"]) is gated and ("**Gate: no arm left the unigram plateau" in readme) is gated
    # the K-copy arm's 0.2 higher loss is read as against FE only when the models learned beyond token frequencies
    assert readings["training_loss/same_rows/fe_subword/final_loss"] == ("not decided" if gated else "against FE")
    if gated:
        assert set(readings.values()) == {"not decided"}


@pytest.mark.slow
def test_the_smoke_study_runs_in_one_process_and_continues_where_it_stopped(tmp_path: Path) -> None:
    if not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    env = {**os.environ, "FEMLM_MIRROR": str(MIRROR), "FEMLM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "femlm.experiment", "study_gpu", "--smoke", "--runs", str(tmp_path / "runs"),
           "--out", str(tmp_path / "out")]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "the power rule asks for" in first.stdout and "3 seeds trained now, 0 before" in first.stderr
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert study["seeds_complete"] == [1, 2, 3] and len(study["runs"]) == 9
    summaries = [r for r in study["runs"] if r["seed"] == 1]
    assert {r["rows_per_step"] for r in summaries} == {16}  # the same rows per step for every arm
    # what made each arm's run, and the plan it ran under, are on disk for the results (and --compare)
    made = json.loads((tmp_path / "runs" / "seed_1" / "mlm_subword" / "run.json").read_text())
    assert made["packages"]["torch"] and made["hardware"]["cpu"] and made["git_commit"]
    assert json.loads((tmp_path / "runs" / "plan.json").read_text())["seeds"] == [1, 2, 3]
    assert study["environment"]["runs"] == 9 and study["unigram_baseline"]["loss"] > 0
    # A run cut in seed 3 keeps seeds 1 and 2; the next invocation trains seed 3 alone and gets the same numbers.
    before = json.loads((tmp_path / "runs" / "seed_3" / "fe_subword" / "summary.json").read_text())
    (tmp_path / "runs" / "seed_3").rename(tmp_path / "runs" / "seed_3.partial")
    again = subprocess.run(cmd, env={**env, "FEMLM_MIRROR": ""}, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 seeds trained now, 2 before" in again.stderr
    after = json.loads((tmp_path / "runs" / "seed_3" / "fe_subword" / "summary.json").read_text())
    assert after["final_eval_loss"] == before["final_eval_loss"]


def test_a_declared_comparison_the_results_lack_stays_in_the_family_undecided(tmp_path: Path) -> None:
    from femlm.study.gpu_results import write_results

    plan = raw()
    plan["stats"] = {**plan["stats"], "confirmatory": [*plan["stats"]["confirmatory"],
                                                       "training_loss/same_rows/fe_typo/final_loss"]}
    _four_seeds(tmp_path / "runs", plan)
    write_results(plan, make_plan(plan, REPO), tmp_path / "runs", tmp_path / "out")
    comps = {c["key"]: c for c in json.loads((tmp_path / "out" / "study.json").read_text())["comparisons"]}
    typo = comps["training_loss/same_rows/fe_typo/final_loss"]
    assert (typo["family"], typo["reading"]) == ("confirmatory", "not decided") and typo["estimate"] is None
    # three in the family now, the one without a result counted at p = 1 (what that does to the others' Holm p:
    # tests/test_study_verdicts.py, test_a_missing_member_counts_at_p_one_so_the_family_does_not_shrink)
    assert sum(c["family"] == "confirmatory" for c in comps.values()) == 3 and "no result" in typo["why"]


def test_a_shorter_window_fits_fewer_seeds_and_a_bad_budget_is_refused() -> None:
    full = make_plan(raw(), REPO)
    short = make_plan(copy.deepcopy(load("study_gpu", budget_minutes=3.2).raw), REPO)
    assert short.budget_s == pytest.approx(192) and full.budget_s == pytest.approx(480)
    assert 2 <= len(short.seeds) < len(full.seeds) and short.total_s <= short.budget_s
    with pytest.raises(UserError, match="--budget-minutes"):
        load("study_gpu", budget_minutes=0)
