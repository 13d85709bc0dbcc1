"""The study driver: its plan (every command composes and validates), its resumption rules (with a fake femlm,
in milliseconds), and, marked slow, the whole smoke study run twice through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from femlm.errors import UserError
from femlm.experiment.runner import Runner
from femlm.experiment.schema import load
from femlm.experiment.tables import Options
from femlm.study import driver as drv
from femlm.study.plan import build_steps, check_plan, load_plan, override_value
from helpers.configs import composed

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("FEMLM_MIRROR") or REPO.parent / "shared" / "data")


def test_full_plan_has_every_arm_mode_seed_and_row(tmp_path: Path) -> None:
    plan = load_plan()
    check_plan(plan)
    steps = build_steps(plan, tmp_path, tmp_path / "enc")
    parts = [s.part for s in steps]
    assert parts[0] == "encoder" and parts[-1] == "results" and parts.index("warmup") < parts.index("pretrain")
    pre = [s for s in steps if s.part == "pretrain"]
    seeds, arms = plan["pretrain"]["seeds"], plan["pretrain"]["arms"]
    assert len(seeds) >= 3 and set(arms) == {"mlm_subword", "fe_subword", "iid_subword"}
    assert len(pre) == len(seeds) * (1 + 2 * (len(arms) - 1))  # MLM once, K-copy arms in both modes
    assert [s.meta["seed"] for s in pre] == sorted(s.meta["seed"] for s in pre)  # seed-major: pairs complete first
    for s in pre:
        mode = override_value(s.command, "trainer.equal_compute")
        assert (mode is None) == (s.meta["arm"] == "mlm_subword") and s.needs == [tmp_path / "warmup" / "checkpoints" / "final"]
    ft = [s for s in steps if s.part == "finetune"]
    assert len(ft) == len(plan["finetune"]["tasks"]) * (1 + len(arms))
    assert all(override_value(s.command, "finetune.seeds") == [1, 2, 3, 4, 5] for s in ft)
    assert any(s.meta["row"] == "no_continual" and s.needs == [tmp_path / "encoder_nopooler"] for s in ft)
    dec = [s for s in steps if s.part == "decomposition"]
    assert dec and override_value(dec[0].command, "analysis.num_masks") == [2, 4, 8]
    assert override_value(dec[0].command, "analysis.batch_rows") == override_value(plan["pretrain"]["overrides"],
                                                                                    "trainer.batch_size")
    assert 60 < sum(s.estimate_s for s in steps) / 60 < 125  # the plan's own estimate fits the 2-hour budget


@pytest.mark.parametrize("smoke", [False, pytest.param(True, marks=pytest.mark.slow)])  # smoke: the slow tier
def test_every_command_of_the_plan_composes_and_validates(tmp_path: Path, smoke: bool) -> None:
    plan = load_plan(smoke)
    for step in build_steps(plan, tmp_path, tmp_path / "enc"):
        if not step.command:
            continue
        command, args = step.command[0], step.command[1:]
        if command == "analyze":
            args = [f"analysis.kind={args[0]}", *args[1:]]
        if command == "download":
            args = [f"download.datasets=[{','.join(a for a in args if '=' not in a)}]",
                    *[a for a in args if "=" in a]]
        cfg = composed(command, *args)
        assert cfg.command == command, step.name


def test_plan_refuses_what_cannot_run() -> None:
    plan = load_plan()
    plan["pretrain"]["overrides"] = [*plan["pretrain"]["overrides"], "trainer.max_steps=90"]
    with pytest.raises(UserError, match="trainer.max_steps=90 must be a multiple of K=4"):
        check_plan(plan)
    plan = load_plan()
    plan["pretrain"]["seeds"] = [1]
    with pytest.raises(UserError, match="at least 2 seeds"):
        check_plan(plan)


class FakeFemlm:
    """Stands in for the subprocess: records the arguments and writes the files a finished step leaves."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.fail_on = fail_on

    def __call__(self, runner: Runner, step, args: list[str]) -> None:
        self.calls.append((step.name, args))
        if self.fail_on and self.fail_on in step.name:
            (step.run_dir).mkdir(parents=True, exist_ok=True)
            (step.run_dir / "run.json").write_text("{}")
            raise UserError(f"step '{step.name}' failed (exit 1)")
        step.run_dir.mkdir(parents=True, exist_ok=True)
        (step.run_dir / "run.json").write_text("{}")
        if step.kind == "pretrain":
            (step.run_dir / "checkpoints" / "final").mkdir(parents=True, exist_ok=True)
            (step.run_dir / "checkpoints" / "state_4.pt").write_text("x")
            (step.run_dir / "summary.json").write_text("{}")
        else:
            (step.run_dir / step.output).write_text("{}")


