"""`femlm analyze`: gradient covariance vs Hamming distance and K-mask variance, end to end.

``run_analyze(cfg, run)`` loads the model (a checkpoint directory, or -- with ``model.name_or_path`` null --
the same architecture at initialisation: the paper's "before pre-training" panel), takes
``analysis.sequences`` validation blocks of the domain as the fixed mini-batch, runs the studies of
`femlm.analysis.studies` and writes into the run directory:

``covariance.csv`` (one row per mask pair), ``covariance_summary.csv`` (per Hamming bin), ``variance.csv``
and ``variance.md`` (per K), ``covariance_distribution.png`` (Figure 2), ``covariance_vs_hamming.png``
(Figure 3), ``variance.png``, and ``analysis.json`` (settings, Spearman rho with its bootstrap interval,
Var_FE / Var_iid per K with intervals, cost, wall time, model, hardware). With ``results_dir`` set, the
same files are copied to ``<results_dir>/analysis_<domain>_<model>_<panel>/``. Kind ``decomposition`` (data vs
mask variance of the batch gradient, and context interactions beyond an additive null model) is
`femlm.analysis.decomposition_run`; kind ``passes`` (disjoint masks across passes: the variance of a cycle's
summed gradient) is `femlm.analysis.passes_run`.

Cost (forward + backward passes of one sequence, see `studies`): covariance ``S (J + 2 budget)``,
variance ``S (J + 2 budget max(K))`` (J reference masks are shared when both studies use the same tau).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from femlm.data.sources import check_sources
from femlm.errors import UserError
from femlm.runtime.device import configure_process, pick_device

from .config import DEFAULT_CHUNK
from .decomposition_run import analyze_decomposition
from .figures import plot_covariance_distribution, plot_covariance_vs_hamming, plot_variance
from .gradients import MaskedLMGradients
from .masks import valid_positions
from .passes_run import analyze_passes
from .studies import (
    covariance_cost,
    covariance_study,
    make_reference,
    resolve_variance_tau,
    variance_cost,
    variance_study,
)
from .tables import publish, write_rows


# ---------------------------------------------------------------------------------------------- inputs
def load_model(cfg: Any, weights: bool = True) -> tuple[Any, torch.nn.Module | None, dict[str, Any]]:
    """(tokenizer, model, description). ``model.name_or_path`` null builds ``model.arch`` at initialisation (the
    paper's "before pre-training" panel). ``weights=False`` makes every check and returns no model (dry run)."""
    from femlm.models.load import check_compatible, construct_model, load_masked_lm, tokenizer_for
    from femlm.models.resolve import resolve_masked_lm, resolve_scratch

    mcfg = cfg.model
    if mcfg.name_or_path:
        resolved = resolve_masked_lm(mcfg, cfg.download)
        model = load_masked_lm(resolved, cfg.download)[0] if weights else None
        pretrain, panel = resolved.femlm, "pretrained"
        slug = f"{pretrain.get('masking')}_step{pretrain.get('step')}" if pretrain else Path(mcfg.name_or_path).name
    else:
        if not mcfg.tokenizer:
            raise UserError(f"model.tokenizer is not set (model={mcfg.name}, name_or_path=null): the "
                            "initialisation panel builds the model from model.arch and needs a tokenizer; give "
                            "the pre-trained checkpoint's directory (same vocabulary) or bert-base-uncased")
        resolved = resolve_scratch(mcfg, *tokenizer_for(mcfg, cfg.download), cfg.download)
        torch.manual_seed(cfg.seed)  # the initial weights are part of the result: make them reproducible
        model = construct_model(resolved) if weights else None
        pretrain, panel, slug = None, "initialisation", "init"
    if weights:
        resolved.announce()
    tokenizer, config = resolved.tokenizer, resolved.config
    check_compatible(config, tokenizer, cfg.data.block_size, f"model={mcfg.name}")
    info = {"name": mcfg.name, "name_or_path": mcfg.name_or_path, "tokenizer": mcfg.tokenizer, "panel": panel,
            "slug": re.sub(r"[^A-Za-z0-9_.-]+", "-", str(slug)), "pretrain": pretrain,
            "parameters_total": sum(p.numel() for p in model.parameters()) if model is not None else None,
            "model_type": getattr(config, "model_type", None), "encoder": resolved.describe()}
    return tokenizer, model, info


def load_sequences(cfg: Any, tokenizer: Any, count: int | None = None) -> tuple[torch.Tensor, list[int]]:
    """``count`` (default ``analysis.sequences``) validation blocks (a seeded choice), ``LongTensor[S, block_size]``;
    only the chosen rows are read from the memory-mapped blocks."""
    from femlm.data.corpus import prepare_blocks

    blocks = prepare_blocks(cfg.domain, tokenizer, cfg.data.block_size, cfg.download, cfg.download.cache_path(),
                            num_proc=cfg.runtime.workers(), seed=cfg.data.corpus_seed(cfg.seed))
    val = blocks["validation"]
    want = count or cfg.analysis.sequences
    if len(val) < want:
        key = "analysis.sequences" if count is None else "analysis.pool / analysis.sequences"
        raise UserError(f"{key}={want}: domain {cfg.domain.name} has {len(val)} validation blocks of "
                        f"{cfg.data.block_size} tokens; lower analysis.sequences or data.block_size")
    picked = np.sort(np.random.default_rng([cfg.seed, 7]).choice(len(val), size=want, replace=False))
    return val[picked].long(), picked.tolist()


def variance_markdown(rows: list[dict[str, Any]], title: str) -> str:
    lines = [f"# {title}", "",
             "| K | tau | draws | Var_iid | Var_FE | Var_FE / Var_iid [95% CI] | Theorem 1 ratio |",
             "|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['K']} | {r['tau']} | {r['draws']} | {r['var_iid']:.4g} | {r['var_fe']:.4g} | "
                     f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {r['theorem1_prediction']:.3f} |")
    r0 = rows[0]
    lines += ["", f"Var(g(m)) = {r0['var_single']:.4g}; Cov of disjoint masks = {r0['cov_fe']:.4g}; Cov of "
              f"independent masks = {r0['cov_iid']:.4g} (0 in expectation). Variances are per sequence, averaged "
              "over the mini-batch. Theorem 1 ratio = 1 + (K - 1) Cov_FE / Var(g(m)).", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- driver
def analyze(cfg: Any, run: Any, model: torch.nn.Module, tokenizer: Any, input_ids: torch.Tensor,
            model_info: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the configured studies on ``input_ids[S, L]`` and write every output file; returns analysis.json."""
    from tqdm.auto import tqdm

    from femlm.runs import hardware

    acfg = cfg.analysis
    if acfg.kind == "decomposition":
        return analyze_decomposition(cfg, run, model, tokenizer, input_ids, model_info, extra)
    if acfg.kind == "passes":
        return analyze_passes(cfg, run, model, tokenizer, input_ids, model_info, extra)
    start = time.time()
    device = pick_device(cfg.runtime.device)
    chunk = cfg.runtime.micro_batch_size or DEFAULT_CHUNK
    valid = valid_positions(input_ids, None, tokenizer.all_special_ids)
    n_valid = valid.sum(dim=1).tolist()
    n_min = int(min(n_valid))
    seqs = len(input_ids)
    do_cov, do_var = acfg.kind in ("covariance", "both"), acfg.kind in ("variance", "both")
    if do_cov and not 0 < acfg.tau < n_min:
        raise UserError(f"analysis.tau={acfg.tau}: must be below the {n_min} maskable tokens of the shortest "
                        f"sequence (data.block_size={cfg.data.block_size} minus special tokens)")
    tau_v = None
    if do_var:
        try:
            tau_v = resolve_variance_tau(n_min, acfg.tau, acfg.variance_tau, list(acfg.num_masks), acfg.ratio)
        except ValueError as err:
            raise UserError(str(err)) from None
    grads = MaskedLMGradients(model, input_ids, None, tokenizer.mask_token_id, acfg.parameters, acfg.method,
                              chunk, device)
    shared = do_cov and do_var and tau_v == acfg.tau
    cost = {"covariance": covariance_cost(seqs, acfg.reference, acfg.budget) if do_cov else 0,
            "variance": (variance_cost(seqs, 0 if shared else acfg.reference, acfg.budget, max(acfg.num_masks))
                         if do_var else 0)}
    run.log(stage="plan", passes=sum(cost.values()), **{f"passes_{k}": v for k, v in cost.items()},
            parameters=grads.numel, method=grads.method, n_min=n_min)
    bar = tqdm(total=sum(cost.values()), unit="grad", desc="analyze", disable=not cfg.logger.progress)
    title = f"{model_info['name']} ({model_info['panel']}), domain {cfg.domain.name}"
    out = Path(run.dir)
    files: list[Path] = []
    refs: dict[int, Any] = {}
    summary: dict[str, Any] = {
        "kind": "analysis", "analysis_kind": acfg.kind, "domain": cfg.domain.name, "model": model_info,
        "seed": cfg.seed,
        "settings": {"sequences": seqs, "block_size": int(input_ids.shape[1]), "tau": acfg.tau,
                     "variance_tau": tau_v, "budget": acfg.budget, "reference": acfg.reference,
                     "hamming_bins": acfg.hamming_bins, "num_masks": list(acfg.num_masks), "bootstrap": acfg.bootstrap,
                     "chunk": chunk, "device": str(device), "method": grads.method,
                     "loss": "mean masked-token cross-entropy, every masked position -> mask token, eval mode"},
        "parameters": grads.describe(),
        "sequences": {"n_valid": n_valid, **(extra or {})},
        "cost": {"planned_passes": cost},
    }

    def reference(tau: int) -> Any:
        if tau not in refs:
            refs[tau] = make_reference(grads, valid, tau, acfg.reference, cfg.seed, chunk, bar)
        return refs[tau]

    if do_cov:
        t0 = time.time()
        res = covariance_study(grads, valid, acfg.tau, acfg.budget, acfg.hamming_bins, reference(acfg.tau),
                               cfg.seed, chunk, acfg.bootstrap, bar)
        files += [write_rows(out / "covariance.csv", res.rows),
                  write_rows(out / "covariance_summary.csv", res.summary),
                  plot_covariance_distribution(res.rows, res.summary, out / "covariance_distribution.png", title),
                  plot_covariance_vs_hamming(res.rows, res.summary, res.spearman,
                                             out / "covariance_vs_hamming.png", title)]
        spear = {k: v for k, v in res.spearman.items() if k != "bin_ci"}
        summary["covariance"] = {"spearman": spear, "summary": res.summary, "stats": res.stats,
                                 "wall_s": round(time.time() - t0, 2)}
        run.log(stage="covariance", **{k: v for k, v in spear.items() if not isinstance(v, list)})
    if do_var:
        t0 = time.time()
        assert tau_v is not None
        res_v = variance_study(grads, valid, list(acfg.num_masks), tau_v, acfg.budget, reference(tau_v), cfg.seed,
                               chunk, acfg.bootstrap, bar)
        files += [write_rows(out / "variance.csv", res_v.rows),
                  plot_variance(res_v.rows, out / "variance.png", title)]
        md = out / "variance.md"
        md.write_text(variance_markdown(res_v.rows, f"K-mask gradient variance: {title}"))
        files.append(md)
        summary["variance"] = {
            "ratios": {str(r["K"]): {"ratio": r["ratio"], "ci": [r["ci_low"], r["ci_high"]],
                                     "theorem1": r["theorem1_prediction"]} for r in res_v.rows},
            "rows": res_v.rows, "stats": res_v.stats, "wall_s": round(time.time() - t0, 2)}
        for r in res_v.rows:
            run.log(stage="variance", K=r["K"], ratio=r["ratio"], ci_low=r["ci_low"], ci_high=r["ci_high"])
    bar.close()
    summary["cost"]["passes"] = grads.passes
    summary["wall_s"] = round(time.time() - start, 2)
    summary["hardware"] = hardware()
    summary["files"] = sorted(p.name for p in files) + ["analysis.json"]
    files.append(run.write_json("analysis.json", summary))
    dest = publish(files, acfg.results_dir, cfg.domain.name, model_info)
    if dest:
        summary["results_dir"] = dest
    return summary


def _sequences(cfg: Any, tokenizer: Any) -> tuple[torch.Tensor, list[int]]:
    """The validation blocks an analysis studies: the decomposition's pool, or the fixed mini-batch."""
    if cfg.analysis.kind == "decomposition":
        return load_sequences(cfg, tokenizer, max(cfg.analysis.pool, cfg.analysis.sequences))
    if cfg.analysis.kind == "passes":
        return load_sequences(cfg, tokenizer, cfg.analysis.pool)
    return load_sequences(cfg, tokenizer)


def plan_analyze(cfg: Any, run: Any) -> dict[str, Any]:
    """Every check of an analysis without computing a gradient: model config and tokenizer, the sequences."""
    check_sources(cfg.domain, cfg.download)
    tokenizer, _, info = load_model(cfg, weights=False)
    input_ids, picked = _sequences(cfg, tokenizer)
    return {"model": info, "sequences": len(picked), "block_size": int(input_ids.shape[1]),
            "kind": cfg.analysis.kind}


def run_analyze(cfg: Any, run: Any) -> dict[str, Any]:
    """`femlm analyze {covariance,variance,both,decomposition,passes}`: the entry point the CLI calls."""
    configure_process(cfg.runtime)
    check_sources(cfg.domain, cfg.download)
    tokenizer, model, info = load_model(cfg)
    input_ids, picked = _sequences(cfg, tokenizer)
    return analyze(cfg, run, model, tokenizer, input_ids, info, {"validation_blocks": picked})
