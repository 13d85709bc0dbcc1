"""`run_pretrain`: the one masked-LM training loop behind `pretrain-scratch` and `continual-pretrain`.

They differ only in config: init=scratch builds the model from `model.arch` / `model.config_name` (and trains
a WordPiece vocabulary when `model.tokenizer` is null); init=checkpoint loads `model.name_or_path`.

Per optimizer step s (1..max_steps): core.step(s) -> log every log_every -> probe -> held-out eval (also at
step 0 and at the end) -> milestone model `checkpoints/step_<s>` + resumable state every save_every. A state
written at step s therefore already holds everything logged up to s, and resuming from it drops any
metrics.jsonl record with step > s, so the loss curve of a killed-and-resumed run has no gap and no duplicate.
"""

from __future__ import annotations

import math
import random
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from femlm.errors import UserError
from femlm.masking.sampling import mix_seed
from femlm.train import checkpoint as ckpt
from femlm.train import inputs
from femlm.train.core import NonFiniteLoss, PretrainCore
from femlm.train.distributed import (
    DistInfo,
    all_reduce_sum,
    broadcast_object,
    cleanup,
    gather_objects,
    init_distributed,
    share_run_dir,
)
from femlm.train.evaluation import build_eval_set
from femlm.train.probe import gradient_variance
from femlm.train.tracking import Wandb, plot_loss_curve, progress_bar


class TrainingDiverged(UserError):
    """The loss (or gradient norm) stopped being finite: the run stops and keeps its last good checkpoint."""


class StopRequest:
    """Ctrl-C during training: finish the current optimizer step, save a state, then raise KeyboardInterrupt.

    A second Ctrl-C stops at once (the newest complete state is then the last one saved). Only installed in the
    main thread and when SIGINT has Python's default handler (never over a handler someone else set, nor over
    SIG_IGN). Under DDP the ranks agree each step (one scalar all-reduce), so they all stop after the same step
    and take part in the same save.
    """

    def __init__(self, dist: DistInfo) -> None:
        self.dist, self.requested = dist, False
        self._previous: Any = None

    def __enter__(self) -> StopRequest:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def agreed(self) -> bool:
        """Whether any rank was interrupted."""
        if not self.dist.distributed:
            return self.requested
        flag = torch.tensor([1.0 if self.requested else 0.0], device=self.dist.device)
        all_reduce_sum(flag, self.dist)
        return bool(flag.item() > 0)


def _resume_requested(value: str | None) -> bool:
    return value is not None and str(value).strip().lower() not in ("", "none", "null", "false")


def _checkpoint_info(cfg: Any, step: int, run_dir: Path, init_from: str | None) -> dict[str, Any]:
    m = cfg.masking
    return {"kind": "pretrain", "command": cfg.command, "masking": m.name, "strategy": m.strategy,
            "granularity": m.granularity, "splits": m.num_copies, "domain": cfg.domain.name,
            "model": cfg.model.name, "step": step, "max_steps": cfg.trainer.max_steps,
            "run_dir": str(run_dir), "init_from": init_from}


def run_pretrain(cfg: Any, run: Any) -> dict[str, Any]:
    """Train a masked LM as `cfg` says, in `run.dir`; returns the summary (also written to summary.json)."""
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-shard save/load bars would drown the training progress bar
    dist = init_distributed(cfg.trainer.device)
    try:
        return _pretrain(cfg, run, dist)
    finally:
        cleanup(dist)


