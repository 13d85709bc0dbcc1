"""From collected results to the paper's tables (rows in the paper's order) and the figures' series.

A fine-tuning result belongs to a row through the checkpoint it started from: ``results.json["pretrain"]``
(the checkpoint's femlm.json) gives the stage (scratch / continual) and the masking arm; no pretrain info
means a released checkpoint fine-tuned as is (the paper's RoBERTa / BERT-base ReEval rows).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from femlm.paper import (
    CONTINUAL_COLUMNS,
    CONTINUAL_REPORTED,
    CS_TASKS,
    GLUE_AVERAGE_REPORTED,
    GLUE_COLUMNS,
    GLUE_REPORTED,
    GLUE_TASKS,
    NEWS_TASKS,
    PAPER_SCALE,
    TABLE_NAMES,
    TASK_HEADERS,
    Column,
    ReportedRow,
    normalise_task,
    parse_reported,
)
from femlm.report.collect import Arm, Collection, FinetuneResult
from femlm.report.scale import scale_of
from femlm.report.tables import Cell, Row, Table

# Arms in the paper's row order, then the controls and the other baselines this code can train.
ARM_ORDER = ("mlm_subword", "fe_subword", "iid_subword", "mlm_span", "fe_span", "iid_span", "mlm_bernoulli",
             "mlm_wwm")
ARM_LABELS = {"mlm_subword": "MLM + Subword", "fe_subword": "FE-MLM + Subword",
              "iid_subword": "i.i.d. K-mask + Subword (control)", "mlm_span": "MLM + Span",
              "fe_span": "FE-MLM + Span", "iid_span": "i.i.d. K-mask + Span (control)",
              "mlm_bernoulli": "MLM (Bernoulli) + Subword", "mlm_wwm": "MLM + Whole word"}
# Rows every table shows even when nothing was measured for them: the paper's own comparison.
CORE_ARMS = {"continual": ("mlm_subword", "fe_subword", "mlm_span", "fe_span"),
             "glue": ("mlm_subword", "fe_subword")}
DEFAULT_NUM_MASKS = {"fully_explored": 4, "iid": 4, "random": 1}  # the paper's K=4 for FE-MLM
VALUE = "mean ± std over fine-tuning seeds of each task's main metric × 100"


def arm_label(masking: str | None) -> str:
    """`fe_subword` -> "FE-MLM + Subword"; a stage suffix (`fe_subword [scratch]`) is kept as is."""
    name, _, rest = str(masking or "").partition(" ")
    if name in ARM_LABELS:
        return ARM_LABELS[name] + (f" {rest}" if rest else "")
    return str(masking or "unknown masking")


@dataclass(frozen=True)
class RowKey:
    order: tuple[int, int]
    label: str


def row_key(result: FinetuneResult, table: str) -> RowKey:
    arm: Arm = result.arm
    rank = ARM_ORDER.index(arm.masking) if arm.masking in ARM_ORDER else len(ARM_ORDER)
    if arm.stage == "none":
        checkpoint = str(result.raw.get("checkpoint") or "checkpoint")
        name = checkpoint.rstrip("/").split("/")[-1] if "/" in checkpoint and len(checkpoint) > 40 else checkpoint
        what = "no continual pre-training" if table == "continual" else "no pre-training: released checkpoint"
        return RowKey((0, 0), f"{what} ({name})")
    if table == "continual" and arm.stage == "scratch":
        return RowKey((1, rank), f"no continual pre-training (from scratch: {arm_label(arm.masking)})")
    if table != "continual" and arm.stage == "continual":
        return RowKey((3, rank), f"{arm_label(arm.masking)} (continual, {result.pretrain.get('domain')})")
    return RowKey((2, rank), arm_label(arm.masking))


PAPER_RATIO = 0.15  # masked share per split in every conf/masking file (the ablation uses 0.125)


def _preferred(results: list[FinetuneResult]) -> tuple[list[FinetuneResult], list[str]]:
    """The final checkpoint (largest step) and, where a split sweep shares the arm, the paper's K and ratio."""
    notes: list[str] = []
    top = max((r.step if r.step is not None else -1) for r in results)
    kept = [r for r in results if (r.step if r.step is not None else -1) == top]
    variants = {(r.num_masks, r.ratio) for r in kept}
    if len(variants) > 1:
        strategy = str((kept[0].pretrain or {}).get("strategy") or "")
        want_k = DEFAULT_NUM_MASKS.get(strategy)

        def rank(v: tuple[int | None, float | None]) -> tuple[bool, bool, int]:
            return (v[0] == want_k, v[1] in (None, PAPER_RATIO), sum((r.num_masks, r.ratio) == v for r in kept))

        best = max(variants, key=rank)
        kept = [r for r in kept if (r.num_masks, r.ratio) == best]
        shown = sorted({f"K={k}" + (f", ratio={q}" if q is not None else "") for k, q in variants})
        notes.append(f"uses K={best[0]}" + (f", ratio={best[1]}" if best[1] is not None else "")
                     + f" of {'; '.join(shown)}")
    return kept, notes


