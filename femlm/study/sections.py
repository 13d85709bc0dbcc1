"""The sections of results/study/README.md, each sentence that compares arms chosen by an interval."""

from __future__ import annotations

from typing import Any

import numpy as np

from femlm.analysis.decomposition_text import verdict_table
from femlm.analysis.gates import not_measured
from femlm.runs import cpu_model, environment_line, environment_under
from femlm.study.arms import label
from femlm.study.collect import run_config
from femlm.study.evidence import (
    dec_units,
    enough,
    null_interval,
    null_units,
    pool_size,
    prediction_label,
    run_gates,
    studied,
)
from femlm.study.text import (
    MODE_LABEL,
    as_interval,
    fmt,
    fmt_ci,
    fmt_sig,
    package_version,
    term_interval,
    x100,
)


def where_label(where: str, d: dict[str, Any]) -> str:
    """How the README names a decomposition run: its plan label, or the checkpoint it ran on."""
    at = "the warmed-up encoder" if d.get("checkpoint", where) == "warmup" else "the final MLM checkpoint"
    return f"{at}, {d['label']}" if d.get("label") else at


def headline_k(verdicts: dict[str, Any]) -> str:
    """The K a one-line verdict quotes: 4 where the run has it, else its largest K."""
    return "4" if "4" in verdicts else max(verdicts, key=int)


def curve_text(curve: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['step']}: {c['eval_loss']:.3f}" for c in curve)


def scale_lines(plan: dict[str, Any], data: dict[str, Any]) -> list[str]:
    p = plan.get("pretrain") or {}
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
    head = data.get("head_warmup") or {}
    if head.get("summary"):
        hs = head["summary"]
        htr = run_config(head.get("dir")).get("trainer") or {}
        lines.append(f"- **Head warm-up**: the fresh MLM head alone (trainer.trainable={htr.get('trainable')}; the "
                     f"encoder and the tied word embeddings frozen), {hs.get('steps', '?')} steps x "
                     f"{hs.get('rows_per_step', '?')} rows, lr {htr.get('lr', '?')}; held-out loss by step: "
                     f"{curve_text(head.get('curve') or [])}.")
    if warm:
        lines.append(f"- **Warm-up curve** (held-out loss by step, whole model): "
                     f"{curve_text((data.get('warmup') or {}).get('curve') or [])}.")
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
                 f"{warm.get('precision', 'fp32')}; torch {package_version('torch')}, transformers {package_version('transformers')}.")
    # what made the runs (issue 40): packages, device, threads, precision, corpus and vocabulary sha256
    lines.append(f"- {environment_line(environment_under(plan.get('runs_dir') or 'runs'))} "
                 "(full record: study.json's `environment`).")
    return lines


def _says(readings: dict[str, Any] | None, key: str) -> str:
    """The reading of comparison ``key`` as every table prints it (femlm.study.verdicts.says); "" when the study
    makes no such comparison."""
    from femlm.study.verdicts import says

    c = (readings or {}).get(key)
    return says(c) if c is not None else ""


def _value(readings: dict[str, Any] | None, key: str, fallback: str) -> str:
    """A comparison's estimate [interval] as the verdict writer prints it (enough digits near 1), with its reading."""
    from femlm.study.verdicts import fmt_value

    c = (readings or {}).get(key)
    return f"{fmt_value(c)}: {_says(readings, key)}" if c is not None else fallback