def _pretrain(cfg: Any, run: Any, dist: DistInfo) -> dict[str, Any]:
    tcfg = cfg.trainer
    run_dir = share_run_dir(run.dir, dist)
    main = dist.is_main
    ckpt_dir = run_dir / "checkpoints"
    current = inputs.config_dict(cfg)
    resuming = _resume_requested(tcfg.resume)
    if resuming:
        target = Path(str(tcfg.resume)).expanduser()
        if str(tcfg.resume).lower() != "true" and target.resolve() != run_dir.resolve():
            raise UserError(f"trainer.resume={tcfg.resume}: a run resumes in its own directory, but this run's "
                            f"directory is {run_dir}; use `femlm {cfg.command} trainer.resume={tcfg.resume}`")
        inputs.check_resume(run_dir, current, writer=main)
    if main:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        if resuming:
            ckpt.remove_partial(ckpt_dir)
        inputs.write_config(run_dir, current)

    # Same seed on every rank: identical initial weights (DDP broadcasts rank 0's anyway).
    random.seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    torch.manual_seed(cfg.seed)
    tokenizer, model, init_from = inputs.tokenizer_and_model(cfg, run_dir, dist)
    train_blocks, val_blocks = _blocks(cfg, tokenizer, dist)
    masker = inputs.make_masker(cfg, tokenizer)
    core = PretrainCore(model, masker, train_blocks, tcfg, cfg.seed, dist)
    eval_set = build_eval_set(val_blocks, cfg.data.eval_blocks, cfg.data.eval_seed, tokenizer)
    torch.manual_seed(mix_seed(cfg.seed, 1, dist.rank))  # per-rank dropout streams

    start, tokens_seen, train_s = 0, 0, 0.0
    # Rank 0 picks the state, so every rank resumes from the same one.
    latest = broadcast_object(ckpt.latest_state(ckpt_dir) if resuming and main else None, dist)
    if latest is not None:
        state = ckpt.load_state(latest[1])  # CPU: RNG states must stay CPU tensors
        core.load_state_dict(state["core"])
        start, tokens_seen, train_s = state["step"], state["tokens_seen"], state["train_s"]
        rngs = state["rng"]
        if len(rngs) == dist.world_size:
            ckpt.set_rng_state(rngs[dist.rank])
        else:
            warnings.warn(f"resuming {len(rngs)}-process state on {dist.world_size} processes: dropout streams "
                          "are reseeded, the run continues but is not bit-identical", stacklevel=2)
    if main and resuming:
        ckpt.truncate_metrics(run.metrics_path, start if latest is not None else -1)
    # From here on the directory holds results: never let an error handler delete it.
    run.created = False

    wandb = Wandb(cfg.logger.wandb.mode, cfg.logger.wandb.project, cfg.logger.wandb.entity, run_dir,
                  f"{cfg.command}/{cfg.masking.name}/{run_dir.name}", current, enabled=main)
    bar = progress_bar(tcfg.max_steps, start, cfg.logger.progress and main)
    block = train_blocks.shape[1]
    eval_rows = tcfg.eval_batch_size or core.micro_rows

    def log(record: dict[str, Any]) -> None:
        run.log(**record)
        wandb.log(record)

    def evaluate(step: int) -> None:
        loss, acc = core.evaluate(eval_set, eval_rows)
        log({"step": step, "eval_loss": loss, "eval_accuracy": acc})
        bar.set_postfix_str(f"eval {loss:.3f}", refresh=False)

    last_good = ckpt.latest_state(ckpt_dir) if main else None
    status = 1
    stop = StopRequest(dist)
    try:
        stop.__enter__()
        if start == 0:
            evaluate(0)
        window_tokens, window_s = 0, 0.0
        for step in range(start + 1, tcfg.max_steps + 1):
            t0 = time.perf_counter()
            try:
                stats = core.step(step)
            except NonFiniteLoss as err:
                where = str(last_good[1]) if last_good else "none (no state saved yet)"
                raise TrainingDiverged(f"{err.what} became {err.value} at step {err.step}; last good checkpoint: "
                                       f"{where}; lower trainer.lr, raise trainer.warmup_ratio or lower "
                                       "trainer.grad_clip, then resume or restart") from None
            elapsed = time.perf_counter() - t0
            tokens = stats.rows * block
            tokens_seen, train_s = tokens_seen + tokens, train_s + elapsed
            window_tokens, window_s = window_tokens + tokens, window_s + elapsed
            bar.update(1)
            if step % tcfg.log_every == 0 or step == tcfg.max_steps:
                speed = window_tokens / max(window_s, 1e-9)
                log({"step": step, "loss": stats.loss, "lr": stats.lr, "tokens_per_s": round(speed, 1),
                     "rows": stats.rows, "masked_tokens": stats.masked_tokens, "grad_norm": stats.grad_norm})
                bar.set_postfix(loss=f"{stats.loss:.3f}", tok_s=f"{speed:.0f}", refresh=False)
                window_tokens, window_s = 0, 0.0
            probe = tcfg.variance_probe
            if probe.enabled and step % probe.every == 0 and main:
                log({"step": step, **gradient_variance(core, step, probe.remasks, list(probe.parameters))})
            if step % tcfg.eval_every == 0 or step == tcfg.max_steps:
                evaluate(step)
            saved = step % tcfg.save_every == 0 or step == tcfg.max_steps
            if saved:
                last_good = _save(cfg, run_dir, core, tokenizer, init_from, step, tokens_seen, train_s, dist,
                                  milestone=step % tcfg.save_every == 0) or last_good
            if step < tcfg.max_steps and stop.agreed():
                if not saved:
                    last_good = _save(cfg, run_dir, core, tokenizer, init_from, step, tokens_seen, train_s, dist,
                                      milestone=False) or last_good
                bar.close()
                raise KeyboardInterrupt(f"stopped after step {step} of {tcfg.max_steps}; state saved at step {step}")
        stop.__exit__()
        bar.close()
        summary = _finish(cfg, run, run_dir, core, tokenizer, init_from, tokens_seen, train_s, dist)
        status = 0
        return summary
    finally:
        stop.__exit__()
        bar.close()
        wandb.finish(exit_code=status)


