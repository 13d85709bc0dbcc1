"""Typed schemas of the `model`, `trainer`, `data` and `logger` config groups.

The YAML files in ``conf/`` must match these dataclasses key for key: the CLI merges every composed config
into them at start-up, so a misspelled key or a wrong type stops the run before any work is done.
"""

# ruff: noqa: UP045 - Optional[...] like every other config schema in femlm (OmegaConf structured configs)
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from femlm.errors import UserError


@dataclass
class ModelConfig:
    name: str = "tiny"
    # A local checkpoint directory (e.g. one `pretrain-scratch` wrote) or a Hub id. None: build from `arch`.
    name_or_path: Optional[str] = None
    # Tokenizer: a directory, a Hub id / mirror name (bert-base-uncased, roberta-base), or None (use the
    # checkpoint's own; `pretrain-scratch` trains a WordPiece tokenizer of `vocab_size` on the corpus).
    tokenizer: Optional[str] = None
    # Architecture for models built from scratch: a Hub id / mirror name whose config.json to read
    # (`config_name`), updated with the explicit fields in `arch`.
    config_name: Optional[str] = None
    arch: dict[str, Any] = field(default_factory=dict)
    vocab_size: int = 8192
    attn_implementation: str = "sdpa"

    def validate(self) -> None:
        if self.vocab_size < 16:
            raise UserError(f"model.vocab_size={self.vocab_size}: must be at least 16")
        if self.attn_implementation not in ("sdpa", "eager"):
            raise UserError(f"model.attn_implementation={self.attn_implementation!r}: allowed sdpa, eager")


@dataclass
class DataConfig:
    block_size: int = 512
    num_proc: int = 2
    # Fixed held-out set: this many validation blocks, masked once with `eval_seed` for every strategy.
    eval_blocks: int = 256
    eval_seed: int = 1234

    def validate(self) -> None:
        if self.block_size < 8:
            raise UserError(f"data.block_size={self.block_size}: must be at least 8")
        if self.num_proc < 1:
            raise UserError(f"data.num_proc={self.num_proc}: must be at least 1")
        if self.eval_blocks < 1:
            raise UserError(f"data.eval_blocks={self.eval_blocks}: must be at least 1")


@dataclass
class VarianceProbeConfig:
    enabled: bool = False
    every: int = 100
    remasks: int = 4
    # Parameter-name globs whose gradients the probe measures; empty: all parameters.
    parameters: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.every < 1 or self.remasks < 2:
            raise UserError(f"trainer.variance_probe: every={self.every} must be >= 1 and remasks={self.remasks} "
                            ">= 2 (a variance needs two draws)")


@dataclass
class TrainerConfig:
    # Rows (masked copies) per optimizer step across all processes; with equal compute a row budget holds
    # batch_size / splits sequences, so MLM and FE-MLM spend the same FLOPs per step.
    batch_size: int = 48
    micro_batch_size: Optional[int] = None  # rows per forward pass; accumulation fills the rest
    max_steps: int = 40000
    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    schedule: str = "linear"
    grad_clip: float = 1.0
    precision: str = "auto"  # auto: bf16 on a GPU that has it, else fp16; on CPU bf16 with AMX, else fp32
    compile: bool = False
    # glibc: keep freed host memory in malloc's heap instead of page-faulting it back every step (host_memory.py)
    keep_freed_memory: bool = True
    sparse_prediction: bool = True
    eval_every: int = 1000
    eval_batch_size: Optional[int] = None  # rows per held-out forward pass (None: the training micro-batch)
    save_every: int = 5000
    keep_last: int = 3
    log_every: int = 10
    # None: fresh run. true: continue the newest run of this command. A path: continue that run.
    resume: Optional[str] = None
    device: str = "auto"
    threads: Optional[int] = None
    variance_probe: VarianceProbeConfig = field(default_factory=VarianceProbeConfig)

    def validate(self) -> None:
        for key in ("batch_size", "max_steps", "eval_every", "save_every", "keep_last", "log_every"):
            value = getattr(self, key)
            if value < 1:
                raise UserError(f"trainer.{key}={value}: must be a positive integer")
        if self.eval_batch_size is not None and self.eval_batch_size < 1:
            raise UserError(f"trainer.eval_batch_size={self.eval_batch_size}: must be a positive integer or null")
        if self.micro_batch_size is not None and not 1 <= self.micro_batch_size <= self.batch_size:
            raise UserError(f"trainer.micro_batch_size={self.micro_batch_size}: must be in [1, trainer.batch_size]")
        if self.lr <= 0:
            raise UserError(f"trainer.lr={self.lr}: must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            raise UserError(f"trainer.warmup_ratio={self.warmup_ratio}: must be in [0, 1)")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise UserError(f"trainer.precision={self.precision!r}: allowed auto, fp32, bf16, fp16")
        if self.schedule not in ("linear", "constant", "cosine"):
            raise UserError(f"trainer.schedule={self.schedule!r}: allowed linear, constant, cosine")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise UserError(f"trainer.device={self.device!r}: allowed auto, cpu, cuda, cuda:N")


@dataclass
class WandbConfig:
    mode: str = "offline"  # offline | online | disabled
    project: str = "femlm"
    entity: Optional[str] = None


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True

    def validate(self) -> None:
        if self.wandb.mode not in ("offline", "online", "disabled"):
            raise UserError(f"logger.wandb.mode={self.wandb.mode!r}: allowed offline, online, disabled")
