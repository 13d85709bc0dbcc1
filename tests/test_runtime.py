"""The runtime section: precision=auto measures instead of consulting a CPU-feature list; device picking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from femlm.errors import UserError
from femlm.runtime import precision
from femlm.runtime.config import RuntimeConfig
from femlm.runtime.device import pick_device, pick_precision


def test_auto_picks_bf16_only_when_it_measured_clearly_faster() -> None:
    assert precision.decide({"fp32": 0.947, "bf16": 0.514}) == "bf16"  # the AMD EPYC with AVX512-BF16 case
    assert precision.decide({"fp32": 0.0116, "bf16": 0.295}) == "fp32"  # emulated bf16 (this project's EPYC)
    assert precision.decide({"fp32": 1.0, "bf16": 0.95}) == "fp32"  # a near tie keeps exact fp32


def test_the_measurement_runs_once_per_machine_and_auto_follows_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEMLM_CACHE", str(tmp_path))
    calls = []

    def fake_measure() -> dict[str, float]:
        calls.append(1)
        return {"fp32": 2.0, "bf16": 1.0}

    monkeypatch.setattr(precision, "measure", fake_measure)
    precision.cpu_choice.cache_clear()
    assert pick_precision("auto", torch.device("cpu")) == torch.bfloat16
    precision.cpu_choice.cache_clear()  # a new process: the answer comes from the cache file
    assert pick_precision("auto", torch.device("cpu")) == torch.bfloat16 and len(calls) == 1
    cached = json.loads((tmp_path / "runtime" / "precision.json").read_text())
    (entry,) = cached.values()
    assert entry["dtype"] == "bf16" and entry["fp32_s"] == 2.0
    precision.cpu_choice.cache_clear()


def test_measure_times_both_dtypes() -> None:
    seconds = precision.measure(rows=8, repeats=1)
    assert set(seconds) == {"fp32", "bf16"} and all(v > 0 for v in seconds.values())


def test_explicit_precisions_and_devices() -> None:
    cpu = torch.device("cpu")
    assert pick_precision("fp32", cpu) is None and pick_precision("bf16", cpu) == torch.bfloat16
    assert pick_precision("fp16", cpu) == torch.float16  # with torch's GradScaler on the CPU too
    RuntimeConfig(device="cpu", precision="fp16").validate()
    assert pick_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="runtime.device='cuda' but no CUDA device is visible"):
            pick_device("cuda")
    with pytest.raises(UserError, match="runtime.device"):
        RuntimeConfig(device="tpu").validate()
    assert RuntimeConfig(data_workers=3).workers() == 3 and RuntimeConfig().workers() >= 1
