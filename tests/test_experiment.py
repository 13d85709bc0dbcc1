"""The experiment runner (femlm.experiment): one schema for every experiment file, the same femlm commands the old
orchestrators ran, and the resumption rules, exercised with a fake femlm (no training)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from femlm.errors import UserError
from femlm.experiment import runner as run_mod
from femlm.experiment.cli import main
from femlm.experiment.runner import Runner
from femlm.experiment.schema import load, names
from femlm.experiment.step import Step
from femlm.experiment.tables import Options, build_steps
from femlm.study.plan import build_steps as study_steps
from femlm.study.plan import load_plan
from helpers.configs import experiment_file

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "femlm" / "conf"
RECORDED = json.loads((REPO / "tests" / "data" / "experiment_commands.json").read_text())["commands"]
# Make target -> the experiment files it runs and the report folder (the old reproduce_paper.sh TABLE argument).
CASES = {"tiny": (["tiny"], {}), "tiny_extras": (["tiny"], {"extras": True}), "glue": (["glue"], {}),
         "continual": (["continual_cs", "continual_news"], {}),
         "glue_average": (["glue"], {"out": Path("results/paper/glue_average")}), "figures": (["figures"], {})}


def test_every_experiment_file_is_one_validated_plan() -> None:
    assert {"tiny", "glue", "continual_cs", "continual_news", "figures", "study", "study_base"} <= set(names())
    for name in names():
        data = yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())
        assert list(data) == ["experiment"], f"{name}: keep experiment files declarative (one block)"
        exp = load(name)
        assert exp.name == name and (CONF / "preset" / f"{exp.preset}.yaml").is_file()
        assert exp.report.scale and exp.estimate.breakdown
        if exp.smoke is not None:
            assert load(name, smoke=True).raw["runs_dir"] != exp.runs_dir  # a smoke run never mixes with the real one
        if exp.extras is not None:
            load(name, extras=True)



@pytest.mark.parametrize(("change", "message"), [
    (("arms:", "arm:"), "experiment.scratch.arm: no such key; did you mean experiment.scratch.arms?"),
    (("seeds: [1, 2, 3]", "seeds: 3"), "experiment.finetune.seeds must be a list"),
    (("preset: tiny", "preset: [tiny]"), "experiment.preset=['tiny']: expected str"),
    (("  scratch:\n    model: tiny\n", "  scratch:\n"), "experiment.scratch.model is missing"),
])
def test_a_bad_key_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], change: tuple[str, str],
                                          message: str) -> None:
    text = (CONF / "experiment" / "tiny.yaml").read_text()
    assert change[0] in text
    experiment_file(tmp_path, monkeypatch, "tiny", text.replace(change[0], change[1], 1))
    assert main(["tiny", "--plan"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and "femlm/conf/experiment/tiny.yaml" in err


def test_a_config_the_plan_names_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (CONF / "experiment" / "tiny.yaml").read_text().replace("iid_subword]", "iid_sbword]")
    experiment_file(tmp_path, monkeypatch, "tiny", text)
    with pytest.raises(UserError, match="masking=iid_sbword, but femlm/conf/masking/iid_sbword.yaml does not exist"):
        build_steps([load("tiny")], Options())


def _report(argv: list[str], scale: bool = True) -> set[str]:
    """A report's overrides as a set (their order is free), without its own run directory (a fresh one) and, where
    `scale` is False, its scale phrase."""
    return {a for a in argv if not a.startswith("hydra.run.dir=") and (scale or not a.startswith("report.scale="))}


# Issue 48 resized the tiny pipeline (femlm/conf/experiment/tiny.yaml says why) and pinned its precision: each
# recorded override -> what replaced it, per command; every other argument is as recorded.
TINY_48 = {"pretrain-scratch": {"trainer.max_steps=300": ["trainer.max_steps=40"],
                                "runtime.eval_every=50": ["runtime.eval_every=20"],
                                "runtime.save_every=100": ["runtime.save_every=20"]},
           "continual-pretrain": {"trainer.max_steps=100": ["trainer.max_steps=30"],
                                  "runtime.eval_every=25": ["runtime.eval_every=10"],
                                  "runtime.save_every=50": ["runtime.save_every=10"]},
           "finetune": {"finetune.max_train_examples=1000": ["finetune.max_train_examples=200", "finetune.epochs=2"]},
           "evaluate": {"finetune.max_train_examples=1000": ["finetune.max_train_examples=200", "finetune.epochs=2"]},
           "analyze": {"masking=fe_subword": ["masking=fe_subword", "analysis.budget=16", "analysis.reference=16"]}}


def _resized(argv: list[str]) -> list[str]:
    """A recorded tiny command as issue 48 changed it: its overrides above, fp32 pinned (`common`)."""
    out: list[str] = []
    for arg in argv:
        out += TINY_48.get(argv[0], {}).get(arg, [arg])
        if arg == "download.offline=true" and argv[0] not in ("download", "report"):
            out.append("runtime.precision=fp32")
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_the_runner_plans_the_commands_the_bash_scripts_ran(case: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Every femlm command line of `make reproduce-<case>` (glue_average: reproduce-glue-average) equals the one
    scripts/reproduce_*.sh printed (recorded in tests/data/experiment_commands.json before they were removed; since
    then only the tables' names, files and folders were renamed: continual, glue, glue_average; and the tiny
    pipeline resized, TINY_48), in the same order; the report's own run directory (and tiny's scale) aside."""
    names_, kw = CASES[case]
    monkeypatch.chdir(tmp_path)  # the recorded paths are relative: runs of this checkout must not make them "cut"
    steps = build_steps([load(n, extras=kw.get("extras", False)) for n in names_], Options(out=kw.get("out")))
    new = [s.args() for s in steps if s.command]  # the in-process timings step runs no command
    old = [_resized(a) for a in RECORDED[case]] if case.startswith("tiny") else RECORDED[case]
    assert [a[0] for a in new] == [a[0] for a in old] or case == "tiny_extras"
    tiny = case.startswith("tiny")  # its scale phrase states the new size
    assert _report(new[-1], not tiny) == _report(old[-1], not tiny) and new[-1][0] == "report"
    if case == "tiny_extras":  # the extras (no-continual row, efficiency sweep) now run before the analysis
        assert sorted(map(tuple, new[:-1])) == sorted(map(tuple, old[:-1]))
    else:
        assert new[:-1] == old[:-1]


