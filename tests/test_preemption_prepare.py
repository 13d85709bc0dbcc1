"""A stop request during corpus preparation (`femlm prepare`, and the preparation inside training and analysis):
the parent stops at its next batch of documents, unit or copied chunk, or, with worker processes, at its next
poll, when it kills the workers (they ignore the signals a cluster sends to every process of the job); the
temporary directory is removed, so nothing reaches the cache, the exit status is 128 + the signal's number, and
the same command run again prepares the corpus byte for byte as an uninterrupted run does.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from femlm import stop
from femlm.runs import Run
from helpers.processes import child_env
from helpers.stopping import mkdir, run_stopped, said_interrupted
from helpers.tiny import tiny_tokenizer


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Any]:
    """Three local text files of 30 short documents each (three units) and a 128-word tokenizer."""
    import random

    tiny_tokenizer(tmp_path / "tok")
    rng = random.Random(0)
    for part in range(3):
        docs = [" ".join(f"w{rng.randrange(123)}" for _ in range(rng.randint(20, 60))) for _ in range(30)]
        (tmp_path / "text" / f"part{part}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "text" / f"part{part}.txt").write_text("\n\n".join(docs) + "\n")
    return {"tok": tmp_path / "tok", "sources": [f"file:{tmp_path / 'text'}/*.txt"]}


def prepare_config(corpus: dict[str, Any], cache: Path, workers: int = 1) -> Any:
    from femlm.config import FemlmConfig

    cfg = FemlmConfig(command="prepare")
    cfg.model.tokenizer, cfg.domain.name, cfg.domain.sources = str(corpus["tok"]), "toy", list(corpus["sources"])
    cfg.data.block_size, cfg.download.cache_dir, cfg.download.offline = 32, str(cache), True
    cfg.runtime.data_workers, cfg.logger.progress = workers, False
    return cfg


def prepared(cache: Path) -> dict[str, Any]:
    """What a prepared cache holds: each corpus's split files (bytes) and counts; fails on a half-written one."""
    (corpus_dir,) = [p for p in (cache / "blocks").iterdir()]
    meta = json.loads((corpus_dir / "meta.json").read_text())
    return {"name": corpus_dir.name, **{s: (corpus_dir / f"{s}.bin").read_bytes() for s in ("train", "validation")},
            **{s: meta[s] for s in ("train", "validation")}}


def nothing_left(cache: Path) -> None:
    left = list((cache / "blocks").iterdir()) if (cache / "blocks").is_dir() else []
    assert left == [], left  # neither a corpus nor a temporary directory


