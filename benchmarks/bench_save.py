"""What a stop costs, so that `hydra.launcher.signal_delay_s` comes from a measurement: the time from SLURM's
pre-kill signal to a saved, resumable state, at the BERT-base shape (110M parameters, random weights, fp32).

On a stop request the trainer finishes the optimizer step in flight on every rank, then saves with the function
it always saves with (femlm.train.loop's saver): the resumable `state_<step>/` (model, AdamW moments, scheduler,
scaler, every rank's RNG, counters: `torch.save`, fsync, one atomic rename) and, when the step is also a
milestone (`runtime.save_every`), the `step_<step>/` model (`save_pretrained` + tokenizer + femlm.json, atomic
too); then it hands over to submitit, which requeues the job. The worst case is therefore one step + one
milestone save (model + state). This script times, on this machine and file system: training steps (the first
builds the AdamW moments and is not counted), state-only saves and milestone saves, each several times; it prints
the sizes, the hardware, and the implied minimum

    signal_delay_s >= 1.5 x (slowest step + slowest milestone save) + 30 s

(the factor and the 30 s cover a shared file system's variance, an evaluation batch in flight when the signal
lands, the process exit and submitit's requeue). A GPU run's step at your batch is what counts on a cluster:
give --device cuda --batch/--seq of your runs and --dir on the file system your runs are written to.

Usage: python benchmarks/bench_save.py [--dir DIR] [--device auto|cpu|cuda] [--batch 8] [--seq 128] [--steps 3]
       [--saves 3] [--threads N] [--smoke]
--dir: where the saves go (a fresh subdirectory, removed at the end; default: the system's temporary directory,
often a RAM disk: give the runs' file system, e.g. --dir $FEMLM_RUNS, for a figure that means something there).
The last line is `signal_delay_s >= <s> (step <a> s + milestone save <b> s, x1.5 + 30 s) on <device>`.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402,F401,I001 (puts the repository and tests/ on sys.path)
from helpers.tiny import synthetic_blocks, tiny_tokenizer  # noqa: E402

from femlm.config import FemlmConfig  # noqa: E402
from femlm.masking import MaskingConfig, build_masker  # noqa: E402
from femlm.runs import hardware  # noqa: E402
from femlm.runtime.config import RuntimeConfig  # noqa: E402
from femlm.train.config import TrainerConfig  # noqa: E402
from femlm.train.core import PretrainCore  # noqa: E402
from femlm.train.distributed import DistInfo  # noqa: E402
from femlm.train.loop import Progress, _saver  # noqa: E402

# (layers, hidden, heads, intermediate, vocabulary): BERT-base, and a 1-layer model for --smoke.
SHAPES = {"bert_base": (12, 768, 12, 3072, 30522), "smoke": (1, 32, 2, 64, 512)}
FACTOR, FIXED_S = 1.5, 30.0


def build(shape: str, batch: int, seq: int, steps: int, device: torch.device, workdir: Path) -> tuple[Any, Any, Any]:
    """(config, PretrainCore, tokenizer) at `shape`, fp32, the trainer's own objects."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    layers, hidden, heads, intermediate, vocab = SHAPES[shape]
    tokenizer = tiny_tokenizer(workdir / "tok", words=vocab - 5)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(AutoConfig.for_model(
        "bert", vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate, max_position_embeddings=512), attn_implementation="sdpa")
    cfg = FemlmConfig(command="pretrain-scratch")
    cfg.model.name, cfg.domain.name = shape, "synthetic"
    cfg.trainer = TrainerConfig(batch_size=batch, max_steps=steps + 1, lr=1e-4, warmup_ratio=0.1)
    cfg.runtime = RuntimeConfig(precision="fp32", device=str(device), keep_last=2)
    masker = build_masker(MaskingConfig(), tokenizer.mask_token_id, len(tokenizer), tokenizer.all_special_ids)
    blocks = synthetic_blocks(batch * (steps + 1), seq, vocab, seed=0)
    core = PretrainCore(model, masker, blocks, cfg.trainer, cfg.runtime, seed=0, dist=DistInfo(device=device))
    return cfg, core, tokenizer


def timed(fn: Any, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the saves are written (default: the temp directory)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps (after one uncounted)")
    parser.add_argument("--saves", type=int, default=3, help="timed saves of each kind")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("FEMLM_BENCH_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--smoke", action="store_true", help="a 1-layer model, one step and one save of each kind")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.seq, args.steps, args.saves = 2, 16, 1, 1
    shape = "smoke" if args.smoke else "bert_base"
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as the trainer does (run_pretrain): no per-shard bar in the save
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    root = Path(tempfile.mkdtemp(prefix="femlm-bench-save-", dir=args.dir))
    try:
        cfg, core, tokenizer = build(shape, args.batch, args.seq, args.steps, device, root)
        params = sum(p.numel() for p in core.objective.model.parameters())
        print(f"[{shape}] {params / 1e6:.2f}M parameters, fp32, batch {args.batch} x {args.seq} tokens, "
              f"{device}; saves to {root}")
        print(f"hardware: {hardware()}")
        timed(lambda: core.step(1), device)  # builds the AdamW moments: the state is then its full size
        steps = [timed(lambda s=s: core.step(s), device) for s in range(2, args.steps + 2)]
        info = {"init_from": None, "attn_implementation": "sdpa", "prediction": core.objective.prediction}
        save = _saver(cfg, root, core, tokenizer, info, DistInfo(device=device))
        (root / "checkpoints").mkdir()
        state_s = [timed(lambda i=i: save(Progress(step=100 + i), milestone=False), device)
                   for i in range(args.saves)]
        milestone_s = [timed(lambda i=i: save(Progress(step=200 + i), milestone=True), device)
                       for i in range(args.saves)]
        state_bytes = size(root / "checkpoints" / f"state_{200 + args.saves - 1}")
        model_bytes = size(root / "checkpoints" / f"step_{200 + args.saves - 1}")
        print(f"step s: median {statistics.median(steps):.3f} max {max(steps):.3f} ({len(steps)} steps)")
        print(f"state save s (state_<n>/, {state_bytes / 1e9:.2f} GB): median {statistics.median(state_s):.3f} "
              f"max {max(state_s):.3f} ({state_bytes / 1e6 / statistics.median(state_s):.0f} MB/s)")
        print(f"milestone save s (step_<n>/ {model_bytes / 1e9:.2f} GB + state): median "
              f"{statistics.median(milestone_s):.3f} max {max(milestone_s):.3f}")
        worst = max(steps) + max(milestone_s)
        needed = math.ceil(FACTOR * worst + FIXED_S)
        print(f"signal_delay_s >= {needed} (step {max(steps):.2f} s + milestone save {max(milestone_s):.2f} s, "
              f"x{FACTOR} + {FIXED_S:.0f} s) on {hardware().get('gpus', [hardware()['cpu']])[0]}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
