"""The batches a training step consumes: their fixed shapes, and their preparation beside the running step.

**Fixed shapes** (runtime.compile=true: one training graph and one evaluation graph for the whole run). Before
the first step `label_bound` fixes, from the masking law and the batch shape, how many labelled positions a
micro-batch carries (`size`) and how many query slots a row needs (`width`, plus one spare slot for padding):
  * exact sub-word counts are known: tau = round_half_up(peak ratio * L) per row (every arm: MLM, FE K copies,
    FE across passes, iid), so size = rows * tau and width = tau: no batch ever exceeds them;
  * Bernoulli sub-word counts are Binomial(L, p) per row and Binomial(rows * L, p) per micro-batch: the bound is
    the binomial quantile a batch exceeds with probability TAIL (per row: TAIL / rows);
  * word-level laws (whole word, span; exact or Bernoulli) pick whole words, so their token counts spread more
    than a binomial in tokens: a normal quantile at the same tail around the mean (tau per row), with the
    binomial's variance widened by WORD_SPREAD (an assumption about word lengths, not derived from the law; a
    wrong guess costs speed only, never a different loss: see below).
  Ratio schedules use the schedule's peak ratio.

A batch beyond the bound keeps the same graph: its labelled positions are split into several *passes* of the same
shapes over the same rows. A position's pass is (its slot // (width - 1), then its order among that slot group in
groups of `size`); each pass runs the rows with its subset of positions. The last layer's query at a position
does not depend on the other positions, so the per-position losses are those of a single pass; the loss sum
and its gradients add up over passes (one backward each). Padding entries point at (0, 0), use the spare slot
and have target -100; a ragged last micro-batch (or evaluation batch) is padded with rows that carry no labels:
padding adds nothing to the loss, its count or its gradients. Eager runs (compile off) stay unpadded, as before.

**Prefetch** (runtime.prefetch=true). `BatchProducer` builds step s+1's batch (masks, positions, pinned host
tensors on CUDA and their copy on a side stream) on one background thread while step s runs; a queue of depth
one keeps it from competing with the step for more than one batch. The masks stay the pure function of (seed,
step or block, visit) that `PretrainCore.batch` defines (explicit generators, no global RNG), so prefetching
changes no bit of a run.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from femlm.masking.sampling import mask_budget
from femlm.train.positions import LabelPositions

TAIL = 1e-9  # probability that a micro-batch needs a second pass (a few in a 1M-step run: a negligible cost)
WORD_SPREAD = 8.0  # word-level laws: variance of the token count relative to a binomial in tokens (assumed)


@dataclass(frozen=True)
class Shape:
    """The fixed shape of every pass of a run's micro-batches: rows, labelled positions, query slots per row."""

    rows: int
    size: int
    width: int  # including the spare slot padding entries use


def label_bound(cfg: Any, rows: int, length: int, copies: int = 1) -> Shape:
    """The fixed shape for micro-batches of `rows` rows of `length` tokens under the masking law `cfg`."""
    from scipy.stats import binom, norm

    ratio = cfg.peak_ratio
    tau = int(mask_budget(torch.tensor([length]), ratio, copies)[0])
    if cfg.count == "exact" and cfg.granularity == "subword":
        return Shape(rows, rows * tau, tau + 1)
    if cfg.granularity == "subword":  # Bernoulli: binomial quantiles
        size = int(binom.isf(TAIL, rows * length, ratio)) + 1
        width = int(binom.isf(TAIL / rows, length, ratio)) + 1
    else:  # whole words or spans: a widened normal quantile around the mean (the mean is tau per row)

        def quantile(n_rows: int, tail: float) -> int:
            spread = math.sqrt(WORD_SPREAD * n_rows * length * ratio * (1 - ratio))
            return math.ceil(n_rows * tau + float(norm.isf(tail)) * spread) + 1

        size, width = quantile(rows, TAIL), quantile(1, TAIL / rows)
    width = min(width, length)
    return Shape(rows, min(size, rows * length), width + 1)


