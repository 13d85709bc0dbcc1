"""A study's plan: femlm/conf/experiment/<name>.yaml (study.yaml, study_base.yaml) turned into an ordered list of
femlm commands.

Every step is one femlm command with a fixed run directory under the study's runs directory, so the driver can
tell what is done by looking at files (`Step.done`). The order puts the cheap, decisive measurements first:

1. encoder       locate or fetch (smoke: build) the encoder and check its weights' sha256 in-process
2. download      verify the data mirror (femlm download, offline)                         femlm download
   (head_warmup) the fresh MLM head alone, the encoder frozen (trainer.trainable)          femlm continual-pretrain
3. warmup        one shared MLM continual run from the encoder with a fresh MLM head       femlm continual-pretrain
                 (or from the head warm-up's final checkpoint)
4. decomposition femlm analyze decomposition on the warmed-up encoder (parts 1 and 2), once
                 per entry of decomposition.variants (e.g. masking ratios, sequence length)  femlm analyze
   (passes)      femlm analyze passes on the warmed-up encoder, once per entry of            femlm analyze
                 passes.variants: disjoint vs independent masks across K visits (issue 28)
5. pretrain      arms x modes x seeds from the warm-up checkpoint, seed-major order        femlm continual-pretrain
                 (seed 1 of every arm first, so a cut study still holds complete pairs)
6. finetune      the no-continual baseline and each arm (one mode, one pre-training seed)
                 on each task with every fine-tuning seed                                  femlm finetune
7. (optional) decomposition on the final MLM checkpoint                                    femlm analyze
8. results       statistics, figures, CSV, study.json, README                              in-process

Smoke (``FEMLM_STUDY_SMOKE=1`` / ``--smoke``): the ``smoke:`` block of the same file is merged over the plan
(mappings merged key by key, lists and scalars replaced), so the smoke run exercises exactly this driver.
Every part but the encoder, the warm-up and the results is optional: study_base.yaml has no pre-training arms and
no fine-tuning.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.experiment.schema import Experiment, load
from femlm.experiment.step import Step, final, override_value

EXPERIMENT = "study"
MODE_SHORT = {"same_rows": "rows", "same_sequences": "seqs"}


def study_plan(exp: Experiment, smoke: bool) -> dict[str, Any]:
    """The plan as the study's code reads it: the file's mapping (smoke block merged when asked, then dropped),
    with `smoke` a flag."""
    plan = {k: v for k, v in exp.raw.items() if k != "smoke"}
    plan["smoke"] = bool(smoke)
    return plan


def load_plan(smoke: bool = False, name: str = EXPERIMENT) -> dict[str, Any]:
    return study_plan(load(name, smoke=smoke), smoke)


def pretrain_dir(runs: Path, arm: str, mode: str, seed: int) -> Path:
    """MLM (one copy) is the same run in both modes: one directory serves both comparisons."""
    return runs / "pretrain" / (f"{arm}_s{seed}" if mode == "any" else f"{arm}_{MODE_SHORT[mode]}_s{seed}")


def arm_mode(arm: str, mode: str, reference: str) -> str:
    return "any" if arm == reference else mode


class Estimator:
    """Planned seconds of each step from the measured unit costs in ``estimate.seconds`` (study.yaml)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.s = dict(plan.get("estimate", {}).get("seconds", {}))

    def get(self, key: str) -> float:
        return float(self.s.get(key, 0.0))

    def pretrain(self, overrides: list[str], eval_blocks: int, row: str = "train_row") -> float:
        rows = int(override_value(overrides, "trainer.batch_size", 32))
        steps = int(override_value(overrides, "trainer.max_steps", 100))
        every = int(override_value(overrides, "runtime.eval_every", 1000))
        evals = steps // every + 1
        saves = steps // int(override_value(overrides, "runtime.save_every", steps)) + 1
        return (self.get("startup") + steps * rows * self.get(row) + evals * eval_blocks * self.get("eval_row")
                + saves * self.get("save"))

    def finetune(self, overrides: list[str], task: str, seeds: int) -> float:
        epochs = float(override_value(overrides, "finetune.epochs", 1) or 1)
        n = override_value(overrides, "finetune.max_train_examples", None)
        sizes = self.s.get("task_sizes", {}).get(task, {})
        train = min(int(n), int(sizes.get("train", n or 0))) if n else int(sizes.get("train", 0))
        scored = epochs * int(sizes.get("dev", 0)) + int(sizes.get("dev", 0)) + int(sizes.get("test", 0))
        per_seed = epochs * train * self.get(f"ft_train_example_{task}") + scored * self.get(f"ft_score_example_{task}")
        return self.get("startup") + self.get("ft_prepare") + seeds * (per_seed + self.get("ft_seed_overhead"))

    def analysis(self, overrides: list[str], unit: str = "gradient_row") -> float:
        a = {k: override_value(overrides, f"analysis.{k}", d) for k, d in
             (("pool", 32), ("reference", 64), ("draws", 8), ("check_batches", 32), ("batch_rows", 48),
              ("sequences", 8), ("budget", 200), ("null_groups", 8), ("null_group_size", 16), ("num_masks", [2, 4, 6, 8]))}
        kmax = max(a["num_masks"])
        rows = (a["pool"] * (a["reference"] + 2 * a["draws"] * kmax) + 2 * a["check_batches"] * a["batch_rows"] * kmax
                + a["sequences"] * (a["reference"] + 2 * a["budget"] + a["null_groups"] * a["null_group_size"]))
        return self.get("startup") + rows * self.get(unit)

    def passes(self, overrides: list[str], unit: str = "gradient_row") -> float:
        """`femlm analyze passes`: S (J + 4 D Kmax) gradient rows (femlm.analysis.passes.passes_cost)."""
        a = {k: override_value(overrides, f"analysis.{k}", d) for k, d in
             (("pool", 32), ("reference", 64), ("draws", 8), ("num_masks", [2, 4, 6, 8]))}
        rows = a["pool"] * (a["reference"] + 4 * a["draws"] * max(a["num_masks"]))
        return self.get("startup") + rows * self.get(unit)


