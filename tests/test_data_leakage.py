"""No task text in pre-training corpora: no document of any domain corpus is an example (exact, or after
case/whitespace normalisation, or with the same first/last 200 characters) of any task's train/dev/test split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from femlm.data.config import DownloadConfig
from femlm.data.corpus import load_documents
from helpers.configs import DOMAIN_NAMES, TASK_NAMES, domain, task
from helpers.leakage import TaskIndex, task_index

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no local mirror at {MIRROR}")


@pytest.fixture(scope="module")
def index() -> tuple[TaskIndex, DownloadConfig]:
    cfg = DownloadConfig(mirror=str(MIRROR), offline=True, verify=False)
    idx, skipped = task_index([task(name) for name in TASK_NAMES], cfg)
    # The DAPT tasks of both domains and the GLUE tasks the mirror holds are all checked.
    assert {"aclarc", "scierc", "hyperpartisan", "agnews", "chemprot", "sst2", "cola"}.isdisjoint(skipped)
    assert idx.examples > 100_000
    return idx, cfg


@needs_mirror
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "wikipedia" else n
                                  for n in DOMAIN_NAMES])
def test_no_domain_corpus_holds_task_text(index, name: str) -> None:
    idx, cfg = index
    d = domain(name)
    docs = load_documents(dataclasses.replace(d, sources=d.all_sources), cfg)  # the held-out files too
    leaks = idx.leaks(docs)
    assert not leaks, f"domain {name}: {len(leaks)} task examples in the corpus, e.g. {leaks[:2]}"


@needs_mirror
def test_the_check_catches_hyperpartisan_articles(index) -> None:
    """The News domain used to read hyperpartisan_news:train; those articles are task text and are caught."""
    idx, cfg = index
    news = domain("news")
    old = dataclasses.replace(news, sources=[*news.sources, "hyperpartisan_news:train"])
    leaks = idx.leaks(load_documents(old, cfg))
    assert len(leaks) > 400 and {(leak.task, leak.split) for leak in leaks} == {("hyperpartisan", "train")}


def test_match_kinds() -> None:
    idx = TaskIndex()
    article = "A long news article body. " * 12
    idx.add("t", "test", ["Short Example Sentence .", article])
    assert idx.leaks(["short   example\nsentence ."])[0].how == "normalised"
    assert idx.leaks(["Short Example Sentence ."])[0].how == "exact"
    assert idx.leaks(["Some Title\n" + article])[0].how == "tail"
    assert idx.leaks([article + "\nReuter"])[0].how == "head"
    assert not idx.leaks(["A paper that cites: Short Example Sentence . and more."])
