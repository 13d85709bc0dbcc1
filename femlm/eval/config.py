"""Typed schemas of the `finetune` and `evaluate` sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from femlm.errors import UserError


@dataclass
class FinetuneConfig:
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    # Overrides of the task's recipe (None: the task config's value).
    epochs: Optional[float] = None
    lr: Optional[float] = None
    batch_size: Optional[int] = None
    max_length: Optional[int] = None
    max_train_examples: Optional[int] = None  # small runs: a seeded, stratified subsample
    eval_batch_size: int = 64
    save_model: bool = False
    device: str = "auto"
    threads: Optional[int] = None

    def validate(self) -> None:
        if len(self.seeds) == 0:
            raise UserError("finetune.seeds=[]: give at least one seed, e.g. finetune.seeds=[1,2,3]")


@dataclass
class EvaluateConfig:
    # A fine-tuned checkpoint, a directory of them, or a pre-training run whose intermediate checkpoints to
    # sweep (fine-tune + evaluate each) for the training-efficiency figure.
    checkpoints: Optional[str] = None
    split: str = "test"
    sweep: bool = False

    def validate(self) -> None:
        if self.checkpoints is None:
            raise UserError("evaluate.checkpoints is not set: give a fine-tuned checkpoint, a directory of "
                            "them, or a pre-training run directory (with evaluate.sweep=true)")
