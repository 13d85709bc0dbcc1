"""Typed schemas of the `trainer` and `logger` sections: the optimisation recipe, and what a run records."""

# ruff: noqa: UP045 - Optional[...] like every other config schema in femlm (OmegaConf structured configs)
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from femlm.errors import UserError, require_choice, require_positive

# The config sections a pre-training run reads (femlm.commands registers the commands with them).
PRETRAIN_SECTIONS = ("model", "domain", "data", "masking", "trainer", "runtime", "download", "logger")


@dataclass
class VarianceProbeConfig:
    enabled: bool = False
    every: int = 100
    remasks: int = 4
    # Parameter-name globs whose gradients the probe measures; empty: all parameters.
    parameters: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.every < 1 or self.remasks < 2:
            raise UserError(f"logger.variance_probe: every={self.every} must be >= 1 and remasks={self.remasks} "
                            ">= 2 (a variance needs two draws)")


@dataclass
class TrainerConfig:
    # Per optimizer step, all processes together: model rows (equal_compute=same_rows) or source sequences
    # (same_sequences); femlm/train/compute.py says how a K-copy arm (FE-MLM, the i.i.d. control) fits in.
    batch_size: int = 48
    equal_compute: str = "same_rows"  # same_rows | same_sequences
    max_steps: int = 40000
    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    schedule: str = "linear"
    grad_clip: float = 1.0
    # Refuse a run that would pass over its training blocks more often than this (the paper's CS run makes
    # ~11 passes over 72k documents); null allows any number (femlm.data.plan).
    max_passes: Optional[float] = 20.0
    # Parameter-name patterns (fnmatch, as model.named_parameters() spells them) that train; every other
    # parameter is frozen. Empty: all train. E.g. [cls.*] trains only a BERT masked-LM head (a head warm-up
    # that leaves the encoder, and the decoder tied to its word embeddings, untouched).
    trainable: list[str] = field(default_factory=list)

    def validate(self) -> None:
        require_positive("trainer", self, "batch_size", "max_steps")
        if self.max_passes is not None and self.max_passes <= 0:
            raise UserError(f"trainer.max_passes={self.max_passes}: must be positive, or null for no limit")
        if self.lr <= 0:
            raise UserError(f"trainer.lr={self.lr}: must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            raise UserError(f"trainer.warmup_ratio={self.warmup_ratio}: must be in [0, 1)")
        require_choice("trainer", "schedule", self.schedule, ("linear", "constant", "cosine"))
        require_choice("trainer", "equal_compute", self.equal_compute, ("same_rows", "same_sequences"))


@dataclass
class WandbConfig:
    mode: str = "offline"  # offline | online | disabled
    project: str = "femlm"
    entity: Optional[str] = None


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True  # progress bars on stderr
    # A measurement, not a setting of the run: re-masking batches never touches the training streams.
    variance_probe: VarianceProbeConfig = field(default_factory=VarianceProbeConfig)

    def validate(self) -> None:
        if self.wandb.mode not in ("offline", "online", "disabled"):
            raise UserError(f"logger.wandb.mode={self.wandb.mode!r}: allowed offline, online, disabled")
