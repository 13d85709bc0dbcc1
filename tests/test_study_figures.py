"""The study's figures (issues 37, 47): one colour per arm from a palette, and every figure builder returns the
values it drew, which must be the numbers the text beside it prints (the committed figures are redrawn from the
committed CSV files: the run directories are not kept)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex

from femlm.outputs import OTHER_COLOR, PALETTE, PINNED_COLORS, arm_colors, write_csv
from femlm.study import figures
from femlm.study.tables import band_rows

ARMS = ["mlm_subword", "fe_passes_subword", "fe_subword"]
RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_every_masking_arm_gets_its_own_colour_without_an_entry() -> None:
    """A new masking YAML needs no colour: unpinned arms take palette colours by sorted name, never a pinned one."""
    masking = sorted(p.stem for p in (Path(figures.__file__).parents[1] / "conf" / "masking").glob("*.yaml"))
    new = ["zz_new_arm", "aa_new_arm"]
    colours = arm_colors([*masking, *PINNED_COLORS, *new])
    assert len(set(colours.values())) == len(colours) and OTHER_COLOR not in colours.values()
    assert colours["aa_new_arm"] == PALETTE[0] and colours["zz_new_arm"] == PALETTE[1]
    assert colours["mlm_subword"] == PINNED_COLORS["mlm_subword"]  # the committed figures keep theirs


def res(arms: list[str]) -> dict[str, Any]:
    grid = [0.0, 1e12, 2e12]
    band = {"flops": grid, "mean": [6.0, 5.5, 5.0], "low": [5.9, 5.4, 4.9], "high": [6.1, 5.6, 5.1], "n": [5] * 3}
    diff = {"flops": grid, "mean": [0.0, 0.01, 0.02], "low": [0.0, -0.01, 0.0], "high": [0.0, 0.03, 0.04], "n": 5}
    return {"bands": {a: dict(band) for a in arms}, "differences": {a: dict(diff) for a in arms[1:]},
            "targets": {"50%": {"loss": 5.5}, "75%": {"loss": 5.2}}}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the study's writers would save, kept open for inspection."""
    figs: list[Any] = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, title=None: figs.append(fig) or path)
    return figs


def test_the_loss_figure_gives_each_arm_its_own_colour_and_draws_the_baseline(drawn: list[Any], tmp_path: Path) -> None:
    """results/study-passes' loss_vs_flops_same_rows.png drew MLM and FE across passes in one blue; the GPU
    study's lacked the unigram line its gate compares with, and its two target labels overlapped."""
    out = figures.plot_curves("same_rows", res(ARMS), tmp_path / "x.png", "t", ("unigram", 6.88))
    (fig,) = drawn
    for ax in fig.axes:
        colours = [to_hex(line.get_color()) for line in ax.get_lines() if line.get_label()[:1] != "_"]
        assert len(colours) == len(set(colours)) >= 2
    left = {line.get_label().split(" (")[0]: to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert left["MLM"] == to_hex(PINNED_COLORS["mlm_subword"]) and "unigram" in left
    assert out["baseline"] == 6.88 and out["final"]["fe_subword"] == 5.0 and out["targets"] == {"50%": 5.5, "75%": 5.2}
    labels = [t for t in fig.axes[0].texts if t.get_text().startswith("target")]
    assert {t.get_ha() for t in labels} == {"left", "right"}  # at alternate ends: they cannot overlap


def test_bands_are_redrawn_from_the_committed_csv(tmp_path: Path) -> None:
    pre = {"same_rows": res(ARMS)}
    write_csv(tmp_path / "pretrain_bands.csv", band_rows(pre))
    back = figures.bands_from_csv(tmp_path / "pretrain_bands.csv", pre)
    assert set(back["same_rows"]["bands"]) == set(ARMS) and set(back["same_rows"]["differences"]) == set(ARMS[1:])
    assert back["same_rows"]["bands"]["fe_subword"]["mean"] == pre["same_rows"]["bands"]["fe_subword"]["mean"]
    assert back["same_rows"]["differences"]["fe_subword"]["n"] == 5
    assert back["same_rows"]["targets"] == pre["same_rows"]["targets"]


def null_of(folder: str, key: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """The committed null-model figure of ``key`` redrawn (to a scratch file) and the study README's text."""
    from femlm.study.regenerate import recorded_settings, run_json

    out = RESULTS / folder
    study = json.loads((out / "study.json").read_text())
    text = (out / "README.md").read_text()
    md = (out / f"decomposition_{key}.md").read_text()
    study["decomposition_settings"] = {key: recorded_settings(study, key, md)}
    j = run_json(study, key, md, text)
    tmp = tmp_path / folder
    tmp.mkdir(parents=True)
    (tmp / f"null_model_{key}.csv").write_bytes((out / f"null_model_{key}.csv").read_bytes())
    return figures.null_figure(j, key, tmp, key), text


def test_the_minilm_null_model_figures_print_no_interval_from_four_sequences(tmp_path: Path) -> None:
    """results/study/null_model_*.png printed "0.63 [0.55, 0.72]" (pairs within 4 sequences) under a title the
    README contradicted; now the figure, like the text, has no interval."""
    for key in ("warmup", "mlm_final"):
        got, text = null_of("study", key, tmp_path / key)
        frac, lo, hi = got["fraction_explained"]
        assert not got["intervals"] and lo is None and hi is None and "measured_ci" not in got
        assert f"fraction explained {frac:.2f} (no interval)" in text


def test_the_seq512_null_model_figure_prints_the_sequence_level_interval(tmp_path: Path) -> None:
    """results/study-base's seq-512 figure printed 0.58 [0.29, 0.91] (pairs) against the text's 0.58 [0.31, 0.94]
    (whole sequences); both now print the sequence-level one."""
    got, text = null_of("study-base", "warmup_seq512", tmp_path)
    frac, lo, hi = got["fraction_explained"]
    assert got["intervals"] and got["sequences"] == 12
    assert f"fraction explained {frac:.2f} [{lo:.2f}, {hi:.2f}]" in text
    rows = list(csv.DictReader((RESULTS / "study-base" / "null_model_warmup_seq512.csv").open()))
    assert [c[0] for c in got["measured_ci"]] == [float(r["measured_ci_seq_low"]) for r in rows]


def test_the_gpu_loss_figure_draws_what_its_readme_prints() -> None:
    """The 2026-11-27 GPU study's figure (drawn once by its freeze.py): the unigram line at the README's value and
    each arm's final mean as the README's runs give it."""
    out = RESULTS / "study-gpu-2026-11-27"
    study = json.loads((out / "study.json").read_text())
    text = (out / "README.md").read_text()
    res_ = figures.bands_from_csv(out / "pretrain_bands.csv", study["pretraining"])["same_rows"]
    caption = next(line for line in text.splitlines() if line.startswith("_The figure draws"))
    finals = {arm: float(re.search(rf"{arm} (\d\.\d+)", caption)[1]) for arm in res_["bands"]}
    line = re.search(r"unigram baseline \((\d\.\d+)\)", caption)
    assert line and float(line[1]) == pytest.approx(study["unigram_baseline"]["loss"], abs=5e-5)
    for arm, b in res_["bands"].items():
        runs = [r["final_eval_loss"] for r in study["runs"] if r["masking"] == arm]
        assert finals[arm] == pytest.approx(b["mean"][-1], abs=5e-5) == pytest.approx(sum(runs) / len(runs), abs=5e-5)
