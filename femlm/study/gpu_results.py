"""results/study-gpu/: what the GPU study's kept seeds say, and only what the declared analysis allows so far.

Before N complete seeds the README shows the gates, "k of N seeds", the speeds and the cards, and nothing that
compares the arms: no loss of an arm, no interval, no p-value, no verdict word (the per-seed records under
seeds/ hold the numbers, for the analysis at N). A study that stops or is abandoned before N reads *not decided*.
At N the declared family is read once, on the first N complete seeds, through femlm.study.verdicts (the one
reading rule of every study: its family, adjustment and readings), and the downstream tasks (secondary) get
paired intervals over the pre-training seeds, with every collapsed fine-tuning run counted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from femlm.experiment.schema import Experiment
from femlm.outputs import CRLF, finite, write_csv
from femlm.study import gpu_windows
from femlm.study.gpu_plan import Plan


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def windows(out: Path) -> list[dict[str, Any]]:
    path = out / "windows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def speeds(recs: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in recs:
        for arm, a in r["arms"].items():
            if a.get("row_tokens_per_s"):
                out.setdefault(arm, []).append(float(a["row_tokens_per_s"]))
    return out


# ---------------------------------------------------------------------------------------------- at N
def analysis(exp: Experiment, out: Path, used: list[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    """The declared family on the seeds used (femlm.study.verdicts), and the downstream intervals."""
    from femlm.study.collect import pretrain_entry
    from femlm.study.compare import analyse_pretraining
    from femlm.study.verdicts import adjust, pretrain_comparisons

    plan = exp.raw
    data: dict[str, Any] = {"pretrain": [], "missing": []}
    for r in used:
        for arm in exp.pretrain.arms:
            entry = pretrain_entry(gpu_windows.seed_dir(out, r["seed"]) / arm)
            if entry is not None:
                mode = "any" if arm == exp.pretrain.reference else exp.pretrain.modes[0]
                data["pretrain"].append({"arm": arm, "mode": mode, "seed": r["seed"], **entry})
    comps = pretrain_comparisons(analyse_pretraining(plan, data), reference=exp.pretrain.reference)
    adjust(comps, plan)
    return comps, downstream(exp, used)


def downstream(exp: Experiment, used: list[dict[str, Any]]) -> dict[str, Any]:
    """Per task: each arm's mean over pre-training seeds (each the mean of its fine-tuning runs), arm - MLM paired
    by pre-training seed (intervals only: a secondary endpoint), and the collapsed runs."""
    from femlm.study.stats import paired, t_interval

    rows = [r for r in used if r.get("downstream")]
    out: dict[str, Any] = {"missing": [{"seed": r["seed"], "error": r.get("downstream_error")} for r in used
                                       if r.get("downstream_error")]}
    ref = exp.pretrain.reference
    for task in exp.finetune.tasks:
        per = {arm: [r["downstream"][arm][task]["mean"] for r in rows] for arm in exp.pretrain.arms}
        out[task] = {"seeds": len(rows), "metric": rows[0]["downstream"][ref][task]["metric"] if rows else None,
                     "arms": {arm: {**t_interval(v).as_dict(), "collapsed": sum(
                         r["downstream"][arm][task]["collapsed"] for r in rows), "runs": sum(
                         r["downstream"][arm][task]["n"] for r in rows)} for arm, v in per.items()},
                     "vs_mlm": {arm: paired(per[arm], per[ref]).as_dict() for arm in exp.pretrain.arms if arm != ref}}
    return out


# ---------------------------------------------------------------------------------------------- writer
def write_results(exp: Experiment, plan: Plan, out: Path, window: dict[str, Any] | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    if window is not None:
        with (out / "windows.jsonl").open("a") as fh:
            fh.write(json.dumps(window) + "\n")
    recs = gpu_windows.records(out)
    done, bad = gpu_windows.complete(recs), gpu_windows.failed(recs)
    warm = gpu_windows.warmup_record(out)
    at_n = bool(warm.get("passed")) and not bad and len(done) >= plan.n
    used = done[:plan.n] if at_n else []
    comps, down = analysis(exp, out, used) if at_n else ([], {})
    from femlm.study.readings import rows as verdict_rows

    study = {"kind": "study", "name": exp.name, "n": plan.n, "n_declared": plan.n_declared,
             "revision": gpu_windows.revision(out), "seeds_complete": [r["seed"] for r in done],
             "seeds_failed": [{"seed": r["seed"], "arms": r["failed_arms"]} for r in bad],
             "decided_at_n": at_n, "seeds_used": [r["seed"] for r in used], "warmup": warm or None,
             "arm_gates": arm_gates(recs), "speeds": speeds(recs), "cards": sorted({r["card"] for r in recs}),
             "windows": windows(out), "plan": plan.text(),
             "comparisons": verdict_rows(comps) if at_n else None, "downstream": down or None,
             # at N, what each run read (femlm.study.headlines' scale line); nothing of the sort before
             "runs": [{"seed": r["seed"], "masking": arm, "seen": _read(
                 gpu_windows.seed_dir(out, r["seed"]) / arm / "summary.json").get("seen")}
                 for r in used for arm in exp.pretrain.arms]}
    (out / "study.json").write_text(json.dumps(finite(study), indent=2, default=str) + "\n")
    if at_n:
        write_csv(out / "comparisons.csv", verdict_rows(comps), line_end=CRLF)
    path = out / "README.md"
    path.write_text("\n".join(readme(exp, plan, study, comps, warm)))
    return path


def arm_gates(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The arms' gate without the arms' losses: passed runs, and the warm-up checkpoint's ACL held-out loss."""
    gates = [a["gate"] for r in recs for a in r["arms"].values()]
    warm = sorted({round(g["warmup_loss"], 4) for g in gates if g.get("warmup_loss") is not None})
    return {"runs": len(gates), "passed": sum(bool(g["passed"]) for g in gates), "warmup_loss": warm}