@pytest.mark.parametrize("where", ["tokenizing", "assembling"])
def test_prepare_in_process_stops_and_leaves_nothing_in_the_cache(
        where: str, corpus: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    from femlm.data import prepare, workers
    from femlm.train.corpus import run_prepare

    run_prepare(prepare_config(corpus, tmp_path / "reference"), Run(dir=mkdir(tmp_path / "r0"), command="prepare"))
    reference = prepared(tmp_path / "reference")
    hook = (workers, "_tokenize_into") if where == "tokenizing" else (prepare, "_copy_unit")
    real, calls = getattr(*hook), []

    def signalled(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)

    monkeypatch.setattr(*hook, signalled)
    cache = tmp_path / "cache"
    assert run_stopped("prepare", prepare_config(corpus, cache), tmp_path / "r1") == 128 + signal.SIGTERM
    assert len(calls) == 1  # the batch (or the unit's copy) in flight finished, no other started
    nothing_left(cache)
    assert not (tmp_path / "r1" / "corpus.json").exists()
    said_interrupted(capsys, signal.SIGTERM, "stopped during data preparation")
    run_prepare(prepare_config(corpus, cache), Run(dir=mkdir(tmp_path / "r2"), command="prepare"))
    assert prepared(cache) == reference


def test_prepare_with_workers_stops_them_and_leaves_nothing(corpus: dict[str, Any], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes: SIGUSR2 reaches the parent and the workers (a cluster signals every process of the
    job); the parent stops at its next poll, kills the workers, removes the temporary directory."""
    from femlm.data import prepare

    def build(cache: Path) -> Any:
        return prepare.prepare_corpus(cfg.domain, tokenizer, 32, cfg.download, cache, num_proc=2, seed=0,
                                      progress=False)

    from femlm.models.load import load_tokenizer

    cfg = prepare_config(corpus, tmp_path / "unused")
    tokenizer = load_tokenizer(str(corpus["tok"]), cfg.download)
    monkeypatch.setattr(prepare, "MIN_PARALLEL_BYTES", 0)  # workers even for a tiny corpus
    build(tmp_path / "reference")
    assert prepared(tmp_path / "reference")  # (the workers ran: meta.json says how many)
    assert json.loads(next((tmp_path / "reference" / "blocks").iterdir()).joinpath("meta.json").read_text()
                      )["workers"] == 2
    signalled: list[int] = []
    real_drain = prepare._drain
    others = set(mp.active_children())  # another test's processes in this xdist worker, if any: not this build's

    def drain(queue: Any, progress: Any) -> None:
        if not signalled:
            signalled.extend(p.pid for p in mp.active_children() if p not in others)
            for pid in signalled:
                os.kill(pid, signal.SIGUSR2)
            os.kill(os.getpid(), signal.SIGUSR2)
        real_drain(queue, progress)

    monkeypatch.setattr(prepare, "_drain", drain)
    cache = tmp_path / "cache"
    with stop.stop_signals(), pytest.raises(stop.StopRequested) as stopped:
        build(cache)
    assert stopped.value.signum == signal.SIGUSR2 and signalled
    assert [p for p in mp.active_children() if p not in others] == []  # every worker is gone
    nothing_left(cache)
    monkeypatch.setattr(prepare, "_drain", real_drain)
    build(cache)
    assert prepared(cache) == prepared(tmp_path / "reference")


def test_a_worker_error_is_raised_as_itself_and_the_workers_are_stopped(corpus: dict[str, Any], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The clean-up that stops the workers must not hide the error that caused it (it once raised AttributeError:
    the executor forgets its processes on shutdown)."""
    from femlm.data import prepare
    from femlm.errors import UserError
    from femlm.models.load import load_tokenizer

    cfg = prepare_config(corpus, tmp_path / "cache")
    real = prepare.plan_units

    def plan_then_lose_a_file(*args: Any) -> Any:
        units = real(*args)
        (tmp_path / "text" / "part1.txt").unlink()  # a worker will fail to read it
        return units

    monkeypatch.setattr(prepare, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(prepare, "plan_units", plan_then_lose_a_file)
    others = set(mp.active_children())  # another test's processes in this xdist worker, if any
    with pytest.raises((OSError, UserError)):
        prepare.prepare_corpus(cfg.domain, load_tokenizer(str(corpus["tok"]), cfg.download), 32, cfg.download,
                               tmp_path / "cache", num_proc=2, seed=0, progress=False)
    assert [p for p in mp.active_children() if p not in others] == []
    nothing_left(tmp_path / "cache")


def test_a_worker_ignores_the_stop_signals_its_parent_handles(tmp_path: Path) -> None:
    script = ("import sys; from femlm.data import workers; from femlm.data.config import DownloadConfig; "
              "workers.init_worker(workers.Job('scan', DownloadConfig())); print('ready', flush=True); "
              "sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=child_env(), cwd=tmp_path)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            child.send_signal(signum)
        time.sleep(0.3)
        assert child.poll() is None  # still there: only its parent stops it
        child.communicate("", timeout=30)
        assert child.returncode == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_stopped_preparer_stops_the_ranks_waiting_for_it(corpus: dict[str, Any], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun local rank 0 prepares and the others wait on the file system: its stop reaches them as a
    stop with the same signal (not as a failure), and nothing is left in the cache."""
    from femlm.data import shared, workers
    from femlm.models.load import load_tokenizer

    cfg = prepare_config(corpus, tmp_path / "cache")
    tokenizer = load_tokenizer(str(corpus["tok"]), cfg.download)
    real = workers._tokenize_into

    def signalled(*args: Any) -> Any:
        os.kill(os.getpid(), signal.SIGUSR2)
        return real(*args)

    monkeypatch.setattr(workers, "_tokenize_into", signalled)
    args = (cfg.domain, tokenizer, 32, cfg.download, tmp_path / "cache", 1, 0)
    with stop.stop_signals(), pytest.raises(stop.StopRequested):
        shared.prepare_shared(*args, preparer=True, token="t1")
    with pytest.raises(stop.StopRequested, match="preparing the corpus was stopped") as waiter:
        shared.prepare_shared(*args, preparer=False, token="t1", poll_s=0.01)
    assert waiter.value.signum == signal.SIGUSR2
    assert [p.name.startswith(".failed-") for p in (tmp_path / "cache" / "blocks").iterdir()] == [True]


def test_the_stop_flag_lives_as_long_as_the_command() -> None:
    """A stop raised by one command does not stop code run after it in the same process (tests, library use)."""
    with stop.stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested() == signal.SIGTERM
        with pytest.raises(stop.StopRequested) as raised:
            stop.check("a loop")
    assert raised.value.signum == signal.SIGTERM and stop.requested() is None
    stop.check("code after the command")  # no stop
