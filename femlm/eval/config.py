"""Typed schemas of the `finetune` and `evaluate` sections."""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError, require_positive


@dataclass
class FinetuneConfig:
    # One fine-tuning run per seed; results report mean ± sample std over them (as the paper's continual
    # pre-training table does).
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    # Overrides of the task's recipe (None: the task config's value).
    epochs: float | None = None
    lr: float | None = None
    batch_size: int | None = None
    max_length: int | None = None
    max_train_examples: int | None = None  # small runs: a seeded, stratified subsample (seed = top-level seed)
    group_by_length: bool = False  # batch training examples of similar length (less padding, HF's option)
    save_model: bool = False  # keep seed_<s>/model (save_pretrained) so `femlm evaluate` can score it

    def validate(self) -> None:
        if len(self.seeds) == 0:
            raise UserError("finetune.seeds=[]: give at least one seed, e.g. finetune.seeds=[1,2,3]")
        if len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"finetune.seeds={list(self.seeds)}: seeds must be distinct (each has its own "
                            "seed_<s>/ directory)")
        require_positive("finetune", self, "batch_size", "max_length", "max_train_examples", allow_none=True)
        if self.max_length is not None and self.max_length < 8:
            raise UserError(f"finetune.max_length={self.max_length}: must be at least 8 tokens, or null")
        if self.epochs is not None and self.epochs <= 0:
            raise UserError(f"finetune.epochs={self.epochs}: must be positive, or null for the task's recipe")
        if self.lr is not None and self.lr <= 0:
            raise UserError(f"finetune.lr={self.lr}: must be positive, or null for the task's recipe")


@dataclass
class EvaluateConfig:
    # A fine-tuned checkpoint, a directory of them, or a pre-training run whose intermediate checkpoints to
    # sweep (fine-tune + evaluate each) for the training-efficiency figure.
    checkpoints: str | None = None
    split: str | None = None  # None: the task's eval_split (test for DAPT tasks, dev for GLUE)
    sweep: bool = False

    def validate(self) -> None:
        if self.checkpoints is None:
            raise UserError("evaluate.checkpoints is not set: give a fine-tuned checkpoint, a directory of "
                            "them, or a pre-training run directory (with evaluate.sweep=true)")
