"""A study's comparisons, each one record (`Comparison`) built from the study's results: the decomposition's
predicted variance ratios and null model, the passes measurement, pre-training losses and compute ratios, one arm
against another, downstream scores. femlm.study.verdicts reads them (one reading rule, families, text).

`study_comparisons(plan, dec, pre, down, passes, reads)` is the one entry point for the CPU studies; a new study
(the GPU study) may build `Comparison` records itself (see femlm.study.verdicts for the fields the rule reads) and
key them ``<kind>/<where>/<what>`` as femlm.experiment.keys spells them: the keys its experiment file's
``stats.confirmatory`` lists.

What a comparison *is* is stated here, once: an **outcome** (a training loss, a compute ratio, a downstream score:
``first`` against ``second``, two arms named by their masking YAMLs), or a **mechanism** reading (``nature``
"prediction": the decomposition's predicted variance ratios; "mechanism": the passes measurement and the null
model's context interactions), which is never read as favouring or going against FE. Caveats that belong to a
reading (a steps/batch confound, the data one arm read, one pre-training seed, a unit count near the minimum) are
built from the numbers beside it and travel with it to every table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from femlm.analysis.intervals import MIN_UNITS
from femlm.experiment import keys
from femlm.study import arms

FAVOURS, AGAINST, UNDECIDED = "favours FE", "against FE", "not decided"
LOWER, HIGHER = "lower", "higher"
# A bootstrap interval from so few units covers less than its nominal 95% for skewed data (the coverage
# simulation in femlm/analysis/intervals.py: 0.90-0.92 from 10 to 20 units); a reading there says so.
FEW_UNITS = 20


@dataclass
class Comparison:
    """One comparison: what it is, its interval, its p-values and (after `verdicts.adjust`) its reading."""

    key: str  # stable id: "<kind>/<where>/<what>" (femlm.experiment.keys), what ``stats.confirmatory`` lists
    kind: str  # variance_ratio, training_loss, compute_ratio, fe_vs_control, downstream, passes, context
    text: str  # what is compared, in full: unit, count, scope
    estimate: float | None
    low: float | None
    high: float | None
    unit: str  # "difference" or "ratio"
    better: str = "lower"  # the side of the null that is better for ``first`` (an outcome) / the mechanism
    p: float | None = None
    p_method: str = ""
    gated: list[str] = field(default_factory=list)
    bound: str = ""  # a censored compute ratio: a bound without interval or p
    n: int | None = None
    sd: float | None = None  # the standard deviation of the paired differences (paired t), or of ``first`` (Welch)
    n_other: int | None = None  # Welch: the other arm's seeds
    sd_other: float | None = None
    df: float | None = None  # the t-test's degrees of freedom (equivalence tests)
    # What it compares: two arms (an outcome) or nothing (a mechanism reading).
    first: str = ""
    second: str = ""
    nature: str = "outcome"  # outcome | prediction | mechanism
    short: str = ""  # the table's name for it
    level: float = 0.95  # the level of the interval [low, high]
    replicates: list[float] | None = None  # a bootstrap's replicates, where stored: p by inversion
    one_seed: bool = False  # downstream: fine-tuning seeds of ONE pre-training seed (no seeds-to-decide)
    group: str = ""  # comparisons that print one shared estimate (the decomposition's per-K ratios)
    group_text: str = ""  # that estimate, e.g. "c_FE + sigma_d2 = 0.111 [0.0432, 0.174]"
    caveats: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # the caveats in a few words (README.md's block)
    # Set by femlm.study.verdicts.adjust:
    about_fe: bool = False  # an outcome of an FE arm against the plan's reference arm: may read favours/against FE
    family: str = "exploratory"  # confirmatory | primary | exploratory
    p_adjusted: float | None = None
    delta: float | None = None  # the declared equivalence margin (stats.delta), in the comparison's units
    p_equivalence: float | None = None  # TOST within +-delta
    p_equivalence_adjusted: float | None = None
    reading: str = UNDECIDED
    why: str = ""
    seeds_needed: int | None = None
    seeds_basis: str = ""

    @property
    def null(self) -> float:
        return 1.0 if self.unit == "ratio" else 0.0

    def side(self) -> str | None:
        """"lower" / "higher" when the interval excludes the null, else None."""
        if self.low is None or self.high is None:
            return None
        return LOWER if self.high < self.null else HIGHER if self.low > self.null else None

    @property
    def contrast(self) -> str:
        """"FE across passes - MLM" (a ratio: "/"); a mechanism reading: its short name."""
        if not self.first:
            return self.short or self.kind
        op = " / " if self.unit == "ratio" else " − "
        return f"{arms.label(self.first)}{op}{arms.label(self.second)}"


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


# ------------------------------------------------------------------------------------------ builders
def _interval(d: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    return _num(d.get("estimate")), _num(d.get("low")), _num(d.get("high"))


def _ci_pair(value: Any, ci: Any) -> tuple[float | None, float | None, float | None]:
    ci = ci or [None, None]
    return _num(value), _num(ci[0]), _num(ci[1])


def _sig(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _few_units(n: int | None, unit: str) -> list[str]:
    if n is not None and MIN_UNITS <= n < FEW_UNITS:
        return [f"{n} {unit}, near the {MIN_UNITS}-unit minimum: femlm's coverage simulation gives a nominal 95% "
                "bootstrap interval 0.90-0.92 coverage there for skewed data (femlm/analysis/intervals.py)"]
    return []


BOOTSTRAP = "bootstrap interval (replicates not stored: no p)"


def variance_comparisons(dec: dict[str, Any], model_parameters: int | None = None) -> list[Comparison]:
    """FE / MLM training-gradient variance per unit compute, *predicted* by each decomposition run, per K: one
    estimate (c_FE + sigma_d2, shared by every K of the run) and its consequence at each K."""
    from femlm.study.evidence import pool_size, prediction_label, run_gates, studied
    from femlm.study.sections import where_label

    out = []
    for where, d in dec.items():
        j = d.get("json")
        if not j:
            continue
        reasons = run_gates(j)["decomposition"]
        share = studied(j, model_parameters)
        for k, v in j["verdicts"].items():
            fe = v["fe"]
            est, lo, hi = _ci_pair(fe["per_compute_vs_mlm"], fe["ci"])
            m, mlo, mhi = _ci_pair(fe.get("c_plus_sigma_d2"), fe.get("c_plus_sigma_d2_ci"))
            direct, dlo, dhi = _ci_pair(fe.get("measured_same_rows"), fe.get("measured_same_rows_ci"))
            check = (f"the direct check on resampled batches (same rows per step): {direct:.3f} "
                     f"[{dlo:.3f}, {dhi:.3f}]" if direct is not None and dlo is not None and dhi is not None
                     else "no direct check (no batches were resampled)")
            out.append(Comparison(
                f"variance_ratio/{where}/K{k}", "variance_ratio",
                f"FE (K={k}) / MLM training-gradient variance per unit compute at {where_label(where, d)}, "
                f"{prediction_label(j)} ({pool_size(j)} pool sequences)", est, lo, hi, "ratio",
                p_method=BOOTSTRAP, gated=list(reasons), n=pool_size(j), nature="prediction",
                short=f"FE / MLM gradient variance per unit compute, K={k}, {where} (predicted)",
                group=f"variance_ratio/{where}",
                group_text=f"c_FE + sigma_d2 = {_sig(m)} [{_sig(mlo)}, {_sig(mhi)}] ({pool_size(j)} pool sequences)",
                caveats=[f"a prediction of the decomposition for {share}, at one checkpoint, not a training outcome; "
                         "every K of this run follows from one estimate, c_FE + sigma_d2",
                         f"K={k}: {check}" if direct is not None else check],
                flags=["a prediction for two layer-0 matrices at one checkpoint",
                       f"direct check {direct:.3f} [{dlo:.3f}, {dhi:.3f}]" if direct is not None and dlo is not None
                       and dhi is not None else "no direct check"]))
    return out


def context_comparisons(dec: dict[str, Any]) -> list[Comparison]:
    """The residual (interaction) decrease of the null model: a reading about context interactions, not FE."""
    from femlm.study.evidence import null_interval, null_sequences, run_gates
    from femlm.study.sections import where_label

    out = []
    for where, d in dec.items():
        j = d.get("json")
        if not j or not (j.get("null_model") or {}).get("summary"):
            continue
        ci = null_interval(j, "residual_decrease")
        est, lo, hi = ci["estimate"], ci["low"], ci["high"]
        gated = run_gates(j)["null_model"] + (["the null model ran on a few sequences and masks, sized as a side "
                                               "number, not as a test"] if d.get("null_model") == "side" else [])
        seqs = null_sequences(j)
        out.append(Comparison(
            f"context/{where}", "context",
            f"residual (interaction) decrease of the gradient covariance with Hamming distance beyond the additive "
            f"null model at {where_label(where, d)} ({seqs} sequences, one checkpoint)",
            est, lo, hi, "difference", better="higher", p_method=BOOTSTRAP, gated=gated, n=seqs, nature="mechanism",
            short=f"context interactions: residual decrease beyond the additive null model, {where}",
            caveats=["tests context interactions only: an additive gradient already satisfies Assumption 1, and "
                     "neither says whether FE pays", *_few_units(seqs, "sequences")],
            flags=["context interactions, not FE's benefit",
                   *([f"{seqs} sequences: coverage 0.90-0.92 there"] if _few_units(seqs, "") else [])]))
    return out


METRIC = {"final_loss": ("final held-out loss", "final loss"),
          "mean_loss": ("mean held-out loss over the budget", "mean loss")}


def _mode(mode: str) -> str:
    from femlm.study.text import MODE_LABEL
    return MODE_LABEL.get(mode, mode)


def _steps_caveat(mode: str, arm: str) -> list[str]:
    """Same sequences per step: a K-copy arm takes K x the rows per step and K x fewer steps than MLM."""
    cfg = arms.masking(arm)
    k = cfg.num_copies if cfg is not None else 1
    if mode != "same_sequences" or k <= 1:
        return []
    return [f"same sequences per step: this arm takes {k}x MLM's rows per step and {k}x fewer optimizer steps, "
            "at one learning rate, so the difference mixes the masks with the step count and batch size"]


def _steps_flag(mode: str, arm: str) -> list[str]:
    cfg = arms.masking(arm)
    k = cfg.num_copies if cfg is not None else 1
    return [f"{k}x fewer steps than MLM: a steps/batch effect"] if mode == "same_sequences" and k > 1 else []


def _reads_flag(first: str, second: str, reads: dict[str, Any] | None) -> list[str]:
    a, b = (reads or {}).get(first), (reads or {}).get(second)
    if not a or not b:
        return []
    if a.get("sequences") == b.get("sequences"):
        return ["same data: only the masks differ"]
    return [f"reads {a.get('sequences'):,} vs {b.get('sequences'):,} sequences"]


def _reads_caveat(first: str, second: str, reads: dict[str, Any] | None) -> list[str]:
    """What two arms read, where it differs (passes vs K-copy: 4x the sequences)."""
    a, b = (reads or {}).get(first), (reads or {}).get(second)
    if not a or not b:
        return []
    if a.get("sequences") == b.get("sequences") and a.get("rows") == b.get("rows"):
        return [f"both arms read {a.get('rows'):,} rows of {a.get('sequences'):,} sequences (K={a.get('K')} and "
                f"K={b.get('K')}): only the masks differ"]
    return [f"{arms.label(first)} read {a.get('sequences'):,} sequences (K={a.get('K')}, {a.get('rows'):,} rows), "
            f"{arms.label(second)} {b.get('sequences'):,} (K={b.get('K')}, {b.get('rows'):,} rows): the difference "
            "includes the data each read, not only the masks"]


def pretrain_comparisons(pre: dict[str, Any], reads: dict[str, Any] | None = None,
                         reference: str = "mlm_subword") -> list[Comparison]:
    """Per mode and arm vs the reference: final and mean loss (paired t), compute to each target (paired t on log
    ratios); one arm against another (``fe_vs_control``: paired t)."""
    out = []
    for mode, res in pre.items():
        ml = _mode(mode)
        for arm, c in (res.get("comparisons") or {}).items():
            for metric in ("final_loss", "mean_loss"):
                m = c[metric]["paired"]
                what, short = METRIC[metric]
                n = m.get("n")
                out.append(Comparison(
                    f"training_loss/{mode}/{arm}/{metric}", "training_loss",
                    f"{arms.label(arm)} - {arms.label(reference)}, {what}, {ml} (paired t, {n} seeds)",
                    *_interval(m), "difference", p=_num(m.get("p")), p_method="paired t", n=n,
                    sd=_num(m.get("std")), df=(n - 1) if isinstance(n, int) and n > 1 else None,
                    first=arm, second=reference, short=f"{short}, {ml} ({n} seeds)",
                    caveats=_steps_caveat(mode, arm), flags=_steps_flag(mode, arm)))
            for key in [k for k in c if k.startswith("ratio_to_")]:
                r = c[key]
                cut = bool(r.get("bound"))
                est, lo, hi = _interval(r)
                target = key[len("ratio_to_"):]
                out.append(Comparison(
                    f"compute_ratio/{mode}/{arm}/{target}", "compute_ratio",
                    f"{arms.label(arm)} / {arms.label(reference)} compute to reach target {target}, {ml} (paired t on "
                    f"log ratios, {r.get('n')} seeds)", est, None if cut else lo, None if cut else hi, "ratio",
                    p=None if cut else _num(r.get("p")), p_method="paired t on log ratios", bound=r.get("bound") or "",
                    n=r.get("n"), first=arm, second=reference,
                    short=f"compute to target {target}, {ml} ({r.get('n')} seeds)", caveats=_steps_caveat(mode, arm),
                    flags=_steps_flag(mode, arm)))
        vs = res.get("fe_vs_control")
        if vs:
            for metric in ("final_loss", "mean_loss"):
                m = vs[metric]
                what, short = METRIC[metric]
                n = len(vs["paired_seeds"])
                out.append(Comparison(
                    f"fe_vs_control/{mode}/{metric}", "fe_vs_control",
                    f"{arms.label(vs['fe'])} - {arms.label(vs['control'])}, {what}, {ml} (paired t, {n} seeds)",
                    *_interval(m), "difference", p=_num(m.get("p")), p_method="paired t", n=n, sd=_num(m.get("std")),
                    df=(n - 1) if n > 1 else None, first=vs["fe"], second=vs["control"],
                    short=f"{short}, {ml} ({n} seeds)",
                    caveats=_reads_caveat(vs["fe"], vs["control"], (reads or {}).get(mode)),
                    flags=_reads_flag(vs["fe"], vs["control"], (reads or {}).get(mode))))
    _cross_reference(out)
    return out


def _cross_reference(comps: list[Comparison]) -> None:
    """A same-sequences K-copy reading beside its i.i.d. control's: where the control loses as much, the step
    count, not the masks, carries the difference."""
    for c in comps:
        if c.kind != "training_loss" or not c.key.startswith("training_loss/same_sequences/") or not c.caveats:
            continue
        for other in comps:
            if (other.kind == "training_loss" and other is not c and arms.role(other.first) == "control"
                    and other.key.rsplit("/", 1)[-1] == c.key.rsplit("/", 1)[-1]
                    and other.key.split("/")[1] == "same_sequences" and other.estimate is not None):
                c.caveats.append(f"{other.contrast} in the same mode: {_sig(other.estimate)} "
                                 f"[{_sig(other.low)}, {_sig(other.high)}]")
                c.flags.append(f"the i.i.d. control loses {_sig(other.estimate)} too")


def majority_seeds(scores: list[Any], majority: float | None) -> int | None:
    """Fine-tuning seeds whose test score is the majority class's (a collapsed classifier)."""
    if majority is None:
        return None
    return sum(1 for v in scores if isinstance(v, (int, float)) and abs(v - majority) < 1e-9)


