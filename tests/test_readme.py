"""README.md is a researcher's first five minutes (issue 48): at most 200 lines, every relative link leads to a
file, and its evidence block is exactly what femlm/study/headlines.py writes from the studies' files."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from femlm.study import headlines

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_has_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_of_the_readme_resolves() -> None:
    targets = [t for t in LINK.findall(README.read_text()) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert targets  # the README links its docs
    missing = [t for t in targets if not (REPO / t.split("#", 1)[0]).exists()]
    assert missing == []


def test_the_evidence_block_is_as_generated(tmp_path: Path) -> None:
    copy = tmp_path / "README.md"
    shutil.copy(README, copy)
    assert headlines.write_headlines(copy, REPO)
    assert copy.read_text() == README.read_text()
