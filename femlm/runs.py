"""Run directories: one per run, never shared.

Hydra chooses the directory (``hydra.run.dir`` / ``hydra.sweep.dir``, see ``conf/hydra/default.yaml``); this
module fills it with what a reader needs to trust the numbers inside: the resolved config, the git commit
of the code, the package versions, and ``metrics.jsonl`` (one JSON object per line, appended as the run
goes, so any tool can read a run that is still going or was killed).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from femlm.errors import UserError
from femlm.outputs import finite

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("femlm", "torch", "transformers", "datasets", "tokenizers", "hydra-core", "omegaconf",
            "numpy", "scikit-learn", "scipy", "wandb", "accelerate")
RUN_MARKER = "run.json"


def git_commit(root: Path = REPO_ROOT) -> str:
    """The commit of the code that produced a run, with ``-dirty`` when the tree has local changes; a copy
    without .git (a device machine's) reports $FEMLM_GIT_COMMIT, as the command that sent it named it."""
    if not (Path(root) / ".git").exists() and os.environ.get("FEMLM_GIT_COMMIT"):
        return os.environ["FEMLM_GIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


# The widest matrix instructions a CPU has, best first: virtual machines often report only "AMD EPYC", and two
# such machines (AVX2 only vs AVX512-BF16) differ ~30x in bf16 speed, so the name alone cannot key timings.
_MATRIX_ISA = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")


def _cpuinfo() -> tuple[str, set[str]]:
    """The first CPU's model name and flags (Linux /proc/cpuinfo; elsewhere "" and none)."""
    name, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def cpu_isa() -> str | None:
    """The CPU's widest matrix instructions (amx_bf16, avx512_bf16, avx512f or avx2), None where unknown."""
    return next((f for f in _MATRIX_ISA if f in _cpuinfo()[1]), None)


def cpu_model() -> str:
    """The CPU's model name and its widest matrix instructions, e.g. "AMD EPYC [avx512_bf16]" (Linux
    /proc/cpuinfo, else what platform knows): every timing is stated with it."""
    name = _cpuinfo()[0] or platform.processor() or platform.machine() or "unknown CPU"
    isa = cpu_isa()
    return f"{name} [{isa}]" if isa else name


def hardware() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"cpu": cpu_model(), "platform": platform.platform(), "cpus": os.cpu_count(),
                            "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


# What every result folder records of the runs behind it (femlm report's report.json and tables' meta.json, the
# studies' study.json): `environment_of` reads it from the runs, `environment_line` is its README line.
LINE_PACKAGES = ("python", "torch", "transformers", "tokenizers", "numpy")


def _load_json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _device(hw: dict[str, Any]) -> str | None:
    gpus = hw.get("gpus")
    if gpus:
        return ", ".join(sorted(set(map(str, gpus))))
    return hw.get("cpu")


def environment_of(run_dirs: list[Path]) -> dict[str, Any]:
    """What made the runs in `run_dirs`, from their run.json (packages, hardware, threads) and summary.json or
    results.json (precision; a pre-training run's corpus counts and sha256 and its vocabulary's sha256). Each
    value is the sorted list of the distinct values the runs recorded (two entries: the runs disagree);
    `not_recorded` names what no run recorded (runs made before femlm recorded it)."""
    packages: dict[str, set[str]] = {}
    found: dict[str, set[Any]] = {"device": set(), "threads": set(), "precision": set(), "vocabulary_sha256": set(),
                                  "git_commit": set()}
    corpora: dict[str, list[dict[str, Any]]] = {}
    dirs = sorted({Path(d) for d in run_dirs})
    for run_dir in dirs:
        info = _load_json(run_dir / RUN_MARKER)
        result = _load_json(run_dir / "summary.json") or _load_json(run_dir / "results.json")
        for name, version in (info.get("packages") or {}).items():
            packages.setdefault(name, set()).add(str(version))
        hw = info.get("hardware") or result.get("hardware") or {}
        if isinstance(hw, dict):
            found["device"].add(_device(hw))
            found["threads"].add(hw.get("torch_threads"))
        found["threads"].add(result.get("threads"))
        recipe = result.get("recipe") if isinstance(result.get("recipe"), dict) else {}
        found["precision"].add(result.get("precision") or recipe.get("precision"))  # pre-training's or fine-tuning's
        found["vocabulary_sha256"].add(result.get("vocabulary_sha256"))
        found["git_commit"].add(info.get("git_commit"))
        corpus = result.get("corpus")
        # the corpus plan of a pre-training summary ("splits"), or femlm prepare's summary (splits at the top)
        splits = (corpus.get("splits") or corpus) if isinstance(corpus, dict) else {}
        if isinstance(splits.get("train"), dict):
            record = {s: {k: splits[s].get(k) for k in ("documents", "tokens", "blocks")}
                      for s in ("train", "validation") if isinstance(splits.get(s), dict)}
            record["sha256"] = corpus.get("sha256")
            domain = str(result.get("domain") or corpus.get("domain") or "?")
            if record not in corpora.setdefault(domain, []):
                corpora[domain].append(record)
    env: dict[str, Any] = {"runs": len(dirs), "packages": {k: sorted(v) for k, v in sorted(packages.items())}}
    env.update({k: sorted(v - {None}, key=str) for k, v in found.items()})
    env["corpora"] = corpora
    missing = [k for k in ("packages", "device", "threads", "precision", "vocabulary_sha256") if not env[k]]
    if not any(r.get("sha256") for records in corpora.values() for r in records):
        missing.append("corpus sha256")
    env["not_recorded"] = missing
    return env


def environment_under(root: str | Path) -> dict[str, Any]:
    """`environment_of` every run directory under `root` (a study's runs_dir; an absent one: no runs)."""
    root = Path(root)
    return environment_of([p.parent for p in root.rglob(RUN_MARKER)] if root.is_dir() else [])


def environment_line(env: dict[str, Any]) -> str:
    """One README line naming what made a result folder (`environment_of`'s record; full values in the meta)."""
    def one(values: list[Any]) -> str:
        return " / ".join(map(str, values)) if values else "not recorded"

    pk = env.get("packages") or {}
    parts = [", ".join(f"{name} {one(pk.get(name, []))}" for name in LINE_PACKAGES)]
    parts.append(f"{one(env.get('device', []))}, {one(env.get('threads', []))} threads, precision "
                 f"{one(env.get('precision', []))}")
    corpora = [f"{domain} {one([(r.get('sha256') or {}).get('train', 'not recorded')[:12] for r in records])}"
               for domain, records in sorted((env.get("corpora") or {}).items())]
    parts.append("corpus train.bin sha256 " + ("; ".join(corpora) or "not recorded"))
    parts.append("vocabulary sha256 " + one([v[:12] for v in env.get("vocabulary_sha256", [])]))
    missing = f" Not recorded by these runs: {', '.join(env['not_recorded'])}." if env.get("not_recorded") else ""
    return f"**Environment** ({env.get('runs', 0)} runs): " + "; ".join(parts) + "." + missing


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)



def read_metrics(metrics_path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``; a line torn by a kill mid-write is skipped."""
    records = []
    if metrics_path.is_file():
        for line in metrics_path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


@dataclass
class Run:
    """A run's directory and its metric log. Only the main process (rank 0) writes."""

    dir: Path
    command: str
    is_main: bool = True
    created: bool = True  # False when continuing an earlier run (resume): never delete it on error
    started: float = field(default_factory=time.time)
    # Resume: the files start_run rewrote (run.json, config.yaml) as they were, and a digest of metrics.jsonl,
    # so that a resume refused before it did anything leaves the earlier run exactly as it was.
    previous: dict[str, bytes | None] = field(default_factory=dict)
    metrics_digest: str | None = None

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.jsonl"

    def log(self, **record: Any) -> None:
        """Append one record to ``metrics.jsonl``; non-finite floats are written as null."""
        if not self.is_main:
            return
        clean = finite(record)
        clean.setdefault("time", round(time.time() - self.started, 3))
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(clean, default=_json_default) + "\n")

    def write_json(self, name: str, payload: Any) -> Path:
        """Write ``name`` in the run directory atomically (temp file + rename)."""
        path = self.dir / name
        if self.is_main:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
            os.replace(tmp, path)
        return path

    def discard(self) -> None:
        """Remove a run directory that a failed start left behind (never an earlier run's). A resumed run that
        failed before it logged anything gets its earlier run.json and config.yaml back."""
        if not self.is_main or not self.dir.exists():
            return
        if self.created:
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self.previous and self.metrics_digest == _digest(self.metrics_path):
            for name, content in self.previous.items():
                path = self.dir / name
                if content is None:
                    path.unlink(missing_ok=True)
                    continue
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_bytes(content)
                os.replace(tmp, path)


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def launcher_job_of(run_dir: Path) -> str | None:
    """The launcher job id a run directory's run.json records (None: none, or no run there)."""
    try:
        return json.loads((Path(run_dir) / RUN_MARKER).read_text()).get("launcher_job")
    except (OSError, ValueError):
        return None


def is_finished(run_dir: Path) -> bool:
    """Whether the run in `run_dir` ran to its end (every command that finishes writes summary.json or
    results.json last)."""
    return any((Path(run_dir) / name).is_file() for name in ("summary.json", "results.json"))


def made_by() -> dict[str, Any]:
    """What run.json records of the code and machine behind a run (environment_of reads it back)."""
    return {"git_commit": git_commit(), "packages": package_versions(), "hardware": hardware()}


def start_run(config: dict[str, Any], run_dir: Path, command: str, is_main: bool = True, resume: bool = False,
              launcher_job: str | None = None) -> Run:
    """Prepare ``run_dir`` for a new run (or an explicit resume of the run already in it); ``config`` is the
    resolved config of the command's own sections (femlm.config.command_config). ``launcher_job``: the id of the
    launcher's job (submitit's), recorded in run.json so that the job, requeued into this directory, finds it
    (``launcher_job_of``)."""
    run_dir = Path(run_dir)
    marker = run_dir / RUN_MARKER
    if marker.exists() and not resume and is_main:
        # Hydra picked a directory that another run already owns: refuse rather than mix two runs. (Not asked
        # of ranks > 0: under srun every task of a job is given the job's directory, which rank 0 may have
        # marked already.)
        raise UserError(f"run directory {run_dir} already holds a run; choose another hydra.run.dir "
                        "or pass resume=true to continue it")
    run = Run(dir=run_dir, command=command, is_main=is_main, created=not marker.exists())
    if not is_main:
        return run
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"output directory {run_dir} is not writable ({err.strerror}); "
                        "set hydra.run.dir or FEMLM_RUNS to a writable directory") from None
    if resume and marker.exists():
        run.previous = {name: (run_dir / name).read_bytes() if (run_dir / name).is_file() else None
                        for name in (RUN_MARKER, "config.yaml")}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    info = {"command": command, "argv": sys.argv, **made_by(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if launcher_job is not None:
        info["launcher_job"] = launcher_job
    if resume and marker.exists():
        previous = json.loads(marker.read_text())
        info["resumed_from"] = previous.get("resumed_from", []) + [previous.get("started")]
    run.write_json(RUN_MARKER, info)
    run.metrics_path.touch()
    run.metrics_digest = _digest(run.metrics_path)
    return run
