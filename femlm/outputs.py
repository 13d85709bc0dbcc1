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


# One colour per arm in every figure (issue 37): each masking arm (femlm/conf/masking/) and baseline row keeps its
# colour across the study's and the report's figures; no two entries share one. Hex, so no style cycle moves them.
ARM_COLORS = {
    "mlm_subword": "#1f77b4", "fe_subword": "#d62728", "iid_subword": "#2ca02c", "fe_passes_subword": "#ff7f0e",
    "mlm_wwm": "#9467bd", "fe_passes_word": "#8c564b", "mlm_span": "#e377c2", "fe_span": "#bcbd22",
    "iid_span": "#17becf", "fe_passes_span": "#aec7e8", "mlm_bernoulli": "#98df8a", "fe_subword_allmask": "#ff9896",
    "no_continual": "#7f7f7f", "warmup_only": "#c5b0d5", "warmup": "#c49c94", "head_warmup": "#dbdb8d",
}
OTHER_COLOR = "#000000"  # an arm without an entry: black, never a colour another arm owns


def arm_color(arm: Any) -> str:
    """The arm's colour in every figure (its masking name, e.g. ``fe_subword``; OTHER_COLOR when unknown)."""
    return ARM_COLORS.get(str(arm), OTHER_COLOR)


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
