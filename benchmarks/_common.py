"""What the benchmarks share: the repository on sys.path, composed configs, and the tests' tiny inputs.

A benchmark runs as a script (`python benchmarks/bench_x.py`), so it puts the repository root (femlm) and tests/
(`helpers`: synthetic blocks, a tiny tokenizer) on sys.path before importing them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def config(command: str, *overrides: str) -> Any:
    """The validated FemlmConfig of `femlm <command> <overrides>`, as the CLI composes it."""
    from femlm.compose import compose
    from femlm.config import validate

    return validate(compose(command, list(overrides)), command)