def _same_checkpoint(result: FinetuneResult) -> tuple[str, Any]:
    pre = result.pretrain or {}
    return (str(pre.get("run_dir") or result.raw.get("checkpoint")), pre.get("step"))


def _cell(results: list[FinetuneResult], task: str, decimals: int) -> tuple[Cell, dict[str, Any]]:
    """Pool the seeds of every kept run; a seed fine-tuned twice from the same checkpoint (a plain fine-tune
    and an efficiency sweep's point) counts once, preferring the plain run."""
    values: list[float] = []
    per_seed: dict[str, float] = {}
    seen: set[tuple[tuple[str, Any], str]] = set()
    aggregate = None
    for result in sorted(results, key=lambda r: ("sweep" in r.path.parts, str(r.path))):
        score = result.scores[task]
        for seed, value in score.values.items():
            if (_same_checkpoint(result), seed) in seen:
                continue
            seen.add((_same_checkpoint(result), seed))
            values.append(value)
            per_seed.setdefault(seed, value)
        if not score.values and score.aggregate is not None:
            aggregate = score.aggregate
    if values:
        std = statistics.stdev(values) if len(values) > 1 else None
        cell = Cell(statistics.fmean(values), std, len(values), decimals)
    elif aggregate is not None:
        cell = Cell(aggregate[0], aggregate[1], aggregate[2], decimals)
    else:
        cell = Cell(decimals=decimals)
    return cell, {"per_seed": per_seed, "files": [str(r.path) for r in results]}


def measured_rows(collection: Collection, table: str, tasks: tuple[str, ...], decimals: int
                  ) -> tuple[list[Row], list[FinetuneResult], list[str]]:
    """One row per arm with a cell per task; the results used (for the scale statement) and notes."""
    groups: dict[RowKey, dict[str, list[FinetuneResult]]] = defaultdict(lambda: defaultdict(list))
    for result in collection.finetune:
        for task in result.scores:
            if task in tasks:
                groups[row_key(result, table)][task].append(result)
    for masking in CORE_ARMS.get(table, ()):
        groups.setdefault(RowKey((2, ARM_ORDER.index(masking)), arm_label(masking)), defaultdict(list))
    if table == "continual" and not any(k.order[0] in (0, 1) for k in groups):
        groups.setdefault(RowKey((0, 0), "no continual pre-training"), defaultdict(list))
    rows, used, notes = [], [], []
    for key in sorted(groups, key=lambda k: (k.order, k.label)):
        row = Row(key.label, "measured")
        for task, results in groups[key].items():
            kept, why = _preferred(results)
            row.cells[task], row.detail[task] = _cell(kept, task, decimals)
            steps = sorted({r.step for r in kept if r.step is not None})
            row.detail[task]["pretrain_steps"] = steps
            if len(kept) > 1:
                why.append(f"seeds pooled from {len(kept)} fine-tuning runs")
            if why:
                notes.append(f"{key.label}, {TASK_HEADERS.get(task, task)}: " + "; ".join(why))
            used += [r for r in kept if r not in used]
        rows.append(row)
    majority = _majority_row(collection, tasks, decimals)
    if majority is not None:
        rows.append(majority)
    return rows, used, notes


