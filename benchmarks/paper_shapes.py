"""Paper-scale shapes through the real pre-training path: BERT-base and RoBERTa-base built from the mirror's
config.json and tokenizers (random weights, init=scratch), sequence 512, FE-MLM with K=4 splits, a few real
optimizer steps of `PretrainCore` (what `run_pretrain` drives). Prints step time and peak memory.

This proves the paper's shapes run end to end (position limits incl. RoBERTa's 514 -> 512 offset, vocab sizes,
FE masking at n=512); it is not a throughput benchmark.

Usage: FEMLM_MIRROR=/path/to/shared/data python benchmarks/paper_shapes.py [--rows 4] [--steps 3] [--threads 2]
       [--smoke]  (BERT-base only, one step on 64-token blocks: checks the path runs, in seconds)
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import config  # noqa: E402,I001 (puts the repository on sys.path)

from femlm.runtime.device import pick_device  # noqa: E402
from femlm.train.distributed import DistInfo  # noqa: E402

MODELS = ("bert_base", "roberta_base")  # femlm/conf/model options: config_name and tokenizer from the mirror


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def run_shape(name: str, rows: int, steps: int, device: torch.device, workdir: Path, seq: int = 512) -> None:
    from femlm.train import inputs
    from femlm.train.core import PretrainCore

    # The paper's model at its true shape, built from scratch (random weights): pretrain-scratch's path.
    cfg = config("pretrain-scratch", f"model={name}", "masking=fe_subword", f"data.block_size={seq}",
                 f"trainer.batch_size={rows}", f"trainer.max_steps={steps}", "download.offline=true")
    torch.manual_seed(0)
    start = time.perf_counter()
    resolved, model, _ = inputs.tokenizer_and_model(cfg, workdir, DistInfo(device=device))
    tokenizer = resolved.tokenizer
    build_s = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    # Random ids from the ordinary vocabulary, framed like real blocks (<s> ... </s> / [CLS] ... [SEP]).
    gen = torch.Generator().manual_seed(0)
    specials = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in specials])
    body = ordinary[torch.randint(len(ordinary), (16, seq - 2), generator=gen)]
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    last = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    blocks = torch.cat([torch.full((16, 1), first), body, torch.full((16, 1), last)], 1).to(torch.int32)
    core = PretrainCore(model, inputs.make_masker(cfg, tokenizer), blocks, cfg.trainer, cfg.runtime, cfg.seed,
                        DistInfo(device=device))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        stats = core.step(step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(stats.loss)
    memory = (f"peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB" if device.type == "cuda"
              else f"peak RSS {peak_rss_gib():.2f} GiB")
    print(f"[{name}] {type(model).__name__} params={params / 1e6:.1f}M vocab={len(tokenizer)} "
          f"positions={model.config.max_position_embeddings} seq={seq} rows={rows} "
          f"(= {core.rank_sequences} sequences x K={core.masker.num_copies}) build {build_s:.1f}s")
    print(f"[{name}] step s: {' '.join(f'{t:.2f}' for t in times)} | loss: {' '.join(f'{v:.3f}' for v in losses)}"
          f" | masked/step={stats.masked_tokens} | {memory} | precision={core.amp_dtype or 'fp32'} "
          f"device={device}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4, help="rows per step (a multiple of K=4)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--models", default="bert_base,roberta_base")
    parser.add_argument("--smoke", action="store_true", help="BERT-base, one step of 64-token blocks")
    args = parser.parse_args()
    seq = 512
    if args.smoke:
        args.models, args.steps, seq = "bert_base", 1, 64
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if not os.environ.get("FEMLM_MIRROR"):
        default = Path(__file__).resolve().parents[2] / "shared" / "data"
        if default.is_dir():
            os.environ["FEMLM_MIRROR"] = str(default)
    device = pick_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            run_shape(name, args.rows, args.steps, device, Path(tmp), seq)


if __name__ == "__main__":
    main()
