"""One colour per arm (issue 37, item 8): the shared map, the study's figures drawn with it, and the figures
redrawn from the committed CSV (the run directories are not kept)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex

from femlm.outputs import ARM_COLORS, OTHER_COLOR, write_csv
from femlm.study import figures
from femlm.study.tables import band_rows

ARMS = ["mlm_subword", "fe_passes_subword", "fe_subword"]


def test_no_two_arms_share_a_colour() -> None:
    colours = [to_hex(c) for c in ARM_COLORS.values()]
    assert len(set(colours)) == len(colours) and to_hex(OTHER_COLOR) not in colours
    masking = {p.stem for p in (Path(figures.__file__).parents[1] / "conf" / "masking").glob("*.yaml")}
    assert masking <= set(ARM_COLORS), masking - set(ARM_COLORS)  # every masking arm has its own


def res(arms: list[str]) -> dict[str, Any]:
    grid = [0.0, 1e12, 2e12]
    band = {"flops": grid, "mean": [6.0, 5.5, 5.0], "low": [5.9, 5.4, 4.9], "high": [6.1, 5.6, 5.1], "n": [5] * 3}
    diff = {"flops": grid, "mean": [0.0, 0.01, 0.02], "low": [0.0, -0.01, 0.0], "high": [0.0, 0.03, 0.04], "n": 5}
    return {"bands": {a: dict(band) for a in arms}, "differences": {a: dict(diff) for a in arms[1:]},
            "targets": {"75%": {"loss": 5.2}}}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the study's writers would save, kept open for inspection."""
    figs: list[Any] = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, title=None: figs.append(fig) or path)
    return figs


def test_the_loss_figure_gives_each_arm_its_own_colour(drawn: list[Any], tmp_path: Path) -> None:
    """results/study-passes' loss_vs_flops_same_rows.png drew MLM and FE across passes in one blue."""
    figures.plot_curves("same_rows", res(ARMS), tmp_path / "x.png", "t")
    (fig,) = drawn
    for ax in fig.axes:
        colours = [to_hex(line.get_color()) for line in ax.get_lines() if line.get_label()[:1] != "_"]
        assert len(colours) == len(set(colours)) >= 2
    left = {line.get_label().split(" (")[0]: to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert left["MLM"] == to_hex(ARM_COLORS["mlm_subword"])


def test_bands_are_redrawn_from_the_committed_csv(tmp_path: Path) -> None:
    pre = {"same_rows": res(ARMS)}
    write_csv(tmp_path / "pretrain_bands.csv", band_rows(pre))
    back = figures.bands_from_csv(tmp_path / "pretrain_bands.csv", pre)
    assert set(back["same_rows"]["bands"]) == set(ARMS) and set(back["same_rows"]["differences"]) == set(ARMS[1:])
    assert back["same_rows"]["bands"]["fe_subword"]["mean"] == pre["same_rows"]["bands"]["fe_subword"]["mean"]
    assert back["same_rows"]["differences"]["fe_subword"]["n"] == 5
    assert back["same_rows"]["targets"] == pre["same_rows"]["targets"]
