"""The in-process GPU study (`make study-gpu`: python -m femlm.experiment study_gpu; issue 39).

All arms and seeds train in ONE process (a femlm subprocess per run costs ~16 s of start-up, and a compile each,
on an H100): femlm's pre-training step (femlm.train.core.PretrainCore: `step`, `evaluate`) on configs composed
from the experiment file's `common` overrides plus each arm's `masking=`, exactly as `femlm pretrain-scratch`
would compose them. Three steps for the runner:

* prepare: the WordPiece vocabulary and the token blocks (femlm.train.inputs, from the mirror) copied into
  ``<runs>/data`` (tokenizer/, train.pt, validation.pt, data.json), so the GPU machine needs neither the mirror nor
  `datasets` (benchmarks/gpu_bundle.py runs this step on the CPU and carries the folder);
* train: seed after seed, every arm of a seed into ``<runs>/seed_<s>.partial/<arm>/`` (metrics.jsonl, summary.json
  in pretrain-scratch's layout), renamed to ``seed_<s>/`` once all arms finished, so a run cut at the time limit
  keeps complete paired seeds and a re-run continues with the next seed. A seed starts only when the time
  measured so far says it ends within the plan's budget;
* results: femlm.study.gpu_results over the complete seeds.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.experiment.runner import REPO
from femlm.experiment.schema import Experiment
from femlm.experiment.step import Step
from femlm.experiment.tables import Options
from femlm.runs import RUN_MARKER, made_by
from femlm.study.driver import summaries_step
from femlm.study.gpu_plan import GpuPlan, make_plan

COMMAND = "pretrain-scratch"


def arm_config(plan: dict[str, Any], arm: str, steps: int) -> Any:
    """The typed config `femlm pretrain-scratch <common> masking=<arm> trainer.max_steps=<steps>` would run."""
    from femlm.compose import compose
    from femlm.config import validate

    return validate(compose(COMMAND, [*plan["common"], f"masking={arm}", f"trainer.max_steps={steps}"]), COMMAND)


def data_settings(plan: dict[str, Any]) -> list[str]:
    """The common overrides that decide the prepared tokenizer and blocks (a change needs a new preparation)."""
    return [o for o in plan["common"] if o.startswith(("domain", "data.", "model.vocab_size", "model.tokenizer"))]


def prepared(plan: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """data.json of a prepared folder (None: not prepared); refused when prepared with other settings."""
    if not (folder / "data.json").is_file():
        return None
    info = json.loads((folder / "data.json").read_text())
    if info.get("settings") != data_settings(plan):
        raise UserError(f"{folder} was prepared with {info.get('settings')}, the experiment file now says "
                        f"{data_settings(plan)}: remove {folder} and prepare it again")
    return info


def data_counts(runs: Path) -> tuple[int | None, int | None]:
    meta = runs / "data" / "data.json"
    if not meta.is_file():
        return None, None
    info = json.loads(meta.read_text())
    return int(info["train_blocks"]), int(info["validation_blocks"])


PLAN_RAN = "plan.json"  # <runs>/plan.json: the plan the training step ran under (the last invocation's)


# ---------------------------------------------------------------------------------------------- prepare
def prepare(plan: dict[str, Any], runs: Path) -> str:
    """Tokenizer and blocks into <runs>/data (once; the GPU machine receives the folder prepared)."""
    out = runs / "data"
    info = prepared(plan, out)
    if info is not None:
        return f"{out}: prepared already ({info['train_blocks']} training blocks)"
    if not os.environ.get("FEMLM_MIRROR"):
        raise UserError(f"{out} is not prepared and FEMLM_MIRROR is unset: prepare it on a machine with the mirror "
                        "(python benchmarks/gpu_bundle.py does) or set FEMLM_MIRROR")
    import torch

    from femlm.models.load import load_tokenizer
    from femlm.train import inputs
    from femlm.train.distributed import DistInfo

    cfg = arm_config(plan, plan["pretrain"]["reference"], 1)
    vocab = inputs.shared_wordpiece(cfg)
    tokenizer = load_tokenizer(str(vocab), cfg.download)
    train, val = inputs.load_blocks(cfg, tokenizer, DistInfo())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(vocab, tmp / "tokenizer")
    for name, blocks in (("train", train), ("validation", val)):
        torch.save(blocks[torch.arange(blocks.shape[0])].to(torch.int32).clone(), tmp / f"{name}.pt")
    info = {"domain": cfg.domain.name, "sources": list(cfg.domain.sources), "block_size": cfg.data.block_size,
            "train_blocks": int(train.shape[0]), "validation_blocks": int(val.shape[0]),
            "vocab_size": len(tokenizer), "tokenizer": "WordPiece trained on the corpus (femlm.train.inputs)",
            "settings": data_settings(plan)}
    (tmp / "data.json").write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, out)
    return f"{out}: {info['train_blocks']} training and {info['validation_blocks']} held-out blocks of {cfg.data.block_size}"


# ---------------------------------------------------------------------------------------------- training
def train_arm(cfg: Any, seed: int, data: dict[str, Any], device: Any, out: Path) -> dict[str, Any]:
    """One arm and seed, as pretrain-scratch trains it (same seeding, step and evaluation), without checkpoints."""
    import torch

    from femlm.masking.sampling import mix_seed
    from femlm.models.load import construct_model
    from femlm.models.resolve import resolve_scratch
    from femlm.runtime.device import precision_name
    from femlm.train import inputs
    from femlm.train.core import NonFiniteLoss, PretrainCore
    from femlm.train.distributed import DistInfo
    from femlm.train.evaluation import build_eval_set
    from femlm.train.loop import Progress

    torch.manual_seed(seed)
    tokenizer = data["tokenizer"]
    model = construct_model(resolve_scratch(cfg.model, tokenizer, data["tokenizer_dir"], cfg.download))
    core = PretrainCore(model, inputs.make_masker(cfg, tokenizer), data["train"], cfg.trainer, cfg.runtime, seed,
                        DistInfo(device=device))
    eval_set = build_eval_set(data["validation"], cfg.data.eval_blocks, cfg.data.eval_seed, tokenizer)
    torch.manual_seed(mix_seed(seed, 1, 0))  # the dropout stream, as femlm.train.loop seeds it
    progress, every = Progress(), data["eval_every"]
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    latest: dict[str, float] = {}  # the last held-out evaluation
    with (out / "metrics.jsonl").open("w") as fh:
        def record(**rec: Any) -> None:
            fh.write(json.dumps({**rec, **progress.seen(), "time": round(time.time() - t_start, 3)}) + "\n")

        def evaluate(step: int) -> float:
            loss, accuracy = core.evaluate(eval_set)
            record(step=step, eval_loss=loss, eval_accuracy=accuracy)
            latest["accuracy"] = accuracy
            return loss

        first = evaluate(0)
        for step in range(1, core.max_steps + 1):
            t0 = time.perf_counter()
            try:
                stats = core.step(step)
            except NonFiniteLoss as err:  # the seed stays .partial: its arms are not written as a result
                raise UserError(f"study_gpu: {cfg.masking.name} seed {seed}: {err}; lower trainer.lr or raise "
                                "trainer.warmup_ratio in the experiment file's common overrides") from None
            progress.add(stats, core, time.perf_counter() - t0)
            last = step == core.max_steps
            if step % every == 0 or last:
                record(step=step, loss=stats.loss, lr=stats.lr, rows=stats.rows, masked_tokens=stats.masked_tokens,
                       grad_norm=stats.grad_norm)
                final = evaluate(step)
    summary = {"kind": "pretrain", "command": COMMAND, "masking": cfg.masking.name, "domain": cfg.domain.name,
               "model": cfg.model.name, "seed": seed, "steps": core.max_steps, "max_steps": cfg.trainer.max_steps,
               "equal_compute": cfg.trainer.equal_compute, "rows_per_step": core.layout.rows,
               "sequences_per_step": core.layout.sequences, "first_eval_loss": first, "final_eval_loss": final,
               "final_eval_accuracy": latest.get("accuracy"),
               "seen": {"sequences": progress.sequences, "source_tokens": progress.source_tokens,
                        "rows": progress.rows, "masked_targets": progress.masked_targets,
                        "train_flops": progress.train_flops},
               "row_tokens_per_s": round(progress.rows * core.block_size / max(progress.train_s, 1e-9), 1),
               "precision": precision_name(core.amp_dtype), "train_s": round(progress.train_s, 2),
               "wall_s": round(time.time() - t_start, 2), "device": str(device),
               "passes": progress.sequences / data["train"].shape[0]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    # what made it (femlm.runs.environment_of reads it): packages, CPU and GPU names, the commit
    (out / RUN_MARKER).write_text(json.dumps(made_by(), indent=2) + "\n")
    return summary


def load_data(plan: dict[str, Any], runs: Path) -> dict[str, Any]:
    import torch

    from femlm.data.config import DownloadConfig
    from femlm.models.load import load_tokenizer

    folder = runs / "data"
    if not (folder / "data.json").is_file():
        raise UserError(f"{folder}: not prepared (run the study's prepare step, or benchmarks/gpu_bundle.py)")
    prepared(plan, folder)
    return {"tokenizer": load_tokenizer(str(folder / "tokenizer"), DownloadConfig(offline=True)),
            "tokenizer_dir": str(folder / "tokenizer"), "train": torch.load(folder / "train.pt"),
            "validation": torch.load(folder / "validation.pt")}


def train_seeds(plan: dict[str, Any], runs: Path, gp: GpuPlan, started: float, log: Any) -> str:
    """Every planned seed not finished yet, all arms of a seed together, while the budget allows."""
    from femlm.runtime.device import configure_process, pick_device

    cfgs = {arm: arm_config(plan, arm, gp.steps[arm]) for arm in gp.arms}
    rt = cfgs[gp.arms[0]].runtime
    configure_process(rt)
    device = pick_device(rt.device)
    data = {**load_data(plan, runs), "eval_every": gp.eval_every}
    done, ran, seed_s = [], [], gp.seed_seconds
    for seed in gp.seeds:
        final = runs / f"seed_{seed}"
        if final.is_dir():
            done.append(seed)
            continue
        elapsed = time.time() - started
        if elapsed + seed_s > gp.budget_s - float(plan["gpu"]["unit_costs"]["results_s"]):
            log(f"seed {seed} and later not started: {elapsed:.0f} s elapsed + ~{seed_s:.0f} s per seed would pass "
                f"the {gp.budget_s / 60:g}-minute budget")
            break
        t0 = time.time()
        partial = runs / f"seed_{seed}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        for arm in gp.arms:
            s = train_arm(cfgs[arm], seed, data, device, partial / arm)
            log(f"seed {seed} {arm}: final held-out loss {s['final_eval_loss']:.4f} after {s['steps']} steps "
                f"({s['row_tokens_per_s']:,.0f} row tokens/s, {s['passes']:.1f} passes)")
        os.replace(partial, final)
        seed_s = time.time() - t0  # the pace measured on this machine decides whether the next seed fits
        ran.append(seed)
    return f"{len(ran)} seeds trained now, {len(done)} before ({len(ran) + len(done)} of {len(gp.seeds)} planned)"


# ---------------------------------------------------------------------------------------------- pipeline
def pipeline(exps: list[Experiment], opts: Options) -> list[Step]:
    (exp,) = exps
    plan = {**exp.raw, "smoke": opts.smoke}
    runs = (opts.runs or opts.root / plan["runs_dir"]).resolve()
    out = (opts.out or opts.root / plan["out_dir"]).resolve()
    started = time.time()
    gp = make_plan(plan, REPO, *data_counts(runs))
    plan["pretrain"] = {**plan["pretrain"], "seeds": gp.seeds}
    print(gp.text(), flush=True)

    def train(runner: Any) -> str:
        gp_now = make_plan(plan, REPO, *data_counts(runs))  # the prepared corpus's counts
        # the plan as it runs (its budget may differ from the file's): the results quote it, not a recomputed one
        (runs / PLAN_RAN).write_text(json.dumps({"text": gp_now.text(), "seeds": gp_now.seeds}, indent=2) + "\n")
        return train_seeds(plan, runs, gp_now, started, runner.log)

    def results(runner: Any) -> str:
        from femlm.study.gpu_results import write_results

        return str(write_results(plan, make_plan(plan, REPO, *data_counts(runs)), runs, out))

    def step(name: str, part: str, seconds: float, action: Any) -> Step:
        return Step(name, part, runs, kind="inprocess", estimate_s=seconds, action=action, home=runs)

    parts = {p.name: p.seconds for p in gp.parts if not p.skipped}
    return [step("prepare the tokenizer and blocks", "prepare", parts["start-up"], lambda r: prepare(plan, runs)),
            step(f"train {len(gp.seeds)} seeds x {len(gp.arms)} arms in one process", "pretrain",
                 parts["compile"] + parts["training"] + parts["evaluation"], train),
            step("results", "results", parts["results"], results),
            *summaries_step(plan, out, None, runs, opts)]
