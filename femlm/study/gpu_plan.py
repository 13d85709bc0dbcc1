"""The plan of the in-process GPU study (study_gpu.yaml's `gpu:` block): seeds from a power rule, minutes per part
from unit costs measured on the card, and what does not fit the budget left out, saying so.

Pure arithmetic (no torch): `make_plan` is what `python -m femlm.experiment study_gpu --plan` prints and what the
run follows. Times come from the unit costs the experiment file stores with their source: a measured tokens/s of
femlm's step at a reference shape (BERT-base), scaled to the study's model by model FLOPs per row token (the same
formula as femlm.train.flops), i.e. assuming the study's model reaches the reference's MFU. Evaluation is a forward
pass only: a third of a training step's FLOPs per token, at the same MFU.

Seeds: as many as 80% power asks for at the effect and paired standard deviation a CPU study observed (its per-seed
CSV, named in the file), at the Holm level of the least significant of the study's confirmatory comparisons
(family alpha / their number), by Guenther's (1981) approximation for the paired t-test's sample size,
n = ((z_{1-a/2} + z_{power}) sd / effect)^2 + z_{1-a/2}^2 / 2; then capped by what fits the budget.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist, fmean, stdev
from typing import Any

from femlm.errors import UserError
from femlm.experiment.step import override_value
from femlm.train.flops import FlopCounts


# ---------------------------------------------------------------------------------------------- power
def seeds_for_power(sd: float, effect: float, alpha: float, power: float) -> int:
    """Pairs a two-sided paired t-test at level `alpha` needs for `power` at a true mean difference `effect`."""
    if effect == 0 or not math.isfinite(sd / effect):
        raise UserError(f"power rule: effect {effect} with paired SD {sd} gives no sample size")
    z = NormalDist().inv_cdf
    za, zb = z(1 - alpha / 2), z(power)
    return max(2, math.ceil(((za + zb) * sd / abs(effect)) ** 2 + za * za / 2))


def observed_pairs(path: Path, arm: str, reference: str, metric: str) -> tuple[float, float, int]:
    """(mean, SD, n) of the per-seed differences arm - reference of `metric` in a study's pretrain_runs.csv."""
    if not path.is_file():
        raise UserError(f"gpu.power.source={path}: no such file (a study's pretrain_runs.csv)")
    by: dict[str, dict[str, float]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            by.setdefault(row["arm"], {})[row["seed"]] = float(row[metric])
    if arm not in by or reference not in by:
        raise UserError(f"gpu.power: {path} has no rows of arm {arm!r} and {reference!r}; it has {', '.join(by)}")
    diffs = [by[arm][s] - by[reference][s] for s in by[reference] if s in by[arm]]
    if len(diffs) < 2:
        raise UserError(f"gpu.power: {path}: fewer than 2 paired seeds of {arm} and {reference}")
    return fmean(diffs), stdev(diffs), len(diffs)


# ---------------------------------------------------------------------------------------------- FLOPs
def bert_flops(arch: dict[str, Any], vocab: int) -> FlopCounts:
    """A BERT masked LM's matmul parameters from its shape: per layer Q, K, V, O (4 h^2) and the FFN (2 h i);
    the head's transform (h^2) and decoder (h V). Checked against femlm.train.flops.flop_counts on the built model."""
    h, layers, inter = int(arch["hidden_size"]), int(arch["num_hidden_layers"]), int(arch["intermediate_size"])
    return FlopCounts(encoder_params=layers * (4 * h * h + 2 * h * inter), head_params=h * h + h * vocab,
                      layers=layers, hidden=h)


def flops_per_token(counts: FlopCounts, seq: int, ratio: float) -> float:
    """Training FLOPs per row token (forward + backward), the head on the masked positions only."""
    return counts.per_step(1, seq, round(ratio * seq)) / seq


# ---------------------------------------------------------------------------------------------- plan
ARCH = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def setting(common: list[str], key: str) -> Any:
    """The value the study's common overrides give `key` (their one home: the arms' configs compose from them)."""
    value = override_value(common, key)
    if value is None:
        raise UserError(f"femlm/conf/experiment/study_gpu.yaml: experiment.common sets no {key}= (the plan needs it)")
    return value


@dataclass
class Part:
    name: str
    seconds: float
    note: str = ""
    skipped: bool = False


@dataclass
class GpuPlan:
    card: str
    arms: list[str]
    seeds: list[int]
    steps: dict[str, int]  # optimizer steps per arm (same_rows: the same for every arm)
    rows_per_step: int
    seq: int
    train_blocks: int
    eval_blocks: int
    eval_every: int
    passes: dict[str, float]  # passes over the training blocks per arm
    tokens_per_s: float
    flops_per_token: float
    seed_seconds: float  # training + evaluation of one seed's arms
    budget_s: float
    parts: list[Part] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return sum(p.seconds for p in self.parts if not p.skipped)

    def text(self) -> str:
        out = [*self.lines, f"  {'part':<14}{'minutes':>8}"]
        for p in self.parts:
            minutes = "-" if p.skipped else f"{p.seconds / 60:.2f}"
            out.append(f"  {p.name:<14}{minutes:>8}  {p.note}")
        out.append(f"  {'total':<14}{self.total_s / 60:>8.2f}  of the {self.budget_s / 60:g}-minute budget")
        return "\n".join(out)


def make_plan(plan: dict[str, Any], root: Path, train_blocks: int | None = None,
              eval_blocks: int | None = None) -> GpuPlan:
    """The study's plan from the experiment file's `gpu:` block (and the prepared corpus's block counts, when
    known; before preparation the file's expected counts)."""
    g, pre, common = plan["gpu"], plan["pretrain"], plan["common"]
    u = g["unit_costs"]
    arch = {key: setting(common, f"model.arch.{key}") for key in ARCH}
    seq, rows = int(setting(common, "data.block_size")), int(setting(common, "trainer.batch_size"))
    vocab, compiled = int(setting(common, "model.vocab_size")), bool(override_value(common, "runtime.compile", False))
    ratio = 0.15  # every arm's masking ratio (the masking configs' default)
    train_blocks = train_blocks or int(g["corpus"]["train_blocks"])
    eval_blocks = min(eval_blocks or int(g["corpus"]["eval_blocks"]), int(setting(common, "data.eval_blocks")))
    k = int(pre.get("num_masks", 4))
    study_fpt = flops_per_token(bert_flops(arch, vocab), seq, ratio)
    ref = u["reference"]
    ref_fpt = flops_per_token(bert_flops(ref, int(ref["vocab_size"])), int(ref["seq"]), ratio)
    tokens_per_s = float(u["tokens_per_s"]) * ref_fpt / study_fpt
    # Same rows per step for every arm: MLM and FE across passes read `rows` sequences per step, the K-copy arm
    # rows / K sequences x K copies; steps from the passes the one-copy arms make over the training blocks.
    steps = math.ceil(float(g["passes"]) * train_blocks / rows)
    passes = {arm: steps * rows / (k if arm == pre["control"] else 1) / train_blocks for arm in pre["arms"]}
    limit = float(setting(common, "trainer.max_passes"))
    if max(passes.values()) > limit:
        raise UserError(f"gpu.passes={g['passes']}: {max(passes.values()):.1f} passes over the training blocks "
                        f"pass trainer.max_passes={limit:g}")
    eval_every = max(1, steps // int(g["eval_points"]))
    evals = steps // eval_every + 1 + (steps % eval_every != 0)
    train_s = steps * rows * seq / tokens_per_s
    eval_s = evals * eval_blocks * seq / (3 * tokens_per_s)
    seed_s = len(pre["arms"]) * (train_s + eval_s + float(u["arm_setup_s"]))

    # Seeds: the power rule, then the budget.
    pw = g["power"]
    confirmatory = (plan.get("stats") or {}).get("confirmatory") or []
    alpha = float(pw["family_alpha"]) / max(1, len(confirmatory))
    wanted, reasons = 3, []
    for arm in pw["arms"]:
        mean, sd, n = observed_pairs(root / pw["source"], arm, pre["reference"], pw["metric"])
        need = seeds_for_power(sd, mean, alpha, float(pw["power"]))
        wanted = max(wanted, need)
        reasons.append(f"{arm} - {pre['reference']}: {need} (observed {mean:+.4f}, paired SD {sd:.4f}, {n} seeds)")
    budget = float(plan["estimate"]["budget_minutes"]) * 60
    fixed = float(u["startup_s"]) + float(u["results_s"]) + (float(u["compile_s"]) * 2 if compiled else 0.0)
    fits = int((budget - fixed) // seed_s)
    if fits < 3:
        raise UserError(f"study_gpu: {fits} seeds fit the {budget / 60:g}-minute budget ({seed_s:.0f} s per seed of "
                        f"{len(pre['arms'])} arms); lower gpu.passes or the model, or raise estimate.budget_minutes")
    n_seeds = min(wanted, fits, int(g.get("max_seeds", wanted)))
    seeds = list(range(1, n_seeds + 1))

    card = str(u["card"])
    p = GpuPlan(card, list(pre["arms"]), seeds, {a: steps for a in pre["arms"]}, rows, seq, train_blocks,
                eval_blocks, eval_every, passes, tokens_per_s, study_fpt, seed_s, budget)
    mode = "compiled" if compiled else "eager"
    p.parts = [
        Part("start-up", float(u["startup_s"]), "one process: imports, tokenizer, prepared blocks, device"),
        Part("compile", float(u["compile_s"]) * 2 if compiled else 0.0,
             "training and evaluation graphs once (assumes runs of the same shapes reuse them: not measured)"
             if compiled else
             f"none: eager ({u['mode_reason']})"),
        Part("training", n_seeds * len(pre["arms"]) * (train_s + float(u["arm_setup_s"])),
             f"{n_seeds} seeds x {len(pre['arms'])} arms x {steps} steps x {rows} rows x {seq} tokens"),
        Part("evaluation", n_seeds * len(pre["arms"]) * evals * eval_blocks * seq / (3 * tokens_per_s),
             f"{evals} held-out evaluations of {eval_blocks} blocks per run"),
    ]
    ft = g.get("finetune") or {}
    ft_s = len(pre["arms"]) * int(ft.get("seeds", 0)) * sum(float(ft["seconds_per_seed"][t]) * study_fpt / ref_fpt
                                                          for t in ft.get("tasks", []))
    left = budget - p.total_s - float(u["results_s"])
    if ft:
        why = (f"needs ~{ft_s / 60:.1f} min, {max(left, 0) / 60:.1f} left after the seeds"
               if ft_s > left else "fits, but in-process fine-tuning is not built yet (README: what is left)")
        why += f"; {len(pre['arms'])} arms x {ft['seeds']} seeds x {', '.join(ft['tasks'])}"
        p.parts.append(Part("fine-tuning", ft_s, f"skipped: {why}", skipped=True))
    p.parts.append(Part("results", float(u["results_s"]), "CSVs, figure, README, one archive"))
    p.lines = [
        f"study_gpu plan on one {card} (unit costs: {u['source']})",
        f"  model: BERT {arch['num_hidden_layers']} layers x {arch['hidden_size']} wide (FFN "
        f"{arch['intermediate_size']}, vocabulary {vocab}), {study_fpt / 1e6:.3g} MFLOP per row token; "
        f"reference {ref['name']} {ref_fpt / 1e6:.0f} MFLOP",
        f"  throughput: {tokens_per_s:,.0f} row tokens/s = femlm {mode} {float(u['tokens_per_s']):,.0f} tokens/s at "
        f"{ref['name']} scaled by FLOPs per token (assumes the same MFU)",
        f"  equal compute (same_rows): every arm {rows} rows x {seq} tokens per step, {steps} steps; passes over "
        f"{train_blocks} training blocks: " + ", ".join(f"{a} {v:.1f}" for a, v in passes.items()),
        f"  seeds: the power rule asks for {wanted} (80% power at Holm's {alpha:.4g} = {pw['family_alpha']} / "
        f"{max(1, len(confirmatory))} confirmatory; " + "; ".join(reasons) + f"); the budget fits {fits}; "
        f"running {n_seeds}" + ("" if n_seeds >= wanted else " (fewer than the rule asks: underpowered for the "
                                 "CPU study's effect; the intervals say what is excluded)"),
    ]
    return p
