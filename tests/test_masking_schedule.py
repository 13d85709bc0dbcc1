"""Masking-rate schedules (masking.ratio_schedule): tau along the schedule, the peak check, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from femlm.errors import UserError
from femlm.masking import IGNORE_INDEX, MaskingConfig, MaskingConfigError, build_masker, make_generator
from femlm.runs import Run
from femlm.train import inputs
from femlm.train.loop import run_pretrain
from helpers.configs import composed
from helpers.tiny import fake_load_blocks, tiny_config, tiny_tokenizer

torch.set_num_threads(1)
LINEAR = {"ratio_schedule": "linear", "ratio": 0.3, "ratio_final": 0.1}


def test_ratio_and_tau_at_steps_along_a_linear_schedule() -> None:
    cfg = MaskingConfig(name="fe", strategy="fully_explored", num_masks=3, **LINEAR).validate()
    assert [round(cfg.ratio_at(s, 11), 6) for s in (1, 6, 11, 12)] == [0.3, 0.2, 0.1, 0.1]
    assert MaskingConfig(ratio=0.2).validate().ratio_at(7, 11) == 0.2  # constant
    masker = build_masker(cfg, mask_token_id=4, vocab_size=300, special_ids=[0, 1, 2, 3, 4])
    row = torch.tensor([[2, *range(5, 205), 3]])  # 200 maskable tokens
    for step, tau in ((1, 60), (6, 40), (11, 20)):
        out = masker(row, None, make_generator(0, step), ratio=cfg.ratio_at(step, 11))
        chosen = (out["labels"] != IGNORE_INDEX).view(1, 3, -1)
        assert chosen.sum(2).tolist() == [[tau] * 3] and (chosen.sum(1) <= 1).all()  # K fixed, tau follows


def test_k_tau_fits_n_at_the_schedules_peak() -> None:
    MaskingConfig(strategy="fully_explored", num_masks=3, **LINEAR).validate()  # peak 0.3: 3 * 0.3 <= 1
    rising = {"ratio_schedule": "linear", "ratio": 0.15, "ratio_final": 0.3}
    with pytest.raises(MaskingConfigError, match=r"num_masks \* masking.ratio_final = 4 \* 0.3 = 1.2"):
        MaskingConfig(strategy="fully_explored", num_masks=4, **rising).validate()
    with pytest.raises(MaskingConfigError, match=r"num_masks \* masking.ratio = 4 \* 0.3 = 1.2"):
        MaskingConfig(strategy="fully_explored", num_masks=4, ratio_schedule="linear", ratio=0.3,
                      ratio_final=0.15).validate()
    with pytest.raises(MaskingConfigError, match="ratio_final=None is invalid with masking.ratio_schedule='linear'"):
        MaskingConfig(ratio_schedule="linear").validate()
    with pytest.raises(MaskingConfigError, match="ratio_final=0.1 is invalid with masking.ratio_schedule='constant'"):
        MaskingConfig(ratio_final=0.1).validate()
    with pytest.raises(UserError, match=r"^masking: masking.num_masks \* masking.ratio_final = 4 \* 0.3") as err:
        composed("pretrain-scratch", "masking=fe_subword", "masking.ratio_schedule=linear", "masking.ratio_final=0.3")
    assert "\n" not in str(err.value)


def test_allmask_file_replaces_every_masked_token() -> None:
    cfg = composed("pretrain-scratch", "masking=fe_subword_allmask").masking
    masker = build_masker(cfg, mask_token_id=4, vocab_size=300, special_ids=[0, 1, 2, 3, 4])
    out = masker(torch.tensor([[2, *range(5, 205), 3]]), None, make_generator(0, 1))
    chosen = out["labels"] != IGNORE_INDEX
    assert chosen.sum() == 4 * 30 and (out["input_ids"][chosen] == 4).all()


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_resume_mid_schedule_is_exact(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from femlm.train import core

    monkeypatch.setattr(inputs, "load_blocks", fake_load_blocks())
    tiny_tokenizer(tmp_path / "tok")

    def config(**extra):
        cfg = tiny_config(tmp_path / "tok", max_steps=12, save_every=4, eval_every=4, **extra)
        for key, value in {"name": "fe_linear", "strategy": "fully_explored", "num_masks": 2, **LINEAR}.items():
            setattr(cfg.masking, key, value)
        return cfg

    def run(name: str) -> Run:
        r = Run(dir=tmp_path / name, command="pretrain-scratch")
        r.dir.mkdir()
        return r

    run_pretrain(config(), run("reference"))
    train = [r for r in records(tmp_path / "reference") if "loss" in r]
    # 30 maskable tokens per block, 4 sequences x K=2 rows: 8 * round(30 * ratio) masked tokens per step
    for r in train:
        ratio = 0.3 - 0.2 * (r["step"] - 1) / 11
        assert r["mask_ratio"] == pytest.approx(ratio) and r["masked_tokens"] == 8 * int(30 * ratio + 0.5)
    assert train[0]["masked_tokens"] == 72 and train[-1]["masked_tokens"] == 24

    step = core.PretrainCore.step

    def crash_at_7(self, s: int):
        if s == 7:
            raise RuntimeError("crash at step 7")
        return step(self, s)

    monkeypatch.setattr(core.PretrainCore, "step", crash_at_7)
    crashed = run("crashed")
    with pytest.raises(RuntimeError, match="crash at step 7"):
        run_pretrain(config(), crashed)
    monkeypatch.setattr(core.PretrainCore, "step", step)
    run_pretrain(config(resume=str(crashed.dir)), Run(dir=crashed.dir, command="pretrain-scratch", created=False))

    keys = ("step", "loss", "mask_ratio", "masked_tokens", "eval_loss")
    assert [[r.get(k) for k in keys] for r in records(crashed.dir)] == \
        [[r.get(k) for k in keys] for r in records(tmp_path / "reference")]
    ref, res = (load_file(tmp_path / d / "checkpoints" / "final" / "model.safetensors") for d in ("reference",
                                                                                                   "crashed"))
    assert all(torch.equal(ref[k], res[k]) for k in ref)


def test_a_run_saved_before_ratio_schedules_existed_still_resumes() -> None:
    from femlm.train.resume import first_difference

    current = {"masking": {"ratio": 0.15, "ratio_schedule": "constant", "ratio_final": None}}
    assert first_difference({"masking": {"ratio": 0.15}}, current) is None
    linear = {"masking": {"ratio": 0.15, "ratio_schedule": "linear", "ratio_final": 0.1}}
    assert first_difference({"masking": {"ratio": 0.15}}, linear) == ("masking.ratio_schedule", "constant", "linear")