def _majority_row(collection: Collection, tasks: tuple[str, ...], decimals: int) -> Row | None:
    """Always predicting the most frequent training label, scored like the models: the floor a tiny model
    must clear before its numbers say anything (fine-tuning results carry it as "majority_baseline")."""
    row = Row("majority class (reference)", "measured",
              detail={"what": "predicts the most frequent training label; no model"})
    for result in collection.finetune:
        base = result.raw.get("majority_baseline")
        if not isinstance(base, dict):
            continue
        for task in result.scores:
            split = result.eval_split
            if task == "mnli_mm":
                split = next((k for k in base if "mismatched" in k), "")
            value = (base.get(split) or {}).get(result.main_metric) if isinstance(base.get(split), dict) else None
            if task in tasks and task not in row.cells and isinstance(value, (int, float)):
                row.cells[task] = Cell(value * (100.0 if abs(value) <= 1 else 1.0), None, 0, decimals)
    return row if row.cells else None


def reported_rows(source: tuple[ReportedRow, ...]) -> list[Row]:
    rows = []
    for entry in source:
        row = Row(entry.label, "reported", citation=entry.citation)
        for task, text in entry.cells.items():
            mean, std, decimals = parse_reported(text)
            row.cells[task] = Cell(mean, std, 0, decimals)
        rows.append(row)
    return rows


def _table(key: str, title: str, columns: tuple[Column, ...], reported: tuple[ReportedRow, ...],
           collection: Collection, phrase: str, commit: str, decimals: int) -> Table:
    tasks = tuple(t for c in columns for t in c.tasks)
    rows, used, notes = measured_rows(collection, key, tasks, decimals)
    text, facts = scale_of(used, collection, phrase, commit)
    return Table(key, title, columns, rows, reported_rows(reported), VALUE, text, facts, PAPER_SCALE[key], notes)


def continual_table(collection: Collection, phrase: str, commit: str, decimals: int = 2) -> Table:
    table = _table("continual", f"{TABLE_NAMES['continual']}: continual pre-training (CS: ACL-ARC, SciERC; News: "
                   "HyperPartisan, AGNews)", CONTINUAL_COLUMNS, CONTINUAL_REPORTED, collection, phrase, commit, decimals)
    table.notes.insert(0, "ACL-ARC and SciERC use the checkpoint continually pre-trained on the CS corpus, "
                          "HyperPartisan and AGNews the one pre-trained on News (as in the paper).")
    expected = {**dict.fromkeys(CS_TASKS, "cs"), **dict.fromkeys(NEWS_TASKS, "news")}
    odd = sorted({f"{TASK_HEADERS[t]} from a checkpoint continually pre-trained on {r.pretrain.get('domain')} "
                  f"({r.path})" for r in collection.finetune if r.arm.stage == "continual" and r.pretrain
                  for t in r.scores if t in expected and r.pretrain.get("domain") not in (None, expected[t])})
    table.notes += [f"domain differs from the paper's: {o}" for o in odd]
    return table


def glue_table(collection: Collection, phrase: str, commit: str, decimals: int = 2) -> Table:
    return _table("glue", f"{TABLE_NAMES['glue']}: GLUE dev, MLM vs FE-MLM pre-trained from scratch",
                  GLUE_COLUMNS,
                  GLUE_REPORTED, collection, phrase, commit, decimals)


def glue_average_table(glue: Table, collection: Collection, phrase: str, commit: str, decimals: int = 2) -> Table:
    """GLUE average of each GLUE-table row; only rows with all nine GLUE numbers get an average."""
    rows, notes = [], []
    for row in glue.measured:
        cells = [row.cells.get(t) for t in GLUE_TASKS]
        have = sum(c is not None and c.mean is not None for c in cells)
        avg = Cell(decimals=decimals)
        if have == len(GLUE_TASKS):
            per_seed = [row.detail[t]["per_seed"] for t in GLUE_TASKS]
            common = set.intersection(*(set(p) for p in per_seed))
            if len(common) > 1:
                # Same seeds on every task: the spread of the per-seed averages is meaningful.
                avgs = [statistics.fmean(p[s] for p in per_seed) for s in sorted(common)]
                avg = Cell(statistics.fmean(avgs), statistics.stdev(avgs), len(avgs), decimals)
            else:
                avg = Cell(statistics.fmean(c.mean for c in cells if c is not None and c.mean is not None),
                           None, 0, decimals)
        elif have:
            notes.append(f"{row.label}: {have}/{len(GLUE_TASKS)} GLUE numbers measured, no average")
        rows.append(Row(row.label, "measured", {"avg": avg}, detail={"glue_numbers": have}))
    used = [r for r in collection.finetune if any(t in GLUE_TASKS for t in r.scores)]
    text, facts = scale_of(used, collection, phrase, commit)
    return Table("glue_average", f"{TABLE_NAMES['glue_average']}: GLUE dev average", (Column("Avg. Score", ("avg",)),), rows,
                 reported_rows(GLUE_AVERAGE_REPORTED), "average over the 9 GLUE dev numbers of the GLUE table (MNLI-m and "
                 "MNLI-mm separately) × 100; ± is the std over seeds of the per-seed average", text, facts,
                 PAPER_SCALE["glue_average"], notes)


