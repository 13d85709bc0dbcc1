"""The compute plan (femlm.train.estimate): its FLOPs are what a run records, its memory estimate is near what
real CPU steps hold, and its GPU hours follow from the stated peak and MFU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from femlm.errors import UserError
from femlm.runtime.config import RuntimeConfig
from femlm.train.estimate import (
    GPU_PEAK_BF16,
    PLAN_GPUS,
    compute_plan,
    masked_per_row,
    micro_batch_memory,
    model_shape,
)

REPO = Path(__file__).resolve().parents[1]
# The estimate against the peak resident memory of two real fp32 CPU steps: measured / estimated within this
# factor either way (measured here: 1.20 for the tiny shape, 1.09 for BERT-base; the rest is the allocator's and
# the process's own memory).
FACTOR = 1.5
SHAPES = {
    # the tiny preset's model (femlm/conf/model/tiny.yaml, 8k WordPiece vocabulary), a 32 x 128 batch
    "tiny": ({"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024,
              "vocab_size": 8192}, 32, 128),
    # BERT-base (transformers' BertConfig defaults: 12 x 768, vocab 30,522), one cheap micro-batch of 2 x 128
    "bert-base": ({}, 2, 128),
}


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc peak-RSS reset")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "bert-base" else n
                                  for n in sorted(SHAPES)])  # bert-base: ~25 s, the slow tier
def test_memory_estimate_is_near_the_measured_cpu_peak(name: str) -> None:
    from transformers import AutoConfig

    arch, rows, seq = SHAPES[name]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "helpers.peak_memory", json.dumps(arch), str(rows), str(seq)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.splitlines()[-1])
    shape = model_shape(AutoConfig.for_model("bert", **arch))
    # fp32 values; a CPU runs attention with dropout through the math kernel, which keeps the probabilities
    estimate = micro_batch_memory(shape, rows, seq, measured["masked"], value_bytes=4, fused_attention=False)
    ratio = measured["peak_bytes"] / estimate["total"]
    assert 1 / FACTOR < ratio < FACTOR, (name, measured, estimate, ratio)


def _tiny(tmp_path: Path, **settings):
    from transformers import AutoConfig

    from femlm.train.inputs import make_masker
    from helpers.tiny import TINY_ARCH, tiny_config, tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    cfg = tiny_config(tmp_path / "tok", **settings)
    arch = {k: v for k, v in TINY_ARCH.items() if k != "model_type"}
    return cfg, tokenizer, AutoConfig.for_model("bert", vocab_size=len(tokenizer), **arch), make_masker(cfg, tokenizer)


@pytest.mark.parametrize("mode", ["same_rows", "same_sequences"])
def test_planned_flops_are_what_the_run_records(tmp_path: Path, mode: str) -> None:
    """Exact FE-MLM masking: the plan's FLOPs equal the sum of the per-step counts the training loop records."""
    from transformers import AutoModelForMaskedLM

    from femlm.train.core import PretrainCore
    from helpers.tiny import synthetic_blocks

    cfg, tokenizer, config, masker = _tiny(tmp_path, max_steps=4, equal_compute=mode)
    plan = compute_plan(cfg, model_shape(config), masked_per_row(masker, tokenizer, cfg.data.block_size))
    core = PretrainCore(AutoModelForMaskedLM.from_config(config), masker,
                        synthetic_blocks(64, cfg.data.block_size, len(tokenizer)), cfg.trainer, cfg.runtime, cfg.seed)
    recorded = 0.0
    for step in range(1, core.max_steps + 1):
        stats = core.step(step)
        recorded += core.flops.per_step(stats.rows, core.block_size, stats.masked_tokens)  # as loop.py records
    assert plan["steps"] == core.max_steps and plan["train_flops"] == pytest.approx(recorded, rel=1e-9)
    assert plan["params"] == sum(p.numel() for p in core.objective.model.parameters())


def test_gpu_hours_follow_from_peak_and_mfu(tmp_path: Path) -> None:
    cfg, tokenizer, config, masker = _tiny(tmp_path)
    shape, masked = model_shape(config), masked_per_row(masker, tokenizer, cfg.data.block_size)
    plans = {}
    for mfu in (0.3, 0.6):
        cfg.runtime.assumed_mfu = mfu
        plans[mfu] = compute_plan(cfg, shape, masked)
    assert set(plans[0.3]["gpu_hours"]) == set(PLAN_GPUS)
    for gpu in PLAN_GPUS:
        peak = GPU_PEAK_BF16[gpu]
        expected = plans[0.3]["train_flops"] / (peak * 0.3) / 3600
        assert plans[0.3]["gpu_hours"][gpu] == pytest.approx(expected, abs=0.05)
        assert plans[0.6]["gpu_hours"][gpu] == pytest.approx(plans[0.3]["gpu_hours"][gpu] / 2, abs=0.05)


def test_memory_grows_with_the_micro_batch_and_sparse_prediction_saves_the_logits(tmp_path: Path) -> None:
    from transformers import AutoConfig

    shape = model_shape(AutoConfig.for_model("bert"))  # BERT-base
    one, two = (micro_batch_memory(shape, rows, 512, 77 * rows) for rows in (8, 16))
    assert two["model_states"] == one["model_states"] == 16 * shape.params
    assert two["activations"] == pytest.approx(2 * one["activations"])
    dense = micro_batch_memory(shape, 8, 512, 77 * 8, sparse_prediction=False)
    assert dense["mlm_head"] == pytest.approx(one["mlm_head"] * 512 / 77)
    frozen = model_shape(AutoConfig.for_model("bert"), trainable=["cls.*"])
    assert frozen.trainable < shape.trainable and frozen.params == shape.params


def test_masked_targets_per_row_come_from_the_runs_masker(tmp_path: Path) -> None:
    cfg, tokenizer, _, masker = _tiny(tmp_path)
    n_valid = cfg.data.block_size - 2  # [CLS] ... [SEP]
    assert masked_per_row(masker, tokenizer, cfg.data.block_size) == masker.budget(torch.tensor([n_valid])).item()


def test_assumed_mfu_outside_zero_one_is_one_line() -> None:
    for bad in (0.0, 1.5):
        with pytest.raises(UserError, match=r"runtime.assumed_mfu=.*\(0, 1\]"):
            RuntimeConfig(assumed_mfu=bad).validate()
