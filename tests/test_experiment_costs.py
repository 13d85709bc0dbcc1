"""Planned minutes per CPU class (femlm.experiment.costs, issue 48): the tiny pipeline's committed unit costs, the
class a machine falls in, "unmeasured class", and the per-stage timings file a run leaves in its results folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from femlm.compose import compose
from femlm.errors import UserError
from femlm.experiment import costs
from femlm.experiment.cli import main
from femlm.experiment.runner import Runner
from femlm.experiment.schema import load
from femlm.experiment.tables import Options

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "femlm" / "conf" / "experiment" / "tiny.yaml"
STAGES = ("download", "scratch", "continual", "finetune", "analysis", "report")


def _on(monkeypatch: pytest.MonkeyPatch, isa: str | None) -> None:
    monkeypatch.setattr("femlm.runs.cpu_isa", lambda: isa)


def _planned(monkeypatch: pytest.MonkeyPatch, isa: str) -> Runner:
    _on(monkeypatch, isa)
    runner = Runner([load("tiny")], Options(dry_run=True))
    runner.steps()
    return runner


def test_tiny_is_planned_within_30_minutes_on_2_avx2_cores_in_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _planned(monkeypatch, "avx2")
    assert runner.sizing is not None and runner.sizing.measured and runner.sizing.cls == "avx2 fp32"
    steps = [s for s in runner.planned if s.kind != "inprocess"]
    assert {s.part for s in steps} == set(STAGES) and all(s.estimate_s > 0 for s in steps)
    assert sum(s.estimate_s for s in steps) <= 30 * 60
    assert runner.sizing.unsized == []


def test_the_avx2_units_give_back_the_records_they_were_derived_from() -> None:
    """The earlier size, planned with the AVX2 class's units, against its records (results/tiny's
    pretrain_runs.csv at b0e1bea: wall s 516 and 496 for 300 scratch steps, 243 / 181 / 160 for 100 continual steps;
    issue 48: fine-tuning cells of 346-371 s, analyses of 208 s), each plus the ~15 s start of a femlm process."""
    units = load("tiny").estimate.classes["avx2 fp32"]
    plan = costs.Costs(units)
    plan.prepared = {"general", "cs"}
    common = ["preset=tiny", "runtime.precision=fp32"]
    scratch = plan.pretrain(compose("pretrain-scratch", [*common, "trainer.max_steps=300", "runtime.eval_every=50",
                                                         "runtime.save_every=100"]))
    continual = plan.pretrain(compose("continual-pretrain", [*common, "domain=cs", "trainer.max_steps=100",
                                                             "runtime.eval_every=25", "runtime.save_every=50"]))
    cells = [plan.finetune(compose("finetune", [*common, f"task={t}", "finetune.max_train_examples=1000"]))
             for t in ("aclarc", "scierc")]
    analysis = plan.analysis(compose("analyze", [*common, "analysis.kind=both"]))
    assert 496 + 15 <= scratch <= 516 + 15 + 20
    assert 160 + 15 <= continual <= 243 + 15
    assert all(346 * 0.9 <= c <= 371 * 1.1 for c in cells) and 346 <= sum(cells) / 2 <= 371 + 10
    assert 208 + 10 <= analysis <= 208 + 20


def test_the_fitted_class_gives_back_its_committed_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class whose units were fitted to a run (tiny.yaml's `source` names results/tiny/timings.json) plans that
    run's stages within 10% and its total within 5%: units edited away from the measurement fail here."""
    timings = json.loads((REPO / "results" / "tiny" / "timings.json").read_text())
    isa, precision = timings["class"].split()
    assert "results/tiny/timings.json" in load("tiny").estimate.classes[timings["class"]]["source"]
    runner = _planned(monkeypatch, isa)
    assert runner.sizing is not None and runner.sizing.cls == f"{isa} {precision}"
    planned = costs.by_part(runner.planned, {s.name: s.estimate_s for s in runner.planned})
    for stage, figures in timings["stages"].items():
        slack = max(0.10 * figures["wall_s"], 1.0)  # download and report: a second or two each
        assert abs(planned[stage] - figures["wall_s"]) <= slack, (stage, planned[stage], figures["wall_s"])
    assert abs(sum(planned.values()) - timings["total_wall_s"]) <= 0.05 * timings["total_wall_s"]