def efficiency_series(collection: Collection) -> dict[str, dict[str, list[tuple[int, float, float | None]]]]:
    """task -> masking -> [(pre-training step, mean score x100, std)] for Figure 4 (left)."""
    series: dict[str, dict[str, dict[int, tuple[float, float | None]]]] = defaultdict(lambda: defaultdict(dict))
    for _path, data in collection.efficiency:
        task = normalise_task(str(data.get("task"))) or str(data.get("task"))
        points = [p for p in data.get("points") or [] if isinstance(p.get("mean"), (int, float))]
        factor = 1.0 if any(abs(p["mean"]) > 1 for p in points) else 100.0
        for p in points:
            std = p.get("std")
            series[task][str(p.get("masking"))][int(p.get("step") or 0)] = (
                p["mean"] * factor, std * factor if isinstance(std, (int, float)) else None)
    by_step: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in collection.finetune:
        pre = result.pretrain or {}
        if result.step is None or result.arm.masking is None:
            continue
        if result.num_masks not in (None, DEFAULT_NUM_MASKS.get(str(pre.get("strategy")), result.num_masks)):
            continue  # a split-ablation arm: it belongs to the other panel
        name = result.arm.masking if result.arm.stage == "continual" else f"{result.arm.masking} [{result.arm.stage}]"
        for task, score in result.scores.items():
            by_step[(task, name)][result.step] += list(score.values.values())
    for (task, masking), steps in by_step.items():
        if len(steps) < 2:
            continue  # one step is a table cell, not a curve
        for step, values in steps.items():
            if values and step not in series[task][masking]:
                series[task][masking][step] = (statistics.fmean(values),
                                               statistics.stdev(values) if len(values) > 1 else None)
    return {t: {m: sorted((s, v[0], v[1]) for s, v in pts.items()) for m, pts in arms.items()}
            for t, arms in series.items()}


def split_series(collection: Collection) -> dict[str, list[tuple[int, float, float | None, int]]]:
    """task -> [(K masks, mean x100, std, n)] over FE-MLM runs that differ only in K (the ablation).

    Runs are grouped by masking ratio too: the paper's sweep masks 12.5% per split, so its K=4 point is not
    the continual pre-training table's FE-MLM arm (15%); the ratio with the most distinct K values is the sweep.
    """
    groups: dict[tuple[str, float | None, int], list[FinetuneResult]] = defaultdict(list)
    for result in collection.finetune:
        pre = result.pretrain or {}
        is_fe = pre.get("strategy") == "fully_explored" or str(pre.get("masking", "")).startswith("fe_")
        if is_fe and result.num_masks is not None:
            for task in result.scores:
                groups[(task, result.ratio, result.num_masks)].append(result)
    by_ratio: dict[tuple[str, float | None], list[tuple[int, float, float | None, int]]] = defaultdict(list)
    for (task, ratio, k), results in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        top = max((r.step or 0) for r in results)
        values = [v for r in results if (r.step or 0) == top for v in r.scores[task].values.values()]
        if values:
            by_ratio[(task, ratio)].append((k, statistics.fmean(values),
                                            statistics.stdev(values) if len(values) > 1 else None, len(values)))
    out: dict[str, list[tuple[int, float, float | None, int]]] = {}
    for (task, _ratio), points in by_ratio.items():
        if len(points) > 1 and len(points) > len(out.get(task, [])):
            out[task] = points
    return out
