"""results/study-gpu/: the GPU study's numbers from its complete seeds (all arms of a seed finished), through the
study pipeline's own statistics (femlm.study.compare.analyse_pretraining: curves against FLOPs, paired by seed)
and tables; a README whose every comparing sentence is chosen by an interval.

Every comparison is read by femlm.study.verdicts, the one writer of every study: the family is the keys of
`stats.confirmatory` (Holm), the rest exploratory (Benjamini-Hochberg); a null result is an interval. One gate of
its own: when no arm's held-out loss has left the unigram plateau (`plateau_gate`), no loss comparison is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from femlm.outputs import CRLF, finite, write_csv
from femlm.runs import environment_line, environment_under
from femlm.study.collect import pretrain_entry
from femlm.study.compare import analyse_pretraining
from femlm.study.figures import plot_curves
from femlm.study.gpu_plan import GpuPlan
from femlm.study.readings import rows as verdict_rows
from femlm.study.readings import verdict_lines
from femlm.study.tables import band_rows, run_rows
from femlm.study.verdicts import adjust, pretrain_comparisons

# A model that predicts from context beats the loss of predicting every masked token from the training set's token
# frequencies alone (the unigram cross-entropy); within this margin of it, it has not left that plateau.
PLATEAU_MARGIN = 0.1  # nats per masked token


def complete_seeds(runs: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in runs.glob("seed_*") if p.is_dir() and
                  p.name.split("_")[1].isdigit())


def collect(plan: dict[str, Any], runs: Path) -> dict[str, Any]:
    """The study's runs in femlm.study.collect's layout: the reference arm under mode "any" (compare.arm_runs)."""
    pre, data = plan["pretrain"], {"pretrain": [], "missing": []}
    for seed in complete_seeds(runs):
        for arm in pre["arms"]:
            entry = pretrain_entry(runs / f"seed_{seed}" / arm)
            mode = "any" if arm == pre["reference"] else pre["modes"][0]
            if entry is not None:
                # runs from before summary.json recorded it: the last held-out evaluation's accuracy
                last = entry["curve"][-1] if entry["curve"] else {}
                entry["summary"].setdefault("final_eval_accuracy", last.get("eval_accuracy"))
                data["pretrain"].append({"arm": arm, "mode": mode, "seed": seed, **entry})
    return data


def unigram_baseline(data_dir: Path) -> dict[str, Any] | None:
    """The held-out loss of a model that knows only the training blocks' token frequencies (add-one smoothed,
    special tokens left out, as the masks leave them out), and the held-out share of the most frequent token (the
    accuracy of always predicting it). None when the prepared blocks are not there."""
    import torch

    from femlm.data.config import DownloadConfig
    from femlm.data.tokenizer import vocabulary_fingerprint
    from femlm.data.tokens import file_sha256
    from femlm.models.load import load_tokenizer

    if not (data_dir / "train.pt").is_file() or not (data_dir / "validation.pt").is_file():
        return None
    tokenizer = load_tokenizer(str(data_dir / "tokenizer"), DownloadConfig(offline=True))
    special = torch.tensor(sorted(tokenizer.all_special_ids))
    train = torch.load(data_dir / "train.pt").flatten().long()
    held = torch.load(data_dir / "validation.pt").flatten().long()
    train, held = train[~torch.isin(train, special)], held[~torch.isin(held, special)]
    counts = torch.bincount(train, minlength=len(tokenizer)).double()
    counts[special] = 0
    prob = (counts + 1) / (counts + 1).sum()
    top = int(counts.argmax())
    return {"loss": float(-prob[held].log().mean()), "top_token": tokenizer.convert_ids_to_tokens(top),
            "top_share": float((held == top).double().mean()), "held_out_tokens": int(held.numel()),
            # what the runs read: the prepared folder (a device machine receives it as prepared here)
            "sha256": {"train.pt": file_sha256(data_dir / "train.pt"),
                       "validation.pt": file_sha256(data_dir / "validation.pt"),
                       "vocabulary": vocabulary_fingerprint(tokenizer)}}


def plateau_gate(summaries: list[dict[str, Any]], base: dict[str, Any] | None) -> list[str]:
    """Why no loss comparison may be read: every arm's mean final held-out loss within PLATEAU_MARGIN of the
    unigram loss (the models have learned token frequencies, not the masked words from their context)."""
    if base is None or not summaries:
        return []
    finals: dict[str, list[float]] = {}
    for s in summaries:
        finals.setdefault(s["masking"], []).append(float(s["final_eval_loss"]))
    means = {arm: sum(v) / len(v) for arm, v in finals.items()}
    if min(means.values()) < base["loss"] - PLATEAU_MARGIN:
        return []
    accuracy = [s.get("final_eval_accuracy") for s in summaries if s.get("final_eval_accuracy") is not None]
    acc = (f"; held-out accuracy {min(accuracy):.1%}-{max(accuracy):.1%} against the {base['top_share']:.1%} of "
           f"always predicting {base['top_token']!r}") if accuracy else ""
    return [f"no arm left the unigram plateau: mean final held-out losses {min(means.values()):.3f}-"
            f"{max(means.values()):.3f} against {base['loss']:.3f} for the training blocks' token frequencies "
            f"alone (not {PLATEAU_MARGIN:g} nats below it){acc}; a difference here is in how the output "
            "distribution fits token frequencies, not in what the masks teach"]


def write_results(plan: dict[str, Any], gp: GpuPlan, runs: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    ran = runs / "plan.json"  # the plan the training ran under (femlm.study.gpu writes it), else this one
    planned = json.loads(ran.read_text()) if ran.is_file() else {"text": gp.text(), "seeds": gp.seeds}
    data = collect(plan, runs)
    seeds = sorted({r["seed"] for r in data["pretrain"]})
    pre = analyse_pretraining(plan, data) if len(seeds) >= 2 else {}
    summaries = [r["summary"] for r in data["pretrain"]]
    base = unigram_baseline(runs / "data")
    gate = plateau_gate(summaries, base)
    comps = pretrain_comparisons(pre, reference=plan["pretrain"]["reference"])
    for c in comps:
        c.gated += ["no arm left the unigram plateau (the README's gate)"] if gate else []
    adjust(comps, plan)
    for mode, res in pre.items():
        if "bands" in res:
            plot_curves(mode, res, out / f"loss_vs_flops_{mode}.png", "held-out MLM loss vs training compute",
                        ("unigram: token frequencies alone", base["loss"]) if base else None)
    if pre:
        write_csv(out / "pretrain_bands.csv", band_rows(pre), line_end=CRLF)
        write_csv(out / "pretrain_runs.csv", run_rows(pre), line_end=CRLF)
        write_csv(out / "comparisons.csv", verdict_rows(comps), line_end=CRLF)
    env = environment_under(runs)
    study = {"kind": "study", "name": plan["name"], "smoke": bool(plan.get("smoke")), "seeds_complete": seeds,
             "seeds_planned": planned["seeds"], "plan": planned["text"], "unigram_baseline": base, "gated": gate,
             "comparisons": verdict_rows(comps), "runs": summaries, "environment": env,
             "pretraining": {m: {k: v for k, v in r.items() if k not in ("bands", "differences")} for m, r in pre.items()}}
    (out / "study.json").write_text(json.dumps(finite(study), indent=2, default=str) + "\n")
    return write_readme(plan, planned, out, seeds, comps, summaries, base, env, gate)


def write_readme(plan: dict[str, Any], planned: dict[str, Any], out: Path, seeds: list[int], comps: list[Any],
                 summaries: list[dict[str, Any]], base: dict[str, Any] | None, env: dict[str, Any],
                 gate: list[str]) -> Path:
    rep = plan["report"]
    lines = [f"# {rep['title']}", "", rep["intro"], "", "## Plan (printed before the run, from unit costs)", "", "```",
             planned["text"], "```", ""]
    missing = [s for s in planned["seeds"] if s not in seeds]
    lines += [f"Complete seeds (every arm finished): {len(seeds)} of {len(planned['seeds'])} planned"
              + (f"; not run: {', '.join(map(str, missing))}" if missing else "") + ".", "",
              f"Made by: {environment_line(env).rstrip('.')}.", ""]
    if summaries:
        lines += ["| arm | seed | steps | rows/step | sequences/step | passes | final held-out loss | row tokens/s |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {s['masking']} | {s['seed']} | {s['steps']} | {s['rows_per_step']} | {s['sequences_per_step']} | "
                  f"{s['passes']:.1f} | {s['final_eval_loss']:.4f} | {s['row_tokens_per_s']:,.0f} |" for s in summaries]
        lines.append("")
    if base is not None:
        lines += [f"Unigram baseline (femlm/study/gpu_results.py): predicting every held-out masked token from the "
                  f"training blocks' token frequencies alone scores {base['loss']:.4f} nats per token over "
                  f"{base['held_out_tokens']:,} held-out tokens; always predicting {base['top_token']!r} is right "
                  f"{base['top_share']:.1%} of the time. The prepared data's sha256: "
                  + ", ".join(f"{k} {v[:12]}" for k, v in base["sha256"].items()) + " (full values in study.json).",
                  ""]
    if gate:
        lines += [f"**Gate: {gate[0]}.** So every loss and compute comparison below reads *not decided*, whatever its "
                  "interval: a study that can answer whether FE pays must train until the held-out loss leaves this "
                  f"plateau (more than the {summaries[0]['steps']} steps run here).", ""]
    speeds: dict[str, list[float]] = {}
    for s in summaries:
        speeds.setdefault(s["masking"], []).append(float(s["row_tokens_per_s"]))
    if speeds:
        lines += ["Speed (eager, as run): " + "; ".join(f"{arm} {min(v):,.0f}-{max(v):,.0f} row tokens/s"
                                                    for arm, v in speeds.items())
                  + ". Equal compute is counted in rows and FLOPs, so a slower arm costs wall time only.", ""]
    lines += verdict_lines(comps, plan) if comps else ["## What the evidence says", "",
                                                       "- none yet: fewer than 2 complete seeds.", ""]
    lines += ["## What this scale still lacks next to the paper's", "", rep["caveat"], "",
              "Files: comparisons.csv (every comparison, raw and adjusted p, reading), pretrain_runs.csv, "
              "pretrain_bands.csv, study.json, loss_vs_flops_same_rows.png.", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))  # README.md's block: the runner's last step (femlm.study.headlines.refresh)
    return path
