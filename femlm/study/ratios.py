"""The decomposition across its variants (study_base.yaml: masking ratios 0.15 / 0.30 / 0.40 at 128 tokens, and
Figures 2-3 at 512 tokens with masks of 128): one table of every term and verdict per variant and K, Figure 2 from
the covariance pairs a decomposition run leaves, and the two studies' scales side by side for docs/evidence.md.

A decomposition run masks ``tau`` of the ``n`` maskable tokens of each block in every copy (``settings.tau``:
``round(analysis.ratio * n)``), so its masking ratio is ``tau / n``; the largest K a ratio allows is ``n // tau``.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from femlm.analysis.gates import not_measured, null_model_gates
from femlm.outputs import CRLF, write_csv
from femlm.study.evidence import enough, pool_size, run_gates
from femlm.study.text import as_interval, fmt, fmt_ci, fmt_sig, term_interval


def masking_ratio(j: dict[str, Any]) -> tuple[int, int]:
    """(tau, n): masked tokens per copy and the fewest maskable tokens of the pool's blocks."""
    n_valid = (j.get("sequences") or {}).get("n_valid") or []
    pool = int(j["settings"]["pool"])
    return int(j["settings"]["tau"]), int(min(n_valid[:pool])) if n_valid else 0


def ratio_rows(dec: dict[str, Any], comps: list[Any] | None = None) -> list[dict[str, Any]]:
    """One row per decomposition run and K: the terms (shared by its K) and the study's reading of FE's predicted
    ratio at that K (``comps``: femlm.study.verdicts' comparisons)."""
    rows = []
    for key, d in dec.items():
        j = d.get("json")
        if not j:
            continue
        tau, n = masking_ratio(j)
        t = j["terms"]
        reasons = run_gates(j)["decomposition"]
        for k, v in j["verdicts"].items():
            fe = v["fe"]
            rows.append({
                "run": key, "label": d.get("label", ""), "block_size": j["settings"]["block_size"], "tau": tau,
                "maskable": n, "ratio": round(tau / n, 4) if n else None, "K": int(k),
                "sigma_d2": t["sigma_d2"]["estimate"], "sigma_d2_ci": t["sigma_d2"]["ci"],
                "sigma_m2": t["sigma_m2"]["estimate"], "sigma_m2_ci": t["sigma_m2"]["ci"],
                "c_fe": t["c_fe"]["estimate"], "c_fe_ci": t["c_fe"]["ci"],
                "c_iid": t["c_iid"]["estimate"], "c_iid_ci": t["c_iid"]["ci"],
                "c_fe_plus_sigma_d2": fe["c_plus_sigma_d2"], "c_fe_plus_sigma_d2_ci": fe["c_plus_sigma_d2_ci"],
                "fe_vs_mlm_per_compute": fe["per_compute_vs_mlm"], "fe_vs_mlm_per_compute_ci": fe["ci"],
                "iid_vs_mlm_per_compute": v["iid"]["per_compute_vs_mlm"], "iid_vs_mlm_per_compute_ci": v["iid"]["ci"],
                "pool_sequences": pool_size(j), "not_measured": reasons})
    return with_readings(rows, comps or [])


def with_readings(rows: list[dict[str, Any]], comps: list[Any]) -> list[dict[str, Any]]:
    """The rows with the study's reading of each K (key ``variance_ratio/<run>/K<k>``) and no other verdict (an
    older study.json's rows carried the analysis' own)."""
    from femlm.study.readings import with_readings as read_rows

    return read_rows(rows, comps, "variance_ratio")


