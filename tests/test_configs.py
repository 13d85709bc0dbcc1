"""The configs: every option of every group composes for every command, a new arm is one file, typos fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from femlm.commands import COMMANDS
from femlm.compose import compose, compose_jobs, config_groups
from femlm.config import command_config, validate
from femlm.errors import UserError

# Options whose validation needs what a real run supplies (a checkpoint, inputs) are composed with it.
NEEDS = {"evaluate": ["evaluate.checkpoints=/tmp"], "report": []}


def _composes(command: str, choices: list[tuple[str, str]]) -> None:
    """Each (group, option) of `choices` composes and validates for `command`, and the command's defaults do."""
    # One Hydra initialisation for all of them, as a sweep composes its jobs (a failure names its job).
    configs = compose_jobs(command, [[f"{group}={option}", *NEEDS.get(command, [])] for group, option in choices])
    for (group, option), cfg in zip(choices, configs, strict=True):
        typed = validate(cfg, command)
        assert typed.command == command
        if group in typed.__dataclass_fields__ and hasattr(getattr(typed, group), "name"):
            assert getattr(typed, group).name == option, (command, group, option)
    plain = validate(compose(command, NEEDS.get(command, [])), command)
    assert set(command_config(plain, command)) >= set(COMMANDS[command].sections)


def test_every_option_of_every_group_composes_with_a_command_that_reads_it() -> None:
    """Each option once, with the first command (by name) whose config has its group; every command's defaults.
    The full command x option matrix (the same options again under each other command) is the slow tier's."""
    seen: set[tuple[str, str]] = set()
    for command in sorted(COMMANDS):
        groups = config_groups(command)
        for group, options in groups.items():
            assert options, f"{command}: group {group} has no options"
        choices = [(g, o) for g, options in groups.items() for o in options if (g, o) not in seen]
        seen.update(choices)
        _composes(command, choices)
    assert {"masking", "model", "task", "domain", "runtime", "preset"} <= {g for g, _ in seen}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_group_composes_for_every_command(command: str) -> None:
    _composes(command, [(group, option) for group, options in config_groups(command).items() for option in options])


def test_groups_are_what_each_command_reads() -> None:
    assert set(config_groups("continual-pretrain")) == {"model", "domain", "masking", "runtime", "preset"}
    assert set(config_groups("finetune")) == {"model", "task", "runtime", "preset"}
    assert "_glue" not in config_groups("finetune")["task"]  # shared blocks are not options


def test_experiment_plans_do_not_compose_into_a_command() -> None:
    """conf/experiment/ is read by the experiment runner alone: no command's config carries the plan."""
    for command in COMMANDS:
        assert "experiment" not in config_groups(command)
        assert not hasattr(validate(compose(command, NEEDS.get(command, [])), command), "experiment")
    with pytest.raises(UserError, match="continual-pretrain has no config group 'experiment'"):
        compose("continual-pretrain", ["experiment=tiny"])


def test_a_new_masking_arm_is_one_short_file(tmp_path: Path) -> None:
    (tmp_path / "masking").mkdir()
    (tmp_path / "masking" / "fe_subword_k8.yaml").write_text(
        "name: fe_subword_k8\nstrategy: fully_explored\nnum_masks: 8\nratio: 0.125\n")
    cfg = validate(compose("continual-pretrain", [f"hydra.searchpath=[file://{tmp_path}]",
                                                  "masking=fe_subword_k8"]), "continual-pretrain")
    assert (cfg.masking.name, cfg.masking.num_masks, cfg.masking.ratio) == ("fe_subword_k8", 8, 0.125)
    assert cfg.masking.mask_replace_prob == 0.8  # everything else from the schema


def test_a_typo_in_a_group_file_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "masking").mkdir()
    (tmp_path / "masking" / "typo.yaml").write_text("name: typo\nnum_mask: 8\n")
    with pytest.raises(UserError, match=r"masking.num_mask: no such key; did you mean masking.num_masks"):
        compose("continual-pretrain", [f"hydra.searchpath=[file://{tmp_path}]", "masking=typo"])


def test_tasks_take_labels_and_text_fields_from_the_registry() -> None:
    task = validate(compose("finetune", ["task=mrpc"]), "finetune").task
    assert task.text_fields == ["#1 String", "#2 String"] and task.labels == ["0", "1"]
    assert (task.epochs, task.max_length, task.patience) == (3, 128, None)  # the GLUE recipe block
    aclarc = validate(compose("finetune", ["task=aclarc"]), "finetune").task
    assert (aclarc.epochs, aclarc.max_length, aclarc.patience) == (10, 512, 3)  # DAPT's, the schema default
    assert validate(compose("finetune", ["task=stsb"]), "finetune").task.labels is None  # regression


def test_a_wrong_value_in_a_group_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    (tmp_path / "masking").mkdir()
    (tmp_path / "masking" / "badval.yaml").write_text("name: badval\nnum_masks: abc\n")
    with pytest.raises(UserError, match=r"^masking/badval.yaml: masking.num_masks='abc': expected an integer$"):
        compose("continual-pretrain", [f"hydra.searchpath=[file://{tmp_path}]", "masking=badval"])


def test_sweeps_expand_like_hydras_basic_sweeper() -> None:
    from femlm.compose import sweep_jobs

    assert sweep_jobs(["a=1,2", "b=x,y", "c=[1,2]"]) == [["a=1", "b=x", "c=[1,2]"], ["a=1", "b=y", "c=[1,2]"],
                                                         ["a=2", "b=x", "c=[1,2]"], ["a=2", "b=y", "c=[1,2]"]]
    assert sweep_jobs(["a=1", "a=2,3"]) == [["a=2"], ["a=3"]]  # a later value of a key replaces an earlier
    with pytest.raises(UserError, match="no viable alternative"):
        sweep_jobs(["a=[1"])


def test_composing_uses_only_hydras_public_modules() -> None:
    """A Hydra upgrade may move its private modules: femlm imports none."""
    import ast

    import femlm

    def modules(node: ast.AST) -> list[str]:
        if isinstance(node, ast.ImportFrom):
            return [node.module or ""]
        return [a.name for a in node.names] if isinstance(node, ast.Import) else []

    private = [f"{path.name}: {name}" for path in Path(femlm.__file__).parent.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text())) for name in modules(node)
               if name.startswith("hydra._internal")]
    assert not private
