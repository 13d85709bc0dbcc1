"""`femlm report --compare <committed folder> <new folder>`: did a rerun reproduce a result folder?

It reads what `femlm report` wrote in each folder (report.json's ``environment``, ``pretrain_runs.csv``, the
tables' ``<key>.meta.json``; a study folder's study.json ``environment``) and prints, in this order, what differs:

1. environment: package versions, device (CPU model and matrix instructions, or GPU), threads, precision;
2. fingerprints: sha256 of each prepared corpus's token files and of the vocabulary;
3. counts: each corpus's documents, tokens and blocks, each pre-training run's sequences, tokens, rows and masked
   targets;
4. numbers: every measured table cell, and whether the new value is within the cell's own noise: within when
   ``|new - committed|`` is at most the larger of the two cells' ± (std over seeds); a cell without a ± must be
   equal; each pre-training run's first and final held-out loss, which has no ±: equal on the same device (CPU
   model and matrix instructions), shown only on another. A study folder's runs are its per-seed rows of
   ``pretrain_runs.csv``, keyed by (mode, arm, seed): their final and mean held-out loss, compared the same way.
   Losses are compared at full precision (``repr``, as femlm writes them since issue 47); a folder written with
   fewer digits is compared at the digits both sides have, and the line says so.

Exit status: 0 when fingerprints and counts are identical and every number is within its noise; 1 when anything of
that differs or cannot be checked (not recorded in a folder: the line says which) -- and when no number at all
could be compared ("cannot be checked", never "reproduced"); 2 for a folder that is not a result folder (one line).
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from femlm.errors import UserError

HELP = ("femlm report --compare COMMITTED NEW: did a rerun reproduce a result folder (femlm report's or a study's)? "
        "Prints what differs -- environment, sha256 fingerprints, counts, every number against its noise, each run's "
        "(a study: each mode, arm and seed's) final and mean held-out loss at full precision -- and exits 0 only "
        "when everything it compared agrees and it compared at least one number; 1 otherwise.")

COUNT_COLUMNS = ("sequences seen", "source tokens seen", "rows processed", "masked targets")
# A pre-training run's held-out losses have no ± of their own: equal on the same device (CPU model and matrix
# instructions), only shown on another (the arithmetic differs).
LOSS_COLUMNS = ("first eval loss", "final eval loss")
# A study's per-seed rows (femlm.study: pretrain_runs.csv keyed by mode, arm and seed): the losses compared.
SEED_COLUMNS = ("final_loss", "mean_loss")


def _json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"--compare: {path} is not readable JSON ({type(err).__name__}); regenerate the folder "
                        "with femlm report") from None
    if not isinstance(loaded, dict):
        raise UserError(f"--compare: {path} holds no JSON object; regenerate the folder with femlm report")
    return loaded


def read_folder(path: str | Path) -> dict[str, Any]:
    """What a result folder says about itself: environment (or None), run counts, measured table cells."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise UserError(f"--compare: {root} is not a directory; give two result folders (e.g. results/tiny)")
    metas = sorted(root.glob("*.meta.json"))
    sources = [root / "report.json", root / "study.json"]
    if not metas and not any(p.is_file() for p in sources):
        raise UserError(f"--compare: {root} holds no report.json, study.json or <table>.meta.json; give a folder "
                        "that femlm report or a study wrote")
    env = next((_json(p).get("environment") for p in sources if p.is_file()), None)
    cells: dict[str, dict[str, Any]] = {}
    for meta in metas:
        data = _json(meta)
        for row in data.get("rows") or []:
            if row.get("source") != "measured":
                continue
            for task, cell in (row.get("cells") or {}).items():
                if isinstance(cell, dict) and cell.get("mean") is not None:
                    cells[f"{data.get('table', meta.stem)}: {row.get('label')}, {task}"] = cell
    runs: dict[str, dict[str, str]] = {}
    seeds: dict[str, dict[str, str]] = {}
    runs_csv = root / "pretrain_runs.csv"
    if runs_csv.is_file():
        with runs_csv.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get("run"):
                    runs[Path(row["run"]).name] = {k: row.get(k, "") for k in (*COUNT_COLUMNS, *LOSS_COLUMNS)}
                elif row.get("arm") and row.get("seed"):  # a study's per-seed table
                    seeds[f"{row.get('mode', '')}/{row['arm']}/seed {row['seed']}"] = {
                        k: row.get(k, "") for k in SEED_COLUMNS}
    return {"path": str(root), "environment": env, "cells": cells, "runs": runs, "seeds": seeds}


