"""Every script in benchmarks/ runs in its small mode (`--smoke`, seconds): a refactor that breaks one fails here.

The figures of a smoke run mean nothing (1-layer models, a step or two); only that the script runs to its last
line is checked. A new benchmark needs a `--smoke` mode and its last line's pattern below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_")) + \
    [REPO / "benchmarks" / "gpu_window.sh"]
MIRROR = REPO.parent / "shared" / "data"
# script -> (a pattern its output must contain, whether it reads the data mirror)
EXPECTED = {
    "bench_compile.py": (r"step s eager=\S+ compiled=\S+ ratio=", False),
    "bench_corpus.py": (r"femlm / run_mlm.py tokens/s: .*\n(.*\n)*RSS big - small: ", True),
    "bench_data.py": (r"speed-up cold vs run_mlm.py-style: ", True),
    "bench_masking.py": (r"fe_subword +4 .*\n(.*\n)*FE across passes as the trainer builds it .*\n(.*\n)*"
                         r"fe_passes_span +\S+ +\S+x +\S+ ms +\S+x +yes\n(.*\n)*tiny BERT .* AdamW step", False),
    "bench_memory.py": (r"memory flat: (yes|no)", False),
    "bench_precision.py": (r"\[smoke b=4 L=32\] step s fp32=\S+ bf16=\S+ speed-up=", False),
    "bench_save.py": (r"step s: median .*\n(.*\n)*signal_delay_s >= \d+ \(step \S+ s \+ milestone save ", False),
    "bench_study.py": (r"estimate.seconds: \{train_row: .*head_row: .*ft_train_example_aclarc: .*gradient_row: ",
                       True),
    "bench_train.py": (r"tokens/s femlm=\d+ hf=\d+ ratio=", False),
    "attention_probe.py": (r"\[compiled, torch's automatic choice\] step .* bmm x\d+, fused forward x\d+ backward x\d+ "
                           r"for 2 layers(.*\n)*\[eager, flash forced\] (.*\n)*dropout applied, eager math: 0\.\d+ "
                           r"\(asked 0\.1\)(.*\n)*attention probe done in ", False),
    "gpu_check.py": (r"TF32: runtime.tf32=True as runtime=gpu sets it.*\n(.*\n)*"
                     r"  plan: \[continual b=4 L=64 eager\] .*\n(.*\n)*"
                     r"losses cpu bf16 vs cpu fp32 .* agree: yes\n(.*\n)*"  # before the benchmark: a cut run keeps it
                     r"\[continual b=4 L=64 eager\] graphs=0 recompiles=0 compile_s=\S+\n"
                     r"\[continual b=4 L=64 eager\] hf graphs=0 .*; hf with femlm's kernels compile_s=\S+\n"
                     r"\[continual b=4 L=64 eager\] host syncs: \S+ per step .*\n"
                     r"\[continual b=4 L=64 eager\] tokens/s femlm=\d+ hf=\d+ ratio=\S+ mfu=\S+ .*\n"
                     r"\[continual b=4 L=64 eager\] block timing \(2 steps per sync\): tokens/s femlm=\d+ hf=\d+ "
                     r"hf_femlm_attention=\d+ .*\n"
                     r"\[continual b=4 L=64 eager\] attention ops \(profiled step\): femlm: .*bmm x\d+.*; hf: .*bmm.*; "
                     r"hf with femlm's kernels: .*bmm.*\n(.*\n)*"
                     r"\[scratch b=8 L=64 \(femlm micro 4, HF micro 4\) eager\] tokens/s (.*\n)*"
                     r"\[fe_k4 b=4 L=64 fe_k4 eager\] tokens/s (.*\n)*"
                     r"\[fe_passes b=4 L=64 fe_passes eager\] tokens/s (.*\n)*"
                     r"\[study b=16 L=64 fe_passes_subword eager\] block timing (.*\n)*gpu-check ok in ", False),
    "gpu_bundle.py": (r"the copy for the device machine: .* MiB(.*\n)*the study .*\n.*timeout 480 python3 -m femlm\.experiment "
                      r"study_gpu --budget-minutes 7\.5 (.*\n)*gpu-check .*\n.*gpu_check\.py --out \$OUT/gpu "
                      r"--commit ", False),
    # issue 46's prepared GPU call: the probe, then gpu-check's 48 x 512 and study rows, into one folder
    "gpu_window.sh": (r"attention probe done in .*\n(.*\n)*\[study b=16 L=64 fe_subword eager\] tokens/s (.*\n)*"
                      r"\[continual b=4 L=64 eager\] block timing (.*\n)*gpu-check ok in (.*\n)*"
                      r"gpu window: \d+ s, exit status 0; wrote \S+-\d{4}-\d\d-\d\d", False),
    "paper_shapes.py": (r"\[bert_base\] step s: ", True),
    "span_stats.py": (r"FE-span K=8 r=0.125 ", True),
    "wholeword_law.py": (r"FE new: p=.* P\(conflict\)=\S+ (.*\n)*timing, \d+ rows, K 6: old ", True),
}


def test_every_benchmark_has_a_smoke_check() -> None:
    assert {p.name for p in BENCHMARKS} == set(EXPECTED)


# Smoke runs of 10 s or more (2 loaded cores) run in the slow tier (`make test-all`); docs/testing.md.
SLOW = {"attention_probe.py", "bench_compile.py", "bench_corpus.py", "bench_data.py", "bench_masking.py",
        "bench_memory.py", "bench_precision.py", "bench_study.py", "gpu_check.py", "gpu_window.sh", "paper_shapes.py",
        "span_stats.py", "wholeword_law.py"}


@pytest.mark.parametrize("script", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW else p
                                    for p in BENCHMARKS], ids=lambda p: p.stem)
def test_benchmark_smoke(script: Path, tmp_path: Path) -> None:
    pattern, needs_mirror = EXPECTED[script.name]
    if needs_mirror and not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
           "FEMLM_CACHE": str(tmp_path / "cache"), "FEMLM_RUNS": str(tmp_path / "runs"), "WANDB_MODE": "disabled",
           "OMP_NUM_THREADS": "1", "FEMLM_BENCH_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if MIRROR.is_dir():
        env["FEMLM_MIRROR"] = str(MIRROR)
    command = ["bash", str(script)] if script.suffix == ".sh" else [sys.executable, str(script)]
    if script.suffix == ".sh":
        env.update(PYTHON=sys.executable, OUT=str(tmp_path / "out"))
    proc = subprocess.run([*command, "--smoke"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"{script.name} --smoke failed:\n{proc.stderr[-3000:]}"
    assert re.search(pattern, proc.stdout), f"{script.name} --smoke printed:\n{proc.stdout[-3000:]}"