def decomposition_section(dec: dict[str, Any], model_parameters: int | None = None,
                          readings: dict[str, Any] | None = None) -> list[str]:
    """Per decomposition run: its terms, the per-K predictions with the study's reading of each, and the null
    model; ``readings``: the study's comparisons by key (femlm.study.verdicts)."""
    lines: list[str] = []
    for where, d in dec.items():
        j = d.get("json")
        if not j:
            continue
        gates = run_gates(j)
        s, terms = j["settings"], j["terms"]
        show = enough(pool_size(j))

        def term(name: str, terms: dict[str, Any] = terms, show: bool = show) -> str:
            t = term_interval(terms[name])
            return fmt_sig(t if show else {**t, "low": None, "high": None})

        lines += [f"### {d['label']}" if d.get("label") else
                  f"### On {'the warmed-up encoder (where every arm starts)' if where == 'warmup' else 'the final MLM checkpoint'}",
                  "",
                  f"Pool of {s['pool']} held-out blocks, tau = {s['tau']}, R = {s['batch_rows']} rows per step, "
                  f"K in {s['num_masks']}; {s['check_batches']} directly resampled batches; {studied(j, model_parameters)}; "
                  f"{dec_units(j)}.", ""]
        if gates["decomposition"]:
            lines += [f"**{not_measured(gates['decomposition'])}.** The numbers are printed; no reading is drawn.", ""]
        lines += ["| term | estimate" + (" [95% CI]" if show else "") + " |", "|---|---|",
                  f"| data term sigma_d2 | {term('sigma_d2')} |",
                  f"| mask term sigma_m2 | {term('sigma_m2')} |"]
        if "sigma_m2_from_fe_masks" in terms:
            lines.append(f"| sigma_m2 from the FE masks (a second unbiased estimate) | {term('sigma_m2_from_fe_masks')} |")
        per_k = {str(k): _says(readings, f"variance_ratio/{where}/K{k}") for k in j["verdicts"]}
        lines += [f"| c_FE (two disjoint masks) | {term('c_fe')} |",
                  f"| c_iid (control, 0 expected) | {term('c_iid')} |", "",
                  "Per K, at the run's batch size (ratios per unit compute, *predicted* from the terms; measured ones "
                  "from directly resampled batches; the reading is the study's, femlm/study/verdicts.py):", "",
                  *verdict_table(j["verdicts"], show, per_k)]
        k = headline_k(j["verdicts"])
        fe = j["verdicts"][k]["fe"]
        share = terms["sigma_d2"]["estimate"] / max(terms["sigma_d2"]["estimate"] + terms["sigma_m2"]["estimate"], 1e-30)
        margin = as_interval(fe["c_plus_sigma_d2"], fe["c_plus_sigma_d2_ci"] if show else None)
        lines += ["", f"Of one MLM row's gradient variance, the data term is {share:.0%} and the mask term "
                  f"{1 - share:.0%}. FE lowers the variance at equal compute only if c_FE < -sigma_d2 (the module "
                  f"docstring of femlm/analysis/decomposition.py); here c_FE + sigma_d2 = {fmt_sig(margin)}, one "
                  f"estimate from which every K's predicted ratio follows ({prediction_label(j, model_parameters)}).",
                  ""]
        null = j.get("null_model", {}).get("summary", {})
        if null:
            frac = null_interval(j, "fraction_explained")
            context = (readings or {}).get(f"context/{where}")
            lines += ["Context interactions against the additive null model (the covariance of a gradient that is a "
                      "sum of per-token terms already falls with the Hamming distance; what is left is interaction; "
                      f"{null_units(j)}): measured decrease "
                      f"{fmt_sig(null_interval(j, 'measured_decrease'))}, the additive model's "
                      f"{fmt_sig(null_interval(j, 'additive_decrease'))}, fraction explained {fmt_ci(frac, 2)}; "
                      f"residual (interaction) decrease {fmt_sig(null_interval(j, 'residual_decrease'))}; D2 "
                      f"{fmt_sig(as_interval(null.get('d2_mean'), None))}, additive share of Var(g(m)) "
                      f"{fmt(null.get('additive_share_of_var'))}. Reading: "
                      + (f"{_says(readings, f'context/{where}')} ({context.why})" if context is not None else
                         "none") + ". It tests interactions only: an additive gradient already satisfies Assumption "
                      "1, and neither says whether FE pays.", ""]
        lines += [f"![decomposition](decomposition_{where}.png)", "", f"![null model](null_model_{where}.png)", "",
                  f"![Figure 2](covariance_distribution_{where}.png)", ""]
    return lines


def pretrain_section(plan: dict[str, Any], pre: dict[str, Any], readings: dict[str, Any] | None = None) -> list[str]:
    """Per equal-compute mode: each arm's losses, each arm against the reference and the arm against its control,
    every comparison cell with the study's reading of it (``readings``: by key)."""
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
        lines += ["", "| arm vs MLM | final loss difference, paired [95% CI]: reading | mean loss difference, paired "
                  "[95% CI]: reading | "
                  + " | ".join(f"compute to reach target {k} (loss {t['loss']:.3f}) / MLM's [95% CI]: reading"
                               for k, t in res["targets"].items()) + " |",
                  "|---|---|---|" + "---|" * len(res["targets"])]
        for arm, c in res["comparisons"].items():
            cells = [f"{label(arm)}"] + [_value(readings, f"training_loss/{mode}/{arm}/{m}", fmt_ci(c[m]["paired"]))
                                         for m in ("final_loss", "mean_loss")]
            for key in res["targets"]:
                cells.append(fmt_ratio(c[f"ratio_to_{key}"], (readings or {}).get(f"compute_ratio/{mode}/{arm}/{key}")))
            lines.append("| " + " | ".join(cells) + " |")
        vs = res.get("fe_vs_control")
        if vs:
            lines += ["", f"{label(vs['fe'])} minus {label(vs['control'])} (paired by seed {vs['paired_seeds']}): final "
                      f"loss {_value(readings, f'fe_vs_control/{mode}/final_loss', fmt_ci(vs['final_loss']))}; mean "
                      f"loss {_value(readings, f'fe_vs_control/{mode}/mean_loss', fmt_ci(vs['mean_loss']))}."]
        lines += ["", f"![loss vs compute]({'loss_vs_flops_' + mode}.png)", ""]
    return lines