def readme(exp: Experiment, plan: Plan, study: dict[str, Any], comps: list[Any], warm: dict[str, Any]) -> list[str]:
    from femlm.study.readings import verdict_lines
    from femlm.study.verdicts import declared_text

    rep, g = exp.report, exp.gpu
    k, n = len(study["seeds_complete"]), plan.n
    lines = [f"# {rep.title}", "", rep.intro or "", "", "## Declared before the data", "",
             f"The family {declared_text(exp.raw)}, in femlm/conf/experiment/{exp.name}.yaml; the plan as it "
             "stands:", "",
             "```", plan.text(), "```", ""]
    if study["seeds_failed"]:
        status = (f"**Not decided: the study stopped** at seed {study['seeds_failed'][0]['seed']} (an arm failed its "
                  f"gate: {g.gates.on_arm_fail}); {k} of {n} seeds complete.")
    elif warm and not warm["passed"]:
        status = f"**Not decided: the study stopped** at the warm-up's gate ({g.gates.on_warmup_fail})."
    elif not study["decided_at_n"]:
        status = (f"**{k} of {n} seeds.** The declared analysis runs once, at {n} complete seeds; until then "
                  f"this README shows {g.analysis.before_n}.")
    else:
        status = f"**{n} of {n} seeds: the declared analysis, read once** (seeds {_span(study['seeds_used'])})."
    lines += ["## Where the study stands", "", status, "", "## Gates", ""]
    if warm:
        gate = warm["gate"]
        lines.append(f"- Warm-up ({warm['card']}, window {warm['window']}): {warm['domain']} held-out loss {gate['loss']:.4f} "
                     f"against the context-free baseline {gate['baseline']:.4f} under the evaluation's masking law "
                     f"(unigram {warm['baseline']['unigram_loss']:.4f}; {warm['baseline']['targets']:,} masked "
                     f"positions): {gate['below_baseline']:.3f} nats below, gate {gate['margin']:g}: "
                     + ("**passed**" if gate["passed"] else "**failed**")
                     + (f"; checkpoint sha256 {warm['checkpoint_sha256'][:12]} (carried to every window)"
                        if gate["passed"] else ""))
    else:
        lines.append("- Warm-up: not trained yet.")
    ag = study["arm_gates"]
    if ag["runs"]:
        lines.append(f"- Arms: {ag['passed']} of {ag['runs']} runs ended below the warm-up checkpoint's ACL held-out "
                     f"loss ({', '.join(f'{x:.4f}' for x in ag['warmup_loss'])} at step 0)"
                     + (f"; failed: {study['seeds_failed']}" if study["seeds_failed"] else ""))
    lines += ["", "## Speeds and cards", ""]
    for arm, v in study["speeds"].items():
        lines.append(f"- {arm}: {min(v):,.0f}-{max(v):,.0f} row tokens/s over {len(v)} runs")
    lines += [f"- Cards: {', '.join(study['cards']) or 'none yet'}", "", "## Windows", "",
              "| window | card | minutes per part | seeds kept |", "|---|---|---|---|"]
    for w in study["windows"]:
        parts = ", ".join(f"{p} {s / 60:.2f}" for p, s in w["parts_s"].items())
        kept = ", ".join(f"{s['seed']} ({s['status']})" for s in w["seeds"]) or "none"
        lines.append(f"| {w['window']} | {w.get('card', '?')} | {parts} | {kept} |")
    lines.append("")
    if study["decided_at_n"]:
        lines += verdict_lines(comps, exp.raw)
        lines += downstream_lines(study["downstream"] or {})
    elif not study["seeds_failed"] and not (warm and not warm["passed"]):
        lines += next_window(bool(warm))
    lines += ["## What this scale lacks next to the paper's", "", rep.caveat or "", "",
              "Files: study.json, seeds/seed_NNN/ (seed.json and each run's summary, metrics, config and run.json), "
              "warmup/ (warmup.json, the run's files, the carried checkpoint), windows.jsonl"
              + (", comparisons.csv" if study["decided_at_n"] else "") + ".", ""]
    return lines


