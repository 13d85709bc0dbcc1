"""results/study/: the study's numbers, figures, CSV, study.json and a README written from them.

Nothing here states a conclusion that the numbers do not carry: every sentence of the README that compares
arms is chosen by an interval (`femlm.study.stats.verdict`, `ratio_verdict`, the decomposition's own verdicts),
and a missing or partial part is reported as such. Runs still missing (a study cut short) are listed, and the
statistics use the runs that finished.
"""

from __future__ import annotations

import csv
import json
import math
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from femlm.study import stats as st
from femlm.study.plan import Step, final, pretrain_dir

ARM_LABEL = {"mlm_subword": "MLM", "fe_subword": "FE-MLM (K=4)", "iid_subword": "i.i.d. K-mask (K=4)",
             "no_continual": "no continual pre-training", "warmup_only": "warm-up only"}
MODE_LABEL = {"same_rows": "same rows per step", "same_sequences": "same sequences per step"}
BEGIN, END = "<!-- study:begin -->", "<!-- study:end -->"


def label(name: str) -> str:
    return ARM_LABEL.get(name, name)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    return f"{x:.{digits}f}"


def fmt_ci(ci: dict[str, Any] | st.Interval, digits: int = 3) -> str:
    d = ci.as_dict() if isinstance(ci, st.Interval) else ci
    if d.get("low") is None or d.get("high") is None:
        return f"{fmt(d.get('estimate'), digits)} (no interval)"
    return f"{fmt(d['estimate'], digits)} [{fmt(d['low'], digits)}, {fmt(d['high'], digits)}]"


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# ------------------------------------------------------------------------------------------------ collect
def eval_curve(run_dir: Path) -> list[dict[str, Any]]:
    """The eval records of a pre-training run: step, train_flops, eval_loss, eval_accuracy and the counts."""
    evals = [r for r in read_records(run_dir / "metrics.jsonl") if r.get("eval_loss") is not None]
    summary = read_json(run_dir / "summary.json") or {}
    if evals and "train_flops" not in evals[-1] and summary.get("seen", {}).get("train_flops"):
        per_step = summary["seen"]["train_flops"] / max(summary.get("steps", 1), 1)  # older runs: constant steps
        for r in evals:
            r["train_flops"] = r["step"] * per_step
    return evals


def collect(plan: dict[str, Any], steps: list[Step], runs: Path) -> dict[str, Any]:
    data: dict[str, Any] = {"missing": [], "optional_missing": [], "pretrain": [], "finetune": [], "decomposition": {}}
    for step in steps:
        if step.part in ("encoder", "results", "download"):
            continue
        if not step.done():
            data["optional_missing" if step.optional else "missing"].append(step.name)
            continue
        if step.part == "warmup":
            data["warmup"] = {"summary": read_json(step.run_dir / "summary.json"), "curve": eval_curve(step.run_dir),
                              "dir": str(step.run_dir)}
        elif step.part == "pretrain":
            data["pretrain"].append({**step.meta, "summary": read_json(step.run_dir / "summary.json"),
                                     "curve": eval_curve(step.run_dir), "dir": str(step.run_dir)})
        elif step.part == "finetune":
            data["finetune"].append({**step.meta, "results": read_json(step.run_dir / "results.json"),
                                     "dir": str(step.run_dir)})
        elif step.part == "decomposition":
            data["decomposition"][step.meta["checkpoint"]] = {
                "json": read_json(step.run_dir / "decomposition.json"), "dir": str(step.run_dir)}
    data["encoder"] = read_json(runs / "encoder_check" / "encoder.json")
    return data


def arm_runs(data: dict[str, Any], arm: str, mode: str, reference: str) -> list[dict[str, Any]]:
    want = "any" if arm == reference else mode
    return sorted((r for r in data["pretrain"] if r["arm"] == arm and r["mode"] == want), key=lambda r: r["seed"])