def test_each_unit_counts_what_the_command_does() -> None:
    common = ["preset=tiny", "runtime.precision=fp32"]
    scratch = compose("pretrain-scratch", [*common, "trainer.max_steps=40", "runtime.eval_every=20",
                                           "runtime.save_every=20"])
    assert costs.Costs({"eval_block": 1}).pretrain(scratch) == 3 * 64  # steps 0, 20, 40 x 64 held-out blocks
    assert costs.Costs({"save": 1}).pretrain(scratch) == 3  # step 20, step 40, the final model
    assert costs.Costs({"train_row": 1}).pretrain(scratch) == 40 * 32
    first = costs.Costs({"prepare_general": 7})
    assert first.pretrain(scratch) == 7 and first.pretrain(scratch) == 0  # a corpus is prepared once
    aclarc = compose("finetune", [*common, "task=aclarc", "finetune.seeds=[1,2,3]", "finetune.epochs=2",
                                  "finetune.max_train_examples=200"])
    assert costs.Costs({"ft_train_example": 1}).finetune(aclarc) == 3 * 2 * 200
    assert costs.Costs({"ft_score_example": 1}).finetune(aclarc) == 3 * (3 * 114 + 139)  # dev per epoch + end, test
    assert costs.Costs({"ft_setup": 1, "ft_setup_aclarc": 5}).finetune(aclarc) == 5  # a task's own value first


@pytest.mark.parametrize("over", [[], ["analysis.tau=15"], ["analysis.kind=variance"], ["analysis.kind=covariance"]])
def test_analysis_rows_are_the_analysis_own_count(over: list[str]) -> None:
    from femlm.analysis.studies import covariance_cost, resolve_variance_tau, variance_cost

    cfg = compose("analyze", ["preset=tiny", "analysis.kind=both", "analysis.budget=16", "analysis.reference=16", *over])
    a = cfg.analysis
    cov, var = a.kind in ("covariance", "both"), a.kind in ("variance", "both")
    shared = cov and var and resolve_variance_tau(cfg.data.block_size - 2, a.tau, a.variance_tau,
                                                  list(a.num_masks)) == a.tau
    rows = (covariance_cost(a.sequences, a.reference, a.budget) if cov else 0) + \
        (variance_cost(a.sequences, 0 if shared else a.reference, a.budget, max(a.num_masks)) if var else 0)
    assert costs.Costs({"gradient_row": 1}).analysis(cfg) == rows


def test_an_unmeasured_class_plans_nothing_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    runner = _planned(monkeypatch, "amx_bf16")
    assert runner.sizing is not None and not runner.sizing.measured and runner.sizing.cls == "amx_bf16 fp32"
    assert all(s.estimate_s == 0 for s in runner.planned)
    assert main(["tiny", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "unmeasured class: amx_bf16 fp32" in out and "planned total" not in out


def test_the_plan_prints_minutes_per_stage_for_this_class(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _on(monkeypatch, "avx512_bf16")
    assert main(["tiny", "--plan"]) == 0
    captured = capsys.readouterr()
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("planned minutes per stage"))
    assert "(avx512_bf16 fp32, quiet)" in line and all(f"{s} " in line for s in STAGES)
    assert "CPU class avx512_bf16 fp32" in captured.err


def test_a_bad_unit_cost_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "experiment"
    folder.mkdir()
    text = TINY.read_text()
    assert "        train_row: 0.0517" in text
    (folder / "tiny.yaml").write_text(text.replace("        train_row: 0.0517", "        train_rows: 0.0517"))
    monkeypatch.setattr("femlm.experiment.schema.conf_dir", lambda: folder)
    _on(monkeypatch, "avx512_bf16")  # another class than the bad one: every class is checked
    with pytest.raises(UserError, match=r"estimate.classes\['avx2 fp32'\]: train_rows: not a unit cost") as err:
        Runner([load("tiny")], Options(dry_run=True)).steps()
    assert "\n" not in str(err.value)


def test_the_results_folder_gets_the_seconds_of_every_step_per_stage(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _on(monkeypatch, "avx2")
    runs, out = tmp_path / "runs", tmp_path / "out"
    monkeypatch.setenv("FEMLM_MIRROR", str(tmp_path))
    walls: dict[str, float] = {}

    def fake(self: Runner, step, args: list[str]) -> None:  # a finished step's files, and its wall time
        step.run_dir.mkdir(parents=True, exist_ok=True)
        if step.kind == "pretrain":
            (step.run_dir / "checkpoints" / "final").mkdir(parents=True, exist_ok=True)
            (step.run_dir / "summary.json").write_text("{}")
        elif step.output:
            (step.run_dir / step.output).write_text("{}")
        walls[step.name] = 0.0

    monkeypatch.setattr(Runner, "femlm", fake)
    assert main(["tiny", "--runs", str(runs), "--out", str(out)]) == 0
    recorded = json.loads((runs / "timings.json").read_text())
    timings = json.loads((out / "timings.json").read_text())
    assert timings["class"] == "avx2 fp32" and timings["unit_costs"] == "committed" and "[avx2]" in timings["cpu"]
    assert [r["step"] for r in timings["steps"]] == list(walls)
    assert all(r["wall_s"] == round(recorded[r["step"]]["wall_s"], 1) and r["planned_s"] for r in timings["steps"])
    assert list(timings["stages"]) == list(STAGES)
    for stage, entry in timings["stages"].items():
        mine = [r for r in timings["steps"] if r["part"] == stage]
        assert entry["planned_s"] == pytest.approx(sum(r["planned_s"] for r in mine), abs=0.1)
