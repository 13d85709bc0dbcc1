"""What made a result folder (femlm.runs.environment_of, its README line) and `femlm report --compare` (issue 40),
on synthetic run directories written as femlm writes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from femlm.errors import UserError
from femlm.report.compare import compare
from femlm.report.config import ReportConfig
from femlm.report.report import run_report
from femlm.runs import environment_line, environment_of

REPO = Path(__file__).resolve().parent.parent
CORPUS = {"train": {"documents": 30, "tokens": 9000, "blocks": 70},
          "validation": {"documents": 3, "tokens": 900, "blocks": 7}, "sha256": {"train": "a" * 64,
                                                                                 "validation": "b" * 64}}
PACKAGES = {"python": "3.11.9", "torch": "2.13.0", "transformers": "5.24.0", "tokenizers": "0.23.3",
            "numpy": "2.4.6"}


def _runs(root: Path, scores: tuple[float, float, float] = (0.70, 0.72, 0.74), tokens: int = 9000,
          vocab: str = "c" * 64, cpu: str = "AMD EPYC [avx512_bf16]", final: float | None = None) -> Path:
    """One pre-training run and one fine-tuning run on its checkpoint, each with run.json."""
    info = {"packages": PACKAGES, "hardware": {"cpu": cpu, "torch_threads": 2, "cuda": False},
            "git_commit": "abc"}
    pre, ft = root / "continual_fe_subword", root / "finetune_fe_subword_aclarc"
    for d in (pre, ft):
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps(info))
    # a pre-training summary's corpus plan (femlm.data.plan.CorpusPlan: counts under "splits")
    corpus = {"domain": "cs", "splits": {"train": {**CORPUS["train"], "tokens": tokens},
                                         "validation": CORPUS["validation"]}, "sha256": dict(CORPUS["sha256"])}
    (pre / "summary.json").write_text(json.dumps({
        "kind": "pretrain", "command": "continual-pretrain", "masking": "fe_subword", "domain": "cs",
        "model": "tiny", "steps": 10, "precision": "fp32", "threads": 2, "corpus": corpus,
        "vocabulary_sha256": vocab, "seen": {"sequences": 80, "source_tokens": 10240, "rows": 320,
                                             "masked_targets": 6000},
        **({} if final is None else {"first_eval_loss": 9.0, "final_eval_loss": final})}))
    femlm = {"kind": "pretrain", "command": "continual-pretrain", "masking": "fe_subword",
             "strategy": "fully_explored", "granularity": "subword", "num_masks": 4, "domain": "cs", "model": "tiny",
             "step": 10, "max_steps": 10, "run_dir": str(pre), "init_from": None}
    seeds = [{"seed": i + 1, "test": {"macro_f1": v}, "dev": {"macro_f1": v}} for i, v in enumerate(scores)]
    (ft / "results.json").write_text(json.dumps({
        "kind": "finetune", "task": "aclarc", "metric": "macro_f1", "main_metric": "macro_f1", "eval_split": "test",
        "checkpoint": str(pre), "pretrain": femlm, "seeds": seeds, "aggregate": {}, "notes": [],
        "recipe": {"precision": "bf16"}}))
    return root


def _report(runs: Path, out: Path) -> Path:
    run_report(SimpleNamespace(report=ReportConfig(inputs=[str(runs)], out_dir=str(out), figures=False)))
    return out


def test_environment_record_and_line(tmp_path: Path) -> None:
    runs = _runs(tmp_path / "runs")
    env = environment_of(sorted(p for p in runs.iterdir()))
    assert env["runs"] == 2 and env["packages"]["torch"] == ["2.13.0"]
    assert env["device"] == ["AMD EPYC [avx512_bf16]"] and env["threads"] == [2] and env["precision"] == ["bf16", "fp32"]
    assert env["corpora"]["cs"][0]["sha256"] == CORPUS["sha256"] and env["vocabulary_sha256"] == ["c" * 64]
    assert env["not_recorded"] == []
    line = environment_line(env)
    assert "\n" not in line and "torch 2.13.0" in line and "cs aaaaaaaaaaaa" in line and "bf16 / fp32" in line
    # runs from before the record: said, not guessed
    bare = tmp_path / "old"
    bare.mkdir()
    (bare / "run.json").write_text(json.dumps({"git_commit": "x"}))
    old = environment_of([bare])
    assert {"packages", "precision", "vocabulary_sha256", "corpus sha256"} <= set(old["not_recorded"])
    assert "Not recorded by these runs" in environment_line(old)


def test_report_folder_names_what_made_it(tmp_path: Path) -> None:
    out = _report(_runs(tmp_path / "runs"), tmp_path / "out")
    manifest = json.loads((out / "report.json").read_text())
    meta = json.loads((out / "continual.meta.json").read_text())
    assert manifest["environment"] == meta["environment"]
    assert manifest["environment"]["packages"]["tokenizers"] == ["0.23.3"]
    readme = (out / "README.md").read_text()
    assert sum(line.startswith("**Environment**") for line in readme.splitlines()) == 1


def test_compare_same_and_different_folders(tmp_path: Path) -> None:
    committed = _report(_runs(tmp_path / "a"), tmp_path / "ra")
    same = _report(_runs(tmp_path / "b", scores=(0.71, 0.72, 0.73), cpu="Intel Xeon [amx_bf16]"), tmp_path / "rb")
    lines, status = compare(committed, same)
    assert status == 0, lines
    assert any("device: DIFFERS" in line for line in lines)  # the environment explains, it does not fail
    assert any("aclarc" in line and "within noise" in line for line in lines)
    assert lines[-1].startswith("reproduced")
    # another corpus (tokens, fingerprint) and a number outside its ±: not reproduced, each line says what
    other = _runs(tmp_path / "c", scores=(0.90, 0.91, 0.92), tokens=9037, vocab="d" * 64)
    summary = json.loads((other / "continual_fe_subword" / "summary.json").read_text())
    summary["corpus"]["sha256"]["train"] = "e" * 64
    (other / "continual_fe_subword" / "summary.json").write_text(json.dumps(summary))
    lines, status = compare(committed, _report(other, tmp_path / "rc"))
    assert status == 1
    text = "\n".join(lines)
    assert "corpus cs token files: DIFFERS" in text and "vocabulary: DIFFERS" in text
    assert "corpus cs: DIFFERS" in text and "OUTSIDE noise" in text and lines[-1].startswith("not reproduced")


def test_compare_bad_folders(tmp_path: Path) -> None:
    good = _report(_runs(tmp_path / "a"), tmp_path / "ra")
    (tmp_path / "empty").mkdir()
    for bad, match in ((tmp_path / "nope", "is not a directory"), (tmp_path / "empty", "holds no report.json")):
        with pytest.raises(UserError, match=match):
            compare(good, bad)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "report.json").write_text("{not json")
    with pytest.raises(UserError, match="not readable JSON"):
        compare(tmp_path / "broken", good)
    # the command line: exit 2 and one line for a bad folder
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "femlm.cli", "report", "--compare", str(good), str(tmp_path / "nope")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "not a directory" in done.stderr


def test_pretraining_losses_must_be_equal_on_the_same_device_and_are_shown_on_another(tmp_path: Path) -> None:
    committed = _report(_runs(tmp_path / "a", final=5.25), tmp_path / "ra")
    lines, status = compare(committed, _report(_runs(tmp_path / "b", final=5.25), tmp_path / "rb"))
    assert status == 0 and any("9.0 / 5.25 vs 9.0 / 5.25: equal (same device)" in x for x in lines), lines
    lines, status = compare(committed, _report(_runs(tmp_path / "c", final=5.31), tmp_path / "rc"))
    assert status == 1 and any("DIFFERS on the same device" in x for x in lines)
    other = _report(_runs(tmp_path / "d", final=5.31, cpu="Intel Xeon [amx_bf16]"), tmp_path / "rd")
    lines, status = compare(committed, other)
    assert status == 0 and any("shown only (another device" in x for x in lines)


def _study(root: Path, final: float = 5.123456789012345) -> Path:
    """A study folder: study.json with a full environment record and the per-seed pretrain_runs.csv (mode, arm,
    seed; losses at full precision, as femlm writes them)."""
    root.mkdir(parents=True)
    env = {"runs": 4, "packages": {k: [v] for k, v in PACKAGES.items()}, "device": ["AMD EPYC [avx512_bf16]"],
           "threads": [2], "precision": ["fp32"], "vocabulary_sha256": ["c" * 64],
           "corpora": {"cs": [{"sha256": "a" * 64, "train": CORPUS["train"], "validation": CORPUS["validation"]}]}}
    (root / "study.json").write_text(json.dumps({"kind": "study", "environment": env}))
    rows = ["mode,arm,seed,final_loss,mean_loss"]
    for seed in (1, 2):
        rows.append(f"same_rows,mlm_subword,{seed},{final + seed!r},{6.0 + seed / 7!r}")
        rows.append(f"same_rows,fe_subword,{seed},{final + seed / 3!r},{6.1 + seed / 7!r}")
    (root / "pretrain_runs.csv").write_text("\n".join(rows) + "\n")
    return root


def test_a_study_folder_is_compared_per_mode_arm_and_seed_at_full_precision(tmp_path: Path) -> None:
    """Two study folders used to pass on fingerprints alone ("0 of 0 numbers within noise", exit 0)."""
    committed = _study(tmp_path / "a")
    lines, status = compare(committed, committed)
    assert status == 0 and lines[-1].startswith("reproduced") and "(8 of 8 numbers" in lines[-1], lines
    changed = _study(tmp_path / "b")
    text = (changed / "pretrain_runs.csv").read_text().replace("6.123456789012345", "6.123456789012346", 1)
    (changed / "pretrain_runs.csv").write_text(text)  # one final loss, one unit in the 16th digit
    lines, status = compare(committed, changed)
    assert status == 1
    (bad,) = [x for x in lines if "DIFFERS on the same device" in x]
    assert bad.startswith("  same_rows/mlm_subword/seed 1:") and "(final_loss)" in bad


def test_a_comparison_of_no_numbers_cannot_be_checked(tmp_path: Path) -> None:
    a, b = _study(tmp_path / "a"), _study(tmp_path / "b")
    for folder in (a, b):
        (folder / "pretrain_runs.csv").unlink()
    lines, status = compare(a, b)
    assert status == 1 and "no number compared: cannot be checked" in "\n".join(lines)
    assert lines[-1].startswith("not reproduced") and "(0 of 0 numbers" in lines[-1]


def test_a_folder_written_with_four_decimals_is_compared_at_four() -> None:
    from femlm.report.compare import same_loss

    assert same_loss("5.2500", "5.25") == (True, "")
    assert same_loss("6.8301", "6.830112345678901") == (True, " (at 4 decimals: committed rounded)")
    assert same_loss("6.8301", "6.830162345678901")[0] is False


def test_report_help_documents_compare() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "femlm.cli", "report", "--help"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0 and "--compare COMMITTED NEW" in done.stdout and "exits 0 only" in done.stdout

