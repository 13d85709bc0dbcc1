"""The GPU study's plan (`python -m femlm.experiment study_gpu --plan`): N from the declared power rule, delta, the
gates, what the warm-up policy weighs and carries, and minutes per part, seeds per window and windows to N on each
card the experiment file lists, every figure labelled measured (on that card) or assumed.

Arithmetic over the composed configs (femlm.study.gpu_configs: steps, rows, block size, model shape, K and the
ratio come from the arm configs) and the typed `gpu:` block; no torch.

Power rule: femlm.study.gpu_power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from femlm.errors import UserError
from femlm.experiment.costs import evaluations, train_examples
from femlm.experiment.gpu_schema import Card, GpuStudy
from femlm.study.gpu_configs import Composed
from femlm.study.gpu_power import planned_n, side_alpha
from femlm.train.flops import FlopCounts

# ---------------------------------------------------------------------------------------------- model
# The layer families the plan counts (femlm runs every one through its sparse MLM head; the sparse last layer only
# for post-LN BERT, so the plan counts every layer dense, as ModernBERT and pre-LN layers run).
MODEL_TYPES = ("bert", "roberta-prelayernorm", "modernbert")
MODEL_NAMES = {"bert": "BERT (post-LN)", "roberta-prelayernorm": "BERT (pre-LN)",
               "modernbert": "ModernBERT (pre-LN, rotary, GeGLU, no biases)"}


def _shape(arch: dict[str, Any]) -> tuple[str, int, int, int]:
    kind = str(arch.get("model_type", "bert"))
    if kind not in MODEL_TYPES:
        raise UserError(f"study_gpu: model.arch.model_type={kind!r}: the plan counts {', '.join(MODEL_TYPES)}")
    return kind, int(arch["hidden_size"]), int(arch["num_hidden_layers"]), int(arch["intermediate_size"])


def model_flops(arch: dict[str, Any], vocab: int) -> FlopCounts:
    """A masked LM's matmul parameters from its shape: per layer Q, K, V, O and the FFN (ModernBERT's GeGLU: an up
    projection to 2 x FFN, half of it the gate, and the down projection), the head's transform and decoder; tests
    check it against femlm.train.flops.flop_counts on the built model."""
    kind, h, layers, inter = _shape(arch)
    ffn = 3 * h * inter if kind == "modernbert" else 2 * h * inter
    return FlopCounts(encoder_params=layers * (4 * h * h + ffn), head_params=h * h + h * vocab, layers=layers,
                      hidden=h)


def model_parameters(arch: dict[str, Any], vocab: int) -> int:
    """Parameters of the masked LM of this shape (HF's BertForMaskedLM, RobertaPreLayerNormForMaskedLM or
    ModernBertForMaskedLM), the decoder tied to the word embeddings."""
    kind, h, layers, inter = _shape(arch)
    if kind == "modernbert":  # no biases but the decoder's; LayerNorms without bias; no position embeddings
        embeddings = vocab * h + h
        layer = 4 * h * h + 3 * h * inter + 2 * h  # Wqkv, Wo; Wi (2 x FFN), Wo; two norms
        head = h * h + h + vocab  # dense, norm, decoder bias
        first_norm, final_norm = h, h  # the first layer's attention norm is an identity (the embeddings' precedes)
        return embeddings + layers * layer - first_norm + final_norm + head
    positions = int(arch.get("max_position_embeddings", 512))
    embeddings = (vocab + positions + int(arch.get("type_vocab_size", 2))) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h * inter + inter + h + 4 * h
    head = h * h + h + 2 * h + vocab
    final_norm = 2 * h if kind == "roberta-prelayernorm" else 0  # pre-LN: a last LayerNorm
    return embeddings + layers * layer + head + final_norm


def flops_per_token(counts: FlopCounts, seq: int, ratio: float) -> float:
    """Training FLOPs per row token (forward + backward), the head on the masked positions only."""
    return counts.per_step(1, seq, round(ratio * seq)) / seq


# ---------------------------------------------------------------------------------------------- the runs
@dataclass
class Runs:
    """What the plan reads from the composed configs and the data counts."""

    arch: dict[str, Any]
    vocab: int
    seq: int
    rows: int
    ratio: float
    warmup_steps: int
    warmup_evals: int
    warmup_eval_blocks: int
    arm_steps: int
    arm_evals: int
    arm_eval_blocks: int
    arm_train_blocks: int
    eval_rows: int  # rows per held-out evaluation batch (runtime.eval_batch_size, else the training batch)
    passes: dict[str, float]  # passes over the arms' training blocks
    cycle: int  # K of FE across passes: visits a full cycle needs
    finetune: dict[str, tuple[int, float, int]]  # task -> (training examples, epochs, runs per checkpoint)
    counted: str  # where the block counts come from
    problems: list[str] = field(default_factory=list)  # why the study may not run (the plan prints them)

    @property
    def params(self) -> int:
        return model_parameters(self.arch, self.vocab)

    @property
    def fpt(self) -> float:
        return flops_per_token(model_flops(self.arch, self.vocab), self.seq, self.ratio)


def read_runs(warm: Composed, arms: dict[str, Composed], tasks: dict[str, Composed],
              counts: dict[str, int], counted: str) -> Runs:
    """The runs' shapes; refuses arms that are not at equal compute or do not cover one full cycle of K visits."""
    w, first = warm.cfg, next(iter(arms.values())).cfg
    for name, c in arms.items():
        a = c.cfg
        if (a.trainer.batch_size, a.trainer.max_steps, a.trainer.equal_compute, a.data.block_size) != \
                (first.trainer.batch_size, first.trainer.max_steps, "same_rows", first.data.block_size):
            raise UserError(f"study_gpu: arm {name} is not at equal compute with {next(iter(arms))} (same_rows: the "
                            "same trainer.batch_size, trainer.max_steps and data.block_size for every arm)")
    if w.model.vocab_size != first.model.vocab_size or w.data.block_size != first.data.block_size:
        raise UserError("study_gpu: the warm-up and the arms must share model.vocab_size and data.block_size")
    rows, steps, train = first.trainer.batch_size, first.trainer.max_steps, counts["arms_train_blocks"]
    passes = {n: steps * rows / c.cfg.masking.num_copies / train for n, c in arms.items()}
    cycle = max(int(c.cfg.masking.num_masks) for c in arms.values() if c.cfg.masking.strategy ==
                "fully_explored_passes") if any(c.cfg.masking.strategy == "fully_explored_passes"
                                                for c in arms.values()) else 1
    one_copy = min(p for n, p in passes.items() if arms[n].cfg.masking.num_copies == 1)
    problems = [] if one_copy >= cycle else [
        f"the arms make {one_copy:.2f} passes over their {train} training blocks ({counted}), fewer than one full "
        f"cycle of K = {cycle} visits (FE across passes differs from MLM only on a revisit): raise trainer.max_steps "
        "or sample fewer ACL documents (domain.max_documents)"]
    ft = {t: (train_examples(c.cfg), float(c.cfg.finetune.epochs or c.cfg.task.epochs), len(c.cfg.finetune.seeds))
          for t, c in tasks.items()}
    return Runs(arch=dict(first.model.arch), vocab=int(first.model.vocab_size), seq=int(first.data.block_size),
                rows=int(rows), ratio=float(first.masking.peak_ratio),
                warmup_steps=int(w.trainer.max_steps),
                warmup_evals=evaluations(w.trainer.max_steps, w.runtime.eval_every),
                warmup_eval_blocks=min(int(w.data.eval_blocks), counts["warmup_validation_blocks"]),
                arm_steps=int(steps), arm_evals=evaluations(steps, first.runtime.eval_every),
                arm_eval_blocks=min(int(first.data.eval_blocks), counts["arms_validation_blocks"]),
                arm_train_blocks=int(train), eval_rows=int(first.runtime.eval_batch_size or rows), passes=passes, cycle=cycle, finetune=ft, counted=counted,
                problems=problems)


