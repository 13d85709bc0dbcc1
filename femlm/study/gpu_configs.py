"""The GPU study's runs as femlm configs: each composed from the experiment file exactly as the CLI would compose
the same command line (`common`, then the block's own overrides, then what the study fixes: the seed, the data it
prepared, the checkpoint a run starts from). Their values (model shape, steps, rows per step, K, the ratio, the
recipe) are read from these configs everywhere, never from the experiment file's text.

  warm-up     femlm pretrain-scratch     <common> <warmup.overrides> masking=<warmup.masking> seed=<warmup.seed>
  arm, seed   femlm continual-pretrain   <common> <pretrain.overrides> masking=<arm> seed=<s>
                                         model.name_or_path=<the warm-up checkpoint>
  downstream  femlm finetune             <common's model and runtime> <finetune.overrides> task=<task>
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from femlm.experiment.schema import Experiment

WARMUP, ARM, FINETUNE = "pretrain-scratch", "continual-pretrain", "finetune"
# What fine-tuning takes from `common` (the rest is pre-training's): the model's shape and the runtime.
FINETUNE_KEYS = ("preset=", "model=", "model.", "runtime", "download.", "logger.")


@dataclass
class Composed:
    command: str
    node: Any  # the composed DictConfig (config.yaml is written from it)
    cfg: Any  # the typed FemlmConfig


def compose_typed(command: str, overrides: list[str]) -> Composed:
    from femlm.compose import compose
    from femlm.config import validate

    node = compose(command, list(overrides))
    return Composed(command, node, validate(node, command))


def warmup(exp: Experiment, tokenizer: Path | None = None) -> Composed:
    """The warm-up run; `tokenizer`: the prepared vocabulary (a run on the device reads it, trains none)."""
    w = exp.warmup
    extra = [f"model.tokenizer={tokenizer}"] if tokenizer is not None else []
    return compose_typed(WARMUP, [*exp.common, *w.overrides, *([f"masking={w.masking}"] if w.masking else []),
                                  f"seed={w.seed}", *extra])


def arm(exp: Experiment, name: str, seed: int, checkpoint: Path | str) -> Composed:
    return compose_typed(ARM, [*exp.common, *exp.pretrain.overrides, f"masking={name}", f"seed={seed}",
                               f"model.name_or_path={checkpoint}"])


def finetune(exp: Experiment, task: str, checkpoint: Path | str | None = None, mirror: Path | None = None) -> Composed:
    """Fine-tuning `task` from `checkpoint`; `mirror`: the task files the study carried (download.mirror)."""
    ft = exp.finetune
    common = [o for o in exp.common if o.startswith(FINETUNE_KEYS)]
    extra = [f"model.name_or_path={checkpoint}"] if checkpoint is not None else []
    extra += [f"download.mirror={mirror}"] if mirror is not None else []
    return compose_typed(FINETUNE, [*common, *ft.overrides, f"task={task}", f"finetune.seeds=[{','.join(map(str, ft.seeds))}]",
                                    *extra])


def arms(exp: Experiment, checkpoint: Path | str = "warmup-checkpoint") -> dict[str, Composed]:
    """Every arm's config at the first seed (what the plan reads: shapes, steps, K)."""
    return {a: arm(exp, a, 1, checkpoint) for a in exp.pretrain.arms}
