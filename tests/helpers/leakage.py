"""Task text must never be pre-training text: find documents of a domain corpus that are task examples (the check
tests/test_data_leakage.py runs on every domain and task of the mirror; no command needs it, so it lives here).

A document *leaks* a task example when any of these fingerprints match (hash-set lookups, so checking every
domain against every task takes seconds):

* ``exact``: the stripped texts are equal;
* ``normalised``: equal after case folding and collapsing whitespace (``" ".join(text.casefold().split())``);
* ``head`` / ``tail``: for examples of at least `EDGE_CHARS` normalised characters, the document starts or
  ends with the same `EDGE_CHARS` characters, which catches an article stored with its title prepended (the
  corpus readers write ``title\\nbody``) or a different trailing sign-off.

Sentence-level tasks (ACL-ARC citation contexts, SciERC relations) are shorter than `EDGE_CHARS`, so only
whole-document equality counts for them: a CS paper that *contains* a cited sentence is in-domain text, as in
DAPT, not a leaked example.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

EDGE_CHARS = 200


@dataclass(frozen=True)
class Leak:
    task: str
    split: str
    how: str  # exact | normalised | head | tail
    document: str  # the first 80 characters of the leaking document


def normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def _fingerprints(text: str) -> list[tuple[str, str]]:
    norm = normalise(text)
    out = [("exact", text.strip()), ("normalised", norm)]
    if len(norm) >= EDGE_CHARS:
        out += [("head", norm[:EDGE_CHARS]), ("tail", norm[-EDGE_CHARS:])]
    return out


class TaskIndex:
    """Fingerprints of task examples -> (task, split) they come from."""

    def __init__(self) -> None:
        self._index: dict[tuple[str, str], tuple[str, str]] = {}
        self.examples = 0

    def add(self, task: str, split: str, texts: Iterable[str | None]) -> None:
        for text in texts:
            if not text or not text.strip():
                continue
            self.examples += 1
            for fingerprint in _fingerprints(text):
                self._index.setdefault(fingerprint, (task, split))

    def leaks(self, documents: Iterable[str]) -> list[Leak]:
        """Every document matching a task example (one `Leak` per document, the first fingerprint that hit)."""
        out = []
        for doc in documents:
            norm = normalise(doc)
            probes = [("exact", doc.strip()), ("normalised", norm)]
            if len(norm) >= EDGE_CHARS:
                probes += [("head", norm[:EDGE_CHARS]), ("tail", norm[-EDGE_CHARS:])]
            for probe in probes:
                hit = self._index.get(probe)
                if hit is not None:
                    out.append(Leak(hit[0], hit[1], probe[0], doc[:80]))
                    break
        return out


def task_index(tasks: Iterable[Any], download: object) -> tuple[TaskIndex, list[str]]:
    """The index of every split of `tasks` (TaskConfig objects) that can be loaded; and the names of the tasks
    skipped as unavailable (not in the mirror or cache)."""
    from femlm.data.tasks import load_task
    from femlm.errors import UserError

    index, skipped = TaskIndex(), []
    for task in tasks:
        name = task.name
        try:
            data = load_task(task, download)  # type: ignore[arg-type]
        except UserError:
            skipped.append(name)
            continue
        for split, ds in data.items():
            columns = ds.with_format("arrow")  # whole columns at once (iterating a Column formats row by row)
            index.add(name, split, columns["text"].to_pylist())
            if "text_pair" in ds.column_names:
                index.add(name, split, columns["text_pair"].to_pylist())
    return index, skipped
