"""`run_pretrain`: the one masked-LM training loop behind `pretrain-scratch` and `continual-pretrain`.

They differ only in where the weights come from (femlm.train.inputs). Optimizer step s (1..max_steps) is
core.step(s), then maybe log, maybe probe, maybe evaluate (also at step 0 and at the end), maybe save a
milestone model `checkpoints/step_<s>` and a resumable state. A state written at step s holds everything
logged up to s, and resuming from it drops any metrics.jsonl record with step > s, so the loss curve of a
killed-and-resumed run has no gap and no duplicate.

`train` is the one entry: the CLI calls it through `run_pretrain`, and the GPU study (femlm.study.gpu) calls
`run_pretrain` in process with `prepared` (the token blocks it carried to a machine without the data mirror) and
a `deadline` (the window's end, checked at the steps that read the device anyway).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from femlm import provenance
from femlm.errors import UserError
from femlm.masking.sampling import mix_seed
from femlm.runs import read_metrics
from femlm.runtime.device import configure_process, precision_name, tf32_record
from femlm.stop import signal_name
from femlm.train import checkpoint as ckpt
from femlm.train import inputs
from femlm.train.core import EvaluationStopped, NonFiniteLoss, PretrainCore, StepStats
from femlm.train.corpus import training_plan_from_blocks
from femlm.train.distributed import DistInfo, broadcast_object, gather_objects, process_group, share_run_dir
from femlm.train.estimate import device_peak
from femlm.train.evaluation import EvalSet, build_eval_set
from femlm.train.interrupt import StopRequest
from femlm.train.probe import gradient_variance
from femlm.train.resume import check_resume, config_dict, write_config
from femlm.train.tracking import Recorder, plot_loss_curve


class TrainingDiverged(UserError):
    """The loss (or gradient norm) stopped being finite: the run stops and keeps its last good checkpoint."""


class DeadlineReached(Exception):
    """`deadline` (time.time() seconds) passed before the last step: the run stops unsaved at a step that read the
    device, and what it wrote is no result (the GPU study drops the seed it belonged to)."""


@dataclass
class Progress:
    """What the run has done so far: saved in every state, reported in summary.json."""

    step: int = 0
    train_s: float = 0.0
    sequences: int = 0  # source sequences (token blocks) drawn from the corpus
    source_tokens: int = 0  # their tokens
    rows: int = 0  # model rows processed: a sequence counts once per masked copy
    masked_targets: int = 0  # labelled positions the loss was computed on
    train_flops: float = 0.0  # model FLOPs (femlm.train.flops; MLM definition, dense encoder)
    # steps added whose label count (under DDP a device tensor) is not yet in the counters: (rows, count, core)
    _unread: list[tuple[int, int | torch.Tensor, PretrainCore]] = field(default_factory=list, init=False, repr=False,
                                                                         compare=False)

    def seen(self) -> dict[str, float]:
        """The cumulative counts, as metrics.jsonl records them (every train and eval record)."""
        self.settle()
        return {"sequences_seen": self.sequences, "source_tokens_seen": self.source_tokens, "rows_seen": self.rows,
                "masked_targets_seen": self.masked_targets, "train_flops": self.train_flops}

    def add(self, stats: StepStats, core: PretrainCore, seconds: float) -> None:
        self.step, self.train_s = stats.step, self.train_s + seconds
        self.sequences += core.step_sequences
        self.source_tokens += core.step_sequences * core.block_size
        self.rows += stats.rows
        # Under DDP the step's global label count is still on the device: added when next read (settle).
        self._unread.append((stats.rows, stats.masked_tokens, core))
        if not isinstance(stats.masked_tokens, torch.Tensor):
            self.settle()

    def settle(self) -> None:
        """Add the label counts and FLOPs of the steps added since the last call (one read for all of them)."""
        unread, self._unread = self._unread, []
        on_device = [count for _, count, _ in unread if isinstance(count, torch.Tensor)]
        values = iter(torch.stack(on_device).tolist() if on_device else [])
        for rows, count, core in unread:
            tokens = int(next(values)) if isinstance(count, torch.Tensor) else count
            self.masked_targets += tokens
            self.train_flops += core.flops.per_step(rows, core.block_size, tokens)

    def state(self) -> dict[str, Any]:
        """The fields, settled: what a saved state and summary.json hold."""
        self.settle()
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}


def run_pretrain(cfg: Any, run: Any, prepared: Any = None, deadline: float | None = None) -> dict[str, Any]:
    """Train a masked LM as `cfg` says, in `run.dir`; returns the summary (also written to summary.json).
    `prepared`: the token blocks to train on (anything with `.train` and `.validation`, e.g. a
    femlm.data.tokens.PreparedCorpus) instead of the domain's, read from the mirror; `deadline`: see `train`."""
    from transformers.utils import logging as hf_logging

    configure_process(cfg.runtime)
    hf_logging.disable_progress_bar()  # per-shard save/load bars would drown the training progress bar
    with process_group(cfg.runtime.device) as dist:
        return train(cfg, run, dist, prepared, deadline)


