"""Evidence that reads right (issue 47), on the committed results and on synthetic folders: every table's reading is
comparisons.csv's; the families are declared, typed and checked when the file loads; the summaries outside a study's
folder come from its files alone and never carry a gated p; no "no difference detected" anywhere in results/."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from femlm.experiment.schema import load
from femlm.study import headlines
from femlm.study.readings import from_row, name_cell, rows
from femlm.study.verdicts import FAVOURS, Comparison, adjust, says
from helpers.configs import experiment_file

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
CONF = REPO / "femlm" / "conf"
STUDIES = headlines.study_folders(REPO, history=True)  # every committed study, history too (smoke runs left out)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row (headers included, separators left out)."""
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("|---")]


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each Markdown table as (header, rows); the header's first cell gets the "### " heading above it appended
    after a tab."""
    out: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    heading = ""
    for i, line in enumerate(lines):
        heading = line[4:] if line.startswith("### ") else heading
        if line.startswith("|---") and i > 0 and lines[i - 1].startswith("| "):
            header = [c.strip() for c in lines[i - 1].strip().strip("|").split(" | ")]
            body = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith("| "):
                    break
                body.append([c.strip() for c in nxt.strip().strip("|").split(" | ")])
            out.append(([f"{header[0]}\t{heading}", *header[1:]], body))
    return out


def csv_of(folder: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((folder / "comparisons.csv").open(newline="")))


def test_the_committed_studies_are_the_ones_the_summaries_list() -> None:
    assert {p.name for p in STUDIES} >= {"study", "study-base", "study-passes", "study-gpu-2026-11-27"}


@pytest.mark.parametrize("folder", STUDIES, ids=lambda p: p.name)
def test_every_reading_in_a_table_is_its_comparisons_csv_reading(folder: Path) -> None:
    """Every comparison table (the study README's, docs/evidence.md's block, README.md's block) and the study
    README's arm-vs-MLM tables print, for each comparison, the reading comparisons.csv holds for its key."""
    from femlm.study import arms
    from femlm.study.readings import row_cells

    comps = [from_row(r) for r in csv_of(folder)]
    by_key = {c.key: c for c in comps}
    names: dict[str, set[str]] = {}
    for c in comps:
        names.setdefault(name_cell(c), set()).add(says(c))
    for group in [[c for c in comps if c.group == g] for g in {c.group for c in comps if c.group}]:
        for size in range(2, len(group) + 1):  # a row of several K of one estimate (any subset in K order)
            for start in range(len(group) - size + 1):
                names.setdefault(row_cells(group[start:start + size])[0], set()).update(says(c) for c in group)
    readme = (folder / "README.md").read_text()
    block = (REPO / "README.md").read_text().split(headlines.BEGIN, 1)[1].split(headlines.END, 1)[0]
    link = f"]({folder.relative_to(REPO)}/README.md)**"
    top = block.split(link, 1)[1].split("**[", 1)[0] if link in block else ""  # a history study is not in the block
    checked = 0
    for text in (readme, top, (REPO / "docs" / "evidence.md").read_text()):
        for header, body in tables(text):
            first, heading = header[0].split("\t")
            if first == "comparison" and "reading" in header:
                col = header.index("reading")
                for cells in body:
                    if cells[0] in names:
                        assert cells[col] in names[cells[0]], (cells[0], cells[col], names[cells[0]])
                        checked += 1
            if text is readme and first == "arm vs MLM":  # "value: reading" cells, keyed by arm and column
                mode = {"same rows per step": "same_rows", "same sequences per step": "same_sequences"}[heading]
                keys = ["final_loss", "mean_loss"] + [re.search(r"target (\d+%)", h)[1] for h in header[3:]]
                for cells in body:
                    arm = next(a for a in {c.first for c in comps if c.first} if arms.label(a) == cells[0])
                    for key, cell in zip(keys, cells[1:], strict=True):
                        full = (f"training_loss/{mode}/{arm}/{key}" if key.endswith("loss") else
                                f"compute_ratio/{mode}/{arm}/{key}")
                        c = by_key[full]
                        assert cell.endswith(": not decided") if c.bound else cell.endswith(f": {says(c)}"), cell
                        checked += 1
    assert checked >= len([c for c in comps if c.family != "exploratory"]) * 2


@pytest.mark.parametrize("folder", STUDIES, ids=lambda p: p.name)
def test_favours_or_against_fe_only_for_an_fe_arm_against_mlm(folder: Path) -> None:
    for r in csv_of(folder):
        if r["reading"] in ("favours FE", "against FE"):
            assert r["about_fe"] == "True" and r["nature"] == "outcome" and r["second"] == "mlm_subword", r["key"]
        if r["nature"] != "outcome":
            assert "FE" not in r["reading"], r["key"]


def test_no_file_under_results_says_no_difference_detected() -> None:
    found = [p for p in RESULTS.rglob("*") if p.is_file() and p.suffix in (".md", ".csv", ".json", ".txt", ".py")
             and "no difference detected" in p.read_text(errors="ignore")]
    assert not found


def test_the_older_families_are_primary_and_the_gpu_one_confirmatory() -> None:
    families = {p.name: {r["family"] for r in csv_of(p)} - {"exploratory"} for p in STUDIES}
    assert families["study"] == families["study-base"] == families["study-passes"] == {"primary"}
    assert families["study-gpu-2026-11-27"] == {"confirmatory"}
    assert "confirmatory" not in headlines.family_line([from_row(r) for r in csv_of(RESULTS / "study")])


def test_a_gated_comparisons_p_never_reaches_the_readme_block(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "toy"
    folder.mkdir(parents=True)
    plan = {"name": "toy", "stats": {"declared": {"when": "before", "date": "2026-11-27"},
                                     "confirmatory": ["training_loss/same_rows/fe_subword/final_loss"]},
            "pretrain": {"reference": "mlm_subword"}}
    c = Comparison("training_loss/same_rows/fe_subword/final_loss", "training_loss", "t", -0.0064, -0.0079, -0.0049,
                   "difference", p=0.000115, p_method="paired t", n=6, sd=0.0015, first="fe_subword",
                   second="mlm_subword", short="final loss", gated=["no arm left the plateau: a gate"])
    adjust([c], plan)
    with (folder / "comparisons.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows([c])[0]))
        w.writeheader()
        w.writerows(rows([c]))
    (folder / "README.md").write_text("# Toy study\n")
    top = tmp_path / "README.md"
    top.write_text(f"x\n{headlines.BEGIN}\n{headlines.END}\ny\n")
    assert headlines.write_headlines(top, tmp_path)
    block = top.read_text()
    assert "0.000115" not in block and "0.00011" not in block and "1.2e-04" not in block
    (row,) = [cells for cells in table_rows(block) if cells[0].startswith("FE-MLM")]
    assert row[2] == "—" and row[3] == "not decided" and "gated: no arm left the plateau" in row[4]


def test_the_readme_block_states_each_studys_scale_and_fe_against_mlm() -> None:
    text = (REPO / "README.md").read_text()
    block = text.split(headlines.BEGIN, 1)[1].split(headlines.END, 1)[0]
    assert block.count("FE vs MLM:") == len(headlines.study_folders(REPO)) == len(STUDIES) - 1  # one history study
    assert "262,144 row tokens, 0.027% of the paper's 983M per arm" in block  # results/study: 2,048 rows of 128
    assert FAVOURS not in {cells[3] for cells in table_rows(block) if len(cells) == 5}
    assert all(len(line) < 400 for line in block.splitlines() if line.startswith("| "))



@pytest.mark.parametrize(("change", "message"), [
    (("      - training_loss/same_rows/fe_subword/final_loss\n", "      - training_loss/same_rows/fe_subwrd/final_loss\n"),
     "stats.confirmatory: 'training_loss/same_rows/fe_subwrd/final_loss' is no comparison this plan makes; did you "
     "mean 'training_loss/same_rows/fe_subword/final_loss'?"),
    (("      - passes/warmup_r15/K6\n", "      - passes/warmup_r15/K5\n"), "'passes/warmup_r15/K5' is no comparison"),
    (("      - passes/warmup_r15/K6\n", "      - pases/warmup_r15/K6\n"), "'pases/warmup_r15/K6' is no comparison key"),
    ((re.compile(r"    declared: .*\n"), ""), "experiment.stats.declared is missing (required)"),
    ((re.compile(r"when: after"), "when: later"), "stats.declared.when='later': allowed before | after"),
    ((re.compile(r", date: \"2026-11-27\", commit: 0ec1f6c"), ""), "stats.declared needs a date (YYYY-MM-DD) or a commit"),
])
def test_a_bad_family_is_one_line_when_the_file_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       change: tuple, message: str) -> None:
    from femlm.errors import UserError

    text = (CONF / "experiment" / "study_passes.yaml").read_text()
    old, new = change
    changed = old.sub(new, text, count=1) if isinstance(old, re.Pattern) else text.replace(old, new, 1)
    assert changed != text
    experiment_file(tmp_path, monkeypatch, "study_passes", changed)
    with pytest.raises(UserError) as err:
        load("study_passes")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_declared_key_of_the_committed_plans_is_one_they_make() -> None:
    for name in ("study", "study_base", "study_passes", "study_gpu"):
        exp = load(name)
        assert exp.stats is not None and exp.stats.declared.when in ("before", "after")


def test_an_arms_label_and_role_live_in_its_masking_yaml() -> None:
    from femlm.study import arms

    for path in (CONF / "masking").glob("*.yaml"):
        cfg = arms.masking(path.stem)
        assert cfg is not None and cfg.label and cfg.role in ("fe", "mlm", "control"), path.stem
    assert arms.label("fe_passes_subword") == "FE across passes" and arms.label("no_continual").startswith("no ")


def test_the_study_writer_leaves_the_summaries_to_the_runners_last_step(tmp_path: Path) -> None:
    """python -m femlm.experiment study: its last step refreshes docs/evidence.md and README.md ("summaries"),
    a smoke run or a folder elsewhere refreshes neither."""
    from femlm.experiment.tables import Options
    from femlm.study import driver
    from femlm.study.plan import load_plan

    plan = load_plan(False, "study")
    steps = driver.summaries_step(plan, REPO / "results" / "study", tmp_path / "e.md", tmp_path, Options())
    assert [s.name for s in steps] == ["summaries"]
    assert driver.summaries_step(plan, tmp_path / "elsewhere", None, tmp_path, Options()) == []
    assert driver.summaries_step({**plan, "smoke": True}, REPO / "results" / "study", None, tmp_path, Options()) == []


def test_a_history_study_is_left_out_of_the_readme_block(tmp_path) -> None:
    """A study whose study.json marks it as history (kept for the record) is no study of the README's block."""
    import shutil

    for name in ("study", "study-gpu-2026-11-27"):
        shutil.copytree(RESULTS / name, tmp_path / "results" / name)
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{headlines.BEGIN}\n{headlines.END}\ny\n")
    assert headlines.write_headlines(readme, tmp_path)
    text = readme.read_text()
    assert "results/study/README.md" in text and "study-gpu-2026-11-27" not in text
