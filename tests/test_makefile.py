"""`make help` is generated from the `## ` comments on the Makefile's targets: every target documents itself."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_make_help_lists_every_target_with_its_comment() -> None:
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    text = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*?)(?<!\\)$", text, re.M | re.S).group(1).replace("\\\n", " ").split()
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = dict(line.strip().split(None, 1) for line in proc.stdout.splitlines())
    assert set(listed) == set(phony), "every phony target has a `## ` comment, and only those are listed"
    comment = re.search(r"^reproduce-continual:.*## (.*)$", text, re.M).group(1)
    assert listed["reproduce-continual"] == comment.strip()
    first = re.search(r"^([a-zA-Z0-9_-]+):", text, re.M).group(1)
    assert first == "help"  # a bare `make` prints the help


@pytest.mark.parametrize(("old", "new", "command"), [
    ("reproduce-table2", "reproduce-continual", "-m femlm.experiment continual_cs continual_news --plan"),
    ("reproduce-table1", "reproduce-glue", "-m femlm.experiment glue --plan"),
    ("reproduce-table3", "reproduce-glue-average", "-m femlm.experiment glue --out results/paper/glue_average --plan"),
])
def test_the_tables_old_targets_run_what_the_new_names_run(old: str, new: str, command: str) -> None:
    """`make reproduce-table2` (how users were told to reproduce the continual table) keeps working: an alias."""
    if shutil.which("make") is None:
        pytest.skip("make not installed")

    def planned(target: str) -> list[str]:
        proc = subprocess.run(["make", "-n", "-s", "-C", str(REPO), target, "ARGS=--plan"], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return [line for line in proc.stdout.splitlines() if "femlm.experiment" in line]

    assert planned(old) == planned(new) and len(planned(new)) == 1 and planned(new)[0].endswith(command)