def write_ratio_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """decomposition_terms.csv: an interval (and the reasons) as JSON text in one cell."""
    flat = [{k: (json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()} for r in rows]
    return write_csv(path, flat, header=None if flat else ["run"], line_end=CRLF)


def _ci(row: dict[str, Any], key: str) -> str:
    """The value with its interval, or alone when the run has too few pool sequences for one."""
    return fmt_sig(as_interval(row[key], row.get(f"{key}_ci") if enough(row.get("pool_sequences")) else None))


def ratio_section(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["| run | tokens | ratio (tau / n) | pool sequences | K | sigma_d2 | sigma_m2 | c_FE | c_iid | "
             "c_FE + sigma_d2 | FE / MLM per unit compute (predicted) | i.i.d. / MLM (predicted) | reading |",
             "|---|---:|---|---:|---:|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['block_size']} | {fmt(r['ratio'], 3)} ({r['tau']} / {r['maskable']}) | "
                     f"{r.get('pool_sequences', '?')} | "
                     f"{r['K']} | {_ci(r, 'sigma_d2')} | {_ci(r, 'sigma_m2')} | {_ci(r, 'c_fe')} | {_ci(r, 'c_iid')} | "
                     f"{_ci(r, 'c_fe_plus_sigma_d2')} | {_ci(r, 'fe_vs_mlm_per_compute')} | "
                     f"{_ci(r, 'iid_vs_mlm_per_compute')} | {r.get('reading', '')} |")
    lines += ["", "FE lowers the training gradient's variance at equal compute only where c_FE + sigma_d2 < 0, i.e. "
              "where the FE / MLM ratio's whole interval is below 1. The terms are per run (one pool, one tau, "
              "shared by its K); the largest K a ratio allows is n // tau. The ratios are predictions of the "
              "decomposition at the run's tau, for the gradient of the parameters it studies, not measured training "
              "variances: every K of a run follows from its one estimate, c_FE + sigma_d2. 95% expanded percentile bootstrap "
              "intervals over the pool's sequences (count in the table; none below 12). The reading is the study's "
              "(femlm/study/verdicts.py: a prediction never reads for or against FE); \"not measured\" where a "
              "sanity gate failed (`femlm.analysis.gates`).", ""]
    return lines


def plot_pairs(src: Path, dec_json: dict[str, Any], path: Path, title: str) -> Path | None:
    """The paper's Figure 2 (covariance per Hamming bin, violins) from a decomposition run's null_model_pairs.csv
    and its bins, drawn by the analysis' own figure code."""
    from femlm.analysis.figures import plot_covariance_distribution

    pairs_csv = src / "null_model_pairs.csv"
    bins = (dec_json.get("null_model") or {}).get("bins") or []
    if not pairs_csv.is_file() or not bins:
        return None
    with pairs_csv.open() as fh:
        pairs = [{"bin": int(r["bin"]), "cov": float(r["cov"])} for r in csv.DictReader(fh)]
    return plot_covariance_distribution(pairs, bins, path, title)


def null_units_of(study: dict[str, Any], key: str) -> int | None:
    """The null model's sequences for a run of a study.json: recorded (``null_sequences``), else the plan's
    ``analysis.sequences`` override (a study.json from before issue 27)."""
    recorded = (study.get("null_sequences") or {}).get(key)
    if isinstance(recorded, int):
        return recorded
    found = None
    for item in ((study.get("plan") or {}).get("decomposition") or {}).get("overrides") or []:
        if str(item).startswith("analysis.sequences="):
            found = int(str(item).split("=", 1)[1])
    return found


def _null_cell(study: dict[str, Any], key: str, null: dict[str, Any]) -> str:
    """The fraction of the covariance fall the additive model explains, or why it is not measured."""
    seqs = null_units_of(study, key)
    reasons = null_model_gates(null, seqs)
    by_seq = null.get("by_sequence") or {}
    ci = by_seq.get("fraction_explained_ci") if by_seq else null.get("fraction_explained_ci")
    value = fmt_ci(as_interval(null.get("fraction_explained"), None if reasons else ci), 2)
    return f"{value}, {not_measured(reasons)}" if reasons else f"{value} ({seqs} sequences)"


def _run_label(study: dict[str, Any], key: str) -> str:
    """A decomposition run's plan label (e.g. "masking ratio 0.15 (19 of 126 tokens per copy), K = 2, 4, 6")."""
    return str((study.get("labels") or {}).get(key) or key)


def pool_count(study: dict[str, Any], key: str, folder: Path) -> int | None:
    """The pool sequences (the unit of sigma_d2's and c_FE's intervals) of a decomposition run: study.json's
    ``pool_sequences``, or, for a study.json from before it had them, the run's decomposition_<key>.md beside it."""
    n = (study.get("pool_sequences") or {}).get(key)
    md = folder / f"decomposition_{key}.md"
    if n is None and md.is_file():
        m = re.search(r"Pool of (\d+) validation blocks", md.read_text())
        n = int(m[1]) if m else None
    return n


def run_shape(study: dict[str, Any], key: str, folder: Path) -> str:
    """"128-token blocks, tau 15": a decomposition run's block length and masked tokens per copy, from its
    recorded settings (study.json's ``decomposition_settings``) or its decomposition_<key>.md beside it."""
    s = (study.get("decomposition_settings") or {}).get(key) or {}
    block, tau = s.get("block_size"), s.get("tau")
    md = folder / f"decomposition_{key}.md"
    if (block is None or tau is None) and md.is_file():
        m = re.search(r"validation blocks of (\d+) tokens, tau = (\d+)", md.read_text())
        block, tau = (int(m[1]), int(m[2])) if m else (None, None)
    return f"{block if block is not None else '?'}-token blocks, tau {tau if tau is not None else '?'}"


def side_by_side(base: dict[str, Any], other_json: Path, keys: dict[str, str]) -> list[str]:
    """The MiniLM study (results/study/study.json, its warm-up decomposition) beside this one (the runs named by
    ``keys``: ``terms`` for the decomposition, ``null_model`` for the null model): shapes and headline terms."""
    other = json.loads(other_json.read_text()) if other_json.is_file() else {}

    def column(study: dict[str, Any], terms_key: str, null_key: str, folder: Path) -> dict[str, str]:
        e = study.get("encoder") or {}
        t = (study.get("decomposition_terms") or {}).get(terms_key) or {}
        null = (study.get("null_model") or {}).get(null_key) or {}
        n = pool_count(study, terms_key, folder)
        unit = f" ({n} pool sequences)" if n else ""
        return {
            "model": f"{e.get('model_type', '?')}, {e.get('layers', '?')} layers, hidden {e.get('hidden', '?')}, "
                     f"{(e.get('parameters') or 0) / 1e6:.1f}M parameters",
            "sigma_d2": fmt_sig(term_interval(t["sigma_d2"])) + unit if t else "n/a",
            "c_fe": fmt_sig(term_interval(t["c_fe"])) + unit if t else "n/a",
            "null": _null_cell(study, null_key, null) if null else "n/a",
        }

    a = column(other, "warmup", "warmup", other_json.parent)
    b = column(base, keys.get("terms", ""), keys.get("null_model", ""), other_json.parent)
    return ["| at the warmed-up encoder | all-MiniLM-L6-v2 (`make study`) | all-mpnet-base-v2 (`make study-base`) |",
            "|---|---|---|",
            f"| encoder | {a['model']} | {b['model']} |",
            f"| decomposition run | {run_shape(other, 'warmup', other_json.parent)} | "
            f"{_run_label(base, keys.get('terms', ''))} |",
            f"| sigma_d2 (data term) | {a['sigma_d2']} | {b['sigma_d2']} |",
            f"| c_FE (two disjoint masks) | {a['c_fe']} | {b['c_fe']} |",
            f"| covariance fall explained by the additive null model | {a['null']} "
            f"({run_shape(other, 'warmup', other_json.parent)}) | {b['null']} "
            f"({_run_label(base, keys.get('null_model', ''))}) |", ""]
