"""fully_explored_passes in femlm's trainer: the visit of a block is the epoch in which the data order reads it.

Claims tested: over the K epochs of a cycle every block's rows partition its maskable tokens (one masked copy per
block per epoch, tau each, MLM's rows and cost per step); a run killed mid-cycle and resumed ends bitwise equal to
the uninterrupted run; two DDP ranks draw exactly the rows one process draws for the same steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from femlm.masking import MaskingConfig
from femlm.runs import Run
from femlm.train import core as core_module
from femlm.train import inputs
from femlm.train.distributed import DistInfo
from femlm.train.loop import run_pretrain
from helpers.tiny import fake_load_blocks, tiny_config, tiny_core, tiny_tokenizer

torch.set_num_threads(1)
BLOCKS = 16  # 2 steps of 8 blocks per epoch


def passes_config() -> MaskingConfig:
    # 32-token blocks: 30 maskable tokens; ratio 0.2 -> K = 5 visits of tau = 6 tokens: a full partition per cycle
    return MaskingConfig(name="fe_passes_subword", strategy="fully_explored_passes", num_masks=None, ratio=0.2)


def test_a_cycle_of_epochs_partitions_every_block() -> None:
    core = tiny_core(masking=passes_config(), blocks=BLOCKS)
    k = core.masker.cfg.num_masks
    assert (k, core.rank_model_rows, core.layout.rows) == (5, 8, 8)  # one row per sequence: MLM's rows per step
    steps_per_epoch = BLOCKS // 8
    for first_epoch in (0, k):  # two cycles
        covered = torch.zeros(BLOCKS, 32, dtype=torch.long)
        for step in range(first_epoch * steps_per_epoch + 1, (first_epoch + k) * steps_per_epoch + 1):
            blocks, visits = core.visits(step)
            rows = core.batch(step)
            assert ((rows["labels"] != -100).sum(dim=1) == 6).all()
            assert rows["copy_index"].tolist() == (visits % k).tolist()
            covered[blocks] += (rows["labels"] != -100).long()
        assert (covered[:, 1:-1] == 1).all() and not covered[:, [0, -1]].any()


def test_k_masks_that_do_not_fit_a_block_are_refused_before_training() -> None:
    from femlm.errors import UserError

    cfg = MaskingConfig(name="fe_passes_subword", strategy="fully_explored_passes", num_masks=None, ratio=0.25)
    with pytest.raises(UserError, match=r"masking.num_masks=4 is invalid for a row of 30") as err:
        tiny_core(masking=cfg, blocks=BLOCKS)  # K 4, tau round(7.5) = 8: 32 > 30
    assert "\n" not in str(err.value)


def test_the_probe_redraws_with_the_visit_law_without_touching_training_masks() -> None:
    core = tiny_core(masking=passes_config(), blocks=BLOCKS)
    train, redraw = core.batch(3), core.batch(3, redraw=0)
    assert not torch.equal(train["labels"], redraw["labels"])
    assert ((redraw["labels"] != -100).sum(dim=1) == 6).all() and torch.equal(core.batch(3)["labels"], train["labels"])


# ---------------------------------------------------------------------------------------------- resume mid-cycle
SETTINGS = {"max_steps": 12, "save_every": 4, "eval_every": 4, "log_every": 1, "batch_size": 8, "keep_last": 2}


def run_cfg(root: Path, **extra):
    cfg = tiny_config(root / "tok", **SETTINGS, **extra)
    cfg.masking = passes_config()
    return cfg


def test_a_run_killed_mid_cycle_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks(n_train=BLOCKS))
    tiny_tokenizer(tmp_path / "tok")
    reference = Run(dir=tmp_path / "reference", command="pretrain-scratch")
    reference.dir.mkdir()
    run_pretrain(run_cfg(tmp_path), reference)

    step = core_module.PretrainCore.step

    def dies_at_7(self, s):  # epoch 3 of the 5-epoch cycle; the last state is step 4 (epoch 1)
        if s == 7:
            raise RuntimeError("killed")
        return step(self, s)

    killed = Run(dir=tmp_path / "killed", command="pretrain-scratch")
    killed.dir.mkdir()
    monkeypatch.setattr(core_module.PretrainCore, "step", dies_at_7)
    with pytest.raises(RuntimeError, match="killed"):
        run_pretrain(run_cfg(tmp_path), killed)
    monkeypatch.setattr(core_module.PretrainCore, "step", step)
    assert not (killed.dir / "checkpoints" / "final").exists()
    run_pretrain(run_cfg(tmp_path, resume=str(killed.dir)), Run(dir=killed.dir, command="pretrain-scratch",
                                                                    created=False))
    ref_w = load_file(reference.dir / "checkpoints" / "final" / "model.safetensors")
    res_w = load_file(killed.dir / "checkpoints" / "final" / "model.safetensors")
    assert ref_w.keys() == res_w.keys()
    for name in ref_w:
        assert torch.equal(ref_w[name], res_w[name]), name
    assert (reference.dir / "metrics.jsonl").read_text().count('"loss"') == 12


# ---------------------------------------------------------------------------------------------- 2 ranks = 1 process
WORLD, STEPS = 2, 6


def _rank_rows(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        core = rank_core(DistInfo(rank=rank, world_size=WORLD))
        torch.save([core.batch(s) for s in range(1, STEPS + 1)], Path(out_dir) / f"rows_{rank}.pt")
    finally:
        dist.destroy_process_group()


def rank_core(info: DistInfo):
    from transformers import AutoConfig, AutoModelForMaskedLM

    from femlm.masking import build_masker
    from femlm.runtime.config import RuntimeConfig
    from femlm.train.config import TrainerConfig
    from femlm.train.core import PretrainCore
    from helpers.tiny import synthetic_blocks

    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(AutoConfig.for_model(
        "bert", vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32))
    masker = build_masker(passes_config(), 4, 64, [0, 1, 2, 3, 4])
    return PretrainCore(model, masker, synthetic_blocks(BLOCKS, 32, 64), TrainerConfig(batch_size=8, max_steps=STEPS),
                        RuntimeConfig(precision="fp32"), seed=0, dist=info)


@pytest.mark.xdist_group("process-groups")
@pytest.mark.timeout(300)
def test_two_ranks_draw_the_rows_of_one_process(tmp_path: Path) -> None:
    mp.spawn(_rank_rows, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    single = rank_core(DistInfo())
    ranks = [torch.load(tmp_path / f"rows_{r}.pt") for r in range(WORLD)]
    for s in range(1, STEPS + 1):  # steps 1-6 span epochs 0-2
        one = single.batch(s)
        for name in ("input_ids", "labels", "copy_index"):
            assert torch.equal(torch.cat([ranks[0][s - 1][name], ranks[1][s - 1][name]]), one[name]), (s, name)
