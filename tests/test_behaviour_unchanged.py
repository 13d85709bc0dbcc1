"""The reorganised code computes what the old code computed: a tiny pipeline's numbers against the golden file.

tests/data/golden_tiny_run.json was written by tests/helpers/golden.py (its "recorded" field says when): first
before the configuration, model loading and training loop were reorganised (issue 14), which reproduced it; then
once more when corpora began to be split by content hash (issue 16). Same configs, same seed, same results: losses
and gradient norms to 1e-4 relative (fp32 kernels differ slightly between CPU models), counts and scores exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from helpers.golden import GOLDEN, run_pipeline


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def test_tiny_pipeline_matches_the_numbers_before_the_reorganisation(cli_in_process_with_hydra, tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())["numbers"]
    numbers = run_pipeline(tmp_path, cli_in_process_with_hydra)
    for stage in ("scratch", "continual", "finetune"):
        assert _close(numbers[stage], golden[stage]), f"{stage}: {numbers[stage]} != golden {golden[stage]}"
    assert len(numbers["scratch"]) == 9 and numbers["finetune"]["history"], "the run logged less than before"
