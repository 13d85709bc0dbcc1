"""The batches a training step consumes: their fixed shapes, and their preparation beside the running step.

**Fixed shapes** (runtime.compile=true: one training graph and one evaluation graph for the whole run). Before
the first step the masker fixes, from its law and the batch shape, how many labelled positions a micro-batch
carries (`size`) and how many query slots a row needs (`width`, plus one spare slot for padding):
`Masker.label_bound`, femlm/masking/bounds.py (exact sub-word and whole-word counts: tau per row; exact spans:
tau plus the longest word; Bernoulli laws: binomial quantiles, in words for whole words). Ratio schedules use
the schedule's peak ratio.

A batch beyond the bound keeps the same graph: its labelled positions are split into several *label chunks* of
the same shapes over the same rows (not to be confused with passes over the corpus). A position's chunk is (its
slot // (width - 1), then its order among that slot group in groups of `size`); each chunk runs the rows with its
subset of positions. The last layer's query at a position does not depend on the other positions, so the
per-position losses are those of a single chunk; the loss sum and its gradients add up over chunks (one backward
each). Every train record counts the chunks run (`label_chunks`). Padding entries point at (0, 0), use the spare
slot and have target -100; a ragged last micro-batch (or evaluation batch) is padded with rows that carry no
labels: padding adds nothing to the loss, its count or its gradients. Eager runs (compile off) stay unpadded.

**Prefetch** (runtime.prefetch=true). `BatchProducer` builds step s+1's batch (masks, positions, pinned host
tensors on CUDA and their copy on a side stream) on one background thread while step s runs; a queue of depth
one keeps it from competing with the step for more than one batch. The masks stay the pure function of (seed,
step or block, visit) that `PretrainCore.batch` defines (explicit generators, no global RNG), so prefetching
changes no bit of a run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from femlm.masking.bounds import Shape
from femlm.train.positions import LabelPositions


def split_label_chunks(labels: torch.Tensor, shape: Shape | None) -> list[LabelPositions]:
    """The labelled positions of `labels` [B, L]: one LabelPositions (unpadded) without a shape, else one or
    more label chunks padded to `shape` (module doc: more than one only beyond the bound)."""
    at = LabelPositions.from_labels(labels)
    if shape is None:
        return [at]
    room = shape.width - 1
    if at.rows.numel() <= shape.size and at.width <= room:
        return [at.padded(shape.size, shape.width)]
    chunks = []
    group = at.slots // room
    for g in range(int(group.max()) + 1):
        index = (group == g).nonzero().flatten()
        for start in range(0, index.numel(), shape.size):
            part = index[start:start + shape.size]
            sub = LabelPositions(at.rows[part], at.cols[part], at.slots[part] - g * room, at.targets[part], room)
            chunks.append(sub.padded(shape.size, shape.width))
    return chunks


def pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """`tensor` [b, ...] with zero rows appended up to `rows` (rows with no labels: they add nothing)."""
    if tensor.shape[0] >= rows:
        return tensor
    return torch.cat([tensor, tensor.new_zeros(rows - tensor.shape[0], *tensor.shape[1:])])


@dataclass
class Prepared:
    """One step's batch, ready for the step: `chunks` are (input ids, positions) on the device, one forward and
    backward each (one per micro-batch, more where a micro-batch went beyond the bound); `count` is the number of
    labelled positions of this rank's rows, from the host masks."""

    step: int | None
    chunks: list[tuple[torch.Tensor, LabelPositions]]
    count: int
    ready: Any = None  # CUDA: the side stream's event the step's stream waits on before using the tensors

    def wait(self, device: torch.device) -> None:
        if self.ready is not None:
            stream = torch.cuda.current_stream(device)
            stream.wait_event(self.ready)
            for ids, at in self.chunks:  # the caching allocator must not reuse them before the step is done
                for t in (ids, *at[:4]):
                    t.record_stream(stream)
            self.ready = None


def prepare(labels: torch.Tensor, input_ids: torch.Tensor, rows: int, shape: Shape | None,
            device: torch.device, step: int | None = None, stream: Any = None) -> Prepared:
    """Split a rank's rows into micro-batches of `rows` (the last padded when `shape` is set), find each one's
    label chunks and move them to `device` (pinned and non-blocking on CUDA, on `stream` when given)."""
    host: list[tuple[torch.Tensor, LabelPositions]] = []
    for start in range(0, labels.shape[0], rows):
        ids, lab = input_ids[start:start + rows], labels[start:start + rows]
        if shape is not None:
            ids = pad_rows(ids, rows)
        host.extend((ids, at) for at in split_label_chunks(lab, shape))
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
