"""Find and read the JSON results runs leave behind (the contracts of docs/architecture.md).

An input may be a run directory, a Hydra multirun sweep directory, any folder above them, or one result
file. Folders are searched recursively for ``results.json`` (fine-tuning), ``efficiency.json`` (checkpoint
sweeps), ``summary.json`` (pre-training) and ``analysis.json`` (gradient analysis). A file that cannot be
read is skipped with a note rather than failing the whole report: one killed run should not hide the rest.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.paper import normalise_task
from femlm.provenance import Provenance
from femlm.report.config import INPUTS
from femlm.runs import read_metrics

RESULT_FILES = {"results.json": "finetune", "efficiency.json": "efficiency", "summary.json": "pretrain",
                "analysis.json": "analysis"}
# Folders that never hold results but can be large (model weights, logs): not worth walking.
SKIP_DIRS = {"checkpoints", ".git", "__pycache__", "wandb", ".hydra", ".venv", "node_modules"}


@dataclass(frozen=True)
class Arm:
    """Which pre-training produced a checkpoint: the stage (none, scratch, continual) and its masking."""

    stage: str
    masking: str | None


@dataclass
class Scores:
    """One task's main metric (x100) for each fine-tuning seed, or the run's own aggregate when no seeds."""

    values: dict[str, float] = field(default_factory=dict)  # seed -> value
    aggregate: tuple[float, float | None, int] | None = None  # (mean, std, n)


@dataclass
class FinetuneResult:
    path: Path
    task: str  # the results.json task name as written
    main_metric: str
    eval_split: str
    pretrain: Provenance | None  # the checkpoint's femlm.json as results.json copied it
    scores: dict[str, Scores]  # report task key -> scores (MNLI may give matched and mismatched)
    raw: dict[str, Any]

    @property
    def arm(self) -> Arm:
        return arm_of(self.pretrain)

    @property
    def step(self) -> int | None:
        return self.pretrain.step if self.pretrain else None

    @property
    def num_masks(self) -> int | None:
        """K of the checkpoint's masking arm (femlm.json)."""
        return self.pretrain.num_masks if self.pretrain else None

    @property
    def ratio(self) -> float | None:
        """Masking ratio per split: femlm.json may not record it; the pre-training run's config.yaml does."""
        if not self.pretrain:
            return None
        value = self.pretrain.get("ratio")
        if value is None and self.pretrain.get("run_dir"):
            masking = _run_config(Path(str(self.pretrain["run_dir"])).expanduser()).get("masking")
            value = masking.get("ratio") if isinstance(masking, dict) else None
        return float(value) if isinstance(value, (int, float)) else None


@dataclass
class PretrainRun:
    path: Path  # summary.json
    summary: dict[str, Any]
    config: dict[str, Any]  # the run's resolved config.yaml ({} when absent)
    eval_curve: list[tuple[int, float]]  # (step, eval_loss) from metrics.jsonl
    info: dict[str, Any] = field(default_factory=dict)  # run.json (git commit, hardware)
    evals: list[dict[str, Any]] = field(default_factory=list)  # the whole eval records (counts, train_flops)

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def num_masks(self) -> int | None:
        """K of the run's masking (config.yaml): what tells the runs of a K sweep apart."""
        masking = self.config.get("masking")
        return _int(masking.get("num_masks")) if isinstance(masking, dict) else None


@dataclass
class AnalysisRun:
    path: Path  # analysis.json
    data: dict[str, Any]
    files: list[Path]  # PNG figures and CSV summaries it wrote


@dataclass
class Collection:
    finetune: list[FinetuneResult] = field(default_factory=list)
    efficiency: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    pretrain: list[PretrainRun] = field(default_factory=list)
    analysis: list[AnalysisRun] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: why" for files that could not be used
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.finetune) + len(self.efficiency) + len(self.pretrain) + len(self.analysis)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def arm_of(pretrain: dict[str, Any] | None) -> Arm:
    """The arm of a checkpoint from its femlm.json (None: a released checkpoint, no femlm pre-training)."""
    record = Provenance.of(pretrain)
    if not record:
        return Arm("none", None)
    return Arm(record.stage, record.masking)


def _walk(root: Path, exclude: Path | None) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        # Never read the report's own output folder back in (it may sit inside an input).
        dirs[:] = sorted(d for d in dirs
                         if d not in SKIP_DIRS and (exclude is None or (here / d).resolve() != exclude))
        for name in sorted(files):
            if name in RESULT_FILES:
                yield here / name


def _percent(values: list[float]) -> tuple[float, bool]:
    """Metrics are fractions in [-1, 1]; a run that already wrote percentages is left as it is."""
    if any(abs(v) > 1.0 for v in values):
        return 1.0, True
    return 100.0, False


def _split_task(task_key: str, split: str) -> str:
    # MNLI is one fine-tuning run with two dev sets; its mismatched numbers fill the MNLI-mm column.
    if task_key in ("mnli_m", "mnli_mm"):
        return "mnli_mm" if "mismatched" in split else "mnli_m"
    return task_key


