"""decomposition.md: the readable summary of `femlm analyze decomposition` (both parts), written from the summary
that decomposition.json holds, so a study can print the same tables from the JSON.

Every interval is printed with its unit and count; with fewer units than `intervals.MIN_UNITS` no interval is
printed (the reason is); a gated estimate (`gates`) prints "not measured: <reason>" beside its numbers.
"""

from __future__ import annotations

import math
from typing import Any

from .intervals import MIN_UNITS


def fmt(value: Any) -> str:
    return "n/a" if not isinstance(value, (int, float)) or not math.isfinite(value) else f"{value:.4g}"


def with_ci(value: Any, ci: Any, show: bool = True) -> str:
    """``value [low, high]``; the value alone when ``show`` is False or the interval is missing (JSON null)."""
    if not show or not isinstance(ci, (list, tuple)) or not all(
            isinstance(c, (int, float)) and math.isfinite(c) for c in ci):
        return fmt(value)
    return f"{fmt(value)} [{fmt(ci[0])}, {fmt(ci[1])}]"


def enough(count: Any) -> bool:
    return isinstance(count, int) and count >= MIN_UNITS


def units_line(unit: str, count: Any, resamples: Any) -> str:
    """The sentence that says what the intervals of a table rest on, or why there are none."""
    if not enough(count):
        return (f"No intervals: {count} {unit} are too few for a bootstrap (at least {MIN_UNITS}; "
                "`femlm.analysis.intervals`), so no verdict is drawn from them.")
    return (f"Intervals: 95% expanded percentile bootstrap over {count} {unit} ({resamples} resamples; "
            "`femlm.analysis.intervals`).")


def verdict_table(verdicts: dict[str, Any], show_ci: bool = True, readings: dict[str, str] | None = None) -> list[str]:
    """Markdown rows of the per-K predictions (also the study's README, from decomposition.json). The last column
    describes one run's interval (unadjusted); a study passes its own ``readings`` per K instead (femlm.study)."""
    ci_head = " [95% CI]" if show_ci else ""
    last = "reading (the study's)" if readings is not None else "95% interval (this run alone)"
    lines = [f"| K | FE / MLM per unit compute{ci_head} | c_FE + sigma_d2{ci_head} | measured, same rows | "
             f"measured, same sequences | i.i.d. / MLM | {last} |", "|---:|---|---|---|---|---|---|"]
    for k, v in verdicts.items():
        fe, iid = v["fe"], v["iid"]
        lines.append(f"| {k} | {with_ci(fe['per_compute_vs_mlm'], fe['ci'], show_ci)} | "
                     f"{with_ci(fe['c_plus_sigma_d2'], fe['c_plus_sigma_d2_ci'], show_ci)} | "
                     f"{with_ci(fe['measured_same_rows'], fe['measured_same_rows_ci'], show_ci)} | "
                     f"{with_ci(fe['measured_same_sequences'], fe['measured_same_sequences_ci'], show_ci)} | "
                     f"{with_ci(iid['per_compute_vs_mlm'], iid['ci'], show_ci)} | "
                     f"{(readings or {}).get(str(k), fe['verdict']) if readings is not None else fe['verdict']} |")
    return lines


def _term(term: dict[str, Any], show: bool) -> str:
    return with_ci(term["estimate"], term["ci"], show)


