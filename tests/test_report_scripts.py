"""Experiment configs (conf/experiment) and the reproduction scripts: consistent plans, resumable steps.

The scripts are exercised with DRY_RUN=1 (they print the femlm commands instead of running them), so the
order of the steps and the skip / resume decisions are checked without training anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from femlm.report.experiment import flatten, load_experiment, lookup, main, names, shell_words

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SCRIPTS = REPO / "scripts"
EXPERIMENTS = ("tiny", "table2_cs", "table2_news", "table1_glue", "figures")


def test_every_experiment_is_a_global_package_with_a_plan() -> None:
    assert set(EXPERIMENTS) <= set(names())
    for name in EXPERIMENTS:
        path = CONF / "experiment" / f"{name}.yaml"
        assert path.read_text().startswith("# @package _global_\n"), name
        data = yaml.safe_load(path.read_text())
        assert list(data) == ["experiment"], f"{name}: keep experiment files declarative (one block)"
        plan = data["experiment"]
        assert plan["name"] == name and (CONF / "preset" / f"{plan['preset']}.yaml").is_file()
        assert plan["report"]["scale"] and plan["estimate"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_plans_name_existing_configs(name: str) -> None:
    plan = load_experiment(name)
    for stage in ("scratch", "continual", "ablation"):
        if stage in plan:
            s = plan[stage]
            for arm in s.get("arms", [s.get("masking")]):
                assert (CONF / "masking" / f"{arm}.yaml").is_file(), (name, stage, arm)
            assert (CONF / "domain" / f"{s['domain']}.yaml").is_file()
            assert (CONF / "model" / f"{s['model']}.yaml").is_file()
    tasks = [*plan.get("finetune", {}).get("tasks", []), *plan.get("baseline", {}).get("tasks", []),
             *plan.get("ablation", {}).get("tasks", [])]
    for task in tasks:
        assert (CONF / "task" / f"{task}.yaml").is_file(), (name, task)


def test_tiny_plan_is_the_brief() -> None:
    plan = load_experiment("tiny")
    assert plan["scratch"]["arms"] == ["mlm_subword", "fe_subword", "iid_subword"]
    assert plan["continual"]["arms"] == plan["scratch"]["arms"] and plan["continual"]["domain"] == "cs"
    assert {k: plan["finetune"][k] for k in ("model", "tasks", "seeds")} == {
        "model": "tiny", "tasks": ["aclarc", "scierc"], "seeds": [1, 2, 3]}
    assert plan["estimate"]["minutes"] > 0 and plan["estimate"]["breakdown"]
    assert load_experiment("figures")["ablation"]["num_masks"] == [2, 4, 6, 8]


def test_experiment_helper(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "scratch.arms"]) == 0
    assert capsys.readouterr().out.split() == ["mlm_subword", "fe_subword", "iid_subword"]
    assert main(["tiny", "no.such.key"]) == 2 and "not found" in capsys.readouterr().err
    assert main(["nosuch", "name"]) == 2
    assert shell_words([1, 2]) == ["1", "2"] and shell_words(None) == [] and shell_words(True) == ["true"]
    assert lookup({"a": {"b": 3}}, "a.b") == 3
    assert flatten({"a": {"b": 1}}) == {"a": {"b": 1}, "a.b": 1}


def _run(script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DRY_RUN": "1", **env}, cwd=REPO)


def _commands(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("femlm ")]


def test_tiny_script_steps_in_order(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    runs = tmp_path / "runs"
    env = {"FEMLM_MIRROR": str(tmp_path / "mirror"), "FEMLM_TINY_RUNS": str(runs),
           "FEMLM_TINY_OUT": str(tmp_path / "out")}
    proc = _run("reproduce_tiny.sh", env=env)
    assert proc.returncode == 0, proc.stderr
    commands = _commands(proc.stdout)
    kinds = [c.split()[1] for c in commands]
    assert kinds == ["download"] + ["pretrain-scratch"] * 3 + ["continual-pretrain"] * 3 + ["finetune"] * 6 + \
        ["analyze"] * 2 + ["report"]
    assert all("hydra.run.dir=" in c for c in commands)
    assert "masking=iid_subword" in commands[3] and f"hydra.run.dir={runs}/scratch_iid_subword" in commands[3]
    assert f"model.name_or_path={runs}/scratch_fe_subword/checkpoints/final" in commands[5]
    assert "task=scierc finetune.seeds=\\[1\\,2\\,3\\]" in commands[8]
    assert "download.offline=true" in commands[1]
    assert f"report.inputs=\\[{runs}\\]" in commands[-1] and "report.scale=" in commands[-1]


def test_tiny_script_skips_and_resumes(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
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
    env = {"FEMLM_MIRROR": str(tmp_path / "mirror"), "FEMLM_TINY_RUNS": str(runs)}
    proc = _run("reproduce_tiny.sh", env=env)
    assert proc.returncode == 0, proc.stderr
    commands = _commands(proc.stdout)
    scratch = [c for c in commands if c.startswith("femlm pretrain-scratch")]
    assert len(scratch) == 2 and f"resume={runs}/scratch_fe_subword" in scratch[0]
    assert "hydra.run.dir" not in scratch[0]  # the CLI points Hydra at the resumed directory itself
    assert not any(f"hydra.run.dir={runs}/finetune_fe_subword_aclarc" in c for c in commands)
    assert f"skip pretrain-scratch: {done}/checkpoints/final exists" in proc.stderr
    assert "moving the incomplete run" in proc.stderr and "finetune_mlm_subword_aclarc" in proc.stderr
    assert any(f"hydra.run.dir={runs}/finetune_mlm_subword_scierc" in c for c in commands)


def test_tiny_script_needs_a_mirror(tmp_path: Path) -> None:
    proc = _run("reproduce_tiny.sh", env={"FEMLM_MIRROR": str(tmp_path / "absent")})
    assert proc.returncode == 2 and "FEMLM_MIRROR" in proc.stderr


@pytest.mark.parametrize("table", ["table1", "table2", "table3", "figures"])
def test_paper_script_plan_prints_the_cost_first(table: str, tmp_path: Path) -> None:
    proc = _run("reproduce_paper.sh", table, "--plan", env={"FEMLM_PAPER_RUNS": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "GPU hours" in lines[1] and "GB" in lines[1] and lines[0].startswith("femlm: reproducing")
    commands = _commands(proc.stdout)
    assert commands[-1].startswith("femlm report") and f"results/paper/{table}" in commands[-1]
    if table == "table2":
        assert sum("continual-pretrain" in c for c in commands) == 8
        assert sum(c.startswith("femlm finetune") for c in commands) == 4 + 16  # released + 4 arms x 2 x 2
    if table == "figures":
        assert sum("evaluate.sweep=true" in c for c in commands) == 2
        assert sum("masking.ratio=0.125" in c for c in commands) == 4


def test_paper_script_usage() -> None:
    proc = _run("reproduce_paper.sh", "table9", env={})
    assert proc.returncode == 2 and "Usage" in proc.stderr


def test_scripts_are_clean_bash() -> None:
    scripts = sorted(SCRIPTS.glob("*.sh"))
    for script in scripts:
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
        assert "set -euo pipefail" in script.read_text() or script.name.startswith("_")
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    proc = subprocess.run(["shellcheck", "-x", *map(str, scripts)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout
