"""The masked-LM training step shared by `pretrain-scratch`, `continual-pretrain` and the benchmarks.

Step `s` (1-based: the s-th optimizer update) is a pure function of (seed, s, rank) and the weights:
  * data: global sequence positions [(s-1)*S, s*S) of an endless stream whose epoch e is
    `randperm(n_blocks)` seeded by (seed, e); rank r takes its 1/W slice. No iterator state to save.
  * masks: `make_generator(seed, s, rank)`; one masker call per step covers all of the rank's rows, so the
    masks do not depend on `micro_batch_size`. `fully_explored_passes` keys each row's mask by (seed, block,
    visit) instead, the visit being the epoch in which the block is read: no rank or step enters.
  * loss: token mean over every masked token of the global batch. Micro-batches and ranks return sums,
    scaled by world_size / (masked tokens of the whole global batch) before backward, so DDP's gradient
    average and accumulation give exactly that mean.
  * shapes and timing: compiled, every step has one shape (femlm/train/batches.py); the next step's batch is
    built on a background thread; a step reads device values only where `read_at(step)` says (docs/training.md).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from femlm.errors import UserError
from femlm.masking import make_generator
from femlm.masking.config import PASSES, MaskingError
from femlm.masking.passes import mask_visits, visit_selection
from femlm.masking.sampling import mix_seed
from femlm.models.optim import param_groups
from femlm.runtime.config import RuntimeConfig
from femlm.runtime.device import pick_precision, sdpa_kernel
from femlm.runtime.host_memory import keep_freed_memory
from femlm.train.batches import BatchProducer, Prepared, Shape, prepare
from femlm.train.compute import step_layout
from femlm.train.config import TrainerConfig
from femlm.train.distributed import DistInfo, all_reduce_sum
from femlm.train.evaluation import EvalSet
from femlm.train.flops import flop_counts
from femlm.train.objective import MaskedLMObjective
from femlm.train.positions import LabelPositions

_REDRAW_STREAM = 1_000_000  # micro_step of redrawn masks (the variance probe): training uses micro_step 0
_REDRAW_CYCLES = 1 << 40  # fully_explored_passes: redraws use cycles from here on, far past any real run

_SCHEDULES = {"linear": "linear", "constant": "constant_with_warmup", "cosine": "cosine"}


class EvaluationStopped(Exception):
    """A stop was requested during a held-out evaluation (every rank raises it, after the same collective)."""


class NonFiniteLoss(RuntimeError):
    def __init__(self, step: int, value: float, what: str = "loss") -> None:
        super().__init__(f"{what} became {value} at step {step}")
        self.step, self.value, self.what = step, value, what


class DataOrder:
    """Block index of every position of the training stream; epoch e is a permutation seeded by (seed, e)."""

    def __init__(self, n_blocks: int, seed: int) -> None:
        if n_blocks < 1:
            raise UserError("no training blocks: the corpus is shorter than one data.block_size block")
        self.n, self.seed = n_blocks, seed
        self._cache: dict[int, torch.Tensor] = {}
        self._lock = threading.Lock()  # the batch producer's thread and the probe may read it at once

    def epoch(self, e: int) -> torch.Tensor:
        with self._lock:
            if e not in self._cache:
                if len(self._cache) > 2:
                    self._cache.pop(min(self._cache))
                gen = torch.Generator().manual_seed(mix_seed(self.seed, e, -1, -1))
                self._cache[e] = torch.randperm(self.n, generator=gen)
            return self._cache[e]

    def locate(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(block index, epoch) of stream positions [start, start + count): the epoch is the pass over the
        corpus, i.e. the visit index of the block (each epoch reads every block once)."""
        positions = torch.arange(start, start + count)
        epochs, offsets = positions // self.n, positions % self.n
        out = torch.empty(count, dtype=torch.long)
        for e in epochs.unique().tolist():
            sel = epochs == e
            out[sel] = self.epoch(e)[offsets[sel]]
        return out, epochs


class StepStats:
    """What optimizer step `step` did. `loss` and `grad_norm` stay on the device until read (a read waits for
    the step to finish: the loop reads them only at log steps); so does `masked_tokens`, the global batch's label
    count, under DDP (the all-reduced device tensor; `int()` reads it; in one process it is the host int).
    `label_chunks`: the forward-backward chunks this rank ran (femlm/train/batches.py), known on the host."""

    def __init__(self, step: int, loss: torch.Tensor | float, rows: int, masked_tokens: int | torch.Tensor,
                 grad_norm: torch.Tensor | float, lr: float, label_chunks: int = 1) -> None:
        self.step, self.rows, self.lr, self.label_chunks = step, rows, lr, label_chunks
        self.masked_tokens = masked_tokens
        self._loss, self._grad_norm = loss, grad_norm

    @property
    def loss(self) -> float:
        return float(self._loss)

    @property
    def grad_norm(self) -> float:
        return float(self._grad_norm)


def make_optimizer(model: nn.Module, tcfg: TrainerConfig, device: torch.device) -> torch.optim.Optimizer:
    groups = param_groups(model, tcfg.weight_decay)
    kwargs: dict[str, Any] = {"lr": tcfg.lr, "betas": tuple(tcfg.betas), "eps": tcfg.eps}
    try:  # fused: one kernel for all parameters (CUDA, and CPU in recent torch)
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs)


def freeze_except(model: nn.Module, patterns: list[str]) -> list[str]:
    """Freeze every parameter whose name matches none of `patterns` (fnmatch); the names left trainable."""
    from fnmatch import fnmatchcase

    names = [n for n, _ in model.named_parameters()]
    keep = [n for n in names if any(fnmatchcase(n, p) for p in patterns)]
    if not keep:
        raise UserError(f"trainer.trainable={patterns}: matches no parameter of the model (names look like "
                        f"{', '.join(names[:2])}, ..., {names[-1]})")
    for name, param in model.named_parameters():
        param.requires_grad_(name in keep)
    return keep


def eval_shape(labels: torch.Tensor, rows: int) -> Shape:
    """The exact shape of a fixed held-out set in batches of `rows`: its largest batch and row counts."""
    per_row = (labels != -100).sum(1)
    size = max((int(per_row[start:start + rows].sum()) for start in range(0, labels.shape[0], rows)), default=0)
    return Shape(rows, max(size, 1), (int(per_row.max()) if per_row.numel() else 0) + 1)


class PretrainCore:
    """Model + optimizer + schedule + data order + masker: `step(s)` performs optimizer update s."""

    def __init__(self, model: nn.Module, masker: Any, blocks: Any, tcfg: TrainerConfig, runtime: RuntimeConfig,
                 seed: int, dist: DistInfo | None = None, max_steps: int | None = None) -> None:
        # blocks: [N, L] token ids, a tensor or femlm.data.tokens.TokenBlocks (memory-mapped): only the rows of
        # each step are gathered, so the corpus is never loaded whole into memory.
        from transformers import get_scheduler

        self.dist = dist or DistInfo()
        self.device = self.dist.device
        if runtime.keep_freed_memory:
            keep_freed_memory()
        self.tcfg, self.runtime, self.seed, self.masker = tcfg, runtime, seed, masker
        self.blocks = blocks
        world, k = self.dist.world_size, masker.num_copies
        self.layout = step_layout(tcfg.equal_compute, tcfg.batch_size, tcfg.max_steps, k, world)
        self.max_steps = max_steps or self.layout.steps
        self.step_sequences = self.layout.sequences
        self.rank_sequences = self.layout.sequences // world
        self.rank_model_rows = self.rank_sequences * k
        self.micro_rows = runtime.micro_batch_size or self.rank_model_rows
        self.order = DataOrder(blocks.shape[0], seed)
        if masker.cfg.strategy == PASSES:  # refuse K disjoint masks that do not fit a block before the first step
            try:
                visit_selection(masker, blocks[0].long(), seed, 0, 0, ratio=masker.cfg.peak_ratio)
            except MaskingError as err:
                raise UserError(str(err)) from None
        self.block_size = int(blocks.shape[1])
        self.flops = flop_counts(model)  # model FLOPs per step, for the run's compute accounting

        if tcfg.trainable:
            freeze_except(model, list(tcfg.trainable))
        self.objective = MaskedLMObjective(model, sparse=runtime.sparse_prediction).to(self.device)
        self.module: nn.Module = self.objective
        if self.dist.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.module = nn.parallel.DistributedDataParallel(self.objective, device_ids=ids)
        # Compiled: one training graph and one evaluation graph for the run (femlm/train/batches.py fixes every
        # shape); the evaluation is its own function, so it never re-enters the training graph's frame.
        self.evaluator: Callable[..., Any] = self.objective.score
        self.shape: Shape | None = None
        if runtime.compile:
            self.shape = masker.label_bound(self.micro_rows, int(blocks.shape[1]), blocks)
            self.module = torch.compile(self.module, dynamic=False)
            self.evaluator = torch.compile(self.objective.score, dynamic=False)
        self.copy_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.producer = BatchProducer(self._prepare_step, runtime.prefetch)
        self.read_at: Callable[[int], bool] = lambda step: True  # which steps read device values (run_pretrain sets it)
        self._bad = torch.zeros(3, dtype=torch.float64, device=self.device)  # first non-finite (step, what, value)
        self.amp_dtype = pick_precision(runtime.precision, self.device)
        # fp16: loss scaling with skipped steps and scale backoff on overflow (torch's GradScaler, CPU or CUDA).
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)
        self.optimizer = make_optimizer(self.objective.model, tcfg, self.device)
        warmup = math.ceil(tcfg.warmup_ratio * self.max_steps)
        self.scheduler = get_scheduler(_SCHEDULES[tcfg.schedule], self.optimizer, num_warmup_steps=warmup,
                                       num_training_steps=self.max_steps)
        self.params = [p for p in self.objective.parameters() if p.requires_grad]

    # ------------------------------------------------------------------------------------------ batches
    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def visits(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(block index, visit) of this rank's sequences for optimizer step `step`: the visit is the epoch."""
        start = (step - 1) * self.step_sequences + self.dist.rank * self.rank_sequences
        return self.order.locate(start, self.rank_sequences)

    def sequences(self, step: int) -> torch.Tensor:
        """This rank's unmasked input blocks [rank_sequences, L] for optimizer step `step`."""
        return self.blocks[self.visits(step)[0]].long()

    def mask_ratio(self, step: int) -> float:
        """The masking ratio of step `step` (masking.ratio_schedule): a pure function of the step, like the masks."""
        return self.masker.cfg.ratio_at(step, self.max_steps)

    def batch(self, step: int, redraw: int | None = None) -> dict[str, torch.Tensor]:
        """This rank's masked rows for step `step` (CPU tensors). `redraw` i (the variance probe) draws the
        masks again from a stream training never uses, with the same law."""
        blocks, visits = self.visits(step)
        sequences, ratio = self.blocks[blocks].long(), self.mask_ratio(step)
        if self.masker.cfg.strategy == PASSES:  # masks keyed by (seed, block, visit): femlm.masking.passes
            if redraw is not None:  # visit v of a cycle training never reaches: the same mask law
                visits = visits + self.masker.cfg.num_masks * (_REDRAW_CYCLES + redraw)
            try:
                return mask_visits(self.masker, sequences, blocks, visits, self.seed, ratio=ratio)
            except MaskingError as err:  # e.g. K disjoint masks that do not fit a row: one line naming the key
                raise UserError(str(err)) from None
        micro = 0 if redraw is None else _REDRAW_STREAM + redraw
        return self.masker(sequences, None, make_generator(self.seed, step, self.dist.rank, micro), ratio=ratio)

    def probe_inputs(self, rows: dict[str, torch.Tensor], start: int, stop: int) -> tuple[torch.Tensor, ...]:
        """Eager inputs of rows [start, stop) (the variance probe): exact positions, the attention mask if any."""
        attention = rows["attention_mask"][start:stop]
        attention = None if bool(attention.all()) else attention.to(self.device, non_blocking=True)
        at = LabelPositions.from_labels(rows["labels"][start:stop])
        return rows["input_ids"][start:stop].to(self.device, non_blocking=True), attention, at.to(self.device)

    def _prepare_step(self, step: int) -> Prepared:
        """Step `step`'s batch, split into label chunks of the run's shape, on the device (the producer thread)."""
        return self._prepare(self.batch(step), step)

    def _prepare(self, rows: dict[str, torch.Tensor], step: int | None = None) -> Prepared:
        # Training rows are whole token blocks (the masker gets no attention mask): no attention mask for the
        # whole run, which lets SDPA take its mask-free kernels.
        return prepare(rows["labels"], rows["input_ids"], self.micro_rows, self.shape, self.device, step,
                       self.copy_stream)

    # ------------------------------------------------------------------------------------------ training
    def backward(self, prepared: Prepared) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients of the global token-mean loss of the `prepared` rows (accumulated in .grad); (loss_sum,
        count), both on the device and not read here."""
        prepared.wait(self.device)
        count = torch.full((1,), float(prepared.count), dtype=torch.float64, device=self.device)
        all_reduce_sum(count, self.dist)
        scale = (self.dist.world_size / count.clamp(min=1.0))[0].float()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, (input_ids, at) in enumerate(prepared.chunks):
            last = i == len(prepared.chunks) - 1
            sync = contextlib.nullcontext() if last or not self.dist.distributed else self._no_sync()
            with sync, sdpa_kernel(self.runtime.sdpa_backend, self.device):
                with self.autocast():
                    loss_sum, _, _ = self.module(input_ids, None, at)
                self.scaler.scale(loss_sum * scale).backward()
            total += loss_sum.detach().double()
        return total, count

    def _no_sync(self) -> contextlib.AbstractContextManager:
        module = getattr(self.module, "_orig_mod", self.module)  # through torch.compile's wrapper
        return module.no_sync()

    def check_finite(self) -> None:
        """Raise NonFiniteLoss for the first step whose loss or gradient norm was not finite (one read)."""
        step, what, value = self._bad.tolist()
        if step:
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(int(step), value, "loss" if what == 0 else "gradient norm")

    def _note_nonfinite(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Record on the device, without reading it, the first step whose loss or gradient norm is not finite."""
        loss_bad = ~torch.isfinite(loss)
        grad_bad = ~torch.isfinite(grad_norm) if not self.scaler.is_enabled() else torch.zeros_like(loss_bad)
        first = torch.stack([torch.full((), float(step), dtype=torch.float64, device=self.device),
                             torch.where(loss_bad, 0.0, 1.0).double(), torch.where(loss_bad, loss, grad_norm.double())])
        self._bad = torch.where((self._bad[0] == 0) & (loss_bad | grad_bad), first, self._bad)

    def step(self, step: int) -> StepStats:
        """Optimizer update number `step` (1-based). A step where `read_at(step)` is false (the loop's steps that
        do not log, evaluate or save) reads no device value: a non-finite loss or gradient norm is recorded on
        the device and raised by the next reading step or `check_finite` (docs/training.md)."""
        read = self.read_at(step)
        self.objective.train()
        prepared = self.producer.take(step, step + 1 if step < self.max_steps else None)
        loss_sum, count = self.backward(prepared)
        all_reduce_sum(loss_sum, self.dist)
        loss = (loss_sum / count.clamp(min=1.0))[0]
        if read:
            self.check_finite()
            if not math.isfinite(value := loss.item()):
                self.optimizer.zero_grad(set_to_none=True)
                raise NonFiniteLoss(step, value)
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.tcfg.grad_clip)
        if read and not math.isfinite(value := float(grad_norm)) and not self.scaler.is_enabled():
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLoss(step, value, "gradient norm")
        if not read:
            self._note_nonfinite(step, loss, grad_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        tokens = count[0] if self.dist.distributed else prepared.count
        return StepStats(step=step, loss=loss, rows=self.rank_model_rows * self.dist.world_size,
                         masked_tokens=tokens, grad_norm=grad_norm, lr=lr, label_chunks=len(prepared.chunks))

    # ------------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, eval_set: EvalSet, batch_rows: int | None = None,
                 should_stop: Callable[[], bool] | None = None) -> tuple[float, float]:
        """Held-out (loss, accuracy) over masked tokens; ranks score disjoint shards, sums are all-reduced.
        `should_stop` is polled before each batch: a rank asked to stop skips the rest of its shard, and once the
        sums are reduced every rank raises EvaluationStopped (the same one collective either way)."""
        shard = eval_set.shard(self.dist.rank, self.dist.world_size)
        batch_rows = batch_rows or self.micro_rows
        sums = torch.zeros(4, dtype=torch.float64, device=self.device)  # loss, count, correct, ranks stopped
        shape = eval_shape(shard.labels, batch_rows) if self.shape is not None else None
        self.objective.eval()
        try:
            with sdpa_kernel(self.runtime.sdpa_backend, self.device):
                for input_ids, at in prepare(shard.labels, shard.input_ids, batch_rows, shape, self.device).chunks:
                    if should_stop is not None and should_stop():
                        sums[3] = 1.0
                        break
                    with self.autocast():
                        loss_sum, count, correct = self.evaluator(input_ids, None, at)
                    sums[:3] += torch.stack([loss_sum.double(), count.double(), correct.double()])
        finally:
            self.objective.train()
        all_reduce_sum(sums, self.dist)
        loss_sum, count, correct, stopped = sums.tolist()
        if stopped:
            raise EvaluationStopped
        return loss_sum / max(count, 1.0), correct / max(count, 1.0)

    def close(self) -> None:
        """Stop the batch producer's thread (after the build in flight, if any)."""
        self.producer.close()

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"model": self.objective.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.objective.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