def decomposition_markdown(summary: dict[str, Any], rows: list[dict[str, Any]], null_rows: list[dict[str, Any]],
                           title: str, readings: dict[str, str] | None = None) -> str:
    """The whole page; ``readings``: a study's reading per K (femlm.study.verdicts) for the last column."""
    s, terms = summary["settings"], summary["terms"]
    gates = summary.get("gates", {})
    show = enough(s["pool"])
    lines = [f"# Gradient variance decomposition: {title}", "",
             f"Pool of {s['pool']} validation blocks of {s['block_size']} tokens, tau = {s['tau']} masked tokens per "
             f"copy, R = {s['batch_rows']} rows per step, K in {s['num_masks']}; {s['reference']} reference masks and "
             f"{s['draws']} draws of {max(s['num_masks'])} masks per sequence and arm; {s['check_batches']} directly "
             f"resampled batches. {units_line('pool sequences', s['pool'], s['bootstrap'])}", ""]
    if gates.get("decomposition"):
        lines += ["**Not measured**: " + "; ".join(gates["decomposition"]) + ". The numbers below are printed, "
                  "but no verdict is drawn from them.", ""]
    lines += ["## Terms (traces of covariance matrices, per sequence)", "",
              "| term | estimate" + (" [95% CI]" if show else "") + " |", "|---|---|",
              f"| data term sigma_d2 = Var_x(E_m[g given x]) | {_term(terms['sigma_d2'], show)} |",
              f"| mask term sigma_m2 = E_x[Var_m(g given x)] | {_term(terms['sigma_m2'], show)} |",
              f"| sigma_m2 from the FE masks (a second unbiased estimate) | "
              f"{_term(terms['sigma_m2_from_fe_masks'], show)} |",
              f"| c_FE, two disjoint masks of one sequence (pooled over K) | {_term(terms['c_fe'], show)} |"]
    for k, t in terms["c_fe_by_K"].items():
        lines.append(f"| c_FE from the first K={k} masks of each draw | {_term(t, show)} |")
    for k, t in terms["c_iid_by_K"].items():
        lines.append(f"| c_iid (control, 0 expected), K={k} | {_term(t, show)} |")
    robust = terms.get("robust", {})
    if robust:
        lines += ["", "Heavy-tail diagnostics (per pool sequence): " + "; ".join(
            f"{name}: mean {fmt(r['mean'])}, median of means {fmt(r['median_of_means'])}"
            + (f", largest sequence's share {fmt(r['largest_sequence_share'])}" if "largest_sequence_share" in r
               else "") for name, r in robust.items()) + "."]
    lines += ["", "Batch variance with S sequences of K copies: (1/S) [sigma_d2 + sigma_m2 / K + (1 - 1/K) c]. "
              "Per unit compute (variance x rows per step) FE costs K sigma_d2 + sigma_m2 + (K - 1) c_FE against "
              "MLM's sigma_d2 + sigma_m2 in *both* equal-compute modes, so FE wins iff c_FE < -sigma_d2. These "
              "ratios are *predictions* from the terms at this tau and these parameters, not measured training "
              "variances.", "",
              "## Per K (equal compute)", "", *verdict_table(summary["verdicts"], show, readings)]
    lines += ["", "Measured ratios come from batches resampled from the pool (data term (1 - 1/S_p) sigma_d2); "
              f"their intervals are over the {s['check_batches']} batches. Predicted ones are for sequences drawn "
              "from the corpus.", "",
              "## Batch-gradient variance per arm", "",
              "| arm | mode | K | sequences / step | rows / step | predicted | measured | "
              "measured / predicted (pool) | variance x rows |",
              "|---|---|---:|---:|---:|---|---|---|---|"]
    measured_show = enough(s["check_batches"]) and show
    for r in rows:
        lines.append(f"| {r['arm']} | {r['mode']} | {r['K']} | {r['sequences_per_step']} | {r['rows_per_step']} | "
                     f"{with_ci(r['predicted_var'], r['predicted_var_ci'], show)} | "
                     f"{with_ci(r['measured_var'], r['measured_var_ci'], measured_show)} | "
                     f"{with_ci(r['measured_over_predicted'], r['measured_over_predicted_ci'], measured_show)} | "
                     f"{with_ci(r['var_x_rows'], r['var_x_rows_ci'], show)} |")
    lines += null_markdown(summary, null_rows)
    lines.append("")
    return "\n".join(lines)


def null_markdown(summary: dict[str, Any], null_rows: list[dict[str, Any]]) -> list[str]:
    """The null model's section: a test of context interactions only (module doc of `null_model`)."""
    ns, null = summary["null_model"]["settings"], summary["null_model"]["summary"]
    gates = summary.get("gates", {}).get("null_model", [])
    seqs = ns["sequences"]
    show = enough(seqs)
    by_seq = null.get("by_sequence", {})

    def ci(key: str) -> str:  # the sequence-level interval where the run has one
        return with_ci(null[key], by_seq.get(f"{key}_ci"), show)

    lines = ["", "## Context interactions beyond an additive null model", "",
             f"{seqs} sequences, tau = {ns['tau']}, {ns['pairs']} mask pairs at stratified Hamming distances, "
             f"{ns['groups']} groups of {ns['group_size']} i.i.d. masks per sequence for the additive model (the "
             "least-squares additive approximation g_add(m) = (1/tau) sum_{i in m} a_i; its covariance is affine in "
             "the overlap, and measured = additive + residual holds exactly). An additive gradient already makes "
             "the covariance fall with the Hamming distance, so this tests for context interactions only: not "
             "Assumption 1 (which an additive model satisfies) and not FE's benefit.",
             "", units_line("sequences (each with its pairs and groups)", seqs, ns.get("bootstrap")), ""]
    if gates:
        lines += ["**Not measured**: " + "; ".join(gates) + ". The numbers below are printed, but no statement "
                  "about context interactions is drawn from them.", ""]
    lines += [f"- measured decrease (first to last H bin): {ci('measured_decrease')}",
              f"- additive model's decrease: {ci('additive_decrease')}",
              f"- fraction explained by the additive model: {ci('fraction_explained')}",
              f"- residual (interaction) decrease: {ci('residual_decrease')}",
              f"- Spearman rho of the residual against H (bins): {ci('residual_rho_bins')}",
              f"- additive share of Var(g(m)): {ci('additive_share_of_var')}",
              f"- D2 (sum of squared first-order effects, >= 0 by definition): {ci('d2_mean')}", "",
              "| H bin | mean H | pairs | measured | additive | residual |", "|---|---:|---:|---|---|---|"]
    for r in null_rows:
        lines.append(f"| {r['h_low']}-{r['h_high']} | {r['h_mean']:.1f} | {r['pairs']} | "
                     f"{with_ci(r['measured'], r.get('measured_ci_seq'), show)} | "
                     f"{with_ci(r['additive'], r.get('additive_ci_seq'), show)} | "
                     f"{with_ci(r['residual'], r.get('residual_ci_seq'), show)} |")
    return lines