def fmt_ratio(r: dict[str, Any], c: Any = None) -> str:
    """A compute-to-target ratio: with its interval and the study's reading ``c`` (a Comparison), or, when runs
    never reached the target (censored), as the bound it is, without an interval and without a reading."""
    from femlm.study.verdicts import UNDECIDED, fmt_value, says

    nr = r.get("not_reached") or {}
    seeds = f"{r.get('n', '?')} seeds"
    bound = r.get("bound") or ""
    if bound == "both censored":
        return f"not measured: neither arm reached the target in some seeds ({seeds})"
    if bound in ("lower", "upper"):
        sign, who = (">=", f"{nr.get('arm', '?')} arm runs") if bound == "lower" else ("<=", f"{nr.get('reference', '?')} MLM runs")
        return (f"{sign} {fmt(r.get('estimate'))} (a bound, no interval: {who} never reached the target; "
                f"{seeds}): {says(c) if c is not None else UNDECIDED}")
    value = fmt_value(c) if c is not None else fmt_ci(r)
    return f"{value} ({seeds}, {r.get('method') or 't'})" + (f": {says(c)}" if c is not None else "")


def downstream_section(down: dict[str, Any], order: list[str], readings: dict[str, Any] | None = None) -> list[str]:
    from femlm.study.comparisons import majority_seeds

    lines: list[str] = []
    for task, d in down.items():
        lines += [f"### {task} (test {d['metric']} x 100; majority class {fmt(100 * d['majority'], 2) if d['majority'] is not None else 'n/a'})", "",
                  "| row | n | mean ± std | 95% CI | seeds at the majority class | vs MLM (Welch) [95% CI]: reading | "
                  "vs no continual [95% CI] |",
                  "|---|---:|---|---|---:|---|---|"]
        for row in [r for r in order if r in d["summary"]]:
            s = d["summary"][row]
            c, b = d["vs_mlm"].get(row), d["vs_no_continual"].get(row)
            k = majority_seeds(d["scores"].get(row) or [], d["majority"])
            reading = _says(readings, f"downstream/{task}/{row}")
            at_majority = "-" if k is None else f"{k} of {s['n']}"
            lines.append(f"| {label(row)} | {s['n']} | {fmt(x100(s['estimate']), 2)} ± {fmt(x100(s['std']), 2)} | "
                         f"[{fmt(x100(s['low']), 2)}, {fmt(x100(s['high']), 2)}] | "
                         f"{at_majority} | "
                         + (f"{fmt(x100(c['estimate']), 2)} [{fmt(x100(c['low']), 2)}, {fmt(x100(c['high']), 2)}]"
                            + (f": {reading}" if reading else "") if c else "-")
                         + " | "
                         + (f"{fmt(x100(b['estimate']), 2)} [{fmt(x100(b['low']), 2)}, {fmt(x100(b['high']), 2)}]"
                            if b else "-")
                         + " |")
        above = [label(k) for k, v in d["above_majority"].items() if v]
        lines += ["", ("Rows whose whole 95% interval is above the majority class: " + ", ".join(above) + "."
                       if above else "No row's 95% interval is entirely above the majority class: at this scale "
                       "fine-tuning barely learns the task, and downstream differences cannot be expected to show."),
                  "", "Only an FE arm against MLM is one of the study's comparisons (its reading beside it); the other "
                  "differences are intervals, read by nothing. Every fine-tuning seed starts from one pre-training "
                  "seed's checkpoint, so these intervals hold fine-tuning noise only.", ""]
    if down:
        lines += ["![downstream](downstream.png)", ""]
    return lines