def _finetune(path: Path, data: dict[str, Any]) -> FinetuneResult:
    task = str(data.get("task") or path.parent.name)
    metric = str(data.get("main_metric") or data.get("metric") or "")
    split = str(data.get("eval_split") or "dev")
    key = normalise_task(task)
    scores: dict[str, Scores] = {}
    if key is not None and metric:
        splits = [split]
        if key in ("mnli_m", "mnli_mm"):
            seen = {s for seed in data.get("seeds") or [] for s in seed if "mismatched" in s}
            splits += sorted(seen - {split})
        for name in splits:
            values: dict[str, float] = {}
            for i, seed in enumerate(data.get("seeds") or []):
                value = (seed.get(name) or {}).get(metric)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    values[str(seed.get("seed", i))] = float(value)
            target = _split_task(key, name)
            if values:
                factor, already = _percent(list(values.values()))
                scores[target] = Scores({s: v * factor for s, v in values.items()})
                continue
            agg = ((data.get("aggregate") or {}).get(name) or {}).get(metric)
            if isinstance(agg, dict) and isinstance(agg.get("mean"), (int, float)):
                factor, _ = _percent([float(agg["mean"])])
                std = agg.get("std")
                scores[target] = Scores(aggregate=(float(agg["mean"]) * factor,
                                                   float(std) * factor if isinstance(std, (int, float)) else None,
                                                   int(agg.get("n") or 0)))
    return FinetuneResult(path, task, metric, split, Provenance.of(data.get("pretrain")), scores, data)


def eval_records(run_dir: Path) -> list[dict[str, Any]]:
    """The eval records of a pre-training run's metrics.jsonl: step, eval_loss, eval_accuracy and the counts."""
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("eval_loss") is not None]


def _eval_curve(records: list[dict[str, Any]]) -> list[tuple[int, float]]:
    curve: list[tuple[int, float]] = []
    for record in records:
        loss, step = record.get("eval_loss"), record.get("step")
        if isinstance(loss, (int, float)) and isinstance(step, (int, float)) and math.isfinite(loss):
            curve.append((int(step), float(loss)))
    return sorted(curve)


def _run_info(run_dir: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


@functools.lru_cache(maxsize=256)
def _run_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    try:
        import yaml

        loaded = yaml.safe_load(path.read_text())
    except Exception:  # noqa: BLE001 - the config only adds detail to the scale statement
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _analysis_files(path: Path, data: dict[str, Any]) -> list[Path]:
    """Every PNG / CSV that analysis.json names (relative to its folder or absolute), else those beside it."""
    found: list[Path] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)
        elif isinstance(node, str) and node.lower().endswith((".png", ".csv")):
            candidate = Path(node) if Path(node).is_absolute() else path.parent / node
            if not candidate.is_file():
                candidate = path.parent / Path(node).name
            if candidate.is_file() and candidate not in found:
                found.append(candidate)

    visit(data)
    if not found:
        found = sorted(p for p in path.parent.iterdir() if p.suffix.lower() in (".png", ".csv"))
    return found


def read_file(path: Path, collection: Collection) -> None:
    """Read one result file into the collection (by its `kind`, else by its name)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        collection.skipped.append(f"{path}: unreadable JSON ({err})")
        return
    if not isinstance(data, dict):
        collection.skipped.append(f"{path}: not a JSON object")
        return
    kind = data.get("kind") or RESULT_FILES.get(path.name)
    if kind == "finetune":
        result = _finetune(path, data)
        if not result.scores:
            collection.skipped.append(f"{path}: task {result.task!r} / metric {result.main_metric!r} has no "
                                      "scores, or no table has that task")
        collection.finetune.append(result)
    elif kind == "efficiency":
        collection.efficiency.append((path, data))
    elif kind == "pretrain":
        evals = eval_records(path.parent)
        collection.pretrain.append(PretrainRun(path, data, _run_config(path.parent), _eval_curve(evals),
                                               _run_info(path.parent), evals))
    elif kind == "evaluate":
        # `femlm evaluate` scoring already fine-tuned checkpoints: no pre-training arm, no table cell.
        collection.notes.append(f"{path}: an evaluate run (scores of fine-tuned checkpoints), not tabulated")
    elif kind in ("analysis", "analyze") or path.name == "analysis.json":
        collection.analysis.append(AnalysisRun(path, data, _analysis_files(path, data)))
    else:
        collection.skipped.append(f"{path}: kind {kind!r} is not a femlm result")


def collect(inputs: list[str], exclude: Path | None = None) -> Collection:
    """Every result under `inputs`, each file once (inputs may overlap)."""
    missing = [str(i) for i in inputs if not Path(i).expanduser().exists()]
    if missing:
        raise UserError(f"report.inputs: {', '.join(missing)} not found; give {INPUTS}")
    exclude = exclude.resolve() if exclude is not None else None
    _run_config.cache_clear()  # run directories may have changed since an earlier report in this process
    seen: set[Path] = set()
    collection = Collection()
    for item in inputs:
        root = Path(item).expanduser()
        files = [root] if root.is_file() else list(_walk(root, exclude))
        for path in files:
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            read_file(path, collection)
    return collection


def run_config(run_dir: str | Path) -> dict[str, Any]:
    """The resolved config a run recorded (config.yaml), {} when it has none."""
    return _run_config(Path(run_dir).expanduser())
