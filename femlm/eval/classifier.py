"""Training and scoring one classifier: the loop `femlm finetune` runs once per seed (no HF Trainer).

DAPT protocol (``task.eval_split == "test"``; peers.md §3, ``classifier.jsonnet``): AdamW (betas 0.9/0.98,
eps 1e-6, weight decay 0.1 except biases and LayerNorm), linear warmup 6% then linear decay (DAPT used
slanted triangular, which is the same shape), grad-norm clip 1, 10 epochs, batch 16, lr 2e-5, early
stopping with patience 3 on the dev main metric, and the best dev epoch's weights scored on test.
GLUE (``eval_split`` dev, or dev_matched for MNLI): the usual BERT recipe from the task config (fixed epochs, no early
stopping unless the task sets patience, Adam betas 0.9/0.999, eps 1e-8), the final model scored on the eval split.

A stop request (femlm.stop) is polled before every training step and every scored batch: the seed being trained is
dropped whole (nothing of it is written), the seeds already finished stay recorded (femlm.eval.finetune).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import DataCollatorWithPadding, PreTrainedModel, get_scheduler

from femlm.errors import UserError
from femlm.eval.inputs import Encoded, LabelSpec, batches, n_batches
from femlm.eval.metrics import compute_metrics
from femlm.models.optim import param_groups
from femlm.runtime.attention import attention_dropout, plan_kernels
from femlm.runtime.device import pick_precision, precision_name
from femlm.stop import check

LogFn = Callable[..., None]


@dataclass
class Recipe:
    epochs: float
    lr: float
    batch_size: int
    max_length: int
    patience: int | None
    warmup_ratio: float
    weight_decay: float
    eval_batch_size: int = 64
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    grad_clip: float = 1.0
    group_by_length: bool = False  # training batches of similar lengths (finetune.group_by_length)
    precision: str = "fp32"  # autocast dtype actually used: fp32, bf16 or fp16 (runtime.precision, resolved)
    # runtime.sdpa_backend: the attention kernels of the training steps (CUDA), never cuDNN with attention dropout
    # (femlm/runtime/attention.py); scoring keeps torch's choice
    sdpa_backend: Any = "auto"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["betas"] = list(self.betas)
        return out


def make_recipe(task: Any, ft: Any, runtime: Any, limit: int, device: torch.device) -> tuple[Recipe, list[str]]:
    """The task's recipe with ``finetune.*`` overrides; ``max_length`` checked against the model;
    ``runtime.precision`` resolved for ``device``."""
    notes: list[str] = []
    max_length = ft.max_length if ft.max_length is not None else task.max_length
    if max_length > limit:
        if ft.max_length is not None:
            raise UserError(f"finetune.max_length={ft.max_length}: the model embeds at most {limit} "
                            f"positions; use finetune.max_length<={limit}")
        notes.append(f"task.max_length={task.max_length} exceeds the model's {limit} positions: "
                     f"inputs truncated to {limit} tokens")
        max_length = limit
    dapt = task.eval_split == "test"
    recipe = Recipe(
        epochs=float(ft.epochs if ft.epochs is not None else task.epochs),
        lr=float(ft.lr if ft.lr is not None else task.lr),
        batch_size=int(ft.batch_size if ft.batch_size is not None else task.batch_size),
        max_length=int(max_length), patience=task.patience, warmup_ratio=float(task.warmup_ratio),
        weight_decay=float(task.weight_decay), eval_batch_size=int(runtime.eval_batch_size or 64),
        betas=(0.9, 0.98) if dapt else (0.9, 0.999), eps=1e-6 if dapt else 1e-8,
        group_by_length=bool(ft.group_by_length), precision=resolve_precision(runtime.precision, device),
        sdpa_backend=runtime.sdpa_backend)
    overridden = [k for k in ("epochs", "lr", "batch_size", "max_length") if getattr(ft, k) is not None]
    if overridden:
        notes.append("recipe overridden by finetune." + ", finetune.".join(
            f"{k}={getattr(ft, k)}" for k in overridden) + f" (task {task.name} recipe: epochs "
            f"{task.epochs}, lr {task.lr}, batch {task.batch_size}, max_length {task.max_length})")
    return recipe, notes


@dataclass
class SeedResult:
    seed: int
    best_epoch: int
    epochs_run: int
    dev: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``runtime.precision`` as the autocast used on ``device``: "bf16", "fp16" or "fp32" (see pick_precision)."""
    return precision_name(pick_precision(precision, device))


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> Any:
    """bf16 or fp16 autocast (as pre-training: GPUs, and CPUs where asked or measured faster) or plain fp32."""
    return torch.autocast(device.type, dtype=AUTOCAST.get(precision, torch.float32), enabled=precision in AUTOCAST)


