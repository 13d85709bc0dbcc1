"""The scale statement every table carries: model, corpus, steps, seeds, hardware and code commit.

Numbers from a 4-layer model trained for minutes must never be read as the paper's; the statement is built
from what the runs themselves recorded (femlm.json of the checkpoint, results.json, the pre-training run's
summary.json / config.yaml / run.json), plus the free-text `report.scale` phrase.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from femlm.report.collect import Collection, FinetuneResult, PretrainRun

# summary.json keys that describe the size of the pre-training corpus, where a run records them.
CORPUS_KEYS = ("corpus_documents", "documents", "train_documents", "corpus_tokens", "train_tokens",
               "train_blocks", "tokens_seen")


def hardware_text(hw: Any) -> str:
    if isinstance(hw, str):
        return hw
    if not isinstance(hw, dict) or not hw:
        return ""
    gpus = hw.get("gpus") or []
    if gpus:
        names = sorted(set(map(str, gpus)))
        return ", ".join(f"{sum(g == n for g in gpus)}x {n}" for n in names)
    threads, cpus = hw.get("torch_threads"), hw.get("cpus")
    return f"CPU ({threads} threads of {cpus} cores)" if threads else f"CPU ({cpus} cores)"


def _join(values: Iterable[Any]) -> str:
    items = sorted({str(v) for v in values if v not in (None, "", [], {})}, key=_natural)
    return ", ".join(items)


def _natural(text: str) -> tuple[int, Any]:
    return (0, int(text)) if text.isdigit() else (1, text)


def _pretrain_run(pretrain: dict[str, Any], runs: dict[Path, PretrainRun]) -> PretrainRun | None:
    run_dir = pretrain.get("run_dir")
    if not run_dir:
        return None
    path = Path(str(run_dir)).expanduser()
    found = runs.get(path.resolve()) if path.exists() else None
    if found is None and (path / "summary.json").is_file():
        try:
            found = PretrainRun(path / "summary.json", json.loads((path / "summary.json").read_text()), {}, [])
        except (OSError, ValueError):
            return None
    return found


_BLOCKS_LOG = re.compile(r"blocks for domain \S+: (\{'train'.*\})\s*$", re.MULTILINE)


def corpus_stats(run: PretrainRun) -> dict[str, Any]:
    """The training split's documents / tokens / blocks: summary.json["corpus"] where a run records it, else
    the line femlm.data.corpus logs into the run's Hydra job log (``blocks for domain X: {...}``)."""
    corpus = run.summary.get("corpus")
    if isinstance(corpus, dict):  # femlm.data.plan.CorpusPlan.as_dict(): per-split counts under "splits"
        splits = corpus.get("splits") if isinstance(corpus.get("splits"), dict) else corpus
        return splits.get("train") if isinstance(splits.get("train"), dict) else splits
    for log in sorted(run.dir.glob("*.log")):
        try:
            found = _BLOCKS_LOG.findall(log.read_text(errors="replace"))
            parsed = ast.literal_eval(found[-1]) if found else None
        except (OSError, ValueError, SyntaxError):
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get("train"), dict):
            return parsed["train"]
    return {}


def corpus_text(run: PretrainRun | None, domain: Any) -> str:
    parts = []
    if run is not None:
        stats = corpus_stats(run)
        counts = [f"{stats[k]:,} {k}" for k in ("documents", "tokens", "blocks") if isinstance(stats.get(k), int)]
        if counts:
            parts.append("train split " + ", ".join(counts))
        for key in CORPUS_KEYS:
            value = run.summary.get(key)
            if isinstance(value, (int, float)):
                parts.append(f"{key.replace('_', ' ')} {value:,}")
        max_docs = ((run.config.get("domain") or {}) if isinstance(run.config.get("domain"), dict) else {}
                    ).get("max_documents")
        if max_docs:
            parts.append(f"subsampled to {max_docs:,} documents")
        corpus = run.summary.get("corpus") if isinstance(run.summary.get("corpus"), dict) else {}
        if isinstance(corpus.get("passes"), (int, float)):
            parts.append(f"{corpus['passes']:,.1f} passes over it")
        if corpus.get("stand_in") and corpus.get("note"):
            parts.append(str(corpus["note"]))  # a run on the offline mirror's samples says so everywhere
    return f"{domain or '?'} corpus" + (f" ({'; '.join(parts)})" if parts else " (size not recorded)")