def downstream_comparisons(down: dict[str, Any], reference: str = "mlm_subword",
                           pretrain_seed: Any = None) -> list[Comparison]:
    """Per task and FE arm: the test-score difference to the reference (Welch over fine-tuning seeds of one
    pre-training seed's checkpoints); higher is better."""
    out = []
    for task, d in down.items():
        ref = d["summary"].get(reference) or {}
        for arm, c in d["vs_mlm"].items():
            if not arms.is_fe(arm) or not c:
                continue
            s = d["summary"].get(arm) or {}
            scores = d.get("scores") or {}
            k_fe, k_ref = (majority_seeds(scores.get(a) or [], d.get("majority")) for a in (arm, reference))
            collapse = ([f"{k_fe} of {len(scores.get(arm) or [])} seeds of {arms.label(arm)} and {k_ref} of "
                         f"{len(scores.get(reference) or [])} of {arms.label(reference)} scored exactly the majority "
                         "class (a collapsed classifier): the scores are a mixture, which a t-test does not model"]
                        if k_fe or k_ref else [])
            seed = f" (seed {pretrain_seed})" if pretrain_seed is not None else ""
            out.append(Comparison(
                f"downstream/{task}/{arm}", "downstream",
                f"{arms.label(arm)} - {arms.label(reference)}, {task} test {d['metric']} (Welch, {s.get('n')} vs "
                f"{ref.get('n')} fine-tuning seeds)", *_interval(c), "difference", better="higher",
                p=_num(c.get("p")), p_method="Welch t", n=s.get("n"), sd=_num(s.get("std")), n_other=ref.get("n"),
                sd_other=_num(ref.get("std")), df=_num(c.get("df")), first=arm, second=reference,
                short=f"{task} test {d['metric']} ({s.get('n')} vs {ref.get('n')} fine-tuning seeds)", one_seed=True,
                caveats=[f"every fine-tuning seed starts from one pre-training seed's checkpoint{seed}: the interval "
                         "holds fine-tuning noise only, and no number of fine-tuning seeds can decide between the "
                         "methods", *collapse],
                flags=["one pre-training seed", *([f"majority-class seeds: {arms.label(arm)} {k_fe}/"
                                                   f"{len(scores.get(arm) or [])}, {arms.label(reference)} {k_ref}/"
                                                   f"{len(scores.get(reference) or [])}"] if k_fe or k_ref else [])]))
    return out


