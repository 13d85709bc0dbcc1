"""`femlm analyze analysis.kind=passes`: run `femlm.analysis.passes` on a checkpoint and write its files.

Called by `femlm.analysis.run` with ``analysis.pool`` validation blocks. Writes into the run directory (and
``<results_dir>/analysis_<domain>_<model>_<panel>/``): ``passes.csv`` (one row per K: Var of a cycle's summed
gradient per sequence, independent and disjoint visits, measured ratio, the decomposition's predicted ratio,
measured / predicted, sigma_m2 and c_FE, each with its 95% interval), ``passes_sequences.csv`` (every sequence's
two variances per K), ``passes.md`` and ``passes.json`` (settings, cost, wall time, model, hardware).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from femlm.errors import UserError

from .config import DEFAULT_CHUNK
from .gradients import MaskedLMGradients
from .masks import valid_positions
from .passes import DRIFT_NOTE, passes_cost, passes_study
from .studies import resolve_variance_tau
from .tables import publish, write_rows


def _ci(value: float, ci: list[float]) -> str:
    def f(x: float) -> str:
        return "n/a" if x is None or not math.isfinite(x) else f"{x:.4g}"
    if len(ci) != 2 or not all(isinstance(c, (int, float)) and math.isfinite(c) for c in ci):
        return f(value)
    return f"{f(value)} [{f(ci[0])}, {f(ci[1])}]"


def passes_markdown(summary: dict[str, Any], rows: list[dict[str, Any]], title: str) -> str:
    s = summary["settings"]
    unit = summary["stats"].get("interval") or {}
    lines = [f"# Disjoint masks across passes: {title}", "",
             f"{s['pool']} validation blocks of {s['block_size']} tokens (the unit of every interval), tau = {s['tau']} "
             f"masked tokens per visit, {s['draws']} cycles of K visits per sequence and arm; prediction from the "
             f"decomposition's terms ({s['reference']} reference masks, {s['draws']} draws); "
             + (f"95% expanded percentile bootstrap over {unit.get('count', s['pool'])} sequences ({s['bootstrap']} "
                "resamples)." if unit.get("enough", True) else
                f"no intervals: {unit.get('count')} sequences, fewer than the {unit.get('min_units')} an interval "
                "needs (femlm/analysis/intervals.py)."), "",
             "| K | Var, independent visits [95% CI] | Var, disjoint visits [95% CI] | measured ratio [95% CI] | "
             "median-of-means ratio | predicted 1 + (K-1) c_FE / sigma_m2 [95% CI] | measured / predicted [95% CI] |",
             "|---:|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['K']} | {_ci(r['var_independent'], r['var_independent_ci'])} | "
                     f"{_ci(r['var_disjoint'], r['var_disjoint_ci'])} | {_ci(r['measured_ratio'], r['measured_ratio_ci'])} | "
                     f"{_ci(r.get('measured_ratio_median_of_means'), [])} | "
                     f"{_ci(r['predicted_ratio'], r['predicted_ratio_ci'])} | "
                     f"{_ci(r['measured_over_predicted'], r['measured_over_predicted_ci'])} |")
    gated = [f"- K = {r['K']}: measured ratio not measured: {'; '.join(r['gates'])}" for r in rows if r.get("gates")]
    gated += [f"- K = {r['K']}: predicted ratio not measured: {'; '.join(r['prediction_gates'])}"
              for r in rows if r.get("prediction_gates")]
    if gated:
        lines += ["", "Gates (femlm/analysis/gates.py): no verdict is drawn from these numbers:", *gated]
    r0 = rows[0]
    lines += ["", f"Terms of the prediction: sigma_m2 = {_ci(r0['sigma_m2'], r0['sigma_m2_ci'])}, c_FE = "
              f"{_ci(r0['c_fe'], r0['c_fe_ci'])}; read off the direct measurement instead: sigma_m2 = "
              f"{r0['sigma_m2_measured']:.4g}, c_FE = {r0['c_fe_measured']:.4g} (K = {r0['K']}). Variances are traces, "
              "per sequence, of a cycle's summed gradient (the K visits' gradients added).", "",
              f"Not measured: {DRIFT_NOTE}; the data term (it cancels in a pass under random reshuffling).", ""]
    return "\n".join(lines)


def analyze_passes(cfg: Any, run: Any, model: torch.nn.Module, tokenizer: Any, input_ids: torch.Tensor,
                   model_info: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure and predict on ``input_ids[pool, L]``; write every output file; returns passes.json."""
    from tqdm.auto import tqdm

    from femlm.runs import hardware
    from femlm.runtime.device import pick_device

    acfg = cfg.analysis
    start = time.time()
    pool = acfg.pool
    if len(input_ids) < pool:
        raise UserError(f"analysis.pool={pool}: only {len(input_ids)} sequences given")
    input_ids = input_ids[:pool]
    device = pick_device(cfg.runtime.device)
    chunk = cfg.runtime.micro_batch_size or DEFAULT_CHUNK
    valid = valid_positions(input_ids, None, tokenizer.all_special_ids)
    n_valid = valid.sum(dim=1)
    num_masks = sorted(set(acfg.num_masks))
    try:
        tau = resolve_variance_tau(int(n_valid.min()), acfg.tau, acfg.variance_tau, num_masks, acfg.ratio)
    except ValueError as err:
        raise UserError(str(err)) from None
    grads = MaskedLMGradients(model, input_ids, None, tokenizer.mask_token_id, acfg.parameters, acfg.method,
                              chunk, device)
    planned = passes_cost(pool, acfg.reference, acfg.draws, max(num_masks))
    formula = "measured 2 S D Kmax + predicted S (J + 2 D Kmax)"
    run.log(stage="plan", passes=sum(planned.values()), **{f"passes_{k}": v for k, v in planned.items()},
            formula=formula, parameters=grads.numel, method=grads.method, tau=tau)
    bar = tqdm(total=sum(planned.values()), unit="grad", desc="passes", disable=not cfg.logger.progress)
    res = passes_study(grads, valid, num_masks, tau, acfg.draws, acfg.reference, cfg.seed, chunk, acfg.bootstrap,
                       acfg.sketch_dim, bar)
    bar.close()
    for r in res.rows:
        run.log(stage="passes", K=r["K"], measured_ratio=r["measured_ratio"], ci_low=r["measured_ratio_ci"][0],
                ci_high=r["measured_ratio_ci"][1], predicted_ratio=r["predicted_ratio"])
    title = f"{model_info['name']} ({model_info['panel']}), domain {cfg.domain.name}"
    summary: dict[str, Any] = {
        "kind": "analysis", "analysis_kind": "passes", "domain": cfg.domain.name, "model": model_info,
        "seed": cfg.seed,
        "settings": {"pool": pool, "block_size": int(input_ids.shape[1]), "tau": tau, "ratio": acfg.ratio,
                     "num_masks": num_masks, "draws": acfg.draws, "reference": acfg.reference,
                     "bootstrap": acfg.bootstrap, "sketch_dim": acfg.sketch_dim, "chunk": chunk, "device": str(device),
                     "method": grads.method,
                     "loss": "mean masked-token cross-entropy, every masked position -> mask token, eval mode"},
        "parameters": grads.describe(),
        "sequences": {"n_valid": n_valid.tolist(), **(extra or {})},
        "rows": res.rows, "stats": res.stats, "not_measured": DRIFT_NOTE,
        "cost": {"planned_passes": planned, "passes": grads.passes, "formula": formula},
        "wall_s": round(time.time() - start, 2), "hardware": hardware(),
    }
    out = Path(run.dir)
    seq_rows = [{"sequence": s, "K": k, "var_independent": float(res.per_sequence["independent"][s, j]),
                 "var_disjoint": float(res.per_sequence["disjoint"][s, j])}
                for s in range(pool) for j, k in enumerate(num_masks)]
    csv_rows = [{**r, "gates": "; ".join(r["gates"]), "prediction_gates": "; ".join(r["prediction_gates"])}
                for r in res.rows]
    files = [write_rows(out / "passes.csv", csv_rows), write_rows(out / "passes_sequences.csv", seq_rows)]
    md = out / "passes.md"
    md.write_text(passes_markdown(summary, res.rows, title))
    files.append(md)
    summary["files"] = sorted(p.name for p in files) + ["passes.json"]
    files.append(run.write_json("passes.json", summary))
    dest = publish(files, acfg.results_dir, cfg.domain.name, model_info)
    if dest:
        summary["results_dir"] = dest
    return summary
