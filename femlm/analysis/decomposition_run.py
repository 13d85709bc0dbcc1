"""`femlm analyze decomposition`: the variance decomposition (part 1) and the additive null model (part 2).

Called by `femlm.analysis.run` with the model and ``max(analysis.pool, analysis.sequences)`` validation
blocks. Writes into the run directory (and ``<results_dir>/analysis_<domain>_<model>_<panel>/``):

* ``decomposition.csv``: one row per arm x mode x K (MLM once): sequences and rows per step, predicted
  variance (sequences from the corpus) with CI, the prediction for batches resampled from the pool, measured
  variance with CI, measured / predicted with CI, variance x rows per step and its ratio to MLM (predicted and
  measured) with CIs.
* ``decomposition.json``: sigma_d2, sigma_m2, c_FE(K), c_iid(K) with CIs, their robust summaries (median of
  means over blocks of pool sequences), verdicts per K, the null model's summary (with ``by_sequence``: intervals
  over whole sequences), ``units`` (every interval's unit, count, resamples and method: `intervals`), ``gates``
  (the reasons, if any, that turn verdicts into "not measured": `gates`), settings, cost, wall time, model and
  hardware.
* ``units.npz``: the per-unit arrays every estimate and interval can be recomputed from (`units`).
* ``decomposition.png``, ``decomposition.md`` (a readable summary of both parts: `decomposition_text`).
* ``null_model.csv`` (per Hamming bin: measured, additive and residual covariance with CIs over mask pairs and
  groups conditional on the sequences, ``*_ci_seq`` over whole sequences), ``null_model_pairs.csv`` (every mask
  pair) and ``null_model.png``.

Cost in gradient rows: decomposition ``S_p (J + 2 D Kmax) + 2 B R Kmax`` and null model
``S (J + 2 budget + G m)`` (S_p = pool, J = reference, D = draws, B = check_batches, R = batch_rows,
S = sequences, G = null_groups, m = null_group_size); it is logged (stage=plan) before any work.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from femlm.errors import UserError

from .config import DEFAULT_CHUNK
from .decomposition import decomposition_cost, decomposition_study
from .decomposition_figures import plot_decomposition, plot_null_model
from .decomposition_text import decomposition_markdown
from .gates import apply_gates, decomposition_gates, null_model_gates
from .gradients import MaskedLMGradients
from .masks import valid_positions
from .null_model import null_model_cost, null_model_study
from .studies import make_reference, resolve_variance_tau
from .tables import publish, write_rows
from .units import write_units


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
    gates = {"decomposition": decomposition_gates(res.terms, pool, res.terms["robust"]),
             "null_model": null_model_gates(null.summary, seqs)}
    apply_gates(res.verdicts, gates["decomposition"])

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
        "terms": res.terms, "verdicts": res.verdicts, "stats": res.stats, "gates": gates,
        "units": {"file": "units.npz", "decomposition": res.stats["intervals"],
                  "null_model": null.stats["intervals"]},
        "null_model": {"summary": null.summary, "bins": null.rows,
                       "settings": {**null.stats, "hamming_bins": acfg.hamming_bins, "budget": acfg.budget}},
        "cost": {"planned_passes": planned, "passes": grads.passes,
                 "formula": "S_p (J + 2 D Kmax) + 2 B R Kmax + S (J + 2 budget + G m)"},
        "wall_s": {"decomposition": round(wall_dec, 2), "null_model": round(wall_null, 2),
                   "total": round(time.time() - start, 2)},
        "hardware": hardware(),
    }
    files = [write_rows(out / "decomposition.csv", res.rows),
             plot_decomposition(res.rows, res.terms, out / "decomposition.png", title),
             write_rows(out / "null_model.csv", null.rows),
             write_rows(out / "null_model_pairs.csv", null.pairs),
             write_units(out / "units.npz", res.units, null.units)]
    plot_null_model(null.rows, null.summary, out / "null_model.png",
                    f"Covariance against Hamming distance beside the additive null model: {title}")
    files.append(out / "null_model.png")
    md = out / "decomposition.md"
    md.write_text(decomposition_markdown(summary, res.rows, null.rows, title))
    files.append(md)
    summary["files"] = sorted(p.name for p in files) + ["decomposition.json"]
    files.append(run.write_json("decomposition.json", summary))
    dest = publish(files, acfg.results_dir, cfg.domain.name, model_info)
    if dest:
        summary["results_dir"] = dest
    return summary
