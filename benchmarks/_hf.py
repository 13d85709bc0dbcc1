"""Hugging Face's side of the training benchmarks: `Trainer` + `DataCollatorForLanguageModeling` (the run_mlm.py
recipe) on the same token blocks as femlm, and HF's attention run under femlm's kernels.

`femlm_attention(kernels)` registers an attention function with transformers' `AttentionInterface` that calls HF's
own SDPA function inside `kernels.context(module.training)` (femlm/runtime/attention.py): the kernel context is
then inside HF's compiled model too, as it is inside femlm's step, so "HF with femlm's attention kernels" compares
the rest of the step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # noqa: F401 (puts the repository and tests/ on sys.path)
import torch

FEMLM_ATTENTION = "femlm_kernels"  # the attn_implementation name femlm_attention registers
LR, WARMUP = 5e-4, 0.1


def femlm_attention(kernels: Any) -> str:
    """Register HF's SDPA attention under femlm's `kernels` (an AttentionKernels) as an attention implementation;
    its name, for `attn_implementation=` or `config._attn_implementation`. The mask is built as for sdpa."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def attention(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with kernels.context(module.training):
            return sdpa_attention_forward(module, *args, **kwargs)

    AttentionInterface.register(FEMLM_ATTENTION, attention)
    AttentionMaskInterface.register(FEMLM_ATTENTION, sdpa_mask)
    return FEMLM_ATTENTION


class _Rows(torch.utils.data.Dataset):
    """HF's training rows without the `datasets` package (a GPU machine may lack it): dicts of Python lists."""

    def __init__(self, ids: list[list[int]], special: list[list[int]]) -> None:
        self.ids, self.special = ids, special

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return {"input_ids": self.ids[i], "special_tokens_mask": self.special[i]}


def hf_dataset(ids: list[list[int]], special: list[list[int]]) -> Any:
    """A `datasets.Dataset` as run_mlm.py uses where the package is installed, else the same rows as _Rows."""
    try:
        from datasets import Dataset
    except ImportError:
        return _Rows(ids, special)
    return Dataset.from_dict({"input_ids": ids, "special_tokens_mask": special})


def hf_trainer(model: torch.nn.Module, tokenizer: Any, blocks: torch.Tensor, out: Path, *, batch: int, micro: int,
               steps: int, precision: str, cuda: bool, compile_model: bool, workers: int,
               callbacks: list[Any]) -> Any:
    """HF `Trainer` + MLM collator over `blocks` (15% Bernoulli masking), AdamW, linear warmup/decay, clipping 1.0:
    `steps` optimizer steps of `batch` rows in micro-batches of `micro` (gradient accumulation), bf16 autocast or
    fp32, `torch_compile` as asked, `workers` DataLoader processes, no length grouping; its printer removed."""
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    special = [[int(t in (tokenizer.cls_token_id, tokenizer.sep_token_id)) for t in row] for row in blocks.tolist()]
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=micro,
                             gradient_accumulation_steps=batch // micro, learning_rate=LR, weight_decay=0.01,
                             adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-6, max_grad_norm=1.0,
                             warmup_steps=int(WARMUP * steps), lr_scheduler_type="linear",
                             logging_steps=max(1, steps // 2), save_strategy="no", report_to="none",
                             use_cpu=not cuda, seed=0, disable_tqdm=True, dataloader_num_workers=workers,
                             bf16=precision == "bf16", torch_compile=compile_model)
    trainer = Trainer(model=model, args=args, train_dataset=hf_dataset(blocks.tolist(), special),
                      data_collator=DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15),
                      callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # its per-log prints are not part of the comparison
    return trainer