# ---------------------------------------------------------------------------------------------- time
def label(f: Any) -> str:
    """A unit cost's provenance: measured (on that card) or assumed, and its source."""
    return f"{'measured' if f.measured else 'assumed'}: {f.source}"


@dataclass
class CardPlan:
    card: str
    tokens_per_s: float  # training row tokens/s at the study's shape (the shortest step included)
    tokens_measured: bool
    parts: list[tuple[str, float, str]]  # (part, seconds, how it was counted)
    first_window: int  # seeds in the window that also trains the warm-up
    later_window: int  # seeds in every later window
    windows: int | None  # windows to N (carried warm-up); None: a seed does not fit one window
    windows_per_window_warmup: int | None  # windows to N if every window trained its own warm-up
    notes: list[str] = field(default_factory=list)


def card_plan(g: GpuStudy, card: Card, runs: Runs, n: int, budget_s: float, arms: list[str],
              done: int = 0, warmup_done: bool = False, measured: dict[str, float] | None = None) -> CardPlan:
    """Minutes per part, seeds per window and windows to N on one card. `measured`: what earlier windows on this
    card measured (median seconds of a seed's arms and of its downstream runs), used instead of the unit costs."""
    ref = card.reference
    ref_arch = {"model_type": ref.model_type, "hidden_size": ref.hidden_size, "num_hidden_layers": ref.num_hidden_layers,
                "intermediate_size": ref.intermediate_size}
    ref_fpt = flops_per_token(model_flops(ref_arch, ref.vocab_size), ref.seq, runs.ratio)
    same = ref.measured and (ref.model_type, ref.hidden_size, ref.num_hidden_layers, ref.intermediate_size,
                             ref.vocab_size, ref.seq, ref.rows) == \
        (str(runs.arch.get("model_type", "bert")), runs.arch["hidden_size"], runs.arch["num_hidden_layers"],
         runs.arch["intermediate_size"], runs.vocab, runs.seq, runs.rows)
    tok = ref.row_tokens_per_s * ref_fpt / runs.fpt
    floor = card.min_step_s.value
    how = (f"measured: {ref.row_tokens_per_s:,.0f} row tokens/s ({ref.mode})" if same else
           f"assumed: {ref.name} {ref.mode} {ref.row_tokens_per_s:,.0f} row tokens/s scaled by FLOPs per token "
           f"({ref_fpt / 1e6:.0f} -> {runs.fpt / 1e6:.1f} MFLOP), a step at least {floor * 1e3:g} ms "
           f"({label(card.min_step_s)})")
    speed = {s.arm: s for s in card.arm_speed}

    def steps_s(steps: int, factor: float = 1.0) -> float:
        """Training steps: FLOPs at the reference's MFU, or the card's shortest step where that is longer."""
        return steps * max(floor, runs.rows * runs.seq / (tok * factor))

    def evals_s(evaluations: int, blocks: int) -> float:
        """Held-out evaluations in batches of runs.eval_rows: a forward pass is a third of a training step's
        FLOPs per token and (launch-bound) a third of its shortest time, at the same MFU (assumed)."""
        batches = math.ceil(blocks / runs.eval_rows)
        return evaluations * max(batches * floor / 3, blocks * runs.seq / (3 * tok))

    def arm_s(name: str) -> float:
        factor = speed[name].factor if name in speed else 1.0
        return (steps_s(runs.arm_steps, factor) + evals_s(runs.arm_evals, runs.arm_eval_blocks)
                + card.run_setup_s.value)

    warm_s = (steps_s(runs.warmup_steps) + evals_s(runs.warmup_evals, runs.warmup_eval_blocks)
              + card.run_setup_s.value)
    seed_s = sum(arm_s(a) for a in arms)
    ft_s = len(arms) * sum(x * e * r for x, e, r in runs.finetune.values()) / card.finetune_examples_per_s.value
    seen = measured or {}
    seed_how = "measured: the median seed of earlier windows on this card" if "arms" in seen else ""
    ft_how = "measured: the median seed of earlier windows on this card" if "downstream" in seen else ""
    seed_s, ft_s = seen.get("arms", seed_s), seen.get("downstream", ft_s)
    fixed = card.startup_s.value + card.results_s.value + g.window.margin_s + 2 * card.compile_s.value

    slow = [f"{s.arm} at {s.factor:g}x ({'measured' if s.measured else 'assumed'}: {s.source})"
            for s in card.arm_speed if s.arm in arms and s.factor != 1]
    parts = [("start-up", card.startup_s.value, label(card.startup_s)),
             ("warm-up", warm_s, f"{runs.warmup_steps} steps x {runs.rows} x {runs.seq} at {how}; "
                                 f"{runs.warmup_evals} evaluations of {runs.warmup_eval_blocks} blocks"),
             ("one seed's arms", seed_s, seed_how or (
                 f"{len(arms)} arms x {runs.arm_steps} steps; {runs.arm_evals} evaluations of {runs.arm_eval_blocks} "
                 f"blocks each" + (f"; {'; '.join(slow)}" if slow else ""))),
             ("one seed's downstream", ft_s, ft_how or (f"{len(arms)} arms x " + ", ".join(
                 f"{t} {r} runs x {x} examples x {e:g} epochs" for t, (x, e, r) in runs.finetune.items())
                 + f" at {card.finetune_examples_per_s.value:g} examples/s ({label(card.finetune_examples_per_s)})")),
             ("results", card.results_s.value, label(card.results_s))]

    def cost(seed: int) -> float:
        return seed_s + (ft_s if seed <= g.downstream.pretrain_seeds else 0.0)

    def fill(start: int, room: float) -> int:
        k = 0
        while start + k < n and cost(start + k + 1) <= room:
            room -= cost(start + k + 1)
            k += 1
        return k

    first = fill(done, budget_s - fixed - (0.0 if warmup_done else warm_s))
    later_room = budget_s - fixed

    def windows(room_first: float, room_later: float) -> int | None:
        k, w, start = done, 0, done
        while k < n:
            got = fill(k, room_first if w == 0 else room_later)
            if got == 0 and w > 0:
                return None  # a seed does not fit one window
            k, w = k + got, w + 1
        return max(w, 1) if start < n else 0

    per_window = windows(budget_s - fixed - warm_s, budget_s - fixed - warm_s)
    # a later window: once the seeds with downstream runs are done (they cost the most), seeds of arms alone
    later = fill(max(done + first, g.downstream.pretrain_seeds), later_room)
    effective = min(tok, runs.rows * runs.seq / floor)
    notes = [] if effective == tok else [f"FLOPs at the reference's MFU alone would allow {tok:,.0f}: the shortest "
                                         f"step ({floor * 1e3:g} ms) decides at {runs.rows} x {runs.seq}"]
    return CardPlan(card.name, effective, same, parts, first, later,
                    windows(budget_s - fixed - (0.0 if warmup_done else warm_s), later_room), per_window, notes)


