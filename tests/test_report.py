"""`femlm report` tables on synthetic result files: layout, formatting, missing cells, reported vs measured."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from femlm.errors import UserError
from femlm.paper import GLUE_AVERAGE_REPORTED, GLUE_REPORTED, GLUE_TASKS, normalise_task, parse_reported
from femlm.report.build import continual_table, glue_average_table, glue_table
from femlm.report.collect import arm_of, collect
from femlm.report.config import ReportConfig
from femlm.report.report import run_report
from femlm.report.tables import Cell, to_csv, to_latex, to_markdown

HARDWARE = {"platform": "Linux", "cpus": 2, "torch_threads": 2, "cuda": False}
STRATEGY = {"mlm": "random", "fe": "fully_explored", "iid": "iid"}


def femlm_json(masking: str, command: str = "continual-pretrain", step: int = 150, max_steps: int = 150,
               num_masks: int | None = None, domain: str = "cs", run_dir: str = "runs/x") -> dict[str, Any]:
    prefix, granularity = masking.split("_", 1)
    default_k = 1 if prefix == "mlm" else 4
    return {"kind": "pretrain", "command": command, "masking": masking, "strategy": STRATEGY[prefix],
            "granularity": granularity, "num_masks": num_masks or default_k, "domain": domain, "model": "tiny",
            "step": step, "max_steps": max_steps, "run_dir": run_dir, "init_from": None}


def write_results(folder: Path, task: str, values: list[float], pretrain: dict[str, Any] | None,
                  metric: str = "macro_f1", split: str = "test", extra: dict[str, list[float]] | None = None,
                  seeds: list[int] | None = None, checkpoint: str = "roberta-base") -> Path:
    """A results.json as femlm finetune writes it (docs/architecture.md), values as fractions."""
    seeds = seeds or list(range(1, len(values) + 1))
    rows = []
    for i, (seed, value) in enumerate(zip(seeds, values, strict=True)):
        row = {"seed": seed, "dev": {metric: value - 0.01}, split: {metric: value}, "best_epoch": 2}
        for other, more in (extra or {}).items():
            row[other] = {metric: more[i]}
        rows.append(row)
    data = {"kind": "finetune", "task": task, "metric": metric, "main_metric": metric, "eval_split": split,
            "checkpoint": checkpoint, "pretrain": pretrain, "seeds": rows, "aggregate": {}, "notes": [],
            "hardware": HARDWARE, "git_commit": "abc1234", "scale": {"train_examples": 1688, "epochs": 3,
                                                                      "max_length": 128}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(data))
    return folder / "results.json"


def continual_runs(root: Path) -> Path:
    """MLM, FE-MLM and the i.i.d. control continually pre-trained on CS, plus the released baseline."""
    for masking, base in (("mlm_subword", 0.70), ("fe_subword", 0.74), ("iid_subword", 0.72)):
        pre = femlm_json(masking, run_dir=str(root / f"continual_{masking}"))
        write_results(root / f"ft_{masking}_aclarc", "aclarc", [base - 0.02, base, base + 0.02], pre)
        write_results(root / f"ft_{masking}_scierc", "scierc", [base + 0.05, base + 0.06, base + 0.07], pre)
    write_results(root / "ft_released_aclarc", "aclarc", [0.60, 0.62, 0.64], None)
    return root


def make_cfg(inputs: list[Path], out: Path, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(report=ReportConfig(inputs=[str(p) for p in inputs], out_dir=str(out), **kw))


@pytest.fixture
def continual(tmp_path: Path):
    collection = collect([str(continual_runs(tmp_path / "runs"))])
    return continual_table(collection, "tiny test scale", "feedbee")


def test_continual_rows_and_columns_in_paper_order(continual) -> None:
    assert [c.header for c in continual.columns] == ["ACL-ARC", "SciERC", "HyperPartisan", "AGNews"]
    labels = [r.label for r in continual.measured]
    assert labels == ["no continual pre-training (roberta-base)", "MLM + Subword", "FE-MLM + Subword",
                      "i.i.d. K-mask + Subword (control)", "MLM + Span", "FE-MLM + Span"]
    assert [r.label for r in continual.reported][:2] == ["RoBERTa (Gururangan et al. 2020)", "DAPT (Gururangan et al. 2020)"]
    md = to_markdown(continual)
    header = next(line for line in md.splitlines() if line.startswith("| Model"))
    assert header == "| Model | ACL-ARC | SciERC | HyperPartisan | AGNews |"


def test_mean_std_over_seeds_times_100(continual) -> None:
    fe = next(r for r in continual.measured if r.label == "FE-MLM + Subword")
    assert fe.cells["aclarc"].mean == pytest.approx(74.0)
    assert fe.cells["aclarc"].std == pytest.approx(2.0)  # sample std (ddof=1) of 72, 74, 76
    assert fe.cells["aclarc"].n == 3
    assert "| FE-MLM + Subword | 74.00 ± 2.00 | 80.00 ± 1.00 | — | — |" in to_markdown(continual)


def test_missing_cells_marked_and_empty_in_csv(continual) -> None:
    span = next(r for r in continual.measured if r.label == "MLM + Span")
    assert "| MLM + Span | — | — | — | — |" in to_markdown(continual)
    rows = list(csv.DictReader(io.StringIO(to_csv(continual))))
    row = next(r for r in rows if r["model"] == "MLM + Span")
    assert row["ACL-ARC"] == "" and row["ACL-ARC std"] == "" and row["ACL-ARC n"] == ""
    assert span.cells == {}
    released = next(r for r in rows if r["model"].startswith("no continual"))
    assert float(released["ACL-ARC"]) == pytest.approx(62.0) and released["SciERC"] == ""


def test_reported_rows_kept_apart_and_labelled(continual) -> None:
    md = to_markdown(continual)
    measured_part, reported_part = md.split("**Reported, Zheng et al. 2020**")
    assert "DAPT" not in measured_part and "75.34" not in measured_part
    assert "| DAPT (Gururangan et al. 2020) | 75.4 ± 2.5 | 80.8 ± 1.5 | 88.2 ± 5.9 | 93.9 ± 0.2 |" in reported_part
    assert "FE-MLM + Span | 78.06 ± 2.31" in reported_part
    rows = list(csv.DictReader(io.StringIO(to_csv(continual))))
    sources = [r["source"] for r in rows]
    assert set(sources) == {"measured", "reported"}
    assert sources == sorted(sources)  # measured first, then reported: never interleaved
    assert all(r["citation"] for r in rows if r["source"] == "reported")
    assert all(not r["citation"] for r in rows if r["source"] == "measured")


def test_scale_statement_everywhere(continual, tmp_path: Path) -> None:
    for needle in ("tiny test scale", "Model: roberta-base (as released), tiny", "continual-pretrain on cs corpus", "150 steps",
                   "seeds 1, 2, 3", "CPU (2 threads of 2 cores)", "git abc1234"):
        assert needle in continual.scale_text, needle
    assert f"**Scale.** {continual.scale_text}" in to_markdown(continual)
    tex = to_latex(continual)
    caption = next(line for line in tex.splitlines() if line.startswith("\\caption{"))
    assert "tiny test scale" in caption and "abc1234" in caption
    from femlm.report.tables import write_table

    paths = write_table(continual, tmp_path / "out")
    meta = json.loads(Path(paths["meta"]).read_text())
    assert meta["scale"]["phrase"] == "tiny test scale" and meta["scale"]["git_commits"] == ["abc1234"]
    assert meta["scale"]["seeds"] == ["1", "2", "3"]
    assert not Path(paths["csv"]).read_text().startswith("#")  # the CSV stays a clean table


def test_latex_booktabs_and_escaping(continual) -> None:
    tex = to_latex(continual)
    for rule in ("\\toprule", "\\midrule", "\\bottomrule"):
        assert rule in tex
    assert tex.index("Measured (this code)") < tex.index("Reported (Zheng et al. 2020)")
    assert "74.00 $\\pm$ 2.00" in tex and "---" in tex and "±" not in tex
    assert "\\begin{tabular}{lcccc}" in tex
    # Every data row has as many cells as the header.
    body = [line for line in tex.splitlines() if line.endswith("\\\\") and "multicolumn" not in line]
    assert all(line.count(" & ") == 4 for line in body)


def test_csv_parses_with_columns_per_task(continual) -> None:
    rows = list(csv.reader(io.StringIO(to_csv(continual))))
    header = rows[0]
    assert header[:5] == ["source", "model", "ACL-ARC", "ACL-ARC std", "ACL-ARC n"]
    assert header[-1] == "citation" and all(len(r) == len(header) for r in rows)
    dapt = next(r for r in rows if r[1].startswith("DAPT"))
    assert dapt[2:4] == ["75.4", "2.5"] and dapt[4] == ""


def test_final_step_and_default_splits_chosen(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write_results(root / "early", "aclarc", [0.50, 0.52], femlm_json("fe_subword", step=50))
    write_results(root / "final", "aclarc", [0.70, 0.72], femlm_json("fe_subword", step=150))
    for k, v in ((2, 0.60), (8, 0.61)):
        write_results(root / f"k{k}", "aclarc", [v, v], femlm_json("fe_subword", step=150, num_masks=k))
    table = continual_table(collect([str(root)]), "s", "c")
    fe = next(r for r in table.measured if r.label == "FE-MLM + Subword")
    assert fe.cells["aclarc"].mean == pytest.approx(71.0)
    assert any("uses K=4 of K=2; K=4; K=8" in n for n in table.notes), table.notes


def test_mnli_matched_and_mismatched_fill_one_column(tmp_path: Path) -> None:
    root = tmp_path / "glue"
    pre = femlm_json("fe_subword", command="pretrain-scratch", domain="general")
    write_results(root / "mnli", "mnli", [0.84, 0.86], pre, metric="accuracy", split="dev_matched",
                  extra={"dev_mismatched": [0.80, 0.82]})
    glue = glue_table(collect([str(root)]), "s", "c")
    fe = next(r for r in glue.measured if r.label == "FE-MLM + Subword")
    assert fe.cells["mnli_m"].mean == pytest.approx(85.0) and fe.cells["mnli_mm"].mean == pytest.approx(81.0)
    assert "| FE-MLM + Subword | 85.00 ± 1.41 / 81.00 ± 1.41 | — |" in to_markdown(glue)
    header = to_csv(glue).splitlines()[0]
    assert header.startswith("source,model,MNLI-m,MNLI-m std,MNLI-m n,MNLI-mm,")


def test_glue_average_only_when_all_nine(tmp_path: Path) -> None:
    root = tmp_path / "glue"
    scratch = {m: femlm_json(m, command="pretrain-scratch", domain="general") for m in ("mlm_subword", "fe_subword")}
    names = {"mnli_m": "mnli", "sst2": "sst2", "qnli": "qnli", "qqp": "qqp", "rte": "rte", "mrpc": "mrpc",
             "cola": "cola", "stsb": "stsb"}
    for key, task in names.items():
        extra = {"dev_mismatched": [0.80, 0.90]} if task == "mnli" else None
        write_results(root / f"fe_{task}", task, [0.80, 0.90], scratch["fe_subword"], metric="accuracy",
                      split="dev_matched" if task == "mnli" else "dev", extra=extra)
        if key != "cola":  # the MLM arm lacks CoLA: no average
            write_results(root / f"mlm_{task}", task, [0.7, 0.7], scratch["mlm_subword"], metric="accuracy",
                          split="dev")
    collection = collect([str(root)])
    glue = glue_table(collection, "s", "c")
    average = glue_average_table(glue, collection, "s", "c")
    fe = next(r for r in average.measured if r.label == "FE-MLM + Subword")
    assert fe.cells["avg"].mean == pytest.approx(85.0) and fe.cells["avg"].std == pytest.approx(7.0711, abs=1e-3)
    mlm = next(r for r in average.measured if r.label == "MLM + Subword")
    assert mlm.cells["avg"].mean is None
    assert any("7/9 GLUE numbers" in n for n in average.notes)  # no CoLA, no MNLI-mm
    md = to_markdown(average)
    assert "| MLM + Subword | — |" in md and "| BERT-base (ReEval) | 82.5 |" in md.split("**Reported")[1]


def test_paper_transcription_is_consistent() -> None:
    # The GLUE average's FE-MLM entry is the mean of the GLUE table's nine FE-MLM numbers (83.61 -> 83.6).
    fe = next(r for r in GLUE_REPORTED if "FE-MLM" in r.label)
    avg = sum(parse_reported(fe.cells[t])[0] for t in GLUE_TASKS) / len(GLUE_TASKS)
    reported = next(r for r in GLUE_AVERAGE_REPORTED if r.label == "BERT-base (FE-MLM)")
    assert round(avg, 1) == parse_reported(reported.cells["avg"])[0]
    assert parse_reported("75.34 ± 2.54") == (75.34, 2.54, 2)
    assert parse_reported("63.0") == (63.0, None, 1)


def test_task_names_and_arms() -> None:
    assert normalise_task("citation_intent") == "aclarc" and normalise_task("SST-2") == "sst2"
    assert normalise_task("sciie") == "scierc" and normalise_task("wnli") is None
    assert arm_of(None).stage == "none"
    assert arm_of({"command": "pretrain-scratch", "masking": "fe_span"}).stage == "scratch"
    assert arm_of({"masking": "fe_span", "init_from": "roberta-base"}).stage == "continual"


@settings(max_examples=60, deadline=None)
@given(st.floats(-100, 100, allow_nan=False), st.floats(0, 50, allow_nan=False), st.integers(0, 4),
       st.integers(0, 9))
def test_cell_text_round_trips(mean: float, std: float, decimals: int, n: int) -> None:
    text = Cell(mean, std, n, decimals).text()
    m, s, d = parse_reported(text)
    assert d == decimals and abs(m - mean) <= 0.5 * 10 ** -decimals + 1e-9
    assert (s is None) == (n == 1)


def test_config_validation() -> None:
    with pytest.raises(UserError, match="report.tables"):
        ReportConfig(tables=["table9"]).validate()
    with pytest.raises(UserError, match="report.inputs"):
        ReportConfig(inputs=[]).validate()


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        run_report(make_cfg([tmp_path / "nope"], tmp_path / "out"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="found no results.json"):
        run_report(make_cfg([tmp_path / "empty"], tmp_path / "out"))


def test_unreadable_file_skipped_with_note(tmp_path: Path) -> None:
    root = continual_runs(tmp_path / "runs")
    (root / "broken").mkdir()
    (root / "broken" / "results.json").write_text("{not json")
    manifest = run_report(make_cfg([root], tmp_path / "out", figures=False))
    assert any("broken" in s for s in manifest["skipped"])
    assert "## Skipped inputs" in (tmp_path / "out" / "README.md").read_text()


def test_overlapping_inputs_counted_once(tmp_path: Path) -> None:
    root = continual_runs(tmp_path / "runs")
    collection = collect([str(root), str(root / "ft_fe_subword_aclarc"), str(root / "ft_fe_subword_aclarc" /
                                                                                  "results.json")])
    assert len(collection.finetune) == 7
    table = continual_table(collection, "s", "c")
    assert next(r for r in table.measured if r.label == "FE-MLM + Subword").cells["aclarc"].n == 3


def test_percent_values_not_scaled_twice(tmp_path: Path) -> None:
    write_results(tmp_path / "r", "aclarc", [70.0, 72.0], femlm_json("mlm_subword"))
    table = continual_table(collect([str(tmp_path / "r")]), "s", "c")
    assert next(r for r in table.measured if r.label == "MLM + Subword").cells["aclarc"].mean == 71.0


def test_single_seed_prints_no_spread(tmp_path: Path) -> None:
    write_results(tmp_path / "r", "aclarc", [0.7], femlm_json("mlm_subword"))
    md = to_markdown(continual_table(collect([str(tmp_path / "r")]), "s", "c"))
    assert re.search(r"\| MLM \+ Subword \| 70\.00 \|", md)


def test_domain_mismatch_is_noted(tmp_path: Path) -> None:
    write_results(tmp_path / "r", "agnews", [0.9, 0.91], femlm_json("fe_subword", domain="cs"), metric="accuracy")
    table = continual_table(collect([str(tmp_path / "r")]), "s", "c")
    assert any("AGNews from a checkpoint continually pre-trained on cs" in n for n in table.notes)
