"""The attention probe (about 60 s on one H100/H200): which SDPA kernel a BERT training step runs, compiled and eager,
what it costs, and the dropout rate each kernel really applies.

1. steps  A 2-layer BERT at BERT-base widths (hidden 768, 12 heads x 64, FFN 3072, vocabulary 30,522), 48 x 512,
   bf16 autocast, dropout 0.1, femlm's objective (its sparse last layer: one HF layer, one sparse layer) with AdamW,
   in four variants: compiled with torch's automatic kernel choice (no context), compiled with femlm's training
   kernels (runtime=gpu's [flash, efficient], entered inside the compiled function), eager with cuDNN forced and
   eager with flash forced. Per variant after two warm-up steps: the attention operators and batched matmuls of
   one profiled step (torch.profiler: aten ops and CUDA kernels), the median step time and the peak memory.
   Acceptance for femlm's compiled variant: 0 `aten::bmm`, the fused forward and backward once per layer.
2. dropout  q = k = 0 (uniform attention weights), v = 1, dropout_p = 0.1, 48 x 12 heads x 512 x 64: the output's
   mean is kept / (1 - p), so each kernel's applied drop rate is 1 - mean x (1 - p) (flash, efficient, cuDNN,
   math eager; torch's automatic choice and femlm's kernels compiled). A kernel that quantises p to 1/16 shows
   0.0625 or 0.125; FlashAttention's 8-bit threshold about 0.1016.
3. write  results/gpu/<card>-<date>/attention_probe.json and attention_probe.md (beside gpu-check's files).

`--smoke`: the same code paths on the CPU at tiny sizes in fp32 (compiled through the aot_eager backend; the CPU's
fused kernel takes no dropout and it has no cuDNN, so those variants fail and say so), results under a fresh
temporary directory.

Usage: python benchmarks/attention_probe.py [--smoke] [--out DIR] [--steps 5]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _gpu  # noqa: E402 (puts the repository and tests/ on sys.path)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _gpu_rows import gpu_runtime  # noqa: E402
from _timing import profiled  # noqa: E402

from femlm.runtime.attention import AttentionKernels, plan_kernels  # noqa: E402
from femlm.train.objective import MaskedLMObjective  # noqa: E402
from femlm.train.positions import LabelPositions  # noqa: E402

P = 0.1  # BERT's attention (and hidden) dropout
SIZES = {"gpu": {"layers": 2, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 30522, "batch": 48, "seq": 512},
         "smoke": {"layers": 2, "hidden": 32, "heads": 2, "ffn": 64, "vocab": 512, "batch": 4, "seq": 64}}
FUSED_OPS = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
             "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_for_cpu")


def forced(name: str) -> AttentionKernels:
    """One kernel for every step, dropout or not (the probe bypasses femlm's no-cuDNN rule to measure cuDNN), also
    on the CPU (where femlm itself enforces nothing): a kernel that cannot run fails, and the probe says so."""
    return AttentionKernels((name,), (name,), (name,), enforced=True)


def variants() -> list[tuple[str, bool, AttentionKernels]]:
    """(name, compiled, kernels) of the step variants: femlm's are runtime=gpu's training kernels, enforced."""
    femlm = plan_kernels(gpu_runtime().get("sdpa_backend", "auto"), "cuda", P)
    return [("compiled, torch's automatic choice", True, AttentionKernels()),
            (f"compiled, femlm's kernels ({','.join(femlm.training or ('auto',))})", True, femlm),
            ("eager, cuDNN forced", False, forced("cudnn")), ("eager, flash forced", False, forced("flash"))]


def build(size: dict[str, int], kernels: AttentionKernels, device: str) -> MaskedLMObjective:
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("bert", vocab_size=size["vocab"], hidden_size=size["hidden"],
                                  num_hidden_layers=size["layers"], num_attention_heads=size["heads"],
                                  intermediate_size=size["ffn"], max_position_embeddings=512,
                                  hidden_dropout_prob=P, attention_probs_dropout_prob=P)
    model = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
    return MaskedLMObjective(model, sparse=True, kernels=kernels).to(device).train()


def batch(size: dict[str, int], device: str) -> tuple[torch.Tensor, LabelPositions]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, size["vocab"], (size["batch"], size["seq"]), generator=gen)
    labels = torch.where(torch.rand(ids.shape, generator=gen) < 0.15, ids, torch.full_like(ids, -100))
    return ids.to(device), LabelPositions.from_labels(labels).to(device)


def measure_steps(name: str, compiled: bool, kernels: AttentionKernels, size: dict[str, int], device: str,
                  steps: int) -> dict[str, Any]:
    """Warm-up (compiling), one profiled step, then `steps` timed steps of one variant."""
    cuda = device.startswith("cuda")
    objective = build(size, kernels, device)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-4, fused=cuda)
    forward = torch.compile(objective, dynamic=False, backend="inductor" if cuda else "aot_eager") \
        if compiled else objective
    ids, at = batch(size, device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            loss_sum, count, _ = forward(ids, None, at)
        (loss_sum / count).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    for _ in range(2):
        step()
    sync()
    warm_s = time.perf_counter() - start
    profile: dict[str, Any] = {}
    with profiled(cuda, profile):
        step()
        sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    ops = profile["ops"]
    fused_fw = sum(n for op, n in ops.items() if op in FUSED_OPS)
    fused_bw = sum(n for op, n in ops.items() if op.removesuffix("_backward") in FUSED_OPS and op.endswith("_backward"))
    return {"name": name, "compiled": compiled, "kernels": kernels.describe(), "warmup_s": round(warm_s, 2),
            "step_s": statistics.median(times), "tokens_per_s": size["batch"] * size["seq"] / statistics.median(times),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None, "ops": ops,
            "bmm": ops.get("aten::bmm", 0) + ops.get("aten::baddbmm", 0), "fused_forward": fused_fw,
            "fused_backward": fused_bw, "layers": size["layers"],
            "accepted": ops.get("aten::bmm", 0) == 0 and fused_fw == fused_bw == size["layers"]}


def drop_rate(kernels: AttentionKernels, compiled: bool, size: dict[str, int], device: str, repeats: int) -> float:
    """The dropout rate a kernel applies: q = k = 0, v = 1, so the output's mean is kept / (1 - P)."""
    cuda = device.startswith("cuda")
    shape = (size["batch"], size["heads"], size["seq"], size["hidden"] // size["heads"])
    dtype = torch.bfloat16 if cuda else torch.float32
    q = torch.zeros(shape, dtype=dtype, device=device, requires_grad=True)
    v = torch.ones(shape, dtype=dtype, device=device, requires_grad=True)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with kernels.context(True):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=P)

    fn = torch.compile(attend, dynamic=False, backend="inductor" if cuda else "aot_eager") if compiled else attend
    total = 0.0
    for _ in range(repeats):
        total += float(fn(q, q, v).detach().double().mean())
    return 1.0 - total / repeats * (1.0 - P)


def reason(err: BaseException, limit: int) -> str:
    """An error in one line: its type and its first two message lines (a compile error's cause is the second)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()][:2]
    return f"{type(err).__name__}: {' / '.join(lines)}"[:limit]


def write(out: Path, record: dict[str, Any]) -> None:
    lines = [f"# Attention probe: {record['card']} ({record['date']})", "",
             f"torch {record['torch']}, CUDA {record['cuda']}, cuDNN {record['cudnn']}, transformers "
             f"{record['transformers']}; commit {record['commit']}; model {record['size']}, dropout {P}; "
             f"{record['wall_s']} s", "",
             "| variant | step s | tokens/s | peak GiB | bmm | fused fwd / bwd (layers) | accepted | operators of one step |",
             "|---|---|---|---|---|---|---|---|"]
    for v in record["steps"]:
        if "error" in v:
            lines.append(f"| {v['name']} | — | — | — | — | — | — | FAILED: {v['error']} |")
            continue
        peak = f"{v['peak_gib']:.2f}" if v["peak_gib"] is not None else "—"
        ops = ", ".join(f"{k.removeprefix('aten::')} x{n}" for k, n in v["ops"].items())
        lines.append(f"| {v['name']} | {v['step_s']:.4f} | {v['tokens_per_s']:,.0f} | {peak} | {v['bmm']} | "
                     f"{v['fused_forward']} / {v['fused_backward']} ({v['layers']}) | {v['accepted']} | {ops} |")
    lines += ["", f"Dropout applied at p = {P} (q = k = 0, v = 1; drop = 1 - mean x (1 - p)):", ""]
    lines += [f"- {name}: {rate if isinstance(rate, str) else f'{rate:.4f}'}" for name, rate in record["dropout"].items()]
    _gpu.write_texts(out, {"attention_probe.json": json.dumps(record, indent=1) + "\n",
                           "attention_probe.md": "\n".join(lines) + "\n"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the same code paths on the CPU at tiny sizes")
    parser.add_argument("--out", type=Path, help="where <card>-<date>/ is written (default: results/gpu; --smoke: a "
                        "fresh temporary directory)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant (after 2 warm-up steps)")
    parser.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        print("attention_probe: no CUDA device is visible; --smoke runs the code paths on the CPU", file=sys.stderr)
        return 2
    os.environ.setdefault("WANDB_MODE", "disabled")
    import transformers

    from femlm.runs import git_commit

    start = time.perf_counter()
    device, size = ("cuda", SIZES["gpu"]) if cuda else ("cpu", SIZES["smoke"])
    card = torch.cuda.get_device_name(0) if cuda else "cpu-smoke"
    date = datetime.date.today().isoformat()
    parent = args.out or (Path(tempfile.mkdtemp(prefix="attention-probe-")) if args.smoke else
                          _gpu.ROOT / "results" / "gpu")
    out = _gpu.fresh_dir(parent / f"{_gpu.slug(card)}-{date}", owner="attention_probe.json")
    record: dict[str, Any] = {"card": card, "date": date, "commit": args.commit or git_commit(), "smoke": args.smoke,
                              "torch": torch.__version__, "cuda": torch.version.cuda,
                              "cudnn": torch.backends.cudnn.version() if cuda else None,
                              "transformers": transformers.__version__, "size": size, "dropout_p": P, "steps": [],
                              "dropout": {}}
    print(f"attention probe on {card}: torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{record['cudnn']}; {size['layers']}-layer BERT {size['hidden']} wide, {size['batch']} x {size['seq']}, "
          f"{'bf16' if cuda else 'fp32'}, dropout {P}", flush=True)
    for name, compiled, kernels in variants():
        torch._dynamo.reset()
        try:
            row = measure_steps(name, compiled, kernels, size, device, args.steps)
        except Exception as err:  # noqa: BLE001 - a kernel that cannot run is a finding: recorded, the rest run
            row = {"name": name, "compiled": compiled, "error": reason(err, 300)}
            traceback.print_exc()
        record["steps"].append(row)
        if "error" in row:
            print(f"[{name}] FAILED: {row['error']}", flush=True)
        else:
            peak = f"{row['peak_gib']:.2f} GiB" if row["peak_gib"] is not None else "n/a on the CPU"
            print(f"[{name}] step {row['step_s'] * 1e3:.1f} ms ({row['tokens_per_s']:,.0f} tokens/s), peak {peak}, "
                  f"bmm x{row['bmm']}, fused forward x{row['fused_forward']} backward x{row['fused_backward']} for "
                  f"{row['layers']} layers, accepted: {row['accepted']}; ops: {row['ops']}", flush=True)
        write(out, {**record, "wall_s": round(time.perf_counter() - start, 1)})
    probes = [(f"eager {n}", forced(n), False) for n in ("flash", "efficient", "cudnn", "math")]
    probes += [(name, kernels, True) for name, compiled, kernels in variants() if compiled]
    for name, kernels, compiled in probes:
        torch._dynamo.reset()
        try:
            rate: float | str = drop_rate(kernels, compiled, size, device, repeats=4 if cuda else 2)
        except Exception as err:  # noqa: BLE001 - e.g. no such kernel for dropout here: say so
            rate = f"not available: {reason(err, 200)}"
        record["dropout"][name] = rate
        print(f"dropout applied, {name}: {rate if isinstance(rate, str) else f'{rate:.4f}'} (asked {P})", flush=True)
        write(out, {**record, "wall_s": round(time.perf_counter() - start, 1)})  # a cut run keeps what it measured
    record["wall_s"] = round(time.perf_counter() - start, 1)
    write(out, record)
    print(f"attention probe done in {record['wall_s']:.0f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