@torch.no_grad()
def predict(model: PreTrainedModel, data: Encoded, spec: LabelSpec, batch_size: int, device: torch.device,
            collator: DataCollatorWithPadding, precision: str = "fp32") -> list[Any]:
    """Predictions in file order (label indices, or floats for regression)."""
    model.eval()
    out: list[Any] = [None] * len(data)
    for idx, batch in batches(data, batch_size, collator, shuffle=False, sort_by_length=True):
        check("scoring")
        batch.pop("labels", None)
        with autocast(device, precision):
            logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float()
        values = logits[:, 0].tolist() if spec.regression else logits.argmax(-1).tolist()
        for i, value in zip(idx, values, strict=True):
            out[i] = value
    return out


def score_split(model: PreTrainedModel, data: Encoded, spec: LabelSpec, metric: str, batch_size: int,
                device: torch.device, collator: DataCollatorWithPadding, precision: str = "fp32"
                ) -> tuple[dict[str, float], list[Any]]:
    predictions = predict(model, data, spec, batch_size, device, collator, precision)
    return compute_metrics(metric, data.labels, predictions, num_labels=spec.num_labels), predictions


def train_seed(model: PreTrainedModel, train: Encoded, dev: Encoded | None, recipe: Recipe, spec: LabelSpec,
               metric: str, main_metric: str, seed: int, device: torch.device, collator: DataCollatorWithPadding,
               log: LogFn, progress: bool = True) -> SeedResult:
    """Train ``model`` in place. With patience, stop after ``patience`` epochs without a better dev main
    metric and load the best epoch's weights back (an in-memory state_dict copy); without, keep the last.
    fp16 scales the loss as pre-training does (torch's GradScaler: a step whose gradients overflow is skipped and
    the scale backs off)."""
    if recipe.patience is not None and dev is None:
        raise UserError("early stopping (task.patience) needs a dev split; this task has none: set "
                        "task.patience=null")
    model.to(device)
    steps_per_epoch = n_batches(len(train), recipe.batch_size)
    total_steps = max(1, math.ceil(recipe.epochs * steps_per_epoch))
    n_epochs = math.ceil(total_steps / steps_per_epoch)
    optimizer = torch.optim.AdamW(param_groups(model, recipe.weight_decay), lr=recipe.lr, betas=recipe.betas,
                                  eps=recipe.eps)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=round(recipe.warmup_ratio * total_steps),
                              num_training_steps=total_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    kernels = plan_kernels(recipe.sdpa_backend, device.type, attention_dropout(getattr(model, "config", None)))
    generator = torch.Generator().manual_seed(seed)
    result = SeedResult(seed=seed, best_epoch=0, epochs_run=0)
    best_score, best_state, bad_epochs, step = -math.inf, None, 0, 0
    for epoch in range(1, n_epochs + 1):
        model.train()
        losses: list[float] = []
        bar = tqdm(batches(train, recipe.batch_size, collator, shuffle=True, generator=generator,
                           group_by_length=recipe.group_by_length),
                   total=min(steps_per_epoch, total_steps - step), desc=f"seed {seed} epoch {epoch}",
                   disable=not progress, leave=False)
        where = f"fine-tuning seed {seed}, epoch {epoch}"
        for _, batch in bar:
            check(where)
            with autocast(device, recipe.precision), kernels.context(True):
                loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
            step += 1
            if step >= total_steps:
                break
        result.epochs_run = epoch
        record: dict[str, Any] = {"seed": seed, "epoch": epoch, "step": step,
                                  "train_loss": sum(losses) / max(1, len(losses)), "lr": scheduler.get_last_lr()[0]}
        if dev is not None:
            scores, _ = score_split(model, dev, spec, metric, recipe.eval_batch_size, device, collator,
                                    recipe.precision)
            record.update({f"dev_{k}": v for k, v in scores.items()})
            if scores[main_metric] > best_score:
                best_score, bad_epochs, result.best_epoch, result.dev = scores[main_metric], 0, epoch, scores
                if recipe.patience is not None:
                    # CPU copy: the best weights must survive later epochs without holding GPU memory.
                    best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            else:
                bad_epochs += 1
        log(**record)
        result.history.append(record)
        if recipe.patience is not None and bad_epochs >= recipe.patience:
            break
    if recipe.patience is None:
        # Fixed-epoch recipe: the final model is the result (selecting on the eval split would be optimistic).
        result.best_epoch = result.epochs_run
        result.dev = {k[4:]: v for k, v in result.history[-1].items() if k.startswith("dev_")}
    elif best_state is not None:
        model.load_state_dict(best_state)
    return result
