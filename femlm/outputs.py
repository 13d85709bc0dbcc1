"""What every writer of result files shares: CSV tables, JSON without NaN, and matplotlib set up for files.

One home each, so every CSV a run leaves is written the same way (None as an empty cell; ``\\n`` line ends, or
``\\r\\n`` where a file has always had them), no JSON file carries a NaN (which JSON does not have and strict
readers refuse), and no figure needs a display.
"""

from __future__ import annotations

import csv
import io
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# The csv module's own line end: the CSV files of `femlm analyze` and of the evidence studies have always had it
# (femlm report's have "\n").
CRLF = "\r\n"


def csv_text(rows: Iterable[Sequence[Any] | Mapping[str, Any]], header: Sequence[str] | None = None,
             line_end: str = "\n") -> str:
    """A CSV table as text: `rows` are sequences under `header`, or mappings (without a header, their keys in
    first-seen order, so no rows give an empty header line; a key a row lacks is an empty cell). None is an
    empty cell."""
    rows = list(rows)
    if header is None and all(isinstance(row, Mapping) for row in rows):
        keys: list[str] = []
        for row in rows:
            keys += [k for k in row if k not in keys]
        header = keys
    if rows and isinstance(rows[0], Mapping):
        rows = [[row.get(k) for k in header] for row in rows]  # type: ignore[union-attr]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=line_end)  # csv writes None as an empty cell
    if header is not None:
        writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_csv(path: Path, rows: Iterable[Sequence[Any] | Mapping[str, Any]],
              header: Sequence[str] | None = None, line_end: str = "\n") -> Path:
    """`csv_text(rows, header, line_end)` written to `path`."""
    path = Path(path)
    with path.open("w", newline="") as handle:
        handle.write(csv_text(rows, header, line_end))
    return path


def finite(value: Any) -> Any:
    """Replace NaN/inf (a diverged loss) by None, recursively: JSON has no NaN and readers choke on it. Numpy
    floats become Python floats (the same JSON text)."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


# One colour per arm in every figure (issues 37, 47): the published arms and baseline rows keep these (pinned, so
# the committed figures and any redrawn ones agree); any other arm takes the next free colour of PALETTE by sorted
# name among the arms one figure draws (`arm_colors`), so a new masking YAML needs no entry here. Hex, so no
# style cycle moves them.
PINNED_COLORS = {
    "mlm_subword": "#1f77b4", "fe_subword": "#d62728", "iid_subword": "#2ca02c", "fe_passes_subword": "#ff7f0e",
    "mlm_wwm": "#9467bd", "fe_passes_word": "#8c564b", "mlm_span": "#e377c2", "fe_span": "#bcbd22",
    "iid_span": "#17becf", "fe_passes_span": "#aec7e8", "mlm_bernoulli": "#98df8a", "fe_subword_allmask": "#ff9896",
    "no_continual": "#7f7f7f", "warmup_only": "#c5b0d5", "warmup": "#c49c94", "head_warmup": "#dbdb8d",
}
# Colours no pinned entry uses (matplotlib's tab20b, then tab20c's darker half).
PALETTE = ("#393b79", "#5254a3", "#6b6ecf", "#9c9ede", "#637939", "#8ca252", "#b5cf6b", "#cedb9c", "#8c6d31",
           "#bd9e39", "#e7ba52", "#e7cb94", "#843c39", "#ad494a", "#d6616b", "#e7969c", "#7b4173", "#a55194",
           "#ce6dbd", "#de9ed6", "#3182bd", "#e6550d", "#31a354", "#756bb1")
OTHER_COLOR = "#000000"  # past the palette's end: black, never a colour another arm owns


def arm_colors(arms: Any) -> dict[str, str]:
    """Each of ``arms`` its colour: pinned where it has one, else the next palette colour by sorted name."""
    names = [str(a) for a in dict.fromkeys(arms)]
    free = iter(PALETTE)
    out = {a: PINNED_COLORS[a] for a in names if a in PINNED_COLORS}
    for a in sorted(a for a in names if a not in PINNED_COLORS):
        out[a] = next(free, OTHER_COLOR)
    return out


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (servers, tests, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, title: str | None = None, dpi: int | None = 120) -> Path:
    """Write `fig` to `path` (a suptitle first when given, laid out tight) and free it."""
    plt = pyplot()
    if title is not None:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi) if dpi is not None else fig.savefig(path)
    plt.close(fig)
    return Path(path)