def _blocks(cfg: Any, tokenizer: Any, dist: DistInfo) -> tuple[torch.Tensor, torch.Tensor]:
    train, val = inputs.load_blocks(cfg, tokenizer, dist)
    if train.shape[0] == 0 or val.shape[0] == 0:
        raise UserError(f"domain {cfg.domain.name}: no train or validation blocks of data.block_size="
                        f"{cfg.data.block_size}; add documents or lower data.block_size")
    return train, val


def _save(cfg: Any, run_dir: Path, core: PretrainCore, tokenizer: Any, init_from: str | None, step: int,
          tokens_seen: int, train_s: float, dist: DistInfo, milestone: bool) -> tuple[int, Path] | None:
    rngs = gather_objects(ckpt.rng_state(), dist)  # collective: every rank takes part
    if not dist.is_main:
        return None
    ckpt_dir = run_dir / "checkpoints"
    info = _checkpoint_info(cfg, step, run_dir, init_from)
    if milestone:
        ckpt.save_model(ckpt_dir / f"step_{step}", core.objective.model, tokenizer, info)
    state = {"core": core.state_dict(), "rng": rngs, "step": step, "tokens_seen": tokens_seen,
             "train_s": train_s, "world_size": dist.world_size}
    path = ckpt.save_state(ckpt_dir, step, state, info, cfg.trainer.keep_last)
    return step, path


def _finish(cfg: Any, run: Any, run_dir: Path, core: PretrainCore, tokenizer: Any, init_from: str | None,
            tokens_seen: int, train_s: float, dist: DistInfo) -> dict[str, Any]:
    from femlm.runs import hardware

    records = ckpt.read_metrics(run.metrics_path) if dist.is_main else []
    evals = [r for r in records if r.get("eval_loss") is not None]
    summary = {"kind": "pretrain", "command": cfg.command, "masking": cfg.masking.name, "domain": cfg.domain.name,
               "model": cfg.model.name, "steps": cfg.trainer.max_steps,
               "final_eval_loss": evals[-1]["eval_loss"] if evals else None,
               "first_eval_loss": evals[0]["eval_loss"] if evals else None,
               "final_eval_accuracy": evals[-1].get("eval_accuracy") if evals else None,
               "tokens_per_s": round(tokens_seen / train_s, 1) if train_s > 0 else None,
               "tokens_seen": tokens_seen, "train_s": round(train_s, 2),
               "wall_s": round(time.time() - run.started, 2), "world_size": dist.world_size,
               "checkpoint": str(run_dir / "checkpoints" / "final"), "hardware": hardware()}
    if dist.is_main:
        info = _checkpoint_info(cfg, cfg.trainer.max_steps, run_dir, init_from)
        ckpt.save_model(run_dir / "checkpoints" / "final", core.objective.model, tokenizer, info)
        if summary["final_eval_loss"] is not None and not math.isfinite(summary["final_eval_loss"]):
            summary["final_eval_loss"] = None
        run.write_json("summary.json", summary)
        try:
            plot_loss_curve(run.metrics_path, run_dir / "loss_curve.png",
                            f"{cfg.command} {cfg.model.name} {cfg.masking.name} on {cfg.domain.name}")
        except Exception as err:  # noqa: BLE001 - a plotting problem must not fail a finished run
            warnings.warn(f"loss_curve.png not written ({type(err).__name__}: {err})", stacklevel=2)
    return summary
