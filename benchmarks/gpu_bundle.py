"""Prepare this checkout for one GPU study window on a device machine that reaches no network, and print the
exact command, with the paths to carry and the size of what travels.

The machine (one H100 or H200; Python 3.12, manylinux x86_64) has torch, transformers, typer, scipy, matplotlib,
statsmodels, pyyaml, pyarrow and pandas, not hydra-core, omegaconf, antlr4-python3-runtime, datasets, dill or
multiprocess, nor the data mirror. This script, run on the CPU machine beside the mirror:

1. prepares the study's data (femlm.study.gpu_data.prepare: the vocabulary, the warm-up's and the arms' corpora
   as uint16 token files, the downstream tasks' files) into runs/study-gpu/data (git-ignored), reused when the
   experiment file's settings are unchanged;
2. downloads the missing wheels into .whl/ (git-ignored): pure-Python or cp312 manylinux wheels, and builds
   antlr4-python3-runtime 4.9.3 (no wheel on PyPI) with `pip wheel`; wheels already there are kept;
3. prints the size of the copy the device machine receives (tracked and untracked-not-ignored files, plus the
   carried paths: the warm-up's corpus only while no warm-up checkpoint is kept in results/study-gpu/warmup/),
   which must stay under 64 MiB, and names a tree with uncommitted changes as dirty (its results would name
   <commit>-dirty);
4. prints the study's command: `python -m femlm.experiment study_gpu` inside a hard 8-minute limit, then one
   archive of results/study-gpu (every kept seed, the gates, the windows) and the warm-up checkpoint in parts
   of <= 15 MiB (files back from $OUT: at most 8, 16 MiB each).

After the window, on the CPU, in the checkout: `tar xzf <files_at>/study-gpu.tar.gz`, then (the first window:
the warm-up's checkpoint) `cat <files_at>/warmup-checkpoint.tar.part-* | tar xf -`, then
`python -m femlm.experiment study_gpu --results-only` and commit results/study-gpu/ (the checkpoint too: later
windows carry it, checked against the sha256 in warmup.json).

Usage: FEMLM_MIRROR=../shared/data python benchmarks/gpu_bundle.py [--no-wheels] [--no-data] [--smoke]
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
WHEELS = ("hydra-core", "omegaconf", "datasets", "dill", "multiprocess")
BUILD = ("antlr4-python3-runtime",)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
LIMIT = 64 * 2**20


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
        files += [p for p in (REPO / path).rglob("*") if p.is_file()] if (REPO / path).is_dir() else [REPO / path]
    return sum(p.stat().st_size for p in files if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-wheels", action="store_true", help="do not download or build the wheels")
    ap.add_argument("--no-data", action="store_true", help="do not prepare the study's data (runs/study-gpu/data)")
    ap.add_argument("--smoke", action="store_true", help="--no-wheels --no-data: the sizes and the commands only")
    args = ap.parse_args(argv)
    if args.smoke:
        args.no_wheels = args.no_data = True
    from femlm.errors import UserError
    from femlm.experiment.schema import load
    from femlm.study import gpu_data
    from femlm.study.gpu_command import AFTER, INSTALL, OUT, RUNS, carry_paths, study_command

    try:
        exp = load("study_gpu")
        if not args.no_data:
            print(gpu_data.prepare(exp, REPO / RUNS), flush=True)
        if not args.no_wheels:
            wheels(REPO / ".whl")
    except UserError as err:
        print(f"femlm: error: {err}", file=sys.stderr)
        return 2
    kept = (REPO / OUT / "warmup" / "checkpoint").is_dir()
    carry = carry_paths(kept)
    size = carried_size([c for c in carry if (REPO / c).exists()])
    missing = [c for c in carry if not (REPO / c).exists()]
    from femlm.runs import git_commit

    sha = git_commit(REPO)  # "-dirty" when tracked files have uncommitted changes (the device copy has no .git)
    print(f"the copy for the device machine: {size / 2**20:.1f} MiB (limit {LIMIT / 2**20:.0f} MiB); the warm-up "
          + ("checkpoint is kept in the tree (carried)" if kept else "trains in this window (its corpus carried)")
          + (f"; not there yet: {', '.join(missing)}" if missing else ""))
    if sha.endswith("-dirty"):
        print(f"the tree is DIRTY: commit first, or the results name {sha}", file=sys.stderr)
    if size > LIMIT:
        print("too large: remove untracked files the study does not need", file=sys.stderr)
        return 1
    print(f"\nthe study (one command, timeout_s=600; carry {carry}):\n  {study_command(sha)}")
    check = INSTALL + f"python3 benchmarks/gpu_check.py --out $OUT/gpu --commit {sha}"
    print(f"\ngpu-check (its own window; carry ['.whl']):\n  {check}")
    print(f"\n{AFTER}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