# ------------------------------------------------------------------------------------------------ analyse
def analyse_pretraining(plan: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    p = plan["pretrain"]
    level = plan.get("stats", {}).get("level", st.LEVEL)
    fractions = plan.get("stats", {}).get("target_fractions", [0.5, 0.75])
    out: dict[str, Any] = {}
    for mode in p["modes"]:
        arms: dict[str, st.ArmCurves] = {}
        for arm in p["arms"]:
            rs = arm_runs(data, arm, mode, p["reference"])
            if rs:
                arms[arm] = st.ArmCurves(arm, [r["seed"] for r in rs],
                                         [([c["train_flops"] for c in r["curve"]], [c["eval_loss"] for c in r["curve"]])
                                          for r in rs])
        if p["reference"] not in arms or len(arms) < 2:
            out[mode] = {"skipped": "too few finished runs for a comparison"}
            continue
        res = st.compare_pretraining(arms, p["reference"], fractions, level)
        res["falling"] = still_falling(arms[p["reference"]], res["range"], level)
        res["differences"] = difference_bands(arms, p["reference"], np.asarray(res["grid"]), level)
        out[mode] = res
    return out


def still_falling(arm: st.ArmCurves, rng: list[float], level: float) -> dict[str, Any]:
    """Loss drop over the last quarter of the budget (value at 75% minus value at the end), per seed, with its
    t-interval: the curves are "still clearly falling" when the interval is above 0."""
    lo, hi = rng
    drops = [st.value_at(c, lo + 0.75 * (hi - lo)) - st.value_at(c, hi) for c in arm.curves]
    ci = st.t_interval(drops, level)
    return {"last_quarter_drop": ci.as_dict(), "falling": bool(ci.low is not None and math.isfinite(ci.low)
                                                               and ci.low > 0)}


def difference_bands(arms: dict[str, st.ArmCurves], reference: str, grid: np.ndarray,
                     level: float) -> dict[str, Any]:
    """Per non-reference arm: the paired (same seed) difference arm - reference along the grid, mean and band."""
    ref = {s: st.interpolate(c, grid) for s, c in zip(arms[reference].seeds, arms[reference].curves, strict=True)}
    out = {}
    for name, arm in arms.items():
        if name == reference:
            continue
        diffs = [st.interpolate(c, grid) - ref[s] for s, c in zip(arm.seeds, arm.curves, strict=True) if s in ref]
        if not diffs:
            continue
        d = np.stack(diffs)
        cis = [st.t_interval(d[:, j].tolist(), level) for j in range(len(grid))]
        out[name] = {"flops": grid.tolist(), "mean": [c.estimate for c in cis],
                     "low": [c.low for c in cis], "high": [c.high for c in cis], "n": len(diffs)}
    return out


def main_metric(results: dict[str, Any]) -> str:
    return results.get("main_metric", "macro_f1")


def analyse_downstream(plan: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    level = plan.get("stats", {}).get("level", st.LEVEL)
    reference = plan["pretrain"]["reference"]
    out: dict[str, Any] = {}
    for task in plan.get("finetune", {}).get("tasks", []):
        rows = [r for r in data["finetune"] if r["task"] == task and r["results"]]
        if not rows:
            continue
        scores, dev, majority, metric = {}, {}, None, None
        for r in rows:
            res = r["results"]
            metric = main_metric(res)
            scores[r["row"]] = [s["test"].get(metric) for s in res["seeds"] if s.get("test")]
            dev[r["row"]] = [s["dev"].get(metric) for s in res["seeds"] if s.get("dev")]
            maj = (res.get("majority_baseline") or {}).get("test", {}).get(metric)
            majority = maj if maj is not None else majority
        comp = st.compare_scores(scores, reference, level)
        vs_base = st.compare_scores(scores, "no_continual", level) if "no_continual" in scores else None
        out[task] = {"metric": metric, "majority": majority, "scores": scores, "dev_scores": dev,
                     "summary": comp["rows"], "vs_mlm": comp["comparisons"],
                     "vs_no_continual": vs_base["comparisons"] if vs_base else {},
                     "above_majority": {k: st.t_interval(v, level).low > majority
                                        if majority is not None and len(v) > 1 else None for k, v in scores.items()},
                     "scale": rows[0]["results"].get("scale")}
    return out


# ------------------------------------------------------------------------------------------------ figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


COLORS = {"mlm_subword": "C0", "fe_subword": "C3", "iid_subword": "C2", "no_continual": "C7", "warmup_only": "C5"}


def plot_curves(mode: str, res: dict[str, Any], path: Path, title: str) -> Path:
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    scale = 1e15
    for arm, b in res["bands"].items():
        x = np.asarray(b["flops"]) / scale
        left.plot(x, b["mean"], color=COLORS.get(arm), label=f"{label(arm)} (n={int(np.nanmax(b['n']))})")
        left.fill_between(x, b["low"], b["high"], color=COLORS.get(arm), alpha=0.2)
    for key, t in res["targets"].items():
        left.axhline(t["loss"], color="grey", lw=0.6, ls=":")
        left.text(left.get_xlim()[0], t["loss"], f" target {key}", va="bottom", fontsize=7, color="grey")
    left.set_xlabel("training compute (PFLOP, model FLOPs)")
    left.set_ylabel("held-out masked-LM loss")
    left.set_title(f"{MODE_LABEL.get(mode, mode)}: mean and 95% t-band over seeds")
    left.legend(fontsize=8)
    for arm, d in res["differences"].items():
        x = np.asarray(d["flops"]) / scale
        right.plot(x, d["mean"], color=COLORS.get(arm), label=f"{label(arm)} - MLM (paired, n={d['n']})")
        right.fill_between(x, d["low"], d["high"], color=COLORS.get(arm), alpha=0.2)
    right.axhline(0, color="black", lw=0.8)
    right.set_xlabel("training compute (PFLOP)")
    right.set_ylabel("loss difference to MLM (same seed)")
    right.set_title("difference to MLM, 95% paired t-band (below 0: better)")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_downstream(down: dict[str, Any], path: Path, order: list[str]) -> Path:
    plt = _plt()
    tasks = list(down)
    fig, axes = plt.subplots(1, max(len(tasks), 1), figsize=(6.2 * max(len(tasks), 1), 4.4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=False):
        d = down[task]
        names = [n for n in order if n in d["scores"]]
        for i, name in enumerate(names):
            vals = [v for v in d["scores"][name] if v is not None]
            s = d["summary"][name]
            ax.errorbar([i], [s["estimate"]], yerr=[[s["estimate"] - (s["low"] if s["low"] is not None else s["estimate"])],
                                                     [(s["high"] if s["high"] is not None else s["estimate"]) - s["estimate"]]],
                        fmt="o", color=COLORS.get(name, "C1"), capsize=5, ms=7)
            ax.scatter(np.full(len(vals), i) + np.linspace(-0.15, 0.15, len(vals)), vals, s=12,
                       color=COLORS.get(name, "C1"), alpha=0.5)
        if d["majority"] is not None:
            ax.axhline(d["majority"], color="black", ls="--", lw=0.8, label="majority class")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(names)), [label(n) for n in names], rotation=15, fontsize=8)
        ax.set_ylabel(f"test {d['metric']}")
        ax.set_title(f"{task}: mean, 95% t-interval and each fine-tuning seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------------ tables
def curve_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for r in data["pretrain"]:
        for c in r["curve"]:
            rows.append({"arm": r["arm"], "mode": r["mode"], "seed": r["seed"], "step": c["step"],
                         "train_flops": c.get("train_flops"), "eval_loss": c["eval_loss"],
                         "eval_accuracy": c.get("eval_accuracy"), "sequences_seen": c.get("sequences_seen"),
                         "rows_seen": c.get("rows_seen"), "masked_targets_seen": c.get("masked_targets_seen")})
    if data.get("warmup"):
        for c in data["warmup"]["curve"]:
            rows.append({"arm": "warmup", "mode": "any", "seed": 0, "step": c["step"], "train_flops": c.get("train_flops"),
                         "eval_loss": c["eval_loss"], "eval_accuracy": c.get("eval_accuracy"),
                         "sequences_seen": c.get("sequences_seen"), "rows_seen": c.get("rows_seen"),
                         "masked_targets_seen": c.get("masked_targets_seen")})
    return rows


def band_rows(pre: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for mode, res in pre.items():
        if "bands" not in res:
            continue
        for arm, b in res["bands"].items():
            for j, x in enumerate(b["flops"]):
                rows.append({"mode": mode, "series": arm, "kind": "loss", "train_flops": x, "mean": b["mean"][j],
                             "low": b["low"][j], "high": b["high"][j], "n": b["n"][j]})
        for arm, d in res["differences"].items():
            for j, x in enumerate(d["flops"]):
                rows.append({"mode": mode, "series": f"{arm}-mlm", "kind": "paired difference", "train_flops": x,
                             "mean": d["mean"][j], "low": d["low"][j], "high": d["high"][j], "n": d["n"]})
    return rows


def comparison_rows(pre: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for mode, res in pre.items():
        if "arms" not in res:
            continue
        for arm, a in res["arms"].items():
            for metric in ("final_loss", "mean_loss"):
                m = a[metric]
                rows.append({"mode": mode, "arm": arm, "quantity": metric, "estimate": m["estimate"], "low": m["low"],
                             "high": m["high"], "n": m["n"], "std": m["std"], "method": "t over seeds"})
        for arm, comp in res["comparisons"].items():
            for metric in ("final_loss", "mean_loss"):
                for how in ("paired", "welch"):
                    m = comp[metric][how]
                    rows.append({"mode": mode, "arm": arm, "quantity": f"{metric} difference to MLM ({how})",
                                 "estimate": m["estimate"], "low": m["low"], "high": m["high"], "n": m["n"],
                                 "p": m["p"], "method": m["method"],
                                 "verdict": comp[metric]["verdict"] if how == "paired" else st.verdict(
                                     st.Interval(m["estimate"], m["low"] if m["low"] is not None else st.NAN,
                                                 m["high"] if m["high"] is not None else st.NAN, m["n"]))})
            for key in res["targets"]:
                m = comp[f"ratio_to_{key}"]
                rows.append({"mode": mode, "arm": arm, "quantity": f"compute to target {key} / MLM's",
                             "estimate": m["estimate"], "low": m["low"], "high": m["high"], "n": m["n"], "p": m["p"],
                             "method": m["method"], "verdict": m["verdict"], "bound": m["bound"],
                             "not_reached_arm": m["not_reached"]["arm"],
                             "not_reached_mlm": m["not_reached"]["reference"]})
    return rows


def run_rows(pre: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"mode": mode, **r} for mode, res in pre.items() for r in res.get("per_run", [])]


def downstream_rows(down: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    per_seed, summary = [], []
    for task, d in down.items():
        for row, vals in d["scores"].items():
            for i, v in enumerate(vals):
                per_seed.append({"task": task, "row": row, "seed_index": i + 1, f"test_{d['metric']}": v,
                                 f"dev_{d['metric']}": (d["dev_scores"].get(row) or [None] * len(vals))[i]})
            s = d["summary"][row]
            c = d["vs_mlm"].get(row, {})
            b = d["vs_no_continual"].get(row, {})
            summary.append({"task": task, "row": row, "metric": d["metric"], "mean": s["estimate"], "std": s["std"],
                            "low": s["low"], "high": s["high"], "n": s["n"], "majority": d["majority"],
                            "diff_to_mlm": c.get("estimate"), "diff_low": c.get("low"), "diff_high": c.get("high"),
                            "welch_p": c.get("p"), "exceeds_seed_noise": c.get("exceeds_seed_noise"),
                            "diff_to_no_continual": b.get("estimate"), "diff_nc_low": b.get("low"),
                            "diff_nc_high": b.get("high"), "exceeds_seed_noise_vs_no_continual": b.get("exceeds_seed_noise")})
    return per_seed, summary


# ------------------------------------------------------------------------------------------------ README
def part_walls(timings: dict[str, Any]) -> dict[str, float]:
    walls: dict[str, float] = {}
    for entry in timings.values():
        walls[entry.get("part", "?")] = walls.get(entry.get("part", "?"), 0.0) + float(entry.get("wall_s", 0.0))
    return walls


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def override(plan_list: list[str], key: str) -> Any:
    from femlm.study.plan import override_value

    return override_value(plan_list, key)


def run_config(run_dir: str | Path | None) -> dict[str, Any]:
    """The resolved config a run recorded (config.yaml): what it actually ran with."""
    import yaml

    path = Path(run_dir or "") / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if run_dir and path.is_file() else {}


def scale_lines(plan: dict[str, Any], data: dict[str, Any]) -> list[str]:
    p = plan["pretrain"]
    e = data.get("encoder") or {}
    warm = (data.get("warmup") or {}).get("summary") or {}
    wcfg = run_config((data.get("warmup") or {}).get("dir"))
    corpus = warm.get("corpus") or {}
    lines = []
    enc_label = plan["encoder"].get("label", "the encoder")
    params = f"{e['parameters'] / 1e6:.1f}M parameters" if e.get("parameters") else ""
    lines.append(f"- **Model**: {enc_label}; {params}; weights sha256 `{(e.get('sha256') or '?')[:16]}...`. "
                 "A fresh MLM head is initialised (`model.new_mlm_head=true`; the decoder is tied to the word "
                 "embeddings, so the new parameters are the head's transform, LayerNorm and bias).")
    if corpus:
        sp = corpus.get("splits", {})
        tr, va = sp.get("train", {}), sp.get("validation", {})
        lines.append(f"- **Corpus**: the mirror's CS stand-in ({', '.join(corpus.get('sources', []))}): "
                     f"{fmt(tr.get('documents'))} training documents, {fmt(tr.get('tokens'))} tokens, "
                     f"{fmt(tr.get('blocks'))} blocks of {corpus.get('block_size')} tokens; "
                     f"{fmt(va.get('blocks'))} held-out blocks from {fmt(va.get('documents'))} other documents, of which "
                     f"{(wcfg.get('data') or {}).get('eval_blocks', '?')} (one fixed mask, the same for every arm and "
                     "checkpoint) give the held-out loss. Not DAPT's 72,000-paper corpus.")
    seen = warm.get("seen", {})
    wt = wcfg.get("trainer") or {}
    starts = [r["curve"][0]["eval_loss"] for r in data["pretrain"] if r["curve"] and r["curve"][0]["step"] == 0]
    lines.append(f"- **Warm-up** (shared by every arm): MLM, {warm.get('steps', '?')} steps x "
                 f"{warm.get('rows_per_step', '?')} rows, lr {wt.get('lr', '?')}; {fmt(seen.get('source_tokens'))} "
                 f"tokens, {fmt((seen.get('train_flops') or 0) / 1e15, 3)} PFLOP; held-out loss "
                 f"{fmt(warm.get('first_eval_loss'))} (fresh head) -> {fmt(warm.get('final_eval_loss'))}"
                 + (f"; the arms' step-0 held-out loss: {fmt(min(starts))}-{fmt(max(starts))} (the same weights "
                    "and held-out set: it must equal the warm-up's last)" if starts else "") + ".")
    runs = data["pretrain"]
    mlm = next((r for r in runs if r["mode"] == "any"), None)
    kcopy = next((r for r in runs if r["mode"] == "same_sequences"), None)
    if mlm:
        cfg = run_config(mlm["dir"])
        t, rt = cfg.get("trainer") or {}, cfg.get("runtime") or {}
        ms = mlm["summary"]
        k = int(p.get("num_masks", 4))
        flops = [r["summary"]["seen"]["train_flops"] for r in runs if r.get("summary")]
        lines.append(
            f"- **Pre-training arms**: {', '.join(label(a) for a in p['arms'])}; equal-compute modes "
            f"{', '.join(MODE_LABEL[m] for m in p['modes'])} (MLM is one run for both); seeds "
            f"{sorted({r['seed'] for r in runs})}; {ms['steps']} steps of {ms['rows_per_step']} rows for MLM and "
            f"same-rows arms ({ms['rows_per_step'] // k} sequences x {k} copies), "
            + (f"{kcopy['summary']['steps']} steps of {kcopy['summary']['rows_per_step']} rows for same-sequences "
               "arms, " if kcopy else "")
            + f"lr {t.get('lr')} ({t.get('schedule')} decay after {t.get('warmup_ratio')} warm-up), held-out loss "
            f"every {rt.get('eval_every')} MLM-equivalent steps; {fmt(np.mean(flops) / 1e15, 3)} PFLOP and "
            f"{fmt(ms['seen']['rows'])} rows per run, {fmt(ms['seen']['source_tokens'])} source tokens for MLM "
            f"(1/{k} of that for the K-copy arms, {ms['seen']['source_tokens'] / max(1, (corpus.get('splits') or {}).get('train', {}).get('tokens', 1)):.2f} "
            f"passes over the corpus); {len(runs)} runs finished.")
    f = plan.get("finetune")
    ft = next((r for r in data["finetune"] if r.get("results")), None)
    if f and ft:
        rec, sc = ft["results"].get("recipe", {}), ft["results"].get("scale", {})
        lines.append(f"- **Fine-tuning**: {', '.join(f['tasks'])}; the arms' final checkpoints ({MODE_LABEL[f['mode']]}, "
                     f"pre-training seed {f['pretrain_seed']}) and the no-continual baseline (the encoder as released, "
                     "without its pooler like every continual checkpoint, so all rows start from a fresh pooler and "
                     f"classifier); seeds {f['seeds']}; at most {sc.get('max_train_examples')} training "
                     "examples (stratified, the same subsample for every row), "
                     f"{rec.get('epochs')} epochs, lr {rec.get('lr')}, batch {rec.get('batch_size')}, max length "
                     f"{rec.get('max_length')}; the best dev epoch is scored on test (DAPT's protocol, macro-F1).")
    threads = (wcfg.get("runtime") or {}).get("threads", "?")
    lines.append(f"- **Hardware**: {cpu_model()}, {threads} threads, "
                 f"{warm.get('precision', 'fp32')}; torch {_version('torch')}, transformers {_version('transformers')}.")
    return lines


def _version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def decomposition_section(dec: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for where, d in dec.items():
        j = d.get("json")
        if not j:
            continue
        s, terms = j["settings"], j["terms"]
        lines += [f"### On the {'warmed-up encoder (where every arm starts)' if where == 'warmup' else 'final MLM checkpoint'}",
                  "",
                  f"Pool of {s['pool']} held-out blocks, tau = {s['tau']}, R = {s['batch_rows']} rows per step, "
                  f"K in {s['num_masks']}; {s['check_batches']} directly resampled batches; parameters: "
                  f"{', '.join(j['parameters']['patterns'])} ({fmt(j['parameters']['numel'])} values); "
                  f"95% bootstrap intervals over the pool's sequences.", "",
                  "| term | estimate [95% CI] |", "|---|---|",
                  f"| data term sigma_d2 | {fmt_ci(_term(terms['sigma_d2']), 4)} |",
                  f"| mask term sigma_m2 | {fmt_ci(_term(terms['sigma_m2']), 4)} |",
                  f"| c_FE (two disjoint masks of one sequence) | {fmt_ci(_term(terms['c_fe']), 4)} |",
                  f"| c_iid (control, 0 expected) | {fmt_ci(_term(terms['c_iid']), 4)} |", "",
                  "| K | FE / MLM variance per unit compute, predicted [95% CI] | measured, same rows | measured, same "
                  "sequences | i.i.d. / MLM predicted | verdict |", "|---:|---|---|---|---|---|"]
        for k, v in j["verdicts"].items():
            fe, iid = v["fe"], v["iid"]
            lines.append(f"| {k} | {fmt_ci(_ratio(fe['per_compute_vs_mlm'], fe['ci']))} | "
                         f"{fmt_ci(_ratio(fe['measured_same_rows'], fe['measured_same_rows_ci']))} | "
                         f"{fmt_ci(_ratio(fe['measured_same_sequences'], fe['measured_same_sequences_ci']))} | "
                         f"{fmt_ci(_ratio(iid['per_compute_vs_mlm'], iid['ci']))} | {fe['verdict']} |")
        v4 = j["verdicts"].get("4") or next(iter(j["verdicts"].values()))
        fe = v4["fe"]
        ci = fe["ci"]
        share = terms["sigma_d2"]["estimate"] / max(terms["sigma_d2"]["estimate"] + terms["sigma_m2"]["estimate"], 1e-30)
        lines += ["", f"Reading: of one MLM row's gradient variance, the data term is {share:.0%} and the mask term "
                  f"{1 - share:.0%}. FE lowers the variance at equal compute only if c_FE < -sigma_d2 (the module "
                  f"docstring of femlm/analysis/decomposition.py); here c_FE + sigma_d2 = "
                  f"{fmt_ci(_ratio(fe['c_plus_sigma_d2'], fe['c_plus_sigma_d2_ci']), 4)}. "
                  + _ratio_sentence(fe["per_compute_vs_mlm"], ci), ""]
        null = j.get("null_model", {}).get("summary", {})
        if null:
            frac = null.get("fraction_explained")
            frac_ci = null.get("fraction_explained_ci") or [None, None]
            lines += ["Assumption 1 against the additive null model (Cov(H) of a model whose gradient is a sum of "
                      f"per-token terms): measured decrease of the covariance over Hamming distance "
                      f"{fmt_ci(_ratio(null.get('measured_decrease'), null.get('measured_decrease_ci')), 4)}, the "
                      f"additive model's {fmt_ci(_ratio(null.get('additive_decrease'), null.get('additive_decrease_ci')), 4)}, "
                      f"fraction explained {fmt_ci(_ratio(frac, frac_ci), 2)}; residual (interaction) decrease "
                      f"{fmt_ci(_ratio(null.get('residual_decrease'), null.get('residual_decrease_ci')), 4)}. "
                      + _null_sentence(null), ""]
        lines += [f"![decomposition](decomposition_{where}.png)", "", f"![null model](null_model_{where}.png)", ""]
    return lines


def _term(t: dict[str, Any]) -> dict[str, Any]:
    ci = t.get("ci") or [None, None]
    return {"estimate": t.get("estimate"), "low": _num(ci[0]), "high": _num(ci[1])}


def _num(x: Any) -> float | None:
    return float(x) if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None


def _ratio(value: Any, ci: Any) -> dict[str, Any]:
    ci = ci or [None, None]
    return {"estimate": _num(value), "low": _num(ci[0]), "high": _num(ci[1])}


def _ratio_sentence(value: float, ci: list[float]) -> str:
    lo, hi = _num(ci[0]), _num(ci[1])
    if lo is None or hi is None:
        return "No interval was computed, so no verdict is drawn."
    if hi < 1:
        return (f"At K=4 the predicted ratio {value:.3f} [{lo:.3f}, {hi:.3f}] is below 1: at this checkpoint FE's "
                "training gradient has lower variance than MLM's at equal compute.")
    if lo > 1:
        return (f"At K=4 the predicted ratio {value:.3f} [{lo:.3f}, {hi:.3f}] is above 1: at equal compute FE's "
                "training gradient has *higher* variance than MLM's (the K copies cost K times fewer sequences, "
                "and the data variance this adds outweighs the negative covariance between disjoint masks).")
    return (f"At K=4 the predicted ratio {value:.3f} [{lo:.3f}, {hi:.3f}] contains 1: no difference in "
            "training-gradient variance at equal compute was detected.")


def _null_sentence(null: dict[str, Any]) -> str:
    ci = null.get("residual_decrease_ci") or [None, None]
    lo, hi = _num(ci[0]), _num(ci[1])
    if lo is None or hi is None:
        return ""
    if lo > 0:
        return ("The residual decreases with H beyond the additive model: evidence of context interactions, which "
                "Assumption 1 needs.")
    if hi < 0:
        return "The residual *increases* with H: the measured decrease is smaller than the additive model gives."
    return ("The residual's decrease contains 0: the covariance's fall with H is what additive per-token "
            "gradients give, so this does not test Assumption 1 beyond the null model.")


def pretrain_section(plan: dict[str, Any], pre: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for mode, res in pre.items():
        lines += [f"### {MODE_LABEL[mode]}", ""]
        if "arms" not in res:
            lines += [f"Not analysed: {res.get('skipped')}.", ""]
            continue
        lo, hi = res["range"]
        falling = res["falling"]
        lines += [f"Common compute range {lo / 1e15:.3f}-{hi / 1e15:.3f} PFLOP ({len(res['grid'])} grid points). "
                  f"Over the last quarter of the budget the MLM loss fell by "
                  f"{fmt_ci(falling['last_quarter_drop'])} (95% t-interval over seeds): "
                  + ("still clearly falling at the end." if falling["falling"] else
                     "**not clearly falling** at the end (the interval reaches 0), so the budget may be past the "
                     "part of training where the arms could separate."), "",
                  "| arm | seeds | final loss [95% CI] | mean loss over the budget (AUC / range) [95% CI] |",
                  "|---|---:|---|---|"]
        for arm, a in res["arms"].items():
            lines.append(f"| {label(arm)} | {len(a['seeds'])} | {fmt_ci(a['final_loss'])} | {fmt_ci(a['mean_loss'])} |")
        lines += ["", "| arm vs MLM | final loss difference, paired [95% CI] | mean loss difference, paired [95% CI] | "
                  + " | ".join(f"compute to reach target {k} (loss {t['loss']:.3f}) / MLM's [95% CI]" for k, t in
                               res["targets"].items()) + " |",
                  "|---|---|---|" + "---|" * len(res["targets"])]
        for arm, c in res["comparisons"].items():
            cells = [f"{label(arm)}", f"{fmt_ci(c['final_loss']['paired'])} ({c['final_loss']['verdict']})",
                     f"{fmt_ci(c['mean_loss']['paired'])} ({c['mean_loss']['verdict']})"]
            for key in res["targets"]:
                r = c[f"ratio_to_{key}"]
                nr = r["not_reached"]
                extra = f"; not reached by {nr['arm']} arm / {nr['reference']} MLM runs" if nr["arm"] or nr["reference"] else ""
                cells.append(f"{fmt_ci(r)} ({r['verdict']}{extra})")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"![loss vs compute]({'loss_vs_flops_' + mode}.png)", ""]
    return lines


def downstream_section(down: dict[str, Any], order: list[str]) -> list[str]:
    lines: list[str] = []
    for task, d in down.items():
        lines += [f"### {task} (test {d['metric']} x 100; majority class {fmt(100 * d['majority'], 2) if d['majority'] is not None else 'n/a'})", "",
                  "| row | n | mean ± std | 95% CI | vs MLM (Welch) [95% CI] | vs no continual [95% CI] |",
                  "|---|---:|---|---|---|---|"]
        for row in [r for r in order if r in d["summary"]]:
            s = d["summary"][row]
            c, b = d["vs_mlm"].get(row), d["vs_no_continual"].get(row)
            lines.append(f"| {label(row)} | {s['n']} | {fmt(_x100(s['estimate']), 2)} ± {fmt(_x100(s['std']), 2)} | "
                         f"[{fmt(_x100(s['low']), 2)}, {fmt(_x100(s['high']), 2)}] | "
                         + (f"{fmt(_x100(c['estimate']), 2)} [{fmt(_x100(c['low']), 2)}, {fmt(_x100(c['high']), 2)}]: "
                            f"{'exceeds' if c['exceeds_seed_noise'] else 'does not exceed'} the seed noise" if c else "-")
                         + " | "
                         + (f"{fmt(_x100(b['estimate']), 2)} [{fmt(_x100(b['low']), 2)}, {fmt(_x100(b['high']), 2)}]: "
                            f"{'exceeds' if b['exceeds_seed_noise'] else 'does not exceed'} the seed noise" if b else "-")
                         + " |")
        above = [label(k) for k, v in d["above_majority"].items() if v]
        lines += ["", ("Rows whose whole 95% interval is above the majority class: " + ", ".join(above) + "."
                       if above else "No row's 95% interval is entirely above the majority class: at this scale "
                       "fine-tuning barely learns the task, and downstream differences cannot be expected to show."), ""]
    if down:
        lines += ["![downstream](downstream.png)", ""]
    return lines


def _x100(x: Any) -> float | None:
    return None if x is None else 100 * x


def conclusions(plan: dict[str, Any], dec: dict[str, Any], pre: dict[str, Any],
                down: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(what the evidence supports, what it does not, what the i.i.d. control shows), each bullet chosen by an
    interval."""
    supports, not_supported, controls = [], [], []
    for where, d in dec.items():
        j = d.get("json")
        if not j:
            continue
        at = "the warmed-up encoder" if where == "warmup" else "the final MLM checkpoint"
        v = j["verdicts"].get("4") or next(iter(j["verdicts"].values()))
        lo, hi = _num(v["fe"]["ci"][0]), _num(v["fe"]["ci"][1])
        ratio = v["fe"]["per_compute_vs_mlm"]
        if lo is not None and hi is not None and hi < 1:
            supports.append(f"Part 1: at {at}, FE (K=4) has lower training-gradient variance than MLM per unit "
                            f"compute (predicted ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}]).")
        elif lo is not None and hi is not None and lo > 1:
            not_supported.append(f"Part 1: at {at}, FE does not reduce the variance of the *training* gradient at "
                                 f"equal compute; it raises it (K=4 ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}]): the data "
                                 "variance of K times fewer sequences outweighs the covariance FE removes. The "
                                 "paper's variance argument covers the mask term only.")
        else:
            not_supported.append(f"Part 1: at {at}, no difference in training-gradient variance per unit compute "
                                 f"between FE (K=4) and MLM was detected (ratio {ratio:.3f}, interval contains 1).")
        null = j.get("null_model", {}).get("summary", {})
        ci = null.get("residual_decrease_ci") or [None, None]
        if _num(ci[0]) is not None and _num(ci[0]) > 0:
            supports.append(f"Part 2: at {at}, the gradient covariance falls with Hamming distance beyond what "
                            "additive per-token gradients give (residual decrease above 0): evidence of context "
                            "interactions (Assumption 1).")
        elif _num(ci[1]) is not None:
            not_supported.append(f"Part 2: at {at}, the fall of covariance with Hamming distance is not shown to "
                                 "exceed the additive null model's (the residual decrease interval reaches 0 or "
                                 "below), so Assumption 1 is not tested beyond what sampling tokens without "
                                 "replacement gives.")
    for mode, res in pre.items():
        if "comparisons" not in res:
            continue
        for arm, c in res["comparisons"].items():
            name = f"{label(arm)} vs MLM, {MODE_LABEL[mode]}"
            v = c["final_loss"]["verdict"]
            ratio = c.get("ratio_to_75%") or next((c[k] for k in c if k.startswith("ratio_to_")), None)
            rv = ratio["verdict"] if ratio else "no ratio"
            text = (f"Part 3 ({name}): final held-out loss {v} (paired difference {fmt_ci(c['final_loss']['paired'])}); "
                    f"compute to the 75% target: {rv} ({fmt_ci(ratio) if ratio else 'n/a'}).")
            if arm != "fe_subword":
                controls.append(text)
            elif v == "lower" or rv.startswith("less compute"):
                supports.append(text)
            else:
                not_supported.append(text)
    for task, d in down.items():
        fe = d["vs_mlm"].get("fe_subword")
        if fe is None:
            continue
        text = (f"Part 4 ({task}): FE-MLM - MLM = {fmt(_x100(fe['estimate']), 2)} "
                f"[{fmt(_x100(fe['low']), 2)}, {fmt(_x100(fe['high']), 2)}] test {d['metric']} x 100 (Welch, "
                f"{d['summary']['fe_subword']['n']} vs {d['summary'].get(plan['pretrain']['reference'], {}).get('n')} seeds)")
        if fe["exceeds_seed_noise"]:
            supports.append(text + ": exceeds the fine-tuning seed noise.")
        else:
            not_supported.append(text + ": does not exceed the fine-tuning seed noise.")
    return supports, not_supported, controls


def count_comparisons(pre: dict[str, Any], down: dict[str, Any]) -> int:
    n = 0
    for res in pre.values():
        for c in res.get("comparisons", {}).values():
            n += 2 + sum(1 for k in c if k.startswith("ratio_to_"))
    for d in down.values():
        n += len(d["vs_mlm"]) + len(d["vs_no_continual"])
    return n


def sizing_lines(plan: dict[str, Any], steps: list[Step], walls: dict[str, float]) -> list[str]:
    """The plan's arithmetic (unit costs measured beforehand x the work of each part) beside the wall time."""
    est = plan.get("estimate", {})
    sec = est.get("seconds", {})
    planned: dict[str, float] = {}
    counts: dict[str, int] = {}
    for s in steps:
        planned[s.part] = planned.get(s.part, 0.0) + s.estimate_s
        counts[s.part] = counts.get(s.part, 0) + (1 if s.command else 0)
    lines = ["### Plan, sizing and wall time", "",
             f"Sized beforehand from unit costs measured on this machine ({est.get('hardware', '?')}; "
             "`benchmarks/bench_study.py`, femlm/conf/experiment/study.yaml `estimate.seconds`): "
             + ", ".join(f"{k} {v} s" for k, v in sec.items() if not isinstance(v, dict)) + ". "
             + (est.get("breakdown", "") or ""), "",
             "| part | femlm commands | planned | measured wall |", "|---|---:|---:|---:|"]
    for part in dict.fromkeys(s.part for s in steps):
        if part in ("encoder",):
            continue
        lines.append(f"| {part} | {counts.get(part, 0)} | {minutes(planned.get(part, 0.0))} | "
                     f"{minutes(walls[part]) if part in walls else '-'} |")
    lines += [f"| **total** | {sum(counts.values())} | {minutes(sum(planned.values()))} | "
              f"{minutes(sum(walls.values())) if walls else '-'} |", ""]
    return lines


def write_readme(plan: dict[str, Any], data: dict[str, Any], pre: dict[str, Any], down: dict[str, Any],
                 timings: dict[str, Any], out: Path, order: list[str], steps: list[Step]) -> Path:
    walls = part_walls(timings)
    smoke = plan.get("smoke")
    title = "FE-MLM evidence study" + (" (SMOKE RUN: toy scale, numbers mean nothing)" if smoke else "")
    lines = [f"# {title}", "",
             "_Generated by `python -m femlm.study` (`make study`) from the runs under "
             f"`{plan['runs_dir']}`; every number and every verdict below is computed from them "
             f"({time.strftime('%Y-%m-%d %H:%M')})._", "",
             "Three questions of issue 17, each answered with error bars: (1) does fully-explored masking reduce the "
             "variance of the *training* gradient at equal compute, and is the paper's Assumption 1 more than what "
             "additive per-token gradients give; (2) does FE make training faster at equal compute (held-out MLM "
             "loss against training FLOPs, MLM vs FE-MLM vs the i.i.d. K-mask control, in both equal-compute modes); "
             "(3) does anything survive downstream (ACL-ARC, SciERC)?", ""]
    if data["missing"]:
        lines += [f"**Incomplete: {len(data['missing'])} step(s) had not finished** when this was written: "
                  + "; ".join(data["missing"]) + ". The statistics use the runs that finished.", ""]
    if data["optional_missing"]:
        lines += ["Optional step(s) not run (the time budget, estimate.budget_minutes, did not allow them): "
                  + "; ".join(data["optional_missing"]) + ".", ""]
    lines += ["## What was measured, at what scale", "", *scale_lines(plan, data), ""]
    lines += sizing_lines(plan, steps, walls)
    supports, not_supported, controls = conclusions(plan, data["decomposition"], pre, down)
    lines += ["## What the evidence supports", ""] + ([f"- {s}" for s in supports] or
                                                      ["- Nothing in FE-MLM's favour: no such interval excludes 'no "
                                                       "difference'."])
    lines += ["", "## What it does not support", ""] + ([f"- {s}" for s in not_supported] or ["- (none)"])
    if controls:
        lines += ["", "## The i.i.d. K-mask control (K copies without the non-overlap)", ""] + [f"- {s}" for s in controls]
    n_comp = count_comparisons(pre, down)
    n_seeds = len({r["seed"] for r in data["pretrain"]}) or len(plan["pretrain"]["seeds"])
    tq = st.t_quantile(n_seeds - 1) if n_seeds > 1 else float("nan")
    lines += ["", f"Each interval is a per-comparison 95% interval; this README makes about {n_comp} comparisons, "
              "so one or two 'differences' among them are expected by chance alone. With "
              f"{n_seeds} pre-training seeds the t quantile is {tq:.2f} ({n_seeds - 1} degrees of freedom): only "
              "differences of several seed standard deviations can be told apart. The scale is tiny next to the paper's (RoBERTa-base, 40k steps of batch 48 x 512 "
              "tokens on 72k papers): a null result here does not rule out an effect at scale, and a positive one "
              "would still need to be reproduced there.", "",
              "## 1-2. Variance of the training gradient; Assumption 1 against the null model", ""]
    dec_lines = decomposition_section(data["decomposition"])
    lines += dec_lines or ["Not run (or not finished).", ""]
    lines += ["## 3. Training speed at equal compute", "",
              "Held-out MLM loss (fixed held-out blocks and masks) against cumulative training FLOPs "
              "(femlm/train/flops.py: dense encoder at every row token, head at masked tokens). Curves are "
              "interpolated linearly onto the union of their evaluation points; bands and intervals are Student-t over "
              "pre-training seeds; differences are paired by seed (a seed fixes the data order, of which a K-copy arm "
              "reads a prefix, and the dropout stream; every arm starts from the same warmed-up weights; all runs, "
              "the warm-up included, share one train/held-out document split, data.split_seed, so the held-out "
              "loss is on documents none of them trained on). Compute "
              "ratios are geometric-mean ratios with a paired t-interval on the log scale; a run that never reaches the "
              "target enters at its budget and makes the ratio a bound.", ""]
    lines += pretrain_section(plan, pre) or ["Not run (or not finished).", ""]
    lines += ["## 4. Downstream", "",
              "Fine-tuning seeds' test scores: mean ± sample std, 95% t-interval; differences by Welch's t-test. The "
              "arms' checkpoints come from one pre-training seed, so the intervals carry fine-tuning noise only.", ""]
    lines += downstream_section(down, order) or ["Not run (or not finished).", ""]
    lines += ["## Files", "",
              "- `study.json`: every number above (and the per-run values); `timings.json`: wall time per step.",
              "- `pretrain_curves.csv` (every evaluation of every run), `pretrain_bands.csv` (plotted means and bands, "
              "differences), `pretrain_runs.csv` (per-run final loss, mean loss, compute to each target), "
              "`pretrain_comparisons.csv` (intervals, p-values, verdicts).",
              "- `downstream_scores.csv` (per seed), `downstream_summary.csv` (means, intervals, differences).",
              "- `decomposition_<checkpoint>.csv`, `null_model_<checkpoint>.csv`, `decomposition_<checkpoint>.md`: the "
              "analysis' own tables.", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def summary_block(plan: dict[str, Any], data: dict[str, Any], pre: dict[str, Any], down: dict[str, Any],
                  timings: dict[str, Any]) -> str:
    """The short, generated summary the top-level README carries between its study markers."""
    supports, not_supported, _ = conclusions(plan, data["decomposition"], pre, down)
    total = sum(part_walls(timings).values())
    runs = len(data["pretrain"])
    lines = [BEGIN, "",
             f"_Generated from `results/study/` ({time.strftime('%Y-%m-%d')}; {runs} pre-training runs, wall "
             f"{minutes(total)} on this machine). Details, intervals and caveats: "
             "[results/study/README.md](results/study/README.md)._", ""]
    lines += ["Supported by the evidence:"] + ([f"- {s}" for s in supports] or ["- nothing beyond noise."])
    lines += ["", "Not supported at this scale:"] + ([f"- {s}" for s in not_supported] or ["- (none)"])
    if data["missing"]:
        lines += ["", f"(The study was incomplete: {len(data['missing'])} steps missing.)"]
    lines += ["", END]
    return "\n".join(lines)


def update_readme(readme: Path, block: str) -> bool:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + block + tail)
    return True


# ------------------------------------------------------------------------------------------------ main
def write_results(plan: dict[str, Any], steps: list[Step], runs: Path, out: Path, timings: dict[str, Any],
                  readme: Path | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    data = collect(plan, steps, runs)
    pre = analyse_pretraining(plan, data)
    down = analyse_downstream(plan, data)
    order = ["no_continual", "warmup_only", *plan["pretrain"]["arms"]]
    for mode, res in pre.items():
        if "bands" in res:
            plot_curves(mode, res, out / f"loss_vs_flops_{mode}.png",
                        f"held-out MLM loss vs training compute, {MODE_LABEL[mode]}")
    if down:
        plot_downstream(down, out / "downstream.png", order)
    write_csv(out / "pretrain_curves.csv", curve_rows(data))
    write_csv(out / "pretrain_bands.csv", band_rows(pre))
    write_csv(out / "pretrain_runs.csv", run_rows(pre))
    write_csv(out / "pretrain_comparisons.csv", comparison_rows(pre))
    per_seed, summary = downstream_rows(down)
    write_csv(out / "downstream_scores.csv", per_seed)
    write_csv(out / "downstream_summary.csv", summary)
    for where, d in data["decomposition"].items():
        src = Path(d["dir"])
        for name in ("decomposition.csv", "null_model.csv", "decomposition.png", "null_model.png", "decomposition.md"):
            if (src / name).is_file():
                stem, ext = name.rsplit(".", 1)
                shutil.copy2(src / name, out / f"{stem}_{where}.{ext}")
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    study = {"kind": "study", "smoke": bool(plan.get("smoke")), "plan": plan, "missing": data["missing"],
             "optional_not_run": data["optional_missing"],
             "encoder": data.get("encoder"), "warmup": (data.get("warmup") or {}).get("summary"),
             "decomposition": {k: (v.get("json") or {}).get("verdicts") for k, v in data["decomposition"].items()},
             "decomposition_terms": {k: (v.get("json") or {}).get("terms") for k, v in data["decomposition"].items()},
             "null_model": {k: (v.get("json") or {}).get("null_model", {}).get("summary")
                            for k, v in data["decomposition"].items()},
             "pretraining": {m: {k: v for k, v in r.items() if k not in ("bands", "differences")} for m, r in pre.items()},
             "downstream": down, "timings": timings, "wall_s_by_part": part_walls(timings),
             "hardware": {"cpu": cpu_model(), "platform": platform.platform()}}
    (out / "study.json").write_text(json.dumps(clean(study), indent=2, default=_json_default) + "\n")
    path = write_readme(plan, data, pre, down, timings, out, order, steps)
    if readme is not None and not plan.get("smoke"):
        update_readme(readme, summary_block(plan, data, pre, down, timings))
    return path


def clean(value: Any) -> Any:
    """NaN and infinities as null (strict JSON), recursively."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


__all__ = ["write_results", "final", "pretrain_dir"]
