"""Plans that tell the truth (documents, tokens, blocks, passes; stand-ins named; too many passes refused), the
`femlm prepare` entry point, and the file-system wait of ranks that do not prepare."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from femlm.data import shared
from femlm.data.config import DataConfig, DomainConfig, DownloadConfig
from femlm.data.plan import check_passes, corpus_plan, stand_in_note
from femlm.data.prepare import corpus_dir, corpus_key
from femlm.data.wordpiece import train_wordpiece
from femlm.errors import UserError
from femlm.masking import MaskingConfig
from femlm.models.load import load_tokenizer
from femlm.runtime.config import RuntimeConfig
from femlm.train.config import TrainerConfig
from femlm.train.corpus import dry_run_plan, run_prepare, run_reads, training_plan_from_blocks
from helpers.configs import domain as domain_config

META = {"train": {"documents": 3036, "tokens": 624_164, "blocks": 1219}, "validation":
        {"documents": 160, "tokens": 32_479, "blocks": 63}, "documents": 3196}


def test_passes_and_the_refusal() -> None:
    fe = MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4)
    trainer = TrainerConfig(batch_size=48, max_steps=40_000)
    steps, per_step = run_reads(trainer, fe)
    assert (steps, per_step) == (40_000, 12) and run_reads(trainer, MaskingConfig()) == (40_000, 48)  # MLM: 4x
    same_sequences = TrainerConfig(batch_size=48, max_steps=40_000, equal_compute="same_sequences")
    assert run_reads(same_sequences, fe) == (10_000, 48)  # K-copy arm: max_steps / K steps of batch_size sequences
    plan = corpus_plan(META, domain_config("cs"), 512, 40_000, per_step)
    assert plan.stand_in and plan.passes == pytest.approx(40_000 * 12 / 1219)
    text = "\n".join(plan.lines())
    assert "train: 3,036 documents, 624,164 tokens, 1,219 blocks of 512" in text and "393.77 passes" in text, text
    assert "stand-in corpus: the offline mirror's samples (s2orc:cs, csabstruct, arxiv_cs, 3,196 documents)" in text
    with pytest.raises(UserError, match=r"makes 393.8 passes over the 1,219 training blocks .* of a stand-in corpus, "
                                        r"more than trainer.max_passes=20; .*domain.max_documents.*trainer.max_steps.*"
                                        r"trainer.max_passes=null") as err:
        check_passes(plan, 20)
    assert "\n" not in str(err.value)
    check_passes(plan, None)  # allowed explicitly
    check_passes(corpus_plan(META, domain_config("cs"), 512, 1000, 12), 20)  # 9.8 passes
    hub = DomainConfig("cs", ["hf:allenai/c4?config=realnewslike"])
    assert stand_in_note(hub) == "" and not corpus_plan(None, hub, 512, 10, 1).stand_in


def _cfg(tmp: Path, domain: DomainConfig, tokenizer_dir: Path, **trainer: object) -> SimpleNamespace:
    return SimpleNamespace(domain=domain, download=DownloadConfig(cache_dir=str(tmp / "cache"), offline=True),
                           data=DataConfig(block_size=16), runtime=RuntimeConfig(data_workers=1), seed=0,
                           model=SimpleNamespace(tokenizer=str(tokenizer_dir), name_or_path=None),
                           trainer=TrainerConfig(**{"batch_size": 8, "max_steps": 50, **trainer}),
                           masking=MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=4))


class _Run:
    def __init__(self, root: Path) -> None:
        self.dir = root

    def write_json(self, name: str, payload: object) -> Path:
        (self.dir / name).write_text(json.dumps(payload))
        return self.dir / name


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DomainConfig, Path]:
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    (tmp_path / "corpus.txt").write_text("\n\n".join(f"local document number {i} about masked tokens ." * 3
                                                     for i in range(40)))
    domain = DomainConfig("mine", [f"file:{tmp_path}/corpus.txt"], None, None, None, validation_fraction=0.1)
    train_wordpiece([f"local document number {i} about masked tokens ." for i in range(40)], 60, tmp_path / "tok")
    return domain, tmp_path


def test_prepare_command_and_dry_run(local, capsys: pytest.CaptureFixture) -> None:
    domain, tmp = local
    cfg = _cfg(tmp, domain, tmp / "tok")
    plan = dry_run_plan(cfg)  # small and local: prepared to count it
    assert plan.prepared and plan.splits["train"]["documents"] == 36 and not plan.stand_in
    summary = run_prepare(cfg, _Run(tmp))
    out = capsys.readouterr().out
    assert "corpus mine: sources file:" in out and "passes over the training blocks" in out
    assert json.loads((tmp / "corpus.json").read_text())["corpus"]["train"]["documents"] == 36
    assert summary["corpus"]["stand_in"] is False
    # The held-out set's context-free baseline (femlm.train.baseline), printed and in corpus.json.
    base = json.loads((tmp / "corpus.json").read_text())["baseline"]
    assert 0 < base["loss"] < base["bayes_loss"] < base["unigram_loss"] and "context-free baseline" in out
    # The training-time check reads the meta of the blocks training got.
    from femlm.data.tokens import PreparedCorpus

    corpus = PreparedCorpus(Path(summary["path"]))
    assert training_plan_from_blocks(cfg, corpus.train).passes == pytest.approx(50 * 2 / corpus.meta["train"]["blocks"])
    with pytest.raises(UserError, match="trainer.max_passes"):
        training_plan_from_blocks(_cfg(tmp, domain, tmp / "tok", max_steps=100_000), corpus.train)


def test_dry_run_of_an_unreachable_hub_corpus_is_one_line(local, monkeypatch: pytest.MonkeyPatch) -> None:
    _, tmp = local
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    paper = DomainConfig("cs", domain_config("cs").paper_sources, 72_000, 2_220_000, 40_000, max_documents=72_000)
    with pytest.raises(UserError, match=r"^domain cs: the Hub corpus hf:claran/modular-s2orc-parquet.* is unreachable "
                                        r".*point domain.sources at the local copy") as err:
        dry_run_plan(_cfg(tmp, paper, tmp / "tok"))
    assert "\n" not in str(err.value)


def test_waiting_ranks_poll_the_file_system(local) -> None:
    domain, tmp = local
    cfg = DownloadConfig(cache_dir=str(tmp / "cache"), offline=True)
    tokenizer = load_tokenizer(str(tmp / "tok"), cfg)
    got: dict[str, object] = {}

    def wait() -> None:
        got["corpus"] = shared.prepare_shared(domain, tokenizer, 16, cfg, tmp / "c", 1, 0, preparer=False,
                                              token="t1", poll_s=0.05)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # nothing prepared yet: still waiting, no timeout
    mine = shared.prepare_shared(domain, tokenizer, 16, cfg, tmp / "c", 1, 0, preparer=True, token="t1")
    waiter.join(timeout=20)
    assert got["corpus"].path == mine.path
    # A failed preparation: the waiters raise its message instead of waiting forever.
    final = corpus_dir(corpus_key(domain, tokenizer, 64, cfg, 0), domain, cfg, tmp / "c")
    shared.failure_marker(final, "t2").write_text("domain mine: the corpus has 400 tokens, shorter than one block")
    with pytest.raises(UserError, match="the process preparing the corpus failed: domain mine: the corpus has 400"):
        shared.prepare_shared(domain, tokenizer, 64, cfg, tmp / "c", 1, 0, preparer=False, token="t2", poll_s=0.01)
    with pytest.raises(UserError, match="shorter than one block"):
        shared.prepare_shared(domain, tokenizer, 4096, cfg, tmp / "c", 1, 0, preparer=True, token="t3")
    final = corpus_dir(corpus_key(domain, tokenizer, 4096, cfg, 0), domain, cfg, tmp / "c")
    assert "shorter than one block" in shared.failure_marker(final, "t3").read_text()
    with pytest.raises(UserError, match="shorter than one block"):  # one process: nobody waits, no marker
        shared.prepare_shared(domain, tokenizer, 4096, cfg, tmp / "c", 1, 0, preparer=True, token="t4", waiters=False)
    assert not shared.failure_marker(final, "t4").exists()
