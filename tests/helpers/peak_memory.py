"""Measure the peak resident memory of real fp32 CPU training steps (`PretrainCore`, MLM masking, sparse
prediction, AdamW) of a BERT masked LM, for tests/test_train_estimate.py. Run as a script in a fresh process, so
no earlier test's freed memory hides what the steps allocate:

    python -m helpers.peak_memory '{"hidden_size": 256, ...}' ROWS SEQ   ->  one JSON line

Linux only: it resets the process's peak RSS (VmHWM) through /proc/self/clear_refs after a warm-up step of a
small model (so the kernels' code pages are already resident), then builds the model and runs two steps: the
first allocates the AdamW moments, the second runs with them in place. The peak counts everything the steps
hold: weights, gradients, optimizer state, activations, the head's logits and the batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _steps(arch: dict, rows: int, seq: int, steps: int) -> tuple[torch.nn.Module, int]:
    from transformers import AutoConfig, AutoModelForMaskedLM

    from femlm.masking import MaskingConfig, build_masker
    from femlm.runtime.config import RuntimeConfig
    from femlm.train.config import TrainerConfig
    from femlm.train.core import PretrainCore
    from helpers.tiny import synthetic_blocks

    config = AutoConfig.for_model("bert", **arch)
    model = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
    masker = build_masker(MaskingConfig(), 4, config.vocab_size, [0, 1, 2, 3, 4])  # MLM, 15%
    core = PretrainCore(model, masker, synthetic_blocks(rows, seq, config.vocab_size), TrainerConfig(
        batch_size=rows, max_steps=steps), RuntimeConfig(precision="fp32", threads=1), seed=0)
    masked = 0
    for step in range(1, steps + 1):
        masked = core.step(step).masked_tokens
    return model, masked


def main() -> None:
    arch, rows, seq = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    _steps({"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 64}, 4, 32, 2)  # warm-up: kernels and libraries loaded
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    base = _rss("VmRSS")
    _, masked = _steps(arch, rows, seq, 2)
    print(json.dumps({"peak_bytes": _rss("VmHWM") - base, "masked": masked}))


if __name__ == "__main__":
    main()
