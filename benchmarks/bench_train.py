"""Training throughput: femlm's pre-training core vs Hugging Face `Trainer` + `DataCollatorForLanguageModeling`
(the run_mlm.py recipe), on the same model, the same initial weights and the same token blocks.

The two run interleaved, step by step, in one process (an HF `TrainerCallback` runs one femlm step after each
HF step), so load from other processes slows both alike. Each side's time is its whole step: HF's includes its
DataLoader + collator, femlm's its masking. Both use fp32 (--precision bf16: both bf16 autocast; femlm's
runtime.precision=auto picks bf16 on CPUs with AMX, HF's Trainer stays fp32 unless told), AdamW, linear
warmup/decay, grad clip 1.0; femlm masks i.i.d. 15% like the collator (mlm_bernoulli) so the losses are comparable.
The allocator setting is process-wide, so it is the same for both sides: --allocator tuned (default) is femlm's
runtime.keep_freed_memory=true (femlm/train/host_memory.py), --allocator default is plain glibc malloc, as
run_mlm.py runs. The ratio under `tuned` is therefore what sparse prediction and the rest of the core gain alone.

MFU (PaLM's definition) = tokens/s x model FLOPs per token / the machine's measured matmul FLOP/s, with ONE
model-FLOPs figure for both sides: the work the MLM objective defines, i.e. the dense encoder at every token
plus the MLM head at the masked tokens (femlm/train/flops.py: 6*N_enc*tokens + 12*layers*hidden*seq*tokens +
6*N_head*predicted). HF's head at unmasked positions and the part of femlm's last layer it skips are not
counted, so the MFU ratio is the throughput ratio. HFU (hardware FLOPs utilisation) counts what each side
executes instead: HF's full head at every token; femlm's sparse head and sparse last layer.

Usage: python benchmarks/bench_train.py [--threads 2] [--steps-tiny 24] [--steps-base 8] [--shapes base,tiny30k,tiny]
       [--allocator tuned|default] [--precision fp32|bf16] [--compile] [--smoke]
The last line is `tokens/s femlm=<a> hf=<b> ratio=<a/b> mfu=<m>` for the tiny shape.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402,F401,I001 (puts the repository and tests/ on sys.path)
from helpers.tiny import synthetic_blocks, tiny_tokenizer  # noqa: E402

from femlm.masking import MaskingConfig, build_masker  # noqa: E402
from femlm.runtime.config import RuntimeConfig  # noqa: E402
from femlm.runtime.host_memory import keep_freed_memory  # noqa: E402
from femlm.train.config import TrainerConfig  # noqa: E402
from femlm.train.core import PretrainCore  # noqa: E402
from femlm.train.distributed import DistInfo  # noqa: E402
from femlm.train.flops import flop_counts, measured_matmul_flops  # noqa: E402
from _hf import LR, WARMUP, hf_trainer  # noqa: E402,I001
from _timing import Schedule, profiled  # noqa: E402


@dataclass
class Shape:
    name: str
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    model_type: str = "bert"  # HF's model_type (the GPU study's row: its experiment file's layers)
    extra: tuple[tuple[str, Any], ...] = ()  # further HF config keys (e.g. ModernBERT's local_attention)


# The special ids of helpers.tiny's tokenizer ([PAD], [UNK], [CLS], [SEP], [MASK]): ModernBERT's config defaults
# name ids of its own 50k vocabulary (femlm.models.load.scratch_config sets them from the tokenizer the same way).
SPECIAL_IDS = {"modernbert": {"pad_token_id": 0, "cls_token_id": 2, "sep_token_id": 3, "bos_token_id": 2,
                              "eos_token_id": 3}}

SHAPES = {
    "base": Shape("bert_base", 12, 768, 12, 3072, 30522, 8, 128),
    # The tiny model with BERT's 30,522-token vocabulary (the shape of the issue's reference measurement),
    # where the full-vocabulary head dominates HF's step; and with femlm's 8k tiny-preset vocabulary.
    "tiny30k": Shape("tiny_vocab30k", 4, 256, 4, 1024, 30522, 32, 128),
    "tiny": Shape("tiny", 4, 256, 4, 1024, 8192, 32, 128),
    # --smoke: every code path in seconds, no meaningful figure (tests/test_benchmarks.py runs it).
    "smoke": Shape("smoke", 1, 32, 2, 64, 512, 4, 32),
}


def model_config(shape: Shape) -> Any:
    """The HF config of a shape (no weights): BERT unless `shape.model_type` names other layers."""
    from transformers import AutoConfig

    return AutoConfig.for_model(shape.model_type, vocab_size=shape.vocab, hidden_size=shape.hidden,
                                num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                                intermediate_size=shape.intermediate, max_position_embeddings=512,
                                **SPECIAL_IDS.get(shape.model_type, {}), **dict(shape.extra))


def build_model(shape: Shape, attn_implementation: str = "sdpa") -> torch.nn.Module:
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(0)
    return AutoModelForMaskedLM.from_config(model_config(shape), attn_implementation=attn_implementation)


def bench_shape(shape: Shape, steps: int, warmup: int, matmul_flops: float, workdir: Path,
                precision: str = "fp32", compile_femlm: bool = False, keep_freed: bool = True,
                device: str = "cpu", compile_hf: bool = False, gpu: GpuOptions | None = None) -> dict[str, Any]:
    """Both sides' tokens/s, MFU and HFU (against `matmul_flops`, the peak FLOP/s), and the ratio. On CUDA each
    timing waits for the GPU, and `femlm_peak_bytes` is femlm's peak memory: its model and optimizer states plus
    the most its step held at once (HF's model, resident beside it, excluded). `compile_hf`: TrainingArguments'
    torch_compile (--compile compiles femlm's side only). `gpu`: benchmarks/gpu_check.py's options (masking arm,
    micro-batches, HF's DataLoader workers and attention, block timing, a profiled step, a probe around each step,
    one side alone); None: this script's own runs. The result also holds each side's per-step seconds of the synced
    steps (`femlm_times`, `hf_times`, warm-up included), its timed blocks (`*_blocks`: first step, last step,
    seconds) and the attention operators of its profiled step (`*_ops`)."""
    from transformers import TrainerCallback

    gpu = gpu or GpuOptions()
    sched = Schedule(warmup, steps, gpu.block, gpu.profile)
    total = sched.total
    tokenizer = tiny_tokenizer(workdir / f"tok_{shape.name}", words=shape.vocab - 5)
    assert len(tokenizer) == shape.vocab
    blocks = synthetic_blocks(shape.batch * total * 2, shape.seq, shape.vocab, seed=0)
    model = build_model(shape, gpu.hf_attention or "sdpa")
    counts = flop_counts(model)
    cuda = torch.device(device).type == "cuda"
    times: dict[str, Any] = {"femlm": [], "hf": [], "femlm_blocks": [], "hf_blocks": [], "femlm_ops": {},
                             "hf_ops": {}}
    femlm_stats: list[Any] = []  # read after the run: a read of a device value would wait for the GPU
    peak = [0]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    # (a) femlm: the PretrainCore that run_pretrain drives
    core = None
    if gpu.femlm:
        masking = gpu.masking or MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.15)
        masker = build_masker(masking, tokenizer.mask_token_id, len(tokenizer), tokenizer.all_special_ids)
        tcfg = TrainerConfig(batch_size=shape.batch, max_steps=total, lr=LR, warmup_ratio=WARMUP)
        runtime = RuntimeConfig(precision=precision, compile=compile_femlm, keep_freed_memory=keep_freed,
                                micro_batch_size=gpu.femlm_micro, **gpu.runtime)
        same = copy.deepcopy(model) if gpu.hf_attention is None else build_model(shape)  # the same weights
        core = PretrainCore(same, masker, blocks, tcfg, runtime, seed=0, dist=DistInfo(device=torch.device(device)))
    if gpu.probe is not None:
        gpu.probe.start(core, total)

    def femlm_step(step: int, wait: bool = True, timed: bool = True) -> None:
        """One femlm step; `wait`: synchronised, its seconds and peak memory recorded when `timed`."""
        if core is None:
            return
        if cuda and wait:
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        done = sync if wait else (lambda: None)
        if gpu.probe is not None:
            stats = gpu.probe.femlm_step(core, step, done)
        else:
            stats = core.step(step)
            done()
        if wait and timed:
            times["femlm"].append(time.perf_counter() - start)
        if cuda and wait and timed and step > warmup:  # the step's own peak on top of what was resident + states
            peak[0] = max(peak[0], torch.cuda.max_memory_allocated(device) - before + state_bytes(core))
        femlm_stats.append(stats)

    def femlm_at(step: int) -> None:
        """femlm's share of HF step `step` (or of step `step` alone): one synced step, a block, or the profile."""
        phase, first = sched.phase(step), sched.block_start(step)
        if phase == "block" and first is not None and core is not None:
            start = time.perf_counter()
            for s in range(first, step + 1):
                femlm_step(s, wait=False)
            sync()
            times["femlm_blocks"].append((first, step, time.perf_counter() - start))
        elif phase == "profile" and core is not None:
            with profiled(cuda, times["femlm_ops"]):
                femlm_step(step, timed=False)
        elif phase in ("warmup", "synced"):
            femlm_step(step)

    class Interleave(TrainerCallback):
        mark = 0.0
        prof: Any = None

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN201
            self.mark = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN201
            if sched.phase(state.global_step + 1) == "profile":
                self.prof = profiled(cuda, times["hf_ops"])
                self.prof.__enter__()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN201
            step = state.global_step
            phase, first = sched.phase(step), sched.block_start(step)
            if gpu.probe is not None:
                gpu.probe.hf_done(step)
            if phase == "block" and first is None:
                return  # inside a block: no wait, the next HF step follows
            sync()
            elapsed = time.perf_counter() - self.mark
            if phase == "profile":
                self.prof.__exit__(None, None, None)
            elif phase == "block":
                times["hf_blocks"].append((first, step, elapsed))
            else:
                times["hf"].append(elapsed)
            femlm_at(step)
            self.mark = time.perf_counter()

    # (b) HF: Trainer + DataCollatorForLanguageModeling, as examples/pytorch/language-modeling/run_mlm.py
    hf_losses = []
    if gpu.hf:
        trainer = hf_trainer(copy.deepcopy(model), tokenizer, blocks, workdir / f"hf_{shape.name}",
                             batch=shape.batch, micro=gpu.hf_micro or shape.batch, steps=total, precision=precision,
                             cuda=cuda, compile_model=compile_hf, workers=gpu.hf_workers, callbacks=[Interleave()])
        trainer.train()
        hf_losses = [(r["step"], r["loss"]) for r in trainer.state.log_history if "loss" in r and "step" in r]
    else:  # femlm alone (gpu_check's FE and study rows: HF has no such arm)
        for step in range(1, total + 1):
            femlm_at(step)
    if core is not None:
        core.close()  # the batch producer's thread
    femlm_losses = [stats.loss for stats in femlm_stats]
    femlm_predicted = [stats.masked_tokens for stats in femlm_stats]

    tokens = shape.batch * shape.seq
    fem_s = sum(times["femlm"][warmup:]) / steps if times["femlm"] else math.nan
    hf_s = sum(times["hf"][warmup:]) / steps if times["hf"] else math.nan
    measured = femlm_predicted[warmup:warmup + steps]
    predicted = sum(measured) / steps if measured else 0.15 * tokens
    sparse_last = core is not None and core.objective.last_layer is not None
    model_flops = counts.per_step(shape.batch, shape.seq, int(predicted))  # the same for both sides
    fem_executed = counts.per_step(shape.batch, shape.seq, int(predicted), sparse_last_layer=sparse_last)
    hf_executed = counts.per_step(shape.batch, shape.seq, tokens)
    out = {"femlm": tokens / fem_s, "hf": tokens / hf_s, "mfu": model_flops / fem_s / matmul_flops,
           "hf_mfu": model_flops / hf_s / matmul_flops, "hfu": fem_executed / fem_s / matmul_flops,
           "hf_hfu": hf_executed / hf_s / matmul_flops, "predicted": predicted, "femlm_peak_bytes": peak[0],
           "femlm_times": times["femlm"], "hf_times": times["hf"], "model_flops": model_flops,
           "femlm_executed_flops": fem_executed, **{k: times[k] for k in
                                                    ("femlm_blocks", "hf_blocks", "femlm_ops", "hf_ops")},
           "attention": core.attention_record() if core is not None else None}
    out["ratio"] = out["femlm"] / out["hf"]
    prefix = f"[{shape.name} b={shape.batch} L={shape.seq}]"
    print(f"{prefix} step s femlm={fem_s:.3f} hf={hf_s:.3f} (mean of {steps} after {warmup} warm-up)")
    start = 0
    for step, loss in hf_losses if core is not None else []:  # HF logs the mean over its logging window
        mine = sum(femlm_losses[start:step]) / (step - start)
        print(f"{prefix} loss steps {start + 1}-{step} femlm={mine:.4f} hf={loss:.4f}")
        start = step
    print(f"{prefix} GFLOP/step model={model_flops / 1e9:.1f} executed femlm={fem_executed / 1e9:.1f} "
          f"hf={hf_executed / 1e9:.1f}; mfu femlm={out['mfu']:.3f} hf={out['hf_mfu']:.3f}; "
          f"hfu femlm={out['hfu']:.3f} hf={out['hf_hfu']:.3f}")
    print(f"{prefix} tokens/s femlm={out['femlm']:.0f} hf={out['hf']:.0f} ratio={out['ratio']:.2f} "
          f"mfu={out['mfu']:.3f}", flush=True)
    return out


@dataclass
class GpuOptions:
    """What benchmarks/gpu_check.py sets beyond this script's own runs (the defaults are this script's)."""

    masking: MaskingConfig | None = None  # femlm's arm (None: mlm_bernoulli 15%, like HF's collator)
    femlm_micro: int | None = None  # runtime.micro_batch_size (None: the whole batch at once)
    hf_micro: int | None = None  # HF's per-device batch; gradient accumulation makes up the batch
    hf_workers: int = 0  # HF's dataloader_num_workers
    probe: Any = None  # start(core, steps), femlm_step(core, step, sync) -> stats, hf_done(step)
    hf: bool = True  # False: femlm's steps alone (no HF side; its figures are NaN)
    femlm: bool = True  # False: HF's steps alone (no femlm side; its figures are NaN)
    hf_attention: str | None = None  # HF's attn_implementation (None: sdpa; _hf.femlm_attention's name)
    block: int = 1  # > 1: after the synced steps as many again, timed in blocks of this many (_timing.Schedule)
    profile: bool = False  # one more step per side under torch.profiler: its attention operators
    runtime: dict[str, Any] = field(default_factory=dict)  # more runtime keys (gpu_check: runtime=gpu's)


def state_bytes(core: PretrainCore) -> int:
    """Bytes of the core's parameters and optimizer state (gradients are freed between steps)."""
    tensors = list(core.objective.parameters())
    tensors += [t for state in core.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=int(os.environ.get("FEMLM_BENCH_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--steps-tiny", type=int, default=24)
    parser.add_argument("--steps-base", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--shapes", default="base,tiny30k,tiny",
                        help="comma list of base, tiny30k, tiny (tiny is printed last)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="both sides: fp32 or bf16 autocast (femlm's auto picks bf16 on AMX CPUs)")
    parser.add_argument("--compile", action="store_true", help="femlm side with runtime.compile=true")
    parser.add_argument("--allocator", choices=("tuned", "default"), default="tuned",
                        help="both sides: glibc malloc keeping freed memory (femlm's default) or as it comes")
    parser.add_argument("--smoke", action="store_true", help="a 1-layer model, 2 steps: checks it runs (seconds)")
    parser.add_argument("--no-prefetch", dest="prefetch", action="store_false",
                        help="femlm side with runtime.prefetch=false (the next batch built inside the step)")
    args = parser.parse_args()
    if args.smoke:
        args.shapes, args.steps_tiny, args.warmup = "smoke", 1, 1
    torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "disabled")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    keep_freed = args.allocator == "tuned"
    if keep_freed and not keep_freed_memory():
        print("note: this C library is not glibc (or refused mallopt): --allocator tuned changes nothing here")
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    matmul = measured_matmul_flops("cpu", dtype, n=256 if args.smoke else 2048, seconds=0.1 if args.smoke else 3.0)
    print(f"threads={args.threads} cpus={os.cpu_count()} load1={load:.2f} torch={torch.__version__} "
          f"precision={args.precision} compile={args.compile} allocator={args.allocator} prefetch={args.prefetch} "
          f"measured {args.precision} matmul {matmul / 1e9:.1f} GFLOP/s")
    names = [n for n in ("base", "tiny30k", "tiny", "smoke") if n in args.shapes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            steps = args.steps_tiny if name.startswith("tiny") else args.steps_base
            results[name] = bench_shape(SHAPES[name], steps, args.warmup, matmul, Path(tmp), args.precision,
                                        args.compile, keep_freed, gpu=GpuOptions(runtime={"prefetch": args.prefetch}))
    last = results[names[-1]]
    print(f"tokens/s femlm={last['femlm']:.0f} hf={last['hf']:.0f} ratio={last['ratio']:.2f} mfu={last['mfu']:.3f}")


if __name__ == "__main__":
    main()