def train(cfg: Any, run: Any, dist: DistInfo, prepared: Any = None, deadline: float | None = None) -> dict[str, Any]:
    """The training loop. A `deadline` (time.time() seconds) passed at a step that reads the device, before the
    last, raises DeadlineReached."""
    rt = cfg.runtime
    run_dir = share_run_dir(run.dir, dist)
    resuming = _prepare_run_dir(cfg, run_dir, dist)
    _seed_everything(cfg.seed)  # same seed on every rank: identical initial weights
    resolved, model, new_head = inputs.tokenizer_and_model(cfg, run_dir, dist)
    tokenizer = resolved.tokenizer
    init_from = str(cfg.model.name_or_path) if resolved.origin != "scratch" else None
    train_blocks, val_blocks = ((prepared.train, prepared.validation) if prepared is not None
                                else inputs.load_blocks(cfg, tokenizer, dist))
    if train_blocks.shape[0] == 0 or val_blocks.shape[0] == 0:
        raise UserError(f"domain {cfg.domain.name}: no train or validation blocks of data.block_size="
                        f"{cfg.data.block_size}; add documents or lower data.block_size")
    corpus = training_plan_from_blocks(cfg, train_blocks)  # refuses a run past trainer.max_passes
    if corpus is not None and dist.is_main:
        print("\n".join(corpus.lines()), flush=True)
    core = PretrainCore(model, inputs.make_masker(cfg, tokenizer), train_blocks, cfg.trainer, rt, cfg.seed, dist)
    eval_set = build_eval_set(val_blocks, cfg.data.eval_blocks, cfg.data.eval_seed, tokenizer)
    torch.manual_seed(mix_seed(cfg.seed, 1, dist.rank))  # per-rank dropout streams
    progress, eval_pending = _restore(core, run_dir, resuming, run, dist)
    # Steps and cadences of this arm: a K-copy arm under equal_compute=same_sequences runs max_steps / K steps.
    max_steps, every = core.max_steps, core.layout.every
    run.created = False  # from here on the directory holds results: no error handler may delete it
    last_good = ckpt.latest_state(run_dir / "checkpoints") if dist.is_main else None
    model_info = {"attn_implementation": resolved.attn_implementation, "prediction": core.objective.prediction}
    save = _saver(cfg, run_dir, core, tokenizer, {"init_from": init_from, **model_info}, dist)
    name = f"{cfg.command}/{cfg.masking.name}/{run_dir.name}"
    with Recorder(run, cfg.logger, run_dir, name, config_dict(cfg), max_steps, progress.step, dist.is_main) as rec, \
            StopRequest(dist) as stop, contextlib.closing(core):  # closing: the batch producer's thread
        if progress.step == 0 or eval_pending:  # eval_pending: the state was saved by a stop during its evaluation
            try:
                rec.log(**_evaluate(core, eval_set, progress.step, rec, stop), **progress.seen())
            except EvaluationStopped:
                stop.agreed(now=True)
                raise stop.stopped(f"stopped during the evaluation at step {progress.step}; nothing new to save")\
                    from None
        window = [0, 0.0, progress.seen()["train_flops"]]  # tokens, seconds, model FLOPs at the last log record
        chunks = 0  # label chunks run since the last log record (femlm/train/batches.py)
        peak = device_peak(core.device, rt.peak_flops)[0]  # per device: MFU of each train record (None: not known)
        # Device values (loss, gradient norm, the non-finite check) are read only at the steps that use them; the
        # variance probe's steps too (a probe after a non-finite step would write NaN rows).
        probe = cfg.logger.variance_probe
        core.read_at = lambda s: s == max_steps or any(s % every(n) == 0 for n in (rt.log_every, rt.eval_every,
                                                                                     rt.save_every)) \
            or (probe.enabled and s % probe.every == 0)
        for step in range(progress.step + 1, max_steps + 1):
            t0 = time.perf_counter()
            last = step == max_steps
            stats = _step(core, step, last_good)
            seconds = time.perf_counter() - t0
            progress.add(stats, core, seconds)
            window = [window[0] + stats.rows * core.block_size, window[1] + seconds, window[2]]
            chunks += stats.label_chunks
            rec.bar.update(1)
            if deadline is not None and not last and core.read_at(step) and time.time() > deadline:
                raise DeadlineReached(f"{name}: the deadline passed after step {step} of {max_steps}")
            if step % every(rt.log_every) == 0 or last:
                speed, seen = round(window[0] / max(window[1], 1e-9), 1), progress.seen()
                mfu = _mfu(seen["train_flops"] - window[2], window[1], peak, dist.world_size)
                rec.log(step=step, loss=stats.loss, lr=stats.lr, row_tokens_per_s=speed, mfu=mfu, rows=stats.rows,
                        masked_tokens=int(stats.masked_tokens), grad_norm=stats.grad_norm,
                        mask_ratio=core.mask_ratio(step), label_chunks=chunks, **seen)
                rec.show(loss=stats.loss, tok_s=f"{speed:.0f}")
                window, chunks = [0, 0.0, seen["train_flops"]], 0
            if probe.enabled and step % probe.every == 0 and dist.is_main:
                rec.log(step=step, **gradient_variance(core, step, probe.remasks, list(probe.parameters)))
            eval_cut = False
            if step % every(rt.eval_every) == 0 or last:
                try:
                    rec.log(**_evaluate(core, eval_set, step, rec, stop), **progress.seen())
                except EvaluationStopped:  # every rank: the state is saved with its evaluation still to do
                    eval_cut = True
            interrupted = (not last or eval_cut) and stop.agreed(now=eval_cut)
            if interrupted and not core.read_at(step):  # nothing after a non-finite step is saved
                _checked(core.check_finite, last_good)
            if step % every(rt.save_every) == 0 or last or interrupted:
                last_good = save(progress, milestone=step % every(rt.save_every) == 0, eval_pending=eval_cut) \
                    or last_good
            if interrupted:
                raise stop.stopped(f"stopped by {signal_name(stop.signum)} after step {step} of {max_steps}; "
                                   f"state saved at step {step}")
    return _finish(cfg, run, run_dir, core, tokenizer, {"init_from": init_from, **model_info}, progress, dist, corpus,
                   {**resolved.describe(), "prediction": core.objective.prediction, "new_mlm_head": new_head})