def build_steps(plan: dict[str, Any], runs: Path, encoder_dir: Path | None = None) -> list[Step]:
    """Every step of the study, in the order the driver runs them."""
    est = Estimator(plan)
    common = list(plan.get("common", []))
    eval_blocks = int(override_value(common, "data.eval_blocks", 64))
    encoder = encoder_dir or runs / "encoder"
    steps: list[Step] = [Step("encoder", "encoder", runs / "encoder_check", kind="inprocess", output="encoder.json")]
    if plan.get("download"):
        steps.append(Step("download", "download", runs / "download",
                          ["download", *plan["download"], "download.offline=true"], output="download.json",
                          estimate_s=est.get("startup")))

    start = encoder
    for part, title, row in (("head_warmup", "head warm-up (fresh MLM head, encoder frozen)", "head_row"),
                             ("warmup", "warm-up (shared MLM continual run, fresh MLM head)", "train_row")):
        w = plan.get(part)
        if not w:
            continue
        rdir = runs / part
        over = [*common, f"masking={w['masking']}", f"seed={w.get('seed', 0)}", *w.get("overrides", [])]
        if part == "warmup" and start != encoder:
            title = "warm-up (shared MLM continual run of the whole model, from the head warm-up)"
        steps.append(Step(title, part, rdir, ["continual-pretrain", *over, f"model.name_or_path={start}"],
                          kind="pretrain", estimate_s=est.pretrain(over, eval_blocks, row), needs=[start],
                          meta={"arm": w["masking"]}))
        start = final(rdir)
    warm_dir = runs / "warmup"

    d = plan.get("decomposition", {})
    p = plan.get("pretrain") or {"arms": [], "seeds": [], "reference": None}
    reference = p["reference"]
    an_over = [*common, f"masking={d.get('masking', 'fe_subword')}", *d.get("overrides", [])]

    def decomposition(where: str, ckpt: Path, variant: dict[str, Any]) -> Step:
        name = variant.get("name", "")
        key = f"{where}_{name}" if name else where
        over = [*an_over, *variant.get("overrides", [])]
        return Step(f"decomposition{' ' + name if name else ''} on the {where} checkpoint", "decomposition",
                    runs / f"decomposition_{key}", ["analyze", "decomposition", *over, f"model.name_or_path={ckpt}"],
                    output="decomposition.json", estimate_s=est.analysis(over, variant.get("unit", "gradient_row")),
                    needs=[ckpt], meta={"checkpoint": where, "key": key, "variant": name,
                                        "label": variant.get("label", ""),
                                        # "side": a null model too small to test for context interactions (numbers only)
                                        "null_model": variant.get("null_model", "test")})

    variants = list(d.get("variants") or [{}])  # one analyze run per variant (study_base: ratios, 512 tokens)
    on = list(d.get("checkpoints", ["warmup"]))
    if "warmup" in on:
        steps += [decomposition("warmup", final(warm_dir), v) for v in variants]
    steps += passes_steps(plan, runs, common, final(warm_dir), est)

    pre_over = list(p.get("overrides", []))
    for seed in p["seeds"]:
        for arm in p["arms"]:
            for mode in (["any"] if arm == reference else p["modes"]):
                over = [*common, f"masking={arm}", f"seed={seed}", *pre_over]
                if mode != "any":
                    over.append(f"trainer.equal_compute={mode}")
                rdir = pretrain_dir(runs, arm, mode, seed)
                label = "MLM (both modes)" if mode == "any" else mode
                steps.append(Step(f"pretrain {arm} {label} seed {seed}", "pretrain", rdir,
                                  ["continual-pretrain", *over, f"model.name_or_path={final(warm_dir)}"],
                                  kind="pretrain", estimate_s=est.pretrain(over, eval_blocks),
                                  needs=[final(warm_dir)], meta={"arm": arm, "mode": mode, "seed": seed}))

    f = plan.get("finetune")
    if f:
        ft_seeds = list(f["seeds"])
        ft_over = list(f.get("overrides", []))
        rows: list[tuple[str, Path]] = []
        if f.get("baseline"):  # the encoder as released, minus its pooler (femlm.study.encoder.without_pooler)
            rows.append(("no_continual", runs / "encoder_nopooler"))
        if f.get("warmup_row"):
            rows.append(("warmup_only", final(warm_dir)))
        for arm in p["arms"]:
            mode = arm_mode(arm, f["mode"], reference)
            rows.append((arm, final(pretrain_dir(runs, arm, mode, int(f["pretrain_seed"])))))
        ft_common = [c for c in common if c.split("=")[0].split(".")[0] in ("preset", "runtime", "download", "logger",
                                                                             "model")]
        for task in f["tasks"]:
            for row, ckpt in rows:
                over = [*ft_common, f"task={task}", f"finetune.seeds=[{','.join(map(str, ft_seeds))}]", *ft_over]
                steps.append(Step(f"finetune {row} on {task}", "finetune", runs / "finetune" / f"{row}_{task}",
                                  ["finetune", *over, f"model.name_or_path={ckpt}"], output="results.json",
                                  estimate_s=est.finetune(over, task, len(ft_seeds)), needs=[ckpt],
                                  meta={"row": row, "task": task, "mode": f["mode"], "pretrain_seed": f["pretrain_seed"]}))
    if "mlm_final" in on and p["seeds"]:
        for v in variants:
            step = decomposition("mlm_final", final(pretrain_dir(runs, reference, "any", int(p["seeds"][0]))), v)
            step.optional = "mlm_final" in d.get("optional", [])
            steps.append(step)
    steps.append(Step("results", "results", runs, kind="inprocess", estimate_s=est.get("results")))
    for step in steps:  # logs and timings under the study's runs; finished pre-training keeps no optimizer states
        step.home = runs
        step.drop_states = step.kind == "pretrain"
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise UserError("study plan: two steps share a name; check the arms, modes and seeds for duplicates")
    return steps


