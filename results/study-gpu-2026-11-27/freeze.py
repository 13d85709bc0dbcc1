"""How this folder's README.md, comparisons.csv, study.json readings and figure were written, once (issue 47).

The GPU study of 2026-11-27 is history: the code that ran it (femlm/study/gpu.py, gpu_plan.py, gpu_results.py at
b0e1bea with uncommitted changes) is replaced by issue 45's study, which writes results/study-gpu/. This script
rewrote the folder from its own files only (study.json, pretrain_bands.csv, masked_baseline.json, device_log.txt)
through femlm's shared reading rule (femlm/study/verdicts.py) and figure code (femlm/study/figures.py), at the
commit that renamed the folder. It is kept so the page says how it was made; it is not part of femlm and nothing
runs it again (a later femlm may not run it unchanged).

    python results/study-gpu-2026-11-27/freeze.py
"""

from __future__ import annotations

import json
from pathlib import Path

from femlm.outputs import CRLF, write_csv
from femlm.study.comparisons import pretrain_comparisons
from femlm.study.figures import bands_from_csv, plot_curves
from femlm.study.readings import rows, verdict_lines
from femlm.study.verdicts import adjust, strip_readings

HERE = Path(__file__).resolve().parent
# The family as study_gpu.yaml declared it before the run (50ef27b, 01:57), frozen here: that file is rewritten.
PLAN = {"name": "study_gpu", "pretrain": {"reference": "mlm_subword"},
        "stats": {"declared": {"when": "before", "date": "2026-11-27", "commit": "50ef27b",
                               "note": "issue 39, before the GPU run of 04:22-04:28"},
                  "confirmatory": ["training_loss/same_rows/fe_passes_subword/final_loss",
                                   "training_loss/same_rows/fe_subword/final_loss"]}}
GATE = ("no arm left the unigram plateau (a gate added after the run: 4ce42eb, 04:35; the runs ended at 04:28): "
        "every run predicted 'the' at every masked position")


