"""femlm's pre-training step on CUDA: device placement, bf16 autocast, fp16 with a GradScaler, the fused AdamW,
torch.compile, DDP over NCCL (when more than one GPU is visible) and DDP + compile.

Every test is marked `cuda` and skips without a GPU; `make gpu-check` (benchmarks/gpu_check.py) runs them with
`pytest -m cuda` on a GPU machine. The model is a 2-layer BERT without dropout, so a step is deterministic
enough to compare eager with compiled.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from femlm.masking import MaskingConfig, build_masker
from femlm.runtime.config import RuntimeConfig
from femlm.train.config import TrainerConfig
from femlm.train.core import PretrainCore
from femlm.train.distributed import DistInfo
from helpers.tiny import synthetic_blocks

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
VOCAB = 128


def tiny_model() -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("bert", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=128, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")


def core_on(device: str, precision: str = "bf16", compile: bool = False, steps: int = 4,
            info: DistInfo | None = None) -> PretrainCore:
    masker = build_masker(MaskingConfig(), 4, VOCAB, [0, 2, 3])
    info = info or DistInfo(device=torch.device(device))
    runtime = RuntimeConfig(precision=precision, compile=compile)
    return PretrainCore(tiny_model(), masker, synthetic_blocks(64, 32, VOCAB), TrainerConfig(batch_size=8,
                        max_steps=steps, lr=1e-3), runtime, seed=0, dist=info)


def losses(core: PretrainCore, steps: int = 4) -> list[float]:
    return [core.step(s).loss for s in range(1, steps + 1)]


def test_the_model_and_optimizer_state_live_on_the_gpu() -> None:
    core = core_on("cuda:0")
    losses(core, 1)
    assert all(p.is_cuda for p in core.objective.parameters())
    assert all(t.is_cuda for state in core.optimizer.state.values() for t in state.values() if t.dim() > 0)


def test_bf16_autocast_steps_track_fp32() -> None:
    core = core_on("cuda:0", "bf16")
    assert core.amp_dtype == torch.bfloat16 and not core.scaler.is_enabled()
    before = torch.cat([p.detach().flatten() for p in core.objective.parameters()]).clone()
    trace = losses(core)
    assert trace == pytest.approx(losses(core_on("cuda:0", "fp32")), rel=2e-2)  # same batches, same start
    after = torch.cat([p.detach().flatten() for p in core.objective.parameters()])
    assert not torch.equal(before, after)


def test_fp16_steps_with_a_grad_scaler_track_fp32() -> None:
    core = core_on("cuda:0", "fp16")
    assert core.amp_dtype == torch.float16 and core.scaler.is_enabled()
    assert losses(core) == pytest.approx(losses(core_on("cuda:0", "fp32")), rel=2e-2)
    assert math.isfinite(core.scaler.get_scale()) and core.scaler.get_scale() > 0


def test_adamw_is_fused_on_cuda() -> None:
    core = core_on("cuda:0")
    defaults = core.optimizer.defaults
    assert defaults.get("fused") or defaults.get("foreach"), defaults
    assert defaults.get("fused"), "CUDA has torch's fused AdamW: femlm must take it, not the foreach fallback"


def test_compiled_step_matches_eager() -> None:
    eager, compiled = losses(core_on("cuda:0", compile=False)), losses(core_on("cuda:0", compile=True))
    assert compiled == pytest.approx(eager, rel=2e-2)  # bf16: kernels fuse differently


def _ddp_worker(rank: int, world: int, init_file: str, out_dir: str, compile: bool) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        info = DistInfo(rank=rank, world_size=world, local_rank=rank, device=torch.device(f"cuda:{rank}"))
        core = core_on(f"cuda:{rank}", compile=compile, info=info)
        trace = losses(core, 3)
        flat = torch.cat([p.detach().flatten() for p in core.objective.parameters()])
        torch.save({"losses": trace, "params": flat.cpu()}, Path(out_dir) / f"rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.xdist_group("process-groups")
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP over NCCL needs more than one visible GPU")
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_nccl_ddp_ranks_stay_in_step(tmp_path: Path, compile: bool) -> None:
    world = min(torch.cuda.device_count(), 2)
    mp.spawn(_ddp_worker, args=(world, str(tmp_path / "init"), str(tmp_path), compile), nprocs=world, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    assert ranks[0]["losses"] == ranks[1]["losses"]  # the loss is all-reduced: one value for every rank
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])  # averaged gradients keep replicas identical
    assert all(math.isfinite(x) for x in ranks[0]["losses"])