# ----------------------------------------------------------------------------------------------- helpers
def _prepare_run_dir(cfg: Any, run_dir: Path, dist: DistInfo) -> bool:
    """Check a resume against the run's saved config; write the config a later resume must match."""
    given = cfg.resume is not None and str(cfg.resume).strip().lower() not in ("", "none", "null", "false")
    resuming = bool(broadcast_object(given, dist))  # rank 0 decides (resume=auto, a requeue: femlm.cli)
    if given and str(cfg.resume).lower() != "true" and Path(str(cfg.resume)).expanduser().resolve() != \
            run_dir.resolve():
        raise UserError(f"resume={cfg.resume}: a run resumes in its own directory, but this run's directory is "
                        f"{run_dir}; use `femlm {cfg.command} resume={cfg.resume}`")
    current = config_dict(cfg)
    if resuming:
        check_resume(run_dir, current, writer=dist.is_main)
    if dist.is_main:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        if resuming:
            ckpt.remove_partial(run_dir / "checkpoints")
        write_config(run_dir, current)
    return resuming


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _restore(core: PretrainCore, run_dir: Path, resuming: bool, run: Any, dist: DistInfo) -> tuple[Progress, bool]:
    """The newest complete state of a resumed run (rank 0 picks it, so every rank resumes from the same one), and
    whether its evaluation is still to do (a stop arrived during it)."""
    latest = broadcast_object(ckpt.latest_state(run_dir / "checkpoints") if resuming and dist.is_main else None,
                              dist)
    progress, eval_pending = Progress(), False
    if latest is not None:
        state = ckpt.load_state(latest[1])  # CPU: RNG states must stay CPU tensors
        core.load_state_dict(state["core"])
        progress, eval_pending = Progress(**state["progress"]), bool(state.get("eval_pending", False))
        if len(state["rng"]) == dist.world_size:
            ckpt.set_rng_state(state["rng"][dist.rank])
        else:
            warnings.warn(f"resuming {len(state['rng'])}-process state on {dist.world_size} processes: dropout "
                          "streams are reseeded, the run continues but is not bit-identical", stacklevel=2)
    if dist.is_main and resuming:
        ckpt.truncate_metrics(run.metrics_path, progress.step if latest is not None else -1)
    return progress, eval_pending


