"""`make study-passes` (femlm/conf/experiment/study_passes.yaml, issue 28 item 3): a plan within its 3-hour budget."""

from __future__ import annotations

from pathlib import Path

from femlm import CONF_DIR
from femlm.study.plan import build_steps, check_plan, load_plan, planned_minutes


def test_the_passes_study_plan_builds_within_its_budget() -> None:
    plan = load_plan(name="study_passes")
    check_plan(plan)
    steps = build_steps(plan, Path("runs"))
    assert planned_minutes(steps) <= plan["estimate"]["budget_minutes"] == 180
    arms = plan["pretrain"]["arms"]
    assert arms == ["mlm_subword", "fe_passes_subword", "fe_subword"] and len(plan["pretrain"]["seeds"]) >= 5
    assert all((Path(CONF_DIR) / "masking" / f"{arm}.yaml").is_file() for arm in arms)
    assert sum(s.part == "pretrain" for s in steps) == 3 * 5 and not any(s.part == "decomposition" for s in steps)
    passes = [s for s in steps if s.part == "passes"]  # item 2 on the warm-up checkpoint, ratios 0.15 and 0.30
    assert [s.command[:2] for s in passes] == [["analyze", "passes"]] * 2
    assert [s.meta["variant"] for s in passes] == ["r15", "r30"]
    assert all("analysis.pool=32" in s.command for s in passes)  # at least 12 units: intervals are drawn
