"""`femlm analyze decomposition`: the variance decomposition (part 1) and the additive null model (part 2).

Called by `femlm.analysis.run` with the model and ``max(analysis.pool, analysis.sequences)`` validation
blocks. Writes into the run directory (and ``<results_dir>/analysis_<domain>_<model>_<panel>/``):

* ``decomposition.csv``: one row per arm x mode x K (MLM once): sequences and rows per step, predicted
  variance (sequences from the corpus) with CI, the prediction for batches resampled from the pool, measured
  variance with CI, measured / predicted with CI, variance x rows per step and its ratio to MLM (predicted and
  measured) with CIs.
* ``decomposition.json``: sigma_d2, sigma_m2, c_FE(K), c_iid(K) with CIs, verdicts per K, the null model's
  summary, settings, cost, wall time, model and hardware.
* ``decomposition.png``, ``decomposition.md`` (a readable summary of both parts).
* ``null_model.csv`` (per Hamming bin: measured, additive and residual covariance with CIs),
  ``null_model_pairs.csv`` (every mask pair) and ``null_model.png``.

Cost in gradient rows: decomposition ``S_p (J + 2 D Kmax) + 2 B R Kmax`` and null model
``S (J + 2 budget + G m)`` (S_p = pool, J = reference, D = draws, B = check_batches, R = batch_rows,
S = sequences, G = null_groups, m = null_group_size); it is logged (stage=plan) before any work.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from femlm.errors import UserError

from .config import DEFAULT_CHUNK
from .decomposition import decomposition_cost, decomposition_study
from .decomposition_figures import plot_decomposition, plot_null_model
from .gradients import MaskedLMGradients
from .masks import valid_positions
from .null_model import null_model_cost, null_model_study
from .studies import make_reference, resolve_variance_tau
from .tables import write_csv


def _fmt(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _with_ci(value: float, ci: list[float]) -> str:
    if not all(isinstance(c, (int, float)) and math.isfinite(c) for c in ci):  # JSON writes NaN as null
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def verdict_table(verdicts: dict[str, Any]) -> list[str]:
    """Markdown rows of the per-K verdicts (also the study's README, from decomposition.json)."""
    lines = ["| K | FE / MLM per unit compute [95% CI] | c_FE + sigma_d2 [95% CI] | measured, same rows | "
             "measured, same sequences | i.i.d. / MLM | verdict |", "|---:|---|---|---|---|---|---|"]
    for k, v in verdicts.items():
        fe, iid = v["fe"], v["iid"]
        lines.append(f"| {k} | {_with_ci(fe['per_compute_vs_mlm'], fe['ci'])} | "
                     f"{_with_ci(fe['c_plus_sigma_d2'], fe['c_plus_sigma_d2_ci'])} | "
                     f"{_with_ci(fe['measured_same_rows'], fe['measured_same_rows_ci'])} | "
                     f"{_with_ci(fe['measured_same_sequences'], fe['measured_same_sequences_ci'])} | "
                     f"{_with_ci(iid['per_compute_vs_mlm'], iid['ci'])} | {fe['verdict']} |")
    return lines


def decomposition_markdown(summary: dict[str, Any], rows: list[dict[str, Any]], null_rows: list[dict[str, Any]],
                           title: str) -> str:
    s, terms, null = summary["settings"], summary["terms"], summary["null_model"]["summary"]
    lines = [f"# Gradient variance decomposition: {title}", "",
             f"Pool of {s['pool']} validation blocks of {s['block_size']} tokens, tau = {s['tau']} masked tokens per "
             f"copy, R = {s['batch_rows']} rows per step, K in {s['num_masks']}; {s['reference']} reference masks and "
             f"{s['draws']} draws of {max(s['num_masks'])} masks per sequence and arm; {s['check_batches']} directly "
             f"resampled batches; intervals: 95% percentile bootstrap ({s['bootstrap']} resamples).", "",
             "## Terms (traces of covariance matrices, per sequence)", "",
             "| term | estimate [95% CI] |", "|---|---|",
             f"| data term sigma_d2 = Var_x(E_m[g given x]) | {_with_ci(**_ev(terms['sigma_d2']))} |",
             f"| mask term sigma_m2 = E_x[Var_m(g given x)] | {_with_ci(**_ev(terms['sigma_m2']))} |",
             f"| c_FE, two disjoint masks of one sequence (pooled over K) | {_with_ci(**_ev(terms['c_fe']))} |"]
    for k, t in terms["c_fe_by_K"].items():
        lines.append(f"| c_FE from the first K={k} masks of each draw | {_with_ci(**_ev(t))} |")
    for k, t in terms["c_iid_by_K"].items():
        lines.append(f"| c_iid (control, 0 expected), K={k} | {_with_ci(**_ev(t))} |")
    lines += ["", "Batch variance with S sequences of K copies: (1/S) [sigma_d2 + sigma_m2 / K + (1 - 1/K) c]. "
              "Per unit compute (variance x rows per step) FE costs K sigma_d2 + sigma_m2 + (K - 1) c_FE against "
              "MLM's sigma_d2 + sigma_m2 in *both* equal-compute modes, so FE wins iff c_FE < -sigma_d2.", "",
              "## Verdict per K (equal compute)", "", *verdict_table(summary["verdicts"])]
    lines += ["", "Measured ratios come from batches resampled from the pool (data term (1 - 1/S_p) sigma_d2), "
              "predicted ones are for sequences drawn from the corpus.", "",
              "## Batch-gradient variance per arm", "",
              "| arm | mode | K | sequences / step | rows / step | predicted [95% CI] | measured [95% CI] | "
              "measured / predicted (pool) [95% CI] | variance x rows [95% CI] |",
              "|---|---|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['mode']} | {r['K']} | {r['sequences_per_step']} | {r['rows_per_step']} | "
                     f"{_with_ci(r['predicted_var'], r['predicted_var_ci'])} | "
                     f"{_with_ci(r['measured_var'], r['measured_var_ci'])} | "
                     f"{_with_ci(r['measured_over_predicted'], r['measured_over_predicted_ci'])} | "
                     f"{_with_ci(r['var_x_rows'], r['var_x_rows_ci'])} |")
    ns = summary["null_model"]["settings"]
    lines += ["", "## Assumption 1 against an additive null model", "",
              f"{ns['sequences']} sequences, tau = {ns['tau']}, {ns['pairs']} mask pairs at stratified Hamming "
              f"distances, {ns['groups']} groups of {ns['group_size']} i.i.d. masks per sequence for the additive "
              "model (the least-squares additive approximation g_add(m) = (1/tau) sum_{i in m} a_i; its covariance "
              "is affine in the overlap, and measured = additive + residual holds exactly).", "",
              f"- measured decrease (first to last H bin): {_with_ci(null['measured_decrease'], null['measured_decrease_ci'])}",
              f"- additive model's decrease: {_with_ci(null['additive_decrease'], null['additive_decrease_ci'])}",
              f"- fraction explained by the additive model: "
              f"{_with_ci(null['fraction_explained'], null['fraction_explained_ci'])}",
              f"- residual (interaction) decrease: {_with_ci(null['residual_decrease'], null['residual_decrease_ci'])}",
              f"- Spearman rho of the residual against H (bins): "
              f"{_with_ci(null['residual_rho_bins'], null['residual_rho_bins_ci'])}",
              f"- additive share of Var(g(m)): {_fmt(null['additive_share_of_var'])}", "",
              "| H bin | mean H | pairs | measured [95% CI] | additive [95% CI] | residual [95% CI] |",
              "|---|---:|---:|---|---|---|"]
    for r in null_rows:
        lines.append(f"| {r['h_low']}-{r['h_high']} | {r['h_mean']:.1f} | {r['pairs']} | "
                     f"{_with_ci(r['measured'], r['measured_ci'])} | {_with_ci(r['additive'], r['additive_ci'])} | "
                     f"{_with_ci(r['residual'], r['residual_ci'])} |")
    lines.append("")
    return "\n".join(lines)


def _ev(term: dict[str, Any]) -> dict[str, Any]:
    return {"value": term["estimate"], "ci": term["ci"]}


def analyze_decomposition(cfg: Any, run: Any, model: torch.nn.Module, tokenizer: Any, input_ids: torch.Tensor,
                          model_info: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run both parts on ``input_ids[max(pool, sequences), L]`` and write every output file."""
    from tqdm.auto import tqdm

    from femlm.runs import hardware
    from femlm.runtime.device import pick_device

    acfg = cfg.analysis
    start = time.time()
    pool, seqs = acfg.pool, acfg.sequences
    if len(input_ids) < max(pool, seqs):
        raise UserError(f"analysis.pool={pool} / analysis.sequences={seqs}: only {len(input_ids)} sequences given")
    device = pick_device(cfg.runtime.device)
    chunk = cfg.runtime.micro_batch_size or DEFAULT_CHUNK
    valid = valid_positions(input_ids, None, tokenizer.all_special_ids)
    n_valid = valid.sum(dim=1)
    n_pool, n_null = int(n_valid[:pool].min()), int(n_valid[:seqs].min())
    num_masks = sorted(set(acfg.num_masks))
    try:
        tau = resolve_variance_tau(n_pool, acfg.tau, acfg.variance_tau, num_masks, acfg.ratio)
    except ValueError as err:
        raise UserError(str(err)) from None
    if not 0 < acfg.tau < n_null:
        raise UserError(f"analysis.tau={acfg.tau}: must be below the {n_null} maskable tokens of the shortest "
                        f"sequence (data.block_size={cfg.data.block_size} minus special tokens)")
    if acfg.batch_rows % math.lcm(*num_masks):
        raise UserError(f"analysis.batch_rows={acfg.batch_rows}: must be a multiple of every K in {num_masks}")
    grads = MaskedLMGradients(model, input_ids, None, tokenizer.mask_token_id, acfg.parameters, acfg.method,
                              chunk, device)
    dec_cost = decomposition_cost(pool, acfg.reference, acfg.draws, max(num_masks), acfg.check_batches, acfg.batch_rows)
    null_cost = null_model_cost(seqs, acfg.reference, acfg.budget, acfg.null_groups, acfg.null_group_size)
    planned = {**dec_cost, "null_model": null_cost}
    run.log(stage="plan", passes=sum(planned.values()), **{f"passes_{k}": v for k, v in planned.items()},
            formula="S_p (J + 2 D Kmax) + 2 B R Kmax + S (J + 2 budget + G m)", parameters=grads.numel,
            method=grads.method, tau=tau, null_tau=acfg.tau)
    bar = tqdm(total=sum(planned.values()), unit="grad", desc="decomposition", disable=not cfg.logger.progress)
    title = f"{model_info['name']} ({model_info['panel']}), domain {cfg.domain.name}"
    out = Path(run.dir)

    t0 = time.time()
    res = decomposition_study(grads, valid[:pool], num_masks, tau, acfg.batch_rows, acfg.reference, acfg.draws,
                              acfg.check_batches, cfg.seed, chunk, acfg.bootstrap, acfg.sketch_dim, bar)
    wall_dec = time.time() - t0
    for k, v in res.verdicts.items():
        run.log(stage="decomposition", K=int(k), fe_vs_mlm=v["fe"]["per_compute_vs_mlm"], ci_low=v["fe"]["ci"][0],
                ci_high=v["fe"]["ci"][1], verdict=v["fe"]["verdict"])
    t0 = time.time()
    ref = make_reference(grads, valid[:seqs], acfg.tau, acfg.reference, cfg.seed, chunk, bar)
    null = null_model_study(grads, valid[:seqs], acfg.tau, acfg.budget, acfg.hamming_bins, ref, acfg.null_groups,
                            acfg.null_group_size, cfg.seed, chunk, acfg.bootstrap, bar)
    wall_null = time.time() - t0
    run.log(stage="null_model", fraction_explained=null.summary["fraction_explained"],
            residual_rho_bins=null.summary["residual_rho_bins"])
    bar.close()

    summary: dict[str, Any] = {
        "kind": "analysis", "analysis_kind": "decomposition", "domain": cfg.domain.name, "model": model_info,
        "seed": cfg.seed,
        "settings": {"pool": pool, "block_size": int(input_ids.shape[1]), "tau": tau, "ratio": acfg.ratio,
                     "num_masks": num_masks,
                     "batch_rows": acfg.batch_rows, "reference": acfg.reference, "draws": acfg.draws,
                     "check_batches": acfg.check_batches, "bootstrap": acfg.bootstrap, "sketch_dim": acfg.sketch_dim,
                     "chunk": chunk, "device": str(device), "method": grads.method,
                     "loss": "mean masked-token cross-entropy, every masked position -> mask token, eval mode"},
        "parameters": grads.describe(),
        "sequences": {"n_valid": n_valid.tolist(), **(extra or {})},
        "terms": res.terms, "verdicts": res.verdicts, "stats": res.stats,
        "null_model": {"summary": null.summary, "bins": null.rows,
                       "settings": {**null.stats, "hamming_bins": acfg.hamming_bins, "budget": acfg.budget}},
        "cost": {"planned_passes": planned, "passes": grads.passes,
                 "formula": "S_p (J + 2 D Kmax) + 2 B R Kmax + S (J + 2 budget + G m)"},
        "wall_s": {"decomposition": round(wall_dec, 2), "null_model": round(wall_null, 2),
                   "total": round(time.time() - start, 2)},
        "hardware": hardware(),
    }
    files = [write_csv(out / "decomposition.csv", res.rows),
             plot_decomposition(res.rows, res.terms, out / "decomposition.png", title),
             write_csv(out / "null_model.csv", null.rows),
             write_csv(out / "null_model_pairs.csv", null.pairs),
             plot_null_model(null.rows, null.summary, out / "null_model.png", f"Assumption 1 vs additive model: {title}")]
    md = out / "decomposition.md"
    md.write_text(decomposition_markdown(summary, res.rows, null.rows, title))
    files.append(md)
    summary["files"] = sorted(p.name for p in files) + ["decomposition.json"]
    files.append(run.write_json("decomposition.json", summary))
    if acfg.results_dir:
        dest = (Path(acfg.results_dir).expanduser()
                / f"analysis_{cfg.domain.name}_{model_info['name']}_{model_info['slug']}")
        dest.mkdir(parents=True, exist_ok=True)
        for path in files:
            shutil.copy2(path, dest / path.name)
        summary["results_dir"] = str(dest)
    return summary