def passes_steps(plan: dict[str, Any], runs: Path, common: list[str], warm: Path, est: Estimator) -> list[Step]:
    """`femlm analyze passes` on the warm-up checkpoint, one run per entry of ``passes.variants``."""
    p = plan.get("passes")
    if not p or "warmup" not in p.get("checkpoints", ["warmup"]):
        return []
    base = [*common, f"masking={p.get('masking', 'fe_subword')}", *p.get("overrides", [])]
    steps = []
    for v in p.get("variants") or [{}]:
        name = v.get("name", "")
        key = f"warmup_{name}" if name else "warmup"
        over = [*base, *v.get("overrides", [])]
        steps.append(Step(f"passes{' ' + name if name else ''} on the warmup checkpoint", "passes",
                          runs / f"passes_{key}", ["analyze", "passes", *over, f"model.name_or_path={warm}"],
                          output="passes.json", estimate_s=est.passes(over, v.get("unit", "gradient_row")),
                          needs=[warm], meta={"checkpoint": "warmup", "key": key, "variant": name,
                                              "label": v.get("label", "")}))
    return steps


def planned_minutes(steps: list[Step]) -> float:
    return sum(s.estimate_s for s in steps) / 60


def check_plan(plan: dict[str, Any]) -> None:
    """Fail before any work on a plan that cannot run as written (one line each)."""
    d = plan.get("decomposition", {})
    for variant in d.get("variants") or [{}]:
        over = [*d.get("overrides", []), *variant.get("overrides", [])]
        ks = override_value(over, "analysis.num_masks", [2, 4, 6, 8])
        r = override_value(over, "analysis.batch_rows", 48)
        if r % math.lcm(*ks):
            raise UserError(f"{plan['name']}.yaml decomposition {variant.get('name', '')}: analysis.batch_rows={r} "
                            f"must be a multiple of every K in {ks}")
    p = plan.get("pretrain")
    if not p:
        if "mlm_final" in d.get("checkpoints", []):
            raise UserError(f"{plan['name']}.yaml: decomposition.checkpoints names mlm_final but the plan has no "
                            "pretrain block")
        return
    if p["reference"] not in p["arms"]:
        raise UserError(f"{plan['name']}.yaml: pretrain.reference={p['reference']} is not one of "
                        f"pretrain.arms={p['arms']}")
    if len(p["seeds"]) < 2:
        raise UserError(f"{plan['name']}.yaml: pretrain.seeds needs at least 2 seeds for an interval (3 or more planned)")
    over = list(p.get("overrides", []))
    k = int(p.get("num_masks", 4))
    steps = int(override_value(over, "trainer.max_steps", 0))
    rows = int(override_value(over, "trainer.batch_size", 0))
    every = int(override_value(over, "runtime.eval_every", 1))
    for key, value, unit in (("trainer.max_steps", steps, k), ("trainer.batch_size", rows, k),
                             ("runtime.eval_every", every, k)):
        if value % unit:
            raise UserError(f"{plan['name']}.yaml pretrain.overrides: {key}={value} must be a multiple of K={k} (same_sequences "
                            "divides steps and cadences by K; same_rows splits the rows into K copies)")
    if steps % every:
        raise UserError(f"{plan['name']}.yaml pretrain.overrides: trainer.max_steps={steps} must be a multiple of "
                        f"runtime.eval_every={every} (the curves need an evaluation at the end of every arm)")
