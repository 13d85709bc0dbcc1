"""Two CPU processes (gloo): DDP gradients equal a single process's on the same global batch, and a whole
`run_pretrain` under 2 ranks trains, with rank 0 alone writing into the run directory."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from femlm.masking import MaskingConfig, build_masker, make_generator
from femlm.runtime.config import RuntimeConfig
from femlm.train.config import TrainerConfig
from femlm.train.core import PretrainCore
from femlm.train.distributed import DistInfo
from helpers.tiny import synthetic_blocks

# These tests open TCP ports for their process groups: one worker runs them all (make test: --dist loadgroup);
# a new test that starts a process group (torchrun, SLURM-style env) takes the same mark.
pytestmark = pytest.mark.xdist_group("process-groups")

torch.set_num_threads(1)
WORLD = 2
VOCAB = 64


def tiny_model() -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("bert", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return AutoModelForMaskedLM.from_config(config)


def global_batch() -> dict[str, torch.Tensor]:
    """8 rows with Bernoulli masks: ranks hold different numbers of masked tokens, so a plain average of
    per-rank means would be wrong; the core's token weighting must make it exact."""
    masker = build_masker(MaskingConfig(name="mlm_bernoulli", count="bernoulli", ratio=0.3), 4, VOCAB, [0, 2, 3])
    return masker(synthetic_blocks(8, 24, VOCAB, seed=3).long(), None, make_generator(0, 1))


def core_for(info: DistInfo, micro: int | None) -> PretrainCore:
    masker = build_masker(MaskingConfig(), 4, VOCAB, [0, 2, 3])
    runtime = RuntimeConfig(micro_batch_size=micro, precision="fp32")  # exact comparison
    return PretrainCore(tiny_model(), masker, synthetic_blocks(16, 24, VOCAB), TrainerConfig(batch_size=8, max_steps=4),
                        runtime, seed=0, dist=info)


def _worker(rank: int, init_file: str, out_dir: str, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        # 1) gradients: each rank backpropagates its half of the global batch, in 2 micro-batches
        rows = global_batch()
        half = rows["labels"].shape[0] // WORLD
        mine = {k: v[rank * half:(rank + 1) * half] for k, v in rows.items()}
        core = core_for(DistInfo(rank=rank, world_size=WORLD), micro=2)
        loss_sum, count = core.backward(core._prepare(mine))
        dist.all_reduce(loss_sum)
        grads = {n: p.grad.clone() for n, p in core.objective.model.named_parameters() if p.grad is not None}
        if rank == 0:
            torch.save({"grads": grads, "loss": loss_sum.item() / count.item()}, Path(out_dir) / "ddp.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()

    # 2) a whole run under torchrun-style environment variables; ranks > 0 get the CLI's placeholder dir
    from femlm.runs import Run
    from femlm.train.loop import run_pretrain
    from helpers.tiny import patch_blocks, tiny_config

    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    patch_blocks()
    cfg = tiny_config(Path(out_dir) / "tok", max_steps=4, save_every=2, eval_every=2)
    cfg.logger.variance_probe.enabled, cfg.logger.variance_probe.every = True, 2  # rank 0 only, no collectives
    run_dir = Path(out_dir) / "run" if rank == 0 else Path(".")
    run = Run(dir=run_dir, command="pretrain-scratch", is_main=rank == 0)
    if rank == 0:
        run_dir.mkdir()
    summary = run_pretrain(cfg, run)
    (Path(out_dir) / f"summary_{rank}.json").write_text(json.dumps({"world": summary["world_size"]}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(300)
def test_two_process_gloo_ddp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers.tiny import tiny_tokenizer

    tiny_tokenizer(tmp_path / "tok")
    monkeypatch.chdir(tmp_path)  # a stray write by rank 1 would land here
    monkeypatch.setenv("WANDB_MODE", "disabled")
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path), free_port()), nprocs=WORLD, join=True)

    single = core_for(DistInfo(), micro=None)
    loss_sum, count = single.backward(single._prepare(global_batch()))
    ddp = torch.load(tmp_path / "ddp.pt")
    assert ddp["loss"] == pytest.approx(loss_sum.item() / count.item(), abs=1e-6)
    for name, param in single.objective.model.named_parameters():
        torch.testing.assert_close(ddp["grads"][name], param.grad, atol=1e-6, rtol=1e-5, msg=name)

    run = tmp_path / "run"
    assert (run / "checkpoints" / "final" / "model.safetensors").is_file()
    assert (run / "checkpoints" / "step_2").is_dir() and (run / "summary.json").is_file()
    assert json.loads((tmp_path / "summary_1.json").read_text())["world"] == WORLD
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in steps if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4] and all(r["rows"] == 8 for r in train)
    state = torch.load(run / "checkpoints" / "state_4" / "state.pt", weights_only=False)
    assert len(state["rng"]) == WORLD  # each rank's dropout stream, for an exact resume
    probes = [r for r in steps if "probe_grad_var" in r]
    assert [r["step"] for r in probes] == [2, 4] and all(r["probe_grad_var"] > 0 for r in probes)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in ("run", "tok", "init")) == \
        ["ddp.pt", "summary_0.json", "summary_1.json"]