def _step(core: PretrainCore, step: int, last_good: tuple[int, Path] | None) -> StepStats:
    return _checked(lambda: core.step(step), last_good)


def _checked(call: Callable[[], Any], last_good: tuple[int, Path] | None) -> Any:
    """`call()`, with a non-finite loss or gradient norm turned into the one-line TrainingDiverged."""
    try:
        return call()
    except NonFiniteLoss as err:
        where = str(last_good[1]) if last_good else "none (no state saved yet)"
        raise TrainingDiverged(f"{err.what} became {err.value} at step {err.step}; last good checkpoint: {where}; "
                               "lower trainer.lr, raise trainer.warmup_ratio or lower trainer.grad_clip, then "
                               "resume or restart") from None


def _mfu(flops: float, seconds: float, peak: float | None, devices: int) -> float | None:
    """Model FLOPs utilisation of a stretch of training: model FLOPs (femlm.train.flops, every rank's) per second
    over the peak of all `devices` (None without a peak)."""
    return float(f"{flops / seconds / (peak * devices):.4g}") if peak and seconds > 0 else None


def _evaluate(core: PretrainCore, eval_set: EvalSet, step: int, rec: Recorder, stop: StopRequest) -> dict[str, Any]:
    loss, accuracy = core.evaluate(eval_set, core.runtime.eval_batch_size or core.micro_rows,
                                   should_stop=lambda: stop.requested)
    rec.show(eval=loss)
    return {"step": step, "eval_loss": loss, "eval_accuracy": accuracy}


def _checkpoint_info(cfg: Any, core: PretrainCore, step: int, run_dir: Path,
                     origin: dict[str, Any]) -> provenance.Provenance:
    """femlm.json; `origin`: init_from, the attention implementation and the prediction path of the run."""
    return provenance.pretrain_record(command=cfg.command, masking=cfg.masking, domain=cfg.domain.name,
                                      model=cfg.model.name, step=step, max_steps=core.max_steps,
                                      equal_compute=cfg.trainer.equal_compute,
                                      precision=precision_name(core.amp_dtype), tf32=tf32_record(core.device),
                                      run_dir=run_dir, **origin)


def _saver(cfg: Any, run_dir: Path, core: PretrainCore, tokenizer: Any, origin: dict[str, Any], dist: DistInfo):
    """save(progress, milestone) -> (step, state path) on rank 0: a resumable state, and with `milestone` the
    model as `checkpoints/step_<s>` (HF save_pretrained + femlm.json)."""

    def save(progress: Progress, milestone: bool, eval_pending: bool = False) -> tuple[int, Path] | None:
        rngs = gather_objects(ckpt.rng_state(), dist)  # collective: every rank takes part
        if not dist.is_main:
            return None
        info = _checkpoint_info(cfg, core, progress.step, run_dir, origin)
        if milestone:
            ckpt.save_model(run_dir / "checkpoints" / f"step_{progress.step}", core.objective.model, tokenizer, info)
        state = {"core": core.state_dict(), "rng": rngs, "progress": progress.state(),
                 "world_size": dist.world_size, "eval_pending": eval_pending}
        return progress.step, ckpt.save_state(run_dir / "checkpoints", progress.step, state, info,
                                              cfg.runtime.keep_last)

    return save


