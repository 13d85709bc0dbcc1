"""The preparation progress: rows read out of the expected total (so there is an ETA), documents/s, tokens/s.

On a terminal it is a tqdm bar on stderr; elsewhere (logs, CI, nohup) tqdm's carriage returns would be noise,
so the same figures go to the log every `LOG_EVERY_S` seconds instead.

The total is exact where the sources say how many rows they hold (parquet row groups, a Hub dataset card's
split size, or the first pass of a sampled corpus), and estimated from bytes elsewhere: plain files' bytes at
the rows-per-byte rate of the pieces finished so far (2 kB a row until one has finished).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence

from tqdm import tqdm

from femlm.data.sources import Unit

BYTES_PER_ROW_GUESS = 2000
LOG_EVERY_S = 30.0
log = logging.getLogger(__name__)


class Progress:
    def __init__(self, desc: str, units: Sequence[Unit], show: bool, rows: Sequence[int | None] | None = None
                 ) -> None:
        self.rows_of = list(rows) if rows is not None else [u.rows for u in units]
        self.bytes_of = [u.nbytes for u in units]
        self.done_rows = self.done_bytes = 0  # finished units whose rows were not known in advance
        self.rows = self.docs = self.tokens = 0
        self.start = time.perf_counter()
        self._shown = self._logged = self.start
        self.desc, self.show = desc, show
        tty = sys.stderr.isatty()
        self.log_lines = show and not tty
        self.bar = tqdm(total=self._total(), desc=desc, unit=" rows", unit_scale=True, disable=not (show and tty),
                        mininterval=0.5, smoothing=0.05, file=sys.stderr, dynamic_ncols=True)

    def _total(self) -> int | None:
        known = sum(r for r in self.rows_of if r is not None)
        unknown_bytes = sum(b for r, b in zip(self.rows_of, self.bytes_of, strict=True) if r is None)
        if not unknown_bytes:
            return known if any(r is not None for r in self.rows_of) else None
        rate = self.done_rows / self.done_bytes if self.done_bytes else 1 / BYTES_PER_ROW_GUESS
        return known + round(unknown_bytes * rate)

    def update(self, rows: int, docs: int, tokens: int) -> None:
        self.rows += rows
        self.docs += docs
        self.tokens += tokens
        self.bar.update(rows)
        now = time.perf_counter()
        if now - self._shown > 0.5:
            self._shown = now
            self.bar.set_postfix_str(self._rates(now), refresh=False)
        if self.log_lines and now - self._logged > LOG_EVERY_S:
            self._logged = now
            log.info("%s: %s", self.desc, self.line(now))

    def _rates(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        return f"{self.docs / elapsed:,.0f} docs/s, {self.tokens / elapsed:,.0f} tok/s"

    def line(self, now: float | None = None) -> str:
        """rows read / expected, documents, tokens, rates and ETA, in words (the log line)."""
        now = now or time.perf_counter()
        total = self.bar.total
        eta = ""
        if total and self.rows:
            left = (now - self.start) * max(total - self.rows, 0) / self.rows
            eta = f", ETA {left / 60:.1f} min"
        expected = f" of ~{total:,}" if total else ""
        return (f"{self.rows:,}{expected} rows, {self.docs:,} documents, {self.tokens:,} tokens; "
                f"{self._rates(now)}{eta}")

    def unit_done(self, index: int, rows: int) -> None:
        """A unit finished: where its rows were estimated, the estimate of the rest improves."""
        if self.rows_of[index] is None:
            self.done_rows += rows
            self.done_bytes += self.bytes_of[index]
            self.rows_of[index], self.bytes_of[index] = rows, 0  # now known
            total = self._total()
            if total is not None:
                self.bar.total = max(total, self.bar.n)
                self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def rates(self) -> dict[str, float]:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return {"seconds": round(elapsed, 3), "documents_per_s": round(self.docs / elapsed, 1),
                "tokens_per_s": round(self.tokens / elapsed, 1)}