def main() -> None:
    study = strip_readings(json.loads((HERE / "study.json").read_text()))
    base, masked = study["unigram_baseline"], json.loads((HERE / "masked_baseline.json").read_text())
    comps = pretrain_comparisons(study["pretraining"], reference="mlm_subword")
    ungated = {c.key: c for c in adjust(pretrain_comparisons(study["pretraining"], reference="mlm_subword"), PLAN)}
    for c in comps:
        c.gated.append(GATE)
    adjust(comps, PLAN)
    study["comparisons"] = rows(comps)
    (HERE / "study.json").write_text(json.dumps(study, indent=2) + "\n")
    write_csv(HERE / "comparisons.csv", rows(comps), line_end=CRLF)
    res = bands_from_csv(HERE / "pretrain_bands.csv", study["pretraining"])["same_rows"]
    drawn = plot_curves("same_rows", res, HERE / "loss_vs_flops_same_rows.png",
                        "held-out MLM loss vs training compute (2026-11-27: every run at the unigram plateau)",
                        ("unigram: token frequencies alone", base["loss"]))
    runs = study["runs"]
    accuracy = sorted({r["final_eval_accuracy"] for r in runs})
    speed = {}
    for r in runs:
        speed.setdefault(r["seed"], {})[r["masking"]] = r["row_tokens_per_s"]
    ratios = [v["fe_passes_subword"] / v["mlm_subword"] for v in speed.values()]
    finals = {arm: [r["final_eval_loss"] for r in runs if r["masking"] == arm] for arm in {r["masking"] for r in runs}}
    declared = [ungated[k] for k in PLAN["stats"]["confirmatory"]]
    env = study["environment"]
    lines = [
        "# FE-MLM at equal compute on a GPU, 2026-11-27: BERT from scratch on the CS corpus (history: it did not "
        "learn)", "",
        f"**This study did not learn, and is kept as history.** All {len(runs)} runs (3 arms x "
        f"{len(study['seeds_complete'])} seeds) ended as the same constant predictor: held-out accuracy "
        f"{accuracy[0]!r} in every run, exactly the share of the most frequent training token, "
        f"{masked['top_token']!r}, among the {masked['masked_positions']:,} masked positions the accuracy is scored on "
        f"({masked['top_count_masked']} of them; `masked_baseline.json`): every run predicted {masked['top_token']!r} "
        f"at every masked position. Their held-out losses ({min(min(v) for v in finals.values()):.3f}-"
        f"{max(max(v) for v in finals.values()):.3f}) sit above the {base['loss']:.3f} of predicting from the "
        "training blocks' token frequencies alone. Nothing here bears on whether FE pays. The GPU study that "
        "replaces it (issue 45) writes `results/study-gpu/`.", "",
        "_Frozen history: written once on 2026-11-27 (issue 47) by `freeze.py` beside it, from this folder's "
        "study.json and CSVs through femlm's one reading rule (femlm/study/verdicts.py); the code that ran the "
        "study has been replaced, and nothing regenerates this page._", "",
        "Issue 39: the paper's K-copy FE-MLM and fully-explored masking across passes against MLM, pre-training a "
        "BERT encoder (8 layers x 512) from scratch at equal compute (the same rows per step and steps for every "
        "arm), with as many seeds as one GPU command allowed. Held-out MLM loss against training FLOPs, paired by "
        "seed.", "",
        "## Provenance", "",
        f"- **Code**: {env['git_commit'][0].split('-')[0][:7]} with uncommitted changes (study.json "
        f"`environment.git_commit` is `{env['git_commit'][0]}`); the results writer and its plateau gate were "
        "committed after the run, in 4ce42eb (04:35).",
        f"- **Machine**: one {env['device'][0]} (the plan below was sized from H100 unit costs and names an H100); "
        f"torch {env['packages']['torch'][0]}, {env['precision'][0]}, eager, {env['threads'][0]} threads on a "
        "16-core machine.",
        "- **Invocations**: two (`device_log.txt`): seeds 1-4 (04:22-04:25), after which the first logged \"seed 5 "
        "and later not started: 159 s elapsed + ~37 s per seed would pass the 3.2-minute budget\"; then seeds 5-6 "
        "(04:27-04:28).",
        "- **Data**: the runs recorded no corpus or vocabulary sha256. The prepared data's sha256 below were computed "
        "from the prepared folder when the results were written (train.pt "
        f"`{base['sha256']['train.pt'][:12]}`, validation.pt `{base['sha256']['validation.pt'][:12]}`, vocabulary "
        f"`{base['sha256']['vocabulary'][:12]}`; full values in study.json), and reproduced on 2026-11-27 from the "
        "data mirror (`femlm.study.gpu.prepare` of issue 47's commit: the same three sha256), which is how "
        "`masked_baseline.json` was computed.", "",
        "## Plan (printed before the run, from H100 unit costs)", "", "```", study["plan"], "```", "",
        f"Complete seeds (every arm finished): {len(study['seeds_complete'])} of {len(study['seeds_planned'])} "
        "planned, in two invocations.", "",
        "| arm | seed | steps | rows/step | sequences/step | passes | final held-out loss | held-out accuracy | "
        "row tokens/s |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['masking']} | {r['seed']} | {r['steps']} | {r['rows_per_step']} | {r['sequences_per_step']} | "
              f"{r['passes']:.1f} | {r['final_eval_loss']!r} | {r['final_eval_accuracy']!r} | "
              f"{r['row_tokens_per_s']:,.0f} |" for r in runs]
    lines += [
        "", "## The plateau, and a gate added after the run", "",
        f"Predicting every held-out masked token from the training blocks' token frequencies alone scores "
        f"{base['loss']:.4f} nats per token over {base['held_out_tokens']:,} held-out tokens (the unigram baseline, "
        "the dashed line in the figure). Accuracy: the README first written compared the runs' 4.2% with the "
        f"{base['top_share']:.1%} of {base['top_token']!r} among *all* held-out tokens; among the "
        f"{masked['masked_positions']:,} masked positions the accuracy is scored on, {masked['top_token']!r} is "
        f"{masked['top_share_masked']:.4%}, which every run matched to the last digit: a constant prediction.", "",
        "**The gate is post hoc.** The family below was declared before the run (50ef27b, 01:57); the plateau gate "
        "(every arm's mean final held-out loss within 0.1 nats of the unigram loss: no loss or compute comparison is "
        "read) was written after it (4ce42eb, 04:35). What it overrode: both declared comparisons' intervals lie "
        "below 0 (" + "; ".join(f"{c.contrast}, {c.short}: {c.estimate:.3g} [{c.low:.3g}, {c.high:.3g}]"
                                for c in declared) + "), and without the gate they would read "
        + " and ".join(dict.fromkeys(f"*{c.reading}*" for c in declared)) + f" (of {len(declared)}). It stands: with every run predicting "
        f"{masked['top_token']!r}, a difference of a few thousandths of a nat is in how the output distribution fits "
        "token frequencies, not in what the masks teach. Its p-values are not printed.", "",
        "![loss vs compute](loss_vs_flops_same_rows.png)", "",
        f"_The figure draws the arms' mean final losses ({', '.join(f'{k} {v:.4f}' for k, v in drawn['final'].items())}"
        f") and the unigram baseline ({drawn['baseline']:.4f})._", "",
        "## Speed (eager, as run)", "",
        "; ".join(f"{arm} {min(v):,.0f}-{max(v):,.0f} row tokens/s" for arm, v in
                  ((a, [r['row_tokens_per_s'] for r in runs if r['masking'] == a]) for a in
                   ("mlm_subword", "fe_passes_subword", "fe_subword")))
        + f". FE across passes ran at {min(ratios):.2f}-{max(ratios):.2f}x MLM's row tokens per second, seed by "
        "seed: it costs what MLM costs in rows and FLOPs, not in wall time here (the likely cause, not profiled: "
        "the masker's per-row loop on the data thread, at 256 rows per step with 2 threads).", "",
        *[line.replace("femlm/conf/experiment/study_gpu.yaml lists", "femlm/conf/experiment/study_gpu.yaml listed "
                       "at 50ef27b (frozen in freeze.py)") for line in verdict_lines(comps, PLAN)],
        "## What this scale still lacks next to the paper's", "",
        "An 8-layer, 512-wide BERT from scratch on a ~0.8M-token stand-in CS corpus read ~12 times, not the paper's "
        "RoBERTa-base continued on DAPT's S2ORC CS papers for 40k steps of 48 x 512 tokens; 228 steps left every run "
        "at the plateau; no fine-tuning in this run.", "",
        "Files: comparisons.csv (every comparison, its reading; a gated one has no p), pretrain_runs.csv, "
        "pretrain_bands.csv, study.json, masked_baseline.json (the masked-position baseline), device_log.txt (both "
        "invocations), loss_vs_flops_same_rows.png, freeze.py (how this page was written).", ""]
    (HERE / "README.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