# ---------------------------------------------------------------------------------------------- the plan
MIB = 2**20
WHEELS_MIB = 1.2  # .whl/ as benchmarks/gpu_bundle.py fills it (measured 2026-11-27: 1.22 MiB, with datasets)


@dataclass
class Plan:
    n: int
    n_declared: int
    revised_sd: float | None
    comparisons: int
    alpha: float  # per side
    runs: Runs
    cards: list[CardPlan]
    carry: dict[str, float]  # MiB that travel under each warm-up policy
    checkpoint_mib: float
    done: int
    rule_n: int  # what the power rule gives (N unless gpu.max_seeds caps it)
    problems: list[str]  # why the study may not run
    delta: float  # the family's smallest margin (stats.delta)
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(self.lines)

    def refuse(self) -> None:
        """A one-line error for the first reason the study may not run (a plan prints them all)."""
        if self.problems:
            raise UserError(f"study_gpu: {self.problems[0]}")


def measured_pace(recs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per card, the median seconds of a kept seed's arms, and of its downstream runs where it had them."""
    from statistics import median

    out: dict[str, dict[str, float]] = {}
    for card in {r["card"] for r in recs}:
        mine = [r["seconds"] for r in recs if r["card"] == card and r.get("seconds")]
        arms = [s["arms"] for s in mine]
        down = [s["downstream"] for s in mine if s.get("downstream")]
        out[card] = {"arms": median(arms)} if arms else {}
        if down:
            out[card]["downstream"] = median(down)
    return out


def data_mib(blocks: int, seq: int, vocab: int) -> float:
    """A prepared split's token file: uint16 ids up to 65,536 entries (femlm.data.tokens), else int32."""
    return blocks * seq * (2 if vocab <= 2**16 else 4) / MIB


def make_plan(g: GpuStudy, budget_minutes: float, runs: Runs, arms: list[str], deltas: list[float],
              counts: dict[str, int], done: int = 0, warmup_done: bool = False,
              revised_sd: float | None = None, measured: dict[str, dict[str, float]] | None = None) -> Plan:
    """The plan of the next window: N, the warm-up policy's sizes, and every card's minutes and seeds
    (`measured`: card name -> what earlier windows measured there, see `card_plan`)."""
    comparisons = len(deltas)
    n0 = planned_n(g, deltas)
    n = rule = planned_n(g, deltas, revised_sd)
    if g.max_seeds is not None:
        n, n0 = min(n, g.max_seeds), min(n0, g.max_seeds)
    ckpt = runs.params * 4 / MIB + runs.vocab * 8 / MIB  # fp32 safetensors + the vocabulary file
    arms_data = data_mib(runs.arm_train_blocks + counts["arms_validation_blocks"], runs.seq, runs.vocab)
    wiki = data_mib(counts["warmup_train_blocks"] + counts["warmup_validation_blocks"], runs.seq, runs.vocab)
    base = g.expected.tree_mib + WHEELS_MIB + arms_data + 2.0  # + the two tasks' files (~1.7 MiB)
    carry = {"carried": base + ckpt, "per_window": base + wiki, "first window": base + wiki}
    cards = [card_plan(g, c, runs, n, budget_minutes * 60, arms, done, warmup_done, (measured or {}).get(c.name))
             for c in g.cards]
    problems = list(runs.problems)
    if carry[g.warmup.policy] > g.window.carry_mib:
        problems.append(f"the {g.warmup.policy} warm-up policy carries {carry[g.warmup.policy]:.1f} MiB, over "
                        f"{g.window.carry_mib:g}")
    p = Plan(n, n0, revised_sd, comparisons, side_alpha(g, comparisons), runs, cards, carry, ckpt, done, rule,
             problems, min(deltas))
    p.lines = _lines(g, p, budget_minutes)
    return p


def _lines(g: GpuStudy, p: Plan, budget_minutes: float) -> list[str]:
    a, r = g.analysis, p.runs
    pw = a.power
    lines = ["study_gpu plan (femlm/conf/experiment/study_gpu.yaml, declared before the data)",
             f"  endpoint: {a.endpoint}",
             f"  delta: {p.delta:g} nats (stats.delta); procedure: {a.procedure} over {p.comparisons} comparisons (difference and "
             f"equivalence together): {a.reading}",
             f"  N = {p.n} paired seeds" + (f" (gpu.max_seeds; the rule gives {p.rule_n})" if p.n != p.rule_n else "")
             + f": TOST at {p.alpha:.4g} per side, {pw.power:.0%} power at a true difference of "
             f"0, paired SD {pw.sd:g} ({pw.df} df; {pw.source})"
             + (f"; revised once, upward, from the first window's SD {p.revised_sd:.4g} (declared N {p.n_declared})"
                if p.revised_sd is not None and p.n != p.n_declared else ""),
             f"  revision: {g.analysis.revision.rule}",
             f"  gates: the warm-up's Wikipedia held-out loss >= {g.gates.warmup_margin:g} nat below the context-free "
             f"baseline under the evaluation's masking law, else: {g.gates.on_warmup_fail}; each arm's ACL held-out "
             f"loss below the warm-up checkpoint's (its step-0 value), else: {g.gates.on_arm_fail}",
             f"  windows: {a.windows}",
             f"  seeds complete: {p.done} of {p.n}",
             f"  model: {MODEL_NAMES[_shape(r.arch)[0]]} {r.arch['num_hidden_layers']} x {r.arch['hidden_size']} "
             f"({r.arch['num_attention_heads']} heads, FFN {r.arch['intermediate_size']}), vocabulary {r.vocab}, "
             f"{r.params:,} parameters, {r.fpt / 1e6:.1f} MFLOP per row token (every layer dense); every run "
             f"{r.rows} rows x {r.seq} tokens per step, held-out evaluation in batches of {r.eval_rows}",
             f"  arms at equal compute: {r.arm_steps} steps each; passes over {r.arm_train_blocks} ACL training blocks "
             f"({r.counted}): " + ", ".join(f"{k} {v:.1f}" for k, v in r.passes.items())
             + f" (one cycle of FE across passes: {r.cycle} visits)",
             f"  warm-up policy: {g.warmup.policy} ({g.warmup.reason})",
             f"    carried: the checkpoint is {p.checkpoint_mib:.1f} MiB (fp32), back in "
             f"{math.ceil(p.checkpoint_mib / g.window.back_file_mib)} file(s) of <= {g.window.back_file_mib:g} MiB; "
             f"a later window carries {p.carry['carried']:.1f} MiB of {g.window.carry_mib:g}",
             f"    per window: every window carries Wikipedia's blocks too ({p.carry['per_window']:.1f} MiB) and trains "
             "the warm-up again (its seeds then cluster by window, or the warm-up must be bitwise reproducible)",
             f"  window: {budget_minutes:g} minutes (estimate.budget_minutes; --budget-minutes), "
             f"{g.window.margin_s:g} s kept for the results"]
    for c in p.cards:
        lines.append(f"  {c.card}: {c.tokens_per_s:,.0f} training row tokens/s ({'measured' if c.tokens_measured else 'assumed'}"
                     + "".join(f"; {n}" for n in c.notes) + ")")
        lines.append(f"    {'part':<22}{'minutes':>8}")
        lines += [f"    {name:<22}{s / 60:>8.2f}  {how}" for name, s, how in c.parts]
        def count(w: int | None) -> str:
            return "never (a seed does not fit one window)" if w is None else f"{w}"

        if p.done >= p.n:
            lines.append(f"    N reached: {p.done} complete seeds")
            continue
        lines.append(f"    seeds per window: {c.first_window} in the window that trains the warm-up, {c.later_window} "
                     f"in each later one (once the first {g.downstream.pretrain_seeds} seeds' downstream runs are done); "
                     f"windows to N: {count(c.windows)} with the carried warm-up, "
                     f"{count(c.windows_per_window_warmup)} if every window trained its own")
    return lines + [f"  REFUSED: {why}" for why in p.problems]
