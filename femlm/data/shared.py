"""One process prepares, the others wait on the file system: corpus preparation under ``torchrun``.

run_mlm.py prepares under DDP with ``main_process_first``, a ``barrier``: the ranks that wait sit in a
collective, and a corpus that takes longer to tokenize than the process group's timeout (30 min for NCCL by
default) kills the run (its users' most common complaint about multi-GPU runs). Here the preparing process
(local rank 0 of each node, so nodes without a shared cache each prepare their own copy) builds the corpus
as usual, and the others *poll* for its finished directory (``meta.json`` appears last, by an atomic rename),
logging every minute, with no timeout of their own: a preparation that fails writes a marker file with its
one-line error, which the waiters raise too; a preparer that dies outright is torn down by torchrun, which
stops the others.

The marker carries a token the ranks agree on before preparing (one broadcast, immediate), so a marker left
by an earlier run is never mistaken for this one's.

A stop request (femlm.stop) reaches both sides: the preparer stops at its next batch (femlm.data.prepare) and
its marker says so, so the waiters stop too, with the same signal; a waiter polls its own flag as it waits (a
waiter stopped alone exits, and torchrun then stops the preparer, which stops cleanly in turn).
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any

from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.prepare import corpus_dir, corpus_key, prepare_corpus
from femlm.data.tokens import PreparedCorpus, is_prepared
from femlm.errors import UserError
from femlm.stop import StopRequested, check

STOPPED = "stopped by signal "  # a failure marker's text when the preparer was stopped, then the signal's number

log = logging.getLogger(__name__)
POLL_S = 2.0
LOG_EVERY_S = 60.0


def failure_marker(final: Path, token: str) -> Path:
    return final.parent / f".failed-{final.name}-{token}"


def prepare_shared(domain: DomainConfig, tokenizer: Any, block_size: int, download: DownloadConfig,
                   cache_dir: str | Path | None, num_proc: int, seed: int, preparer: bool, token: str = "run",
                   poll_s: float = POLL_S, log_every_s: float = LOG_EVERY_S, waiters: bool = True
                   ) -> PreparedCorpus:
    """The prepared corpus on every process: `preparer` builds it (or loads it), the others wait for it.
    `waiters=False` (a single process): no failure marker is left behind, since nobody would read it."""
    final = corpus_dir(corpus_key(domain, tokenizer, block_size, download, seed), domain, download, cache_dir)
    marker = failure_marker(final, token)
    if preparer:
        try:
            return prepare_corpus(domain, tokenizer, block_size, download, cache_dir, num_proc=num_proc, seed=seed)
        except BaseException as err:
            if waiters:
                final.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(err, StopRequested):
                    marker.write_text(f"{STOPPED}{err.signum or signal.SIGINT}")
                else:
                    marker.write_text(str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}")
            raise
    return wait_for_corpus(final, marker, poll_s, log_every_s)


def wait_for_corpus(final: Path, marker: Path, poll_s: float = POLL_S, log_every_s: float = LOG_EVERY_S
                    ) -> PreparedCorpus:
    """Poll until `final` is a prepared corpus (then open it) or `marker` says its preparation failed."""
    start = last = time.monotonic()
    while not is_prepared(final):
        check("the wait for the corpus that local rank 0 prepares")
        if marker.exists():
            said = marker.read_text().strip()
            if said.startswith(STOPPED):
                raise StopRequested("stopped: the process preparing the corpus was stopped",
                                    int(said.removeprefix(STOPPED)))
            raise UserError(f"the process preparing the corpus failed: {said}")
        now = time.monotonic()
        if now - last >= log_every_s:
            last = now
            log.warning("waiting for local rank 0 to prepare %s (%.0f min so far); no timeout applies", final,
                        (now - start) / 60)
        time.sleep(poll_s)
    return PreparedCorpus(final)
