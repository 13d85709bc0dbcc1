"""How GPU windows add up to one study: the study code's fingerprint, the seed records, the one revision of N.

* **Study code.** A seed's numbers depend on femlm's training loop, masks, model and runtime code and on the
  pinned runtime (attention kernel, compile, precision) and packages; `study_code` fingerprints all of them (the
  code by its syntax tree without docstrings, so a comment or a docstring does not count). Seeds of different
  fingerprints are never pooled: a window whose fingerprint differs from the seeds already kept refuses to run.
* **Seeds.** `<out>/seeds/seed_<s>/seed.json` (and each arm's summary, metrics, config and run.json beside it) is
  written once every arm (and its downstream runs) finished, by renaming a finished folder: a seed cut by the
  window's deadline leaves nothing and runs again, whole, in the next window. A seed whose arm failed its gate is
  kept as failed: counted, shown, never replaced.
* **Revision.** Once, after the first window that ends with at least `revision.min_seeds` complete seeds, N is
  recomputed from the larger paired SD of the confirmatory comparisons (never the mean), only upward, and
  recorded in `<out>/revision.json`; it is never revised again.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
from pathlib import Path
from statistics import stdev
from typing import Any

from femlm.errors import UserError
from femlm.study.collect import read_json

CODE = ("femlm/train", "femlm/masking", "femlm/models", "femlm/runtime", "femlm/data/tokens.py")
REPO = Path(__file__).resolve().parents[2]


def _syntax(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(tree, annotate_fields=False)


def study_code(runtime: Any, root: Path = REPO) -> dict[str, Any]:
    """The fingerprint of what makes a seed's numbers, and its parts (for a reader who compares two)."""
    from femlm.runs import package_versions

    files = sorted(p for entry in CODE for p in ((root / entry).rglob("*.py") if (root / entry).is_dir()
                                                   else [root / entry]))
    code = hashlib.sha256()
    for path in files:
        code.update(str(path.relative_to(root)).encode() + b"\0" + _syntax(path).encode() + b"\0")
    versions = package_versions()
    pinned = {"sdpa_backend": str(runtime.sdpa_backend), "compile": bool(runtime.compile),
              "precision": str(runtime.precision), "torch": versions.get("torch"),
              "transformers": versions.get("transformers")}
    whole = hashlib.sha256((code.hexdigest() + json.dumps(pinned, sort_keys=True)).encode()).hexdigest()
    return {"sha256": whole, "code_sha256": code.hexdigest(), "files": len(files), **pinned}


# ---------------------------------------------------------------------------------------------- seeds
def seed_dir(out: Path, seed: int) -> Path:
    return out / "seeds" / f"seed_{seed:03d}"


def records(out: Path) -> list[dict[str, Any]]:
    """Every kept seed's record (complete or failed), by seed."""
    found = []
    for path in sorted((out / "seeds").glob("seed_*/seed.json")):
        found.append(json.loads(path.read_text()))
    return sorted(found, key=lambda r: r["seed"])


def check_pooling(out: Path, code: dict[str, Any], warmup_sha256: str | None) -> None:
    """Refuse a window whose study code or warm-up differs from the seeds already kept."""
    for r in records(out):
        if r["study_code"]["sha256"] != code["sha256"]:
            differ = sorted(k for k in code if r["study_code"].get(k) != code.get(k) and k != "sha256")
            raise UserError(f"{seed_dir(out, r['seed'])} was trained by other study code ({', '.join(differ)} "
                            "differ): seeds of different code are never pooled; restore that code (its commit is in "
                            "the seed's run.json) or declare a new study in a new results folder")
        if warmup_sha256 is not None and r["warmup_sha256"] != warmup_sha256:
            raise UserError(f"{seed_dir(out, r['seed'])} continued another warm-up checkpoint "
                            f"({r['warmup_sha256'][:12]}, now {warmup_sha256[:12]}): seeds are pooled only over one "
                            "carried warm-up")


# A run's light files (no checkpoints): what a kept seed and the kept warm-up carry of each run.
LIGHT = ("summary.json", "metrics.jsonl", "config.yaml", "run.json")


def write_seed(out: Path, seed: int, record: dict[str, Any], runs: dict[str, Path]) -> Path:
    """The seed's record and each run's light files (no checkpoints), written whole or not at all."""
    final = seed_dir(out, seed)
    if final.exists():
        raise UserError(f"{final} exists: a kept seed is never written again")
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, run_dir in runs.items():
        for f in (*LIGHT, "results.json"):  # results.json: a fine-tuning run's scores
            if (run_dir / f).is_file():
                (tmp / name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(run_dir / f, tmp / name / f)
    (tmp / "seed.json").write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, final)
    return final


def complete(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in recs if r["status"] == "complete"]


def failed(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in recs if r["status"] == "failed"]


# ---------------------------------------------------------------------------------------------- revision
def paired_sds(recs: list[dict[str, Any]], reference: str, arms: list[str]) -> dict[str, float]:
    """The paired differences' SD (arm - reference final held-out loss) over complete seeds: the variance only."""
    out = {}
    for arm in arms:
        diffs = [r["arms"][arm]["final_eval_loss"] - r["arms"][reference]["final_eval_loss"] for r in complete(recs)]
        if len(diffs) >= 2:
            out[arm] = stdev(diffs)
    return out


def revision(out: Path) -> dict[str, Any] | None:
    return read_json(out / "revision.json")


def warmup_record(out: Path) -> dict[str, Any]:
    """The kept warm-up's record (`warmup/warmup.json`: its gate, `passed`, the checkpoint's sha256); {} before one."""
    return read_json(out / "warmup" / "warmup.json") or {}


def maybe_revise(out: Path, g: Any, reference: str, arms: list[str], deltas: list[float], window: str) -> str | None:
    """The one revision of N (see the module's docstring); a line saying what it did, or None."""
    from femlm.study.gpu_power import planned_n

    recs = complete(records(out))
    if revision(out) is not None or len(recs) < g.analysis.revision.min_seeds:
        return None
    sds = paired_sds(recs, reference, arms)
    largest = max(sds.values())
    before, after = planned_n(g, deltas), planned_n(g, deltas, largest)
    record = {"window": window, "seeds": len(recs), "paired_sd": sds, "sd_used": max(largest, g.analysis.power.sd),
              "n_declared": before, "n": max(before, after), "rule": g.analysis.revision.rule}
    (out / "revision.json").write_text(json.dumps(record, indent=2) + "\n")
    return (f"N revised once from {len(recs)} seeds' paired SDs ({', '.join(f'{k} {v:.4g}' for k, v in sds.items())}):"
            f" {before} -> {record['n']}")