def seen_text(run: PretrainRun | None, equal_compute: Any) -> str:
    """', equal compute same_rows: 1,200 sequences (153,600 source tokens), 4,800 rows, 2,880 masked targets,
    1.2e+12 FLOPs': what a pre-training run processed, each count on its own (summary.json "seen")."""
    seen = run.summary.get("seen") if run is not None and isinstance(run.summary.get("seen"), dict) else {}
    if not seen:
        return f", equal compute {equal_compute}" if equal_compute else ""
    return (f", equal compute {equal_compute or '?'}: {seen.get('sequences', 0):,} sequences "
            f"({seen.get('source_tokens', 0):,} source tokens), {seen.get('rows', 0):,} rows, "
            f"{seen.get('masked_targets', 0):,} masked targets, {seen.get('train_flops', 0):.2g} FLOPs")


def scale_of(results: list[FinetuneResult], collection: Collection, phrase: str, report_commit: str
             ) -> tuple[str, dict[str, Any]]:
    """The statement (text, and the same facts as a dict for .meta.json) for the runs behind a table."""
    runs = {r.dir.resolve(): r for r in collection.pretrain}
    models, pretraining, hardware, commits = set(), set(), set(), set()
    seeds, ft_scale = set(), {}
    for result in results:
        pre = result.pretrain or {}
        model = pre.get("model")
        models.add(str(model.get("name") if isinstance(model, dict) else model) if model
                   else f"{result.raw.get('checkpoint') or '?'} (as released)")
        if pre:
            run = _pretrain_run(pre, runs)
            step, max_steps = pre.get("step"), pre.get("max_steps")
            steps = f"{step} steps" if step == max_steps or not max_steps else f"step {step} of {max_steps}"
            steps += seen_text(run, pre.get("equal_compute"))
            origin = ""
            if pre.get("init_from"):
                # The last path parts name the starting checkpoint well enough (runs/tiny/scratch_x/...).
                origin = ", from " + "/".join(Path(str(pre["init_from"])).parts[-3:])
            pretraining.add(f"{pre.get('command') or 'pre-training'} on {corpus_text(run, pre.get('domain'))}, "
                            f"{steps}{origin}")
            if run is not None:
                hardware.add(hardware_text(run.summary.get("hardware") or run.info.get("hardware")))
                commits.add(run.info.get("git_commit"))
        hardware.add(hardware_text(result.raw.get("hardware")))
        commits.add(result.raw.get("git_commit"))
        for score in result.scores.values():
            seeds.update(score.values)
        for key, value in (result.raw.get("scale") or {}).items():
            if value is None:
                continue
            ft_scale.setdefault(key, set()).add(value if not isinstance(value, (list, dict)) else str(value))
    facts = {"phrase": phrase, "models": sorted(models), "pretraining": sorted(pretraining),
             "seeds": sorted(seeds, key=_natural), "finetune": {k: sorted(map(str, v), key=_natural)
                                                                 for k, v in ft_scale.items()},
             "hardware": sorted(h for h in hardware if h), "git_commits": sorted(c for c in commits if c),
             "report_git_commit": report_commit, "runs": len(results)}
    if not results:
        return (f"{phrase}. No measured runs for this table (report code at git {report_commit}).", facts)
    finetune = "; ".join(f"{k.replace('_', ' ')} {', '.join(v)}" for k, v in facts["finetune"].items())
    text = (f"{phrase}. Model: {', '.join(facts['models'])}. "
            f"Pre-training: {'; '.join(facts['pretraining']) or 'none by femlm (released checkpoints)'}. "
            f"Fine-tuning: seeds {_join(seeds) or 'not recorded'}" + (f"; {finetune}" if finetune else "") + ". "
            f"Hardware: {'; '.join(facts['hardware']) or 'not recorded'}. "
            f"Code: git {', '.join(facts['git_commits']) or 'not recorded'} (report written at {report_commit}).")
    return text, facts