def split_positions(labels: torch.Tensor, shape: Shape | None) -> list[LabelPositions]:
    """The labelled positions of `labels` [B, L]: one LabelPositions (unpadded) without a shape, else one or
    more passes padded to `shape` (module doc: more than one only beyond the bound)."""
    at = LabelPositions.from_labels(labels)
    if shape is None:
        return [at]
    room = shape.width - 1
    if at.rows.numel() <= shape.size and at.width <= room:
        return [at.padded(shape.size, shape.width)]
    passes = []
    group = at.slots // room
    for g in range(int(group.max()) + 1):
        index = (group == g).nonzero().flatten()
        for start in range(0, index.numel(), shape.size):
            part = index[start:start + shape.size]
            sub = LabelPositions(at.rows[part], at.cols[part], at.slots[part] - g * room, at.targets[part], room)
            passes.append(sub.padded(shape.size, shape.width))
    return passes


def pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """`tensor` [b, ...] with zero rows appended up to `rows` (rows with no labels: they add nothing)."""
    if tensor.shape[0] >= rows:
        return tensor
    return torch.cat([tensor, tensor.new_zeros(rows - tensor.shape[0], *tensor.shape[1:])])


@dataclass
class Prepared:
    """One step's batch, ready for the step: `passes` are (input ids, positions) on the device, one forward and
    backward each; `count` is the number of labelled positions of this rank's rows, from the host masks."""

    step: int | None
    passes: list[tuple[torch.Tensor, LabelPositions]]
    count: int
    ready: Any = None  # CUDA: the side stream's event the step's stream waits on before using the tensors

    def wait(self, device: torch.device) -> None:
        if self.ready is not None:
            stream = torch.cuda.current_stream(device)
            stream.wait_event(self.ready)
            for ids, at in self.passes:  # the caching allocator must not reuse them before the step is done
                for t in (ids, *at[:4]):
                    t.record_stream(stream)
            self.ready = None


def prepare(labels: torch.Tensor, input_ids: torch.Tensor, rows: int, shape: Shape | None,
            device: torch.device, step: int | None = None, stream: Any = None) -> Prepared:
    """Split a rank's rows into micro-batches of `rows` (the last padded when `shape` is set), find each one's
    passes and move them to `device` (pinned and non-blocking on CUDA, on `stream` when given)."""
    host: list[tuple[torch.Tensor, LabelPositions]] = []
    for start in range(0, labels.shape[0], rows):
        ids, lab = input_ids[start:start + rows], labels[start:start + rows]
        if shape is not None:
            ids = pad_rows(ids, rows)
        host.extend((ids, at) for at in split_positions(lab, shape))
    count = int((labels != -100).sum())
    if device.type != "cuda":
        return Prepared(step, host, count)
    context = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
    with context:
        moved = [(ids.pin_memory().to(device, non_blocking=True),
                  LabelPositions(*(t.pin_memory() for t in at[:4]), at.width).to(device)) for ids, at in host]
        ready = torch.cuda.Event()
        ready.record()
    return Prepared(step, moved, count, ready if stream is not None else None)


class BatchProducer:
    """`take(step, following)`: step's Prepared batch (built ahead if it was asked for, else now), and the build
    of `following` started on the background thread. One batch ahead at most."""

    def __init__(self, build: Callable[[int], Prepared], enabled: bool = True) -> None:
        self.build, self.enabled = build, enabled
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[int, Future] | None = None
        self._lock = threading.Lock()

    def take(self, step: int, following: int | None) -> Prepared:
        with self._lock:
            ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == step:
            prepared = ahead[1].result()
        else:
            if ahead is not None:
                ahead[1].exception()  # an unused build (a step taken out of order): finish it, drop it
            prepared = self.build(step)
        if self.enabled and following is not None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="femlm-batches")
            self._ahead = (following, self._pool.submit(self.build, following))
        return prepared

    def close(self) -> None:
        """Wait for a build in flight and stop the thread."""
        if self._ahead is not None:
            self._ahead[1].exception()
            self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
