"""The GPU study's device command and what it carries: one home for benchmarks/gpu_bundle.py (which prints them
with this checkout's commit) and the study's README (which shows them for the next window).

The command installs the carried wheels (never torch), runs the study inside a hard 8-minute limit (its own
deadline, `--budget-minutes`, ends the last seed earlier, cleanly), and packs what comes back: one archive of the
results folder (every kept seed, the gates, the windows; not the committed pre-flight beside them) and the warm-up
checkpoint in parts of at most 15 MiB
(files back from $OUT: at most 8, 16 MiB each).
"""

from __future__ import annotations

RUNS = "runs/study-gpu"
OUT = "results/study-gpu"
BUDGET_MINUTES = 7.5  # the study's deadline; `timeout 480` ends the command at 8 minutes whatever happens
INSTALL = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
           ".whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; ")


def carry_paths(warmup_kept: bool) -> list[str]:
    """What travels besides the tree: the wheels and the prepared data (the warm-up's corpus only while no warm-up
    checkpoint is kept: later windows do not train it)."""
    data = [f"{RUNS}/data/{p}" for p in ("data.json", "tokenizer", "arms", "mirror")]
    return [".whl", *data, *([] if warmup_kept else [f"{RUNS}/data/warmup"])]


def study_command(commit: str) -> str:
    """The device command for one window (`commit`: the checkout's, -dirty when it has uncommitted changes)."""
    pack = (f"tar czf $OUT/study-gpu.tar.gz --exclude={OUT}/warmup/checkpoint --exclude={OUT}/preflight {OUT}; "
            f"if [ -d {OUT}/warmup/checkpoint ]; then tar cf - {OUT}/warmup/checkpoint | "
            "split -b 15m - $OUT/warmup-checkpoint.tar.part-; fi")
    return (f"set -o pipefail; export PYTHONUNBUFFERED=1 FEMLM_GIT_COMMIT={commit}; " + INSTALL
            + f"timeout 480 python3 -m femlm.experiment study_gpu --budget-minutes {BUDGET_MINUTES:g} 2>&1 "
            f"| tee $OUT/study_gpu.log; rc=$?; {pack}; exit $rc")


AFTER = (f"after the window, in the checkout: `tar xzf <files_at>/study-gpu.tar.gz`; the first window also "
         f"`cat <files_at>/warmup-checkpoint.tar.part-* | tar xf -`; then `python -m femlm.experiment study_gpu "
         f"--results-only` and commit {OUT}/ (the warm-up checkpoint too: later windows carry it, checked against "
         "the sha256 in warmup.json)")
