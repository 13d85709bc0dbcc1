"""`femlm report` end to end on synthetic runs: figures written or skipped with a note, README, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from test_report import continual_runs, femlm_json, make_cfg, write_results

from femlm.paper import TABLE_NAMES
from femlm.report.build import efficiency_series, split_series
from femlm.report.collect import collect
from femlm.report.report import run_report

PNG = b"\x89PNG\r\n\x1a\n"


def pretrain_run(folder: Path, masking: str, command: str = "continual-pretrain", domain: str = "cs") -> Path:
    """summary.json + metrics.jsonl + config.yaml + run.json as a pre-training run leaves them."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"kind": "pretrain", "command": command, "masking": masking, "domain": domain, "model": "tiny",
               "steps": 150, "final_eval_loss": 5.0, "first_eval_loss": 7.0, "row_tokens_per_s": 1234.5,
               "tokens_seen": 614400, "wall_s": 120.0, "hardware": {"cpus": 2, "torch_threads": 2}}
    (folder / "summary.json").write_text(json.dumps(summary))
    lines = [{"step": s, "loss": 8 - s / 50, "lr": 1e-3} for s in (10, 20)]
    lines += [{"step": s, "eval_loss": 7 - s / 75, "eval_accuracy": 0.1} for s in (50, 100, 150)]
    (folder / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n{partial")
    (folder / "config.yaml").write_text("domain:\n  name: cs\n  max_documents: 2000\n")
    (folder / "run.json").write_text(json.dumps({"git_commit": "beef123", "hardware": summary["hardware"]}))
    (folder / f"{command}.log").write_text(  # the Hydra job log line femlm.data.corpus writes
        "[2026-01-01 00:00:00,000][femlm.data.corpus][INFO] - blocks for domain cs: {'train': {'documents': "
        "3036, 'tokens': 785242, 'blocks': 6134, 'dropped': 90}, 'validation': {'documents': 160}}\n")
    return folder


def analysis_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "covariance.png").write_bytes(PNG + b"fake")
    (folder / "covariance_summary.csv").write_text("hamming,mean,ci_low,ci_high,n\n0,1.0,0.9,1.1,10\n")
    (folder / "covariance.csv").write_text("hamming,cov\n0,1\n")
    (folder / "variance.png").write_bytes(PNG + b"fake")
    # The layout femlm analyze writes: numbers nested by study, file names in "files".
    data = {"kind": "analysis", "covariance": {"spearman": {"rho_pairs": -0.8, "ci_low": -0.9,
                                                            "p_value_pairs": 1e-20}},
            "variance": {"ratios": {"4": {"ratio": 0.6, "ci": [0.5, 0.7], "theorem1": 0.59}}},
            "settings": {"tau": 16, "chunk": 8, "sequences": 4}, "files": ["covariance.csv", "covariance.png",
                                                           "covariance_summary.csv", "variance.png"]}
    (folder / "analysis.json").write_text(json.dumps(data))
    return folder


def all_figure_inputs(root: Path) -> Path:
    continual_runs(root)
    for masking in ("mlm_subword", "fe_subword"):
        pretrain_run(root / f"continual_{masking}", masking)
        # an efficiency sweep: fine-tuning results at intermediate steps
        for step, value in ((50, 0.5), (100, 0.6)):
            write_results(root / "sweep" / masking / f"step_{step}", "aclarc", [value, value + 0.02],
                          femlm_json(masking, step=step))
    for k, value in ((2, 0.70), (4, 0.74), (6, 0.73), (8, 0.72)):
        pre = femlm_json("fe_subword", num_masks=k, run_dir=str(root / f"ablation_k{k}"))
        (root / f"ablation_k{k}").mkdir(parents=True)  # femlm.json has no ratio: the run's config.yaml does
        (root / f"ablation_k{k}" / "config.yaml").write_text(f"masking:\n  num_masks: {k}\n  ratio: 0.125\n")
        for task in ("aclarc", "scierc"):
            write_results(root / f"ablation_k{k}_{task}", task, [value, value + 0.01, value + 0.02], pre)
    analysis_run(root / "analyze_before")
    analysis_run(root / "analyze_after")
    return root


def test_all_figures_written(tmp_path: Path) -> None:
    root = all_figure_inputs(tmp_path / "runs")
    out = tmp_path / "results" / "tiny"
    manifest = run_report(make_cfg([root], out, scale="tiny synthetic"))
    status = {f["key"]: f["status"] for f in manifest["figures"]}
    assert status == {"efficiency": "written", "splits": "written", "pretrain_loss": "written",
                      "analysis": "written"}
    for name in ("figure4_efficiency.png", "ablation_splits.png", "pretrain_loss.png"):
        data = (out / "figures" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 1000
    assert (out / "figures" / "analysis" / "analyze_before" / "covariance.png").is_file()
    assert (out / "figures" / "analysis" / "analyze_after" / "covariance_summary.csv").is_file()
    assert not (out / "figures" / "analysis" / "analyze_after" / "covariance.csv").exists()
    readme = (out / "README.md").read_text()
    assert "tiny synthetic" in readme and "![figure4_efficiency](figures/figure4_efficiency.png)" in readme
    assert "- covariance.spearman.rho_pairs: -0.8" in readme and "- variance.ratios.4.ratio: 0.6" in readme
    assert "settings.chunk" not in readme  # only the telling numbers
    # An analysis.json from before issue 27 may hold Spearman's p over mask pairs (not independent): not printed;
    # the count of sequences is, with the reason no verdict is drawn.
    assert "p_value_pairs" not in readme
    assert readme.count("_Point estimates over 4 sequences, without intervals: no verdict") == 2
    assert f"### {TABLE_NAMES['continual']}" in readme and "**Scale.**" in readme
    assert "| " + str(root / "continual_fe_subword") in readme  # the pre-training runs table
    for suffix in ("md", "tex", "csv", "meta.json"):
        assert (out / f"continual.{suffix}").is_file()
    assert json.loads((out / "report.json").read_text())["counts"]["analysis"] == 2


def test_splits_series_and_efficiency_series(tmp_path: Path) -> None:
    collection = collect([str(all_figure_inputs(tmp_path / "runs"))])
    splits = split_series(collection)
    assert [p[0] for p in splits["aclarc"]] == [2, 4, 6, 8]
    # K=4 of the ablation (ratio 0.125) is not pooled with the continual table's FE-MLM arm (K=4, ratio 0.15).
    assert splits["scierc"][1][1:3] == (75.0, 1.0) and splits["scierc"][1][3] == 3
    eff = efficiency_series(collection)
    assert [p[0] for p in eff["aclarc"]["fe_subword"]] == [50, 100, 150]
    assert "fe_subword" not in {m for m in eff.get("scierc", {})}  # one step only: a cell, not a curve


def test_efficiency_json_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "sweep"
    folder.mkdir(parents=True)
    points = [{"step": s, "masking": m, "mean": v, "std": 0.01, "n": 3}
              for m, base in (("mlm_subword", 0.5), ("fe_subword", 0.55)) for s, v in ((100, base), (200, base + 0.1))]
    (folder / "efficiency.json").write_text(json.dumps({"kind": "efficiency", "task": "aclarc",
                                                        "main_metric": "macro_f1", "points": points}))
    eff = efficiency_series(collect([str(tmp_path / "runs")]))
    assert eff["aclarc"]["fe_subword"] == [(100, 55.00000000000001, 1.0), (200, 65.0, 1.0)] or \
        [round(p[1], 6) for p in eff["aclarc"]["fe_subword"]] == [55.0, 65.0]
    manifest = run_report(make_cfg([tmp_path / "runs"], tmp_path / "out"))
    assert next(f for f in manifest["figures"] if f["key"] == "efficiency")["status"] == "written"


def test_figures_skipped_with_a_note(tmp_path: Path) -> None:
    root = continual_runs(tmp_path / "runs")
    out = tmp_path / "out"
    manifest = run_report(make_cfg([root], out))
    figures = {f["key"]: f for f in manifest["figures"]}
    assert all(f["status"] == "skipped" and f["note"] for f in figures.values())
    assert not list((out / "figures").glob("*.png"))
    readme = (out / "README.md").read_text()
    assert readme.count("_Not drawn:") == 4 and "femlm evaluate evaluate.sweep=true" in readme


def test_stale_figures_removed_on_rerun(tmp_path: Path) -> None:
    root = all_figure_inputs(tmp_path / "runs")
    out = tmp_path / "out"
    run_report(make_cfg([root], out))
    assert (out / "figures" / "ablation_splits.png").is_file()
    run_report(make_cfg([continual_runs(tmp_path / "other")], out))
    assert not (out / "figures" / "ablation_splits.png").exists()
    assert not (out / "figures" / "analysis").exists()


def test_corpus_and_commit_of_pretraining_in_scale(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_dir = pretrain_run(root / "continual_fe_subword", "fe_subword")
    write_results(root / "ft", "aclarc", [0.7, 0.72], femlm_json("fe_subword", run_dir=str(run_dir)))
    manifest = run_report(make_cfg([root], tmp_path / "out", tables=["continual"], figures=False))
    meta = json.loads(Path(manifest["tables"]["continual"]["meta"]).read_text())
    assert "tokens seen 614,400" in meta["scale_text"] and "subsampled to 2,000 documents" in meta["scale_text"]
    assert "beef123" in meta["scale_text"] and "abc1234" in meta["scale_text"]
    assert "train split 3,036 documents, 785,242 tokens, 6,134 blocks" in meta["scale_text"]
    assert not (tmp_path / "out" / "glue.md").exists()


def test_majority_class_reference_row(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r", "aclarc", [0.3, 0.32], femlm_json("fe_subword"))
    data = json.loads(path.read_text())
    data["majority_baseline"] = {"prediction": "Background", "test": {"macro_f1": 0.1127}}
    path.write_text(json.dumps(data))
    run_report(make_cfg([tmp_path / "r"], tmp_path / "out", tables=["continual"], figures=False))
    md = (tmp_path / "out" / "continual.md").read_text()
    assert "| majority class (reference) | 11.27 | — | — | — |" in md.split("**Reported")[0]


def test_cli_report(cli, tmp_path: Path) -> None:
    root = continual_runs(tmp_path / "runs")
    out = tmp_path / "results" / "tiny"
    result = cli("report", f"report.inputs=[{root}]", f"report.out_dir={out}",
                 "report.scale='tiny: 4 layers, 150 steps'", "report.tables=[continual]", "report.figures=false",
                 f"hydra.run.dir={tmp_path / 'report_run'}")
    assert result.code == 0, result.stderr
    assert "tiny: 4 layers, 150 steps" in (out / "continual.md").read_text()
    assert (tmp_path / "report_run" / "report.json").is_file()
    # (Bad inputs -> UserError is checked in-process in test_report.py: a second CLI start costs ~15 s.)