def _interval(c: dict[str, Any]) -> str:
    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:+.4f}"

    return f"{num(c['estimate'])} [{num(c['low'])}, {num(c['high'])}]"


def next_window(warmup_kept: bool) -> list[str]:
    """How the next window runs: the exact device command (femlm.study.gpu_command; benchmarks/gpu_bundle.py
    prints it with the checkout's commit and checks the size of what travels)."""
    from femlm.study.gpu_command import AFTER, carry_paths, study_command

    return ["## The next window", "",
            "Beside the data mirror, `FEMLM_MIRROR=../shared/data python benchmarks/gpu_bundle.py` prepares the copy "
            "(or finds it prepared), prints its size (at most 64 MiB) and this command with the checkout's commit "
            "(named -dirty when the tree has uncommitted changes); run it as one device call with timeout_s=600 and "
            f"carry {carry_paths(warmup_kept)}:", "", "```", study_command("<commit>"), "```", "", f"Then, {AFTER}.",
            ""]


def downstream_lines(down: dict[str, Any]) -> list[str]:
    lines = ["## Downstream (secondary: intervals only)", ""]
    lines += [f"- seed {m['seed']}: no downstream runs ({m['error']})" for m in down.get("missing", [])]
    for task, d in down.items():
        if task == "missing":
            continue
        lines.append(f"- {task} ({d['metric']}, {d['seeds']} pre-training seeds, each the mean of its fine-tuning "
                     "runs): " + "; ".join(f"{arm} - MLM {_interval(c)}" for arm, c in d["vs_mlm"].items())
                     + "; collapsed runs (one class for every test example, kept in the means): " + ", ".join(
                         f"{arm} {a['collapsed']} of {a['runs']}" for arm, a in d["arms"].items()))
    return [*lines, ""]


def _span(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if seeds else "none"