def _digits(text: str) -> int | None:
    """Decimals a number was written with (None: exponent notation or not a number)."""
    if "e" in text.lower() or not text.strip():
        return None
    return len(text.split(".", 1)[1]) if "." in text else 0


def same_loss(a: str, b: str) -> tuple[bool, str]:
    """(equal, how) of two written losses: exactly, at full precision, or at the digits both sides have when one
    was written rounded (a folder from before issue 47)."""
    try:
        x, y = Decimal(a), Decimal(b)
    except InvalidOperation:
        return a == b, ""
    da, db = _digits(a), _digits(b)
    if x == y or da is None or db is None or da == db or min(da, db) >= 15:
        return x == y, ""
    d = min(da, db)
    q = Decimal(1).scaleb(-d)
    return x.quantize(q) == y.quantize(q), f" (at {d} decimals: {'committed' if da < db else 'new'} rounded)"


def _same(label: str, a: Any, b: Any, where: tuple[str, str]) -> tuple[str, bool | None]:
    """One comparison line and True (same), False (differs) or None (not recorded on a side)."""
    if a in (None, [], {}) or b in (None, [], {}):
        missing = " and ".join(w for w, v in zip(where, (a, b), strict=True) if v in (None, [], {}))
        return f"  {label}: not recorded in {missing}", None
    if a == b:
        return f"  {label}: same ({_short(a)})", True
    return f"  {label}: DIFFERS: {_short(a)} vs {_short(b)}", False