@pytest.mark.parametrize("case", ["study", "study_smoke", "study_base", "study_base_smoke"])
def test_the_study_plans_the_commands_it_ran_before(case: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the recorded paths are relative: runs of this checkout must not make them "cut"
    name, smoke = case.removesuffix("_smoke"), case.endswith("_smoke")
    plan = load_plan(smoke, name)
    runs = Path(plan["runs_dir"])
    steps = study_steps(plan, runs, runs / "encoder")
    # the `femlm analyze passes` steps are new since the record (issue 28): study_base has them, study not
    passes = [s for s in steps if s.part == "passes"]
    assert [s.meta["variant"] for s in passes] == (["r15", "r30"] if name == "study_base" else [])
    assert all(s.command[:2] == ["analyze", "passes"] for s in passes)
    kept = [s for s in steps if s.part != "passes"]
    assert [s.args() if s.command else [f"<{s.part}>"] for s in kept] == RECORDED[case]


class FakeFemlm:
    """Stands in for the subprocess: records the arguments and writes the files a finished step leaves."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, runner: Runner, step: Step, args: list[str]) -> None:
        self.calls.append((step.name, args))
        step.run_dir.mkdir(parents=True, exist_ok=True)
        (step.run_dir / "run.json").write_text("{}")
        if step.kind == "pretrain":
            (step.run_dir / "checkpoints" / "final").mkdir(parents=True, exist_ok=True)
            (step.run_dir / "summary.json").write_text("{}")
        elif step.output:
            (step.run_dir / step.output).write_text("{}")


def test_tiny_skips_finished_steps_resumes_a_cut_pretraining_and_sets_aside_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    done = runs / "scratch_mlm_subword"
    (done / "checkpoints" / "final").mkdir(parents=True)
    (done / "summary.json").write_text("{}")
    (runs / "scratch_fe_subword").mkdir(parents=True)
    (runs / "scratch_fe_subword" / "run.json").write_text("{}")  # cut before the final checkpoint
    (runs / "finetune_fe_subword_aclarc").mkdir()
    (runs / "finetune_fe_subword_aclarc" / "results.json").write_text("{}")
    (runs / "finetune_mlm_subword_aclarc").mkdir()  # a killed fine-tune: no results.json
    (runs / "finetune_mlm_subword_scierc").mkdir()  # killed between seeds: results.json of the seeds so far
    (runs / "finetune_mlm_subword_scierc" / "results.json").write_text('{"complete": false, "seeds": [{}]}')
    monkeypatch.setenv("FEMLM_MIRROR", str(tmp_path))
    fake = FakeFemlm()
    monkeypatch.setattr(Runner, "femlm", lambda self, step, args: fake(self, step, args))

    assert main(["tiny", "--plan", "--runs", str(runs), "--out", str(tmp_path / "out")]) == 0
    listing = capsys.readouterr().out
    for state, name in (("done", "scratch mlm_subword"), ("cut: resume", "scratch fe_subword"),
                        ("set aside", "finetune mlm_subword aclarc"), ("to run", "scratch iid_subword")):
        assert any(f"[{state:>11}]" in line and name in line.replace("pretrain-", "") for line in listing.splitlines())
    assert fake.calls == []

    assert main(["tiny", "--runs", str(runs), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    calls = dict(fake.calls)
    assert len(calls) == 16 - 2  # the finished scratch run and the complete fine-tuning are skipped
    assert calls["tiny pretrain-scratch fe_subword"][-1] == f"resume={runs}/scratch_fe_subword"
    assert "tiny pretrain-scratch mlm_subword" not in calls and "tiny finetune fe_subword aclarc" not in calls
    assert "moving the incomplete run" in err and list(runs.glob("finetune_mlm_subword_aclarc.incomplete-*"))
    assert calls["tiny finetune mlm_subword scierc"][-1] == f"hydra.run.dir={runs}/finetune_mlm_subword_scierc"
    report = calls["report"]
    assert f"report.inputs=[{runs}]" in report and f"report.out_dir={tmp_path / 'out'}" in report
    timings = json.loads((runs / "timings.json").read_text())
    assert set(timings) == set(calls) and (runs / "experiment.log").is_file()

    fake.calls.clear()  # again: only the report runs
    assert main(["tiny", "--runs", str(runs), "--out", str(tmp_path / "out")]) == 0
    assert [n for n, _ in fake.calls] == ["report"]


def test_a_failing_step_stops_the_run_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FEMLM_MIRROR", str(tmp_path))
    opts = Options(runs=tmp_path / "runs", stamp="now", named=["tiny"])
    runner = Runner([load("tiny")], opts, python=shutil.which("false") or "/bin/false")
    with pytest.raises(UserError, match="step 'tiny download' failed .* fix the cause and run it again"):
        runner.run()
    assert json.loads((tmp_path / "runs" / "timings.json").read_text())["tiny download"]["status"] == "failed"
    assert (tmp_path / "runs" / "logs" / "tiny_download.log").is_file()


def test_offline_experiments_need_a_mirror_and_paper_ones_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FEMLM_MIRROR", str(tmp_path / "absent"))
    assert main(["tiny", "--runs", str(tmp_path / "runs")]) == 2
    assert "FEMLM_MIRROR" in capsys.readouterr().err
    monkeypatch.setattr(run_mod.shutil, "which", lambda name: None)
    monkeypatch.delenv("FEMLM_ALLOW_CPU", raising=False)
    assert main(["continual_cs", "--runs", str(tmp_path / "runs")]) == 2
    assert "no GPU found (nvidia-smi)" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_paper_plans_print_the_cost_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["continual_cs", "continual_news", "--plan"]) == 0
    captured = capsys.readouterr()
    assert "~10 GPU hours on 1x A100" in captured.err.splitlines()[0]
    commands = [line.strip() for line in captured.out.splitlines() if line.strip().startswith("femlm ")]
    assert commands[-1].startswith("femlm report") and "report.out_dir=results/paper/continual" in commands[-1]
    assert sum("continual-pretrain" in c for c in commands) == 8
    assert sum(c.startswith("femlm finetune") for c in commands) == 4 + 16  # released + 4 arms x 2 tasks x 2
    assert main(["nosuch"]) == 2 and "allowed" in capsys.readouterr().err


def test_femlm_experiment_is_the_same_front_door(cli_in_process) -> None:
    listed = cli_in_process("experiment", "--list")
    assert listed.code == 0 and listed.stdout.split() == names()
    planned = cli_in_process("experiment", "glue", "--out", "results/paper/glue_average", "--plan")
    assert planned.code == 0 and "report.out_dir=results/paper/glue_average" in planned.stdout
    bad = cli_in_process("experiment", "nosuch")
    assert bad.code == 2 and "experiment 'nosuch'" in bad.stderr


def test_python_m_femlm_study_is_an_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from femlm.study.driver import main as study_main

    monkeypatch.setenv("FEMLM_STUDY_SMOKE", "1")
    assert study_main(["--experiment", "study_base", "--plan", "--runs", str(tmp_path / "runs")]) == 0
    listing = capsys.readouterr().out
    assert "head warm-up" in listing and f"hydra.run.dir={tmp_path / 'runs'}/head_warmup" in listing
    assert not (tmp_path / "runs").exists()  # a plan writes nothing