def _finish(cfg: Any, run: Any, run_dir: Path, core: PretrainCore, tokenizer: Any, origin: dict[str, Any],
            progress: Progress, dist: DistInfo, corpus: Any, encoder: dict[str, Any]) -> dict[str, Any]:
    from femlm.data.tokenizer import vocabulary_fingerprint
    from femlm.runs import hardware

    evals = [r for r in read_metrics(run.metrics_path) if r.get("eval_loss") is not None] if dist.is_main else []
    final_loss = evals[-1]["eval_loss"] if evals else None
    summary = {"kind": "pretrain", "command": cfg.command, "masking": cfg.masking.name, "domain": cfg.domain.name,
               "model": cfg.model.name, "steps": core.max_steps, "max_steps": cfg.trainer.max_steps,
               "equal_compute": cfg.trainer.equal_compute, "rows_per_step": core.layout.rows,
               "sequences_per_step": core.layout.sequences,
               "final_eval_loss": final_loss if final_loss is not None and math.isfinite(final_loss) else None,
               "first_eval_loss": evals[0]["eval_loss"] if evals else None,
               "final_eval_accuracy": evals[-1].get("eval_accuracy") if evals else None,
               "row_tokens_per_s": round(progress.rows * core.block_size / progress.train_s, 1)
               if progress.train_s > 0 else None,
               "seen": {k: v for k, v in progress.state().items() if k not in ("step", "train_s")},
               "train_s": round(progress.train_s, 2), "wall_s": round(time.time() - run.started, 2),
               "world_size": dist.world_size, "precision": precision_name(core.amp_dtype),
               # TF32 for fp32 matmuls (runtime.tf32; null off CUDA), beside the precision
               "tf32": tf32_record(core.device),
               # model FLOPs utilisation over train_s and what it is measured against (femlm.train.estimate)
               **_run_mfu(core, progress, dist),
               # the attention kernels asked for and the one torch dispatches at the run's shapes, and compile
               "sdpa_backend": core.attention_record(), "compiled": bool(core.runtime.compile),
               "corpus": corpus.as_dict() if corpus is not None else None,
               # sha256 of the vocabulary (tokens in id order); the corpus's token files: corpus["sha256"]
               "vocabulary_sha256": vocabulary_fingerprint(tokenizer),
               "threads": torch.get_num_threads(),
               "checkpoint": str(run_dir / "checkpoints" / "final"), "hardware": hardware(),
               # model.new_mlm_head=true: the head parameters initialised fresh at the start (empty: none).
               "new_mlm_head": list(encoder["new_mlm_head"]),
               # the resolved model: class, attention implementation, prediction path, tokenizer, position limit
               "encoder": encoder}
    if dist.is_main:
        info = _checkpoint_info(cfg, core, core.max_steps, run_dir, origin)
        ckpt.save_model(run_dir / "checkpoints" / "final", core.objective.model, tokenizer, info)
        run.write_json("summary.json", summary)
        try:
            plot_loss_curve(run.metrics_path, run_dir / "loss_curve.png",
                            f"{cfg.command} {cfg.model.name} {cfg.masking.name} on {cfg.domain.name}")
        except Exception as err:  # noqa: BLE001 - a plotting problem must not fail a finished run
            warnings.warn(f"loss_curve.png not written ({type(err).__name__}: {err})", stacklevel=2)
    return summary


def _run_mfu(core: PretrainCore, progress: Progress, dist: DistInfo) -> dict[str, Any]:
    peak, source = device_peak(core.device, core.runtime.peak_flops)
    return {"mfu": _mfu(progress.state()["train_flops"], progress.train_s, peak, dist.world_size),
            "peak_flops": peak, "peak_flops_source": source}
