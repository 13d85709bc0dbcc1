"""Prepare this checkout for one command on a GPU machine that reaches no network, and print that command.

The machine (one H100; Python 3.12, manylinux x86_64) has torch, transformers, typer, scipy, matplotlib,
statsmodels and pyyaml, not hydra-core, omegaconf or antlr4-python3-runtime, nor the data mirror or `datasets`.
This script, run on the CPU machine beside the mirror:

1. prepares the GPU study's corpus (femlm.study.gpu.prepare: the WordPiece vocabulary and the token blocks) into
   runs/study-gpu/data (git-ignored, like every runs/ folder);
2. downloads the missing wheels into .whl/ (git-ignored by .gitignore): hydra-core and omegaconf as cp312
   manylinux-or-pure wheels, and builds antlr4-python3-runtime 4.9.3 (it has no wheel on PyPI) with `pip wheel`;
   wheels already there are kept (nothing is downloaded twice);
3. checks that the copy the device machine receives (tracked and untracked-not-ignored files, plus the carried
   .whl/ and runs/study-gpu/data) stays under 64 MiB;
4. prints the device command for the study (`python -m femlm.experiment study_gpu`; its results and runs packed into
   ONE archive under $OUT, since at most 8 files come back), for `python benchmarks/gpu_check.py`, and for both in
   one call (gpu-check's paper shapes, then the study with `--budget-minutes` for what is left), each with the
   paths to carry.

After the run, on the CPU: `tar xzf <files_at>/study-gpu.tar.gz` in the checkout, then
`python -m femlm.experiment study_gpu --results-only` rewrites results/study-gpu/ (the GPU run writes it too).

Usage: FEMLM_MIRROR=../shared/data python benchmarks/gpu_bundle.py [--no-wheels] [--no-data]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The versions installed here (the ones femlm's tests ran with): pure-Python wheels on PyPI, and antlr4's sdist.
WHEELS = ("hydra-core", "omegaconf")
BUILD = ("antlr4-python3-runtime",)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
LIMIT = 64 * 2**20
DATA = "runs/study-gpu/data"
INSTALL = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
           ".whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; ")


def have(folder: Path, name: str, version: str) -> bool:
    stem = name.replace("-", "_").lower()
    return any(p.name.lower().startswith(f"{stem}-{version}") for p in folder.glob("*.whl"))


def wheels(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    for name in WHEELS:
        version = metadata.version(name)
        if not have(folder, name, version):
            plats = [a for p in PLATFORMS for a in ("--platform", p)]
            subprocess.run([*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                            "--implementation", "cp", *plats, "-d", str(folder), f"{name}=={version}"], check=True)
    for name in BUILD:
        version = metadata.version(name)
        if not have(folder, name, version):
            subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(folder), f"{name}=={version}"], check=True)


def carried_size(extra: list[str]) -> int:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = [REPO / f for f in listed if f]
    for path in extra:
        files += [p for p in (REPO / path).rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-wheels", action="store_true", help="do not download or build the wheels")
    ap.add_argument("--no-data", action="store_true", help="do not prepare runs/study-gpu/data")
    ap.add_argument("--smoke", action="store_true", help="--no-wheels --no-data: the plan and the commands only")
    args = ap.parse_args(argv)
    if args.smoke:
        args.no_wheels = args.no_data = True
    from femlm.errors import UserError
    from femlm.experiment.schema import load
    from femlm.study.gpu import prepare
    from femlm.study.gpu_plan import make_plan

    try:
        exp = load("study_gpu")
        if not args.no_data:
            print(prepare(dict(exp.raw), REPO / "runs" / "study-gpu"), flush=True)
        if not args.no_wheels:
            wheels(REPO / ".whl")
        from femlm.study.gpu import data_counts

        print(make_plan(dict(exp.raw), REPO, *data_counts(REPO / "runs" / "study-gpu")).text())
    except UserError as err:
        print(f"femlm: error: {err}", file=sys.stderr)
        return 2
    carry = [".whl", DATA]
    size = carried_size([c for c in carry if (REPO / c).exists()])
    print(f"the copy for the device machine: {size / 2**20:.1f} MiB (limit {LIMIT / 2**20:.0f} MiB)")
    if size > LIMIT:
        print("too large: remove untracked files the study does not need", file=sys.stderr)
        return 1
    tar = "tar czf $OUT/study-gpu.tar.gz --exclude=runs/study-gpu/data results/study-gpu runs/study-gpu"
    study = INSTALL + f"python3 -m femlm.experiment study_gpu; rc=$?; {tar}; exit $rc"
    # The device copy has no .git: name the commit measured here, so results.json records it.
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() or "unknown"
    check = INSTALL + f"python3 benchmarks/gpu_check.py --out $OUT/gpu --commit {commit}"
    # Both in one 10-minute call, as on 2026-11-27 (a session's device time is 15 minutes, start-up included):
    # gpu-check's paper shapes under a hard limit, then the study fitted to what is left; every part logs to $OUT.
    both = ("set -o pipefail; export PYTHONUNBUFFERED=1 FEMLM_GIT_COMMIT=" + commit + "; " + INSTALL
            + "timeout 360 python3 benchmarks/gpu_check.py --out $OUT/gpu --commit $FEMLM_GIT_COMMIT --budget-s 330 "
            "2>&1 | tee $OUT/gpu_check.log; timeout 215 python3 -m femlm.experiment study_gpu --budget-minutes 3.2 "
            f"2>&1 | tee $OUT/study_gpu.log; {tar}")
    print(f"\nthe study (one command, timeout_s=600; carry {carry}):\n  {study}")
    print(f"\ngpu-check (its own window; carry ['.whl']):\n  {check}")
    print(f"\nboth in one call (timeout_s=598; carry {carry}; ~9.5 min):\n  {both}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