def _short(value: Any) -> str:
    if isinstance(value, list):
        return " / ".join(_short(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_short(v)}" for k, v in value.items())
    text = str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def _within(a: dict[str, Any], b: dict[str, Any]) -> bool:
    noise = max(float(a.get("std") or 0.0), float(b.get("std") or 0.0))
    return abs(float(b["mean"]) - float(a["mean"])) <= noise


def compare(committed: str | Path, new: str | Path) -> tuple[list[str], int]:
    """The report's lines and its exit status (see the module docstring)."""
    a, b = read_folder(committed), read_folder(new)
    where = (a["path"], b["path"])
    lines = [f"femlm report --compare {a['path']} (committed) {b['path']} (new)"]
    ea, eb = a["environment"] or {}, b["environment"] or {}
    checks: list[bool | None] = []  # fingerprints, counts and numbers decide the exit status

    lines.append("environment (differences here explain, they do not fail, a comparison):")
    if not ea.get("packages") or not eb.get("packages"):
        lines.append(_same("packages", ea.get("packages"), eb.get("packages"), where)[0])
    for name in sorted(set(ea.get("packages") or {}) & set(eb.get("packages") or {})):
        lines.append(_same(f"package {name}", (ea.get("packages") or {}).get(name),
                           (eb.get("packages") or {}).get(name), where)[0])
    for key in ("device", "threads", "precision"):
        lines.append(_same(key, ea.get(key), eb.get(key), where)[0])

    lines.append("fingerprints (sha256):")
    domains = sorted(set(ea.get("corpora") or {}) | set(eb.get("corpora") or {}))
    for domain in domains:
        sa = [r.get("sha256") for r in (ea.get("corpora") or {}).get(domain, []) if r.get("sha256")]
        sb = [r.get("sha256") for r in (eb.get("corpora") or {}).get(domain, []) if r.get("sha256")]
        line, ok = _same(f"corpus {domain} token files", sa, sb, where)
        lines.append(line)
        checks.append(ok)
    line, ok = _same("vocabulary", ea.get("vocabulary_sha256"), eb.get("vocabulary_sha256"), where)
    lines.append(line)
    checks.append(ok)
    if not domains:
        lines.append(f"  corpora: not recorded in {' and '.join(where)}")
        checks.append(None)

    lines.append("counts:")
    for domain in domains:
        ca = [{s: r.get(s) for s in ("train", "validation")} for r in (ea.get("corpora") or {}).get(domain, [])]
        cb = [{s: r.get(s) for s in ("train", "validation")} for r in (eb.get("corpora") or {}).get(domain, [])]
        line, ok = _same(f"corpus {domain}", ca, cb, where)
        lines.append(line)
        checks.append(ok)
    def counts(run: dict[str, str] | None) -> dict[str, str] | None:
        return None if run is None else {k: run.get(k, "") for k in COUNT_COLUMNS}

    for run in sorted(set(a["runs"]) | set(b["runs"])):
        line, ok = _same(f"run {run}", counts(a["runs"].get(run)), counts(b["runs"].get(run)), where)
        lines.append(line)
        checks.append(ok)

    lines.append("numbers (within noise: |new - committed| <= the larger ±; no ±: equal):")
    within = 0
    for key in sorted(set(a["cells"]) | set(b["cells"])):
        ca, cb = a["cells"].get(key), b["cells"].get(key)
        if ca is None or cb is None:
            lines.append(f"  {key}: only in {where[0] if cb is None else where[1]}")
            checks.append(None)
            continue
        ok = _within(ca, cb)
        within += ok
        checks.append(ok)
        lines.append(f"  {key}: {_cell(ca)} vs {_cell(cb)}, difference {float(cb['mean']) - float(ca['mean']):+.2f}: "
                     + ("within noise" if ok else "OUTSIDE noise"))
    same_device = bool(ea.get("device")) and ea.get("device") == eb.get("device")
    losses = 0
    pairs = [(f"run {run} held-out loss first/final", a["runs"][run], b["runs"][run], LOSS_COLUMNS)
             for run in sorted(set(a["runs"]) & set(b["runs"]))]
    pairs += [(f"{key}: final / mean held-out loss", a["seeds"][key], b["seeds"][key], SEED_COLUMNS)
              for key in sorted(set(a["seeds"]) & set(b["seeds"]))]
    for key in sorted(set(a["seeds"]) ^ set(b["seeds"])):
        lines.append(f"  {key}: only in {where[0] if key in a['seeds'] else where[1]}")
        checks.append(None)
    for name, ra, rb, columns in pairs:
        la, lb = [ra.get(k) or "" for k in columns], [rb.get(k) or "" for k in columns]
        if not all(la) or not all(lb):
            continue
        text = f"  {name}: {' / '.join(la)} vs {' / '.join(lb)}"
        if not same_device:
            lines.append(text + ": shown only (another device: no ± to judge by)")
            continue
        results = [same_loss(x, y) for x, y in zip(la, lb, strict=True)]
        ok = all(r[0] for r in results)
        how = next((r[1] for r in results if r[1]), "")
        checks.append(ok)
        within, losses = within + sum(r[0] for r in results), losses + len(results)
        differs = [c for c, r in zip(columns, results, strict=True) if not r[0]]
        lines.append(text + (f": equal (same device){how}" if ok else
                             f": DIFFERS on the same device ({', '.join(differs)}){how}"))
    numbers = sum(1 for k in a["cells"] if k in b["cells"]) + losses
    if numbers == 0:
        lines.append("  no number compared: cannot be checked")
        checks.append(None)
    differs = sum(c is False for c in checks)
    unknown = sum(c is None for c in checks)
    verdict = ("reproduced: fingerprints and counts identical, every number within its noise" if not differs
               and not unknown else f"not reproduced: {differs} check(s) differ, {unknown} cannot be checked")
    lines.append(f"{verdict} ({within} of {numbers} numbers within noise).")
    return lines, 0 if not differs and not unknown else 1


def _cell(cell: dict[str, Any]) -> str:
    std = cell.get("std")
    return f"{float(cell['mean']):.2f}" + (f" ± {float(std):.2f}" if std is not None else "") + \
        (f" (n={cell['n']})" if cell.get("n") else "")


def main(args: list[str]) -> int:
    """`femlm report --compare A B`: print the comparison, return its exit status."""
    if len(args) != 2:
        raise UserError(f"--compare takes two result folders (committed, new); got {len(args)}: "
                        f"{' '.join(args) or 'none'}")
    lines, status = compare(*args)
    print("\n".join(lines))
    return status