def passes_comparisons(rows: list[dict[str, Any]]) -> list[Comparison]:
    """Var(disjoint visits) / Var(independent visits) of a cycle's summed gradient (passes_rows' rows)."""
    out = []
    for r in rows:
        est, lo, hi = _ci_pair(r["measured_ratio"], r.get("measured_ratio_ci"))
        k, tau, block = int(r["K"]), int(r["tau"]), int(r["block_size"])
        out.append(Comparison(
            f"passes/{r['run']}/K{k}", "passes",
            f"across passes, Var(disjoint) / Var(independent visits) of a cycle's summed gradient, mask term only, "
            f"K={k}, tau {tau} of {block}-token blocks ({r['sequences']} sequences, one checkpoint)", est, lo, hi,
            "ratio", p_method=BOOTSTRAP, gated=list(r.get("not_measured") or []), n=r.get("sequences"),
            nature="mechanism", short=f"Var(disjoint) / Var(independent visits), K={k}, {r['run']} (mask term)",
            caveats=[f"the mask term only, all visits at one checkpoint's weights; K x tau = {k * tau} masked tokens "
                     f"per cycle in a {block}-token block, so a cycle masks most of each block exactly once and much "
                     "of the reduction follows from disjointness itself", *_few_units(r.get("sequences"),
                                                                                     "sequences")],
            flags=[f"mask term at one checkpoint; K x tau = {k * tau} of {block} tokens"]))
    return out


def study_comparisons(plan: dict[str, Any], dec: dict[str, Any], pre: dict[str, Any], down: dict[str, Any],
                      passes: list[dict[str, Any]], reads: dict[str, Any] | None = None,
                      model_parameters: int | None = None) -> list[Comparison]:
    """Every comparison of one study's results (the collected or the committed ones; see the module doc).
    ``dec``: decomposition runs {key: {"json", "label"}}; ``pre``: femlm.study.compare.analyse_pretraining's
    result; ``down``: analyse_downstream's; ``passes``: femlm.study.passes.passes_rows; ``reads``: per mode and
    arm the K, rows and sequences a run read (study.json's ``arms_read``); ``model_parameters``: the encoder's, for
    the share of it a decomposition studies."""
    reference = (plan.get("pretrain") or {}).get("reference", "mlm_subword")
    seed = (plan.get("finetune") or {}).get("pretrain_seed")
    comps = [*variance_comparisons(dec, model_parameters), *context_comparisons(dec), *passes_comparisons(passes),
             *pretrain_comparisons(pre, reads, reference), *downstream_comparisons(down, reference, seed)]
    for c in comps:
        keys.check_spelling(c.key)
    return comps