def fake_driver(tmp_path: Path, fake: FakeFemlm, monkeypatch: pytest.MonkeyPatch) -> Runner:
    """The runner on the smoke study, every femlm command replaced by `fake`."""
    (tmp_path / "enc").mkdir(exist_ok=True)
    monkeypatch.setattr(Runner, "femlm", lambda self, step, args: fake(self, step, args))
    monkeypatch.setattr(drv, "locate_encoder", lambda plan, runs: tmp_path / "enc")
    monkeypatch.setattr(drv.enc, "describe", lambda path: {"parameters": 1, "sha256": "0" * 64})
    monkeypatch.setattr(drv.enc, "without_pooler", lambda src, out: out.mkdir(parents=True, exist_ok=True))
    import femlm.study.results as res

    monkeypatch.setattr(res, "write_results", lambda *a, **k: tmp_path / "out" / "README.md")
    monkeypatch.setenv("FEMLM_MIRROR", str(tmp_path))
    return Runner([load("study", smoke=True)], Options(runs=tmp_path / "runs", out=tmp_path / "out", smoke=True,
                                                       named=["study"]))


def test_driver_runs_each_step_once_resumes_cut_runs_and_sets_aside_others(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeFemlm()
    d = fake_driver(tmp_path, fake, monkeypatch)
    runs = tmp_path / "runs"
    assert d.run() == 0
    names = [n for n, _ in fake.calls]
    assert len(names) == len(set(names)) == sum(1 for s in build_steps(load_plan(True), runs, tmp_path / "enc")
                                                 if s.command)
    assert all(any(a.startswith("hydra.run.dir=") for a in args) for _, args in fake.calls)
    assert not list((runs / "warmup" / "checkpoints").glob("state_*"))  # finished runs drop their states
    timings = json.loads((runs / "timings.json").read_text())
    assert set(timings) == set(names) and all(t["status"] == "done" for t in timings.values())

    # Second invocation: nothing to do.
    fake.calls.clear()
    assert fake_driver(tmp_path, fake, monkeypatch).run() == 0 and fake.calls == []

    # A pre-training run cut mid-way resumes in place; a fine-tuning run cut mid-way is set aside and rerun.
    cut = runs / "pretrain" / "fe_subword_rows_s2"
    (cut / "summary.json").unlink()
    ft = runs / "finetune" / "fe_subword_aclarc"
    (ft / "results.json").unlink()
    assert fake_driver(tmp_path, fake, monkeypatch).run() == 0
    calls = dict(fake.calls)
    assert calls["pretrain fe_subword same_rows seed 2"][-1] == f"resume={cut}"
    assert any(a == f"hydra.run.dir={ft}" for a in calls["finetune fe_subword on aclarc"])
    assert list(ft.parent.glob("fe_subword_aclarc.incomplete-*")) and len(calls) == 2


def test_a_failing_step_stops_the_study_and_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeFemlm(fail_on="pretrain iid_subword same_rows seed 1")
    d = fake_driver(tmp_path, fake, monkeypatch)
    with pytest.raises(UserError, match="failed"):
        d.run()
    timings = json.loads((tmp_path / "runs" / "timings.json").read_text())
    assert timings["pretrain iid_subword same_rows seed 1"]["status"] == "failed"
    assert not (tmp_path / "runs" / "finetune").exists()  # nothing after the failure ran


@pytest.mark.slow
@pytest.mark.mirror
def test_smoke_study_end_to_end_twice(tmp_path: Path) -> None:
    """The whole driver at toy scale through the real CLI: steps, results, README; then a second run skips all."""
    if not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    env = {**os.environ, "FEMLM_MIRROR": str(MIRROR), "FEMLM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "FEMLM_STUDY_SMOKE": "1"}
    args = [sys.executable, "-m", "femlm.study", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-4000:]
    readme = (tmp_path / "out" / "README.md").read_text()
    for heading in ("## What was measured", "## What the evidence says", "**FE vs MLM:",
                    "### The declared family: primary, chosen after the data", "### Exploratory (Benjamini-Hochberg",
                    "## 1-2. Variance", "## 3. Training speed", "## 4. Downstream", "SMOKE RUN"):
        assert heading in readme, heading
    assert "no difference detected" not in readme and '"verdict"' not in (tmp_path / "out" / "study.json").read_text()
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert study["smoke"] and not study["missing"] and set(study["pretraining"]) == {"same_rows", "same_sequences"}
    for name in ("loss_vs_flops_same_rows.png", "loss_vs_flops_same_sequences.png", "downstream.png",
                 "decomposition_warmup.png", "null_model_warmup.png", "pretrain_bands.csv", "downstream_summary.csv",
                 "comparisons.csv"):
        assert (tmp_path / "out" / name).is_file(), name
    summary = json.loads((tmp_path / "runs" / "warmup" / "summary.json").read_text())
    assert summary["new_mlm_head"]  # the encoder had no head: the fresh one is recorded

    assert set(study["arms_read"]["same_rows"]) == {"mlm_subword", "fe_subword", "iid_subword"}
    assert study["decomposition_settings"]["warmup"]["pool"] == study["pool_sequences"]["warmup"]
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "start (planned" not in second.stderr and second.stderr.count("done already, skipped") >= 15


def test_optional_step_is_skipped_past_the_time_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeFemlm()
    d = fake_driver(tmp_path, fake, monkeypatch)
    d.exps[0].raw["decomposition"].update(checkpoints=["warmup", "mlm_final"], optional=["mlm_final"])
    d.exps[0].estimate.budget_minutes = 1e-6  # already spent
    assert d.run() == 0
    names = [n for n, _ in fake.calls]
    assert "decomposition on the warmup checkpoint" in names  # not optional: runs whatever the budget
    assert "decomposition on the mlm_final checkpoint" not in names
    assert d.skipped == ["decomposition on the mlm_final checkpoint"]
    # With time left, a later invocation runs it (and only it).
    fake.calls.clear()
    again = fake_driver(tmp_path, fake, monkeypatch)
    again.exps[0].raw["decomposition"].update(checkpoints=["warmup", "mlm_final"], optional=["mlm_final"])
    again.exps[0].estimate.budget_minutes = 1e6
    assert again.run() == 0 and [n for n, _ in fake.calls] == ["decomposition on the mlm_final checkpoint"]


def test_a_fine_tuning_killed_between_seeds_is_not_done(tmp_path: Path) -> None:
    """results.json is rewritten after every seed; only one that says "complete" marks the step done."""
    plan = load_plan(smoke=True)
    step = next(s for s in build_steps(plan, tmp_path / "runs", tmp_path / "enc") if s.part == "finetune")
    step.run_dir.mkdir(parents=True)
    (step.run_dir / "results.json").write_text(json.dumps({"complete": False, "seeds": [{}]}))
    assert not step.done()
    (step.run_dir / "results.json").write_text(json.dumps({"complete": True, "seeds": [{}, {}]}))
    assert step.done()
