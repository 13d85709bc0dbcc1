"""Corpora published in splits (issue 45): the WikiExtractor and CL-SciSumm readers, `domain.validation_sources`
(the published held-out files are the validation split, not a random hold-out), `domain.vocabulary_sources` (one
vocabulary for two domains), and the context-free baseline `femlm prepare` prints. Toy copies of the mirror's
formats in tmp_path; tests/test_data_study_mirror.py reads the real files."""

from __future__ import annotations

import dataclasses
import io
import lzma
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import load_documents, prepare_blocks
from femlm.data.documents import scisumm_documents, scisumm_sentences, wikiextractor_documents
from femlm.data.registry import REGISTRY
from femlm.data.tokens import read_meta
from femlm.data.wordpiece import train_wordpiece
from femlm.errors import UserError
from femlm.train.baseline import context_free_baseline, token_counts

WORDS = ["the", "model", "masks", "tokens", "and", "predicts", "them", "from", "context", "with", "lower",
         "gradient", "variance", "paper", "corpus", "parser"]


def _article(i: int, paragraphs: int = 2) -> str:
    rng = np.random.default_rng(i)
    body = "".join(" ".join(rng.choice(WORDS, 15)) + " .\n" for _ in range(paragraphs))
    return f'<doc id="{i}" url="http://en.wikipedia.org/wiki?curid={i}" title="Article {i}">\nArticle {i}\n\n{body}</doc>\n'


def _write_xz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lzma.compress(text.encode("utf-8")))


def _paper(i: int) -> bytes:
    rng = np.random.default_rng(100 + i)
    sentences = "".join(f'<S sid="{k}" ssid="{k}">{" ".join(rng.choice(WORDS, 10))} .</S>\n' for k in range(4))
    return f'<PAPER>\n<S sid="0">Paper {i}</S>\n<SECTION title="1 Intro" number="1">\n{sentences}</SECTION>\n</PAPER>\n'.encode()


# The three kinds of bad file of the real train archive: legacy 8-bit bytes, raw & and <, an empty <PAPER>.
BAD = {"latin1.xml": b'<PAPER><S sid="1">a 3 \xd7 3 grid of the model</S></PAPER>',
       "broken.xml": b'<PAPER><S sid="1">AT&T uses x < y\nin the parser</S><S sid="2">  </S></PAPER>',
       "empty.xml": b"<PAPER>\n</PAPER>\n"}


def _write_tar(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:xz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DownloadConfig, Path]:
    """A mirror with toy enwiki (train 30 articles, valid 6 of which one repeats a train article) and acl_scisumm
    (train 12 papers + the 3 bad files, valid 4 papers); the registry's checksums dropped for them."""
    mirror = tmp_path / "mirror"
    enwiki, acl = REGISTRY["enwiki"], REGISTRY["acl_scisumm"]
    _write_xz(mirror / enwiki.file("train").path, "".join(_article(i) for i in range(30)) + _article(99, 0))
    _write_xz(mirror / enwiki.file("valid").path, "".join(_article(i) for i in [*range(30, 35), 3]))
    _write_xz(mirror / enwiki.file("test").path, "".join(_article(i) for i in range(40, 44)))
    _write_tar(mirror / acl.file("train").path, {**{f"p{i:02d}.xml": _paper(i) for i in range(12)}, **BAD})
    _write_tar(mirror / acl.file("valid").path, {f"v{i}.xml": _paper(50 + i) for i in range(4)})
    for entry in (enwiki, acl):
        files = tuple(dataclasses.replace(f, sha256=None) for f in entry.files)
        monkeypatch.setitem(REGISTRY, entry.name, dataclasses.replace(entry, files=files))
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    return DownloadConfig(mirror=str(mirror), cache_dir=str(tmp_path / "cache"), offline=True), tmp_path


def test_wikiextractor_articles(toy) -> None:
    cfg, tmp = toy
    docs = wikiextractor_documents(tmp / "mirror" / REGISTRY["enwiki"].file("train").path)
    assert len(docs) == 30  # article 99 is its title alone: no document
    assert docs[0].split("\n")[0] == "Article 0" and len(docs[0].split("\n")) == 3
    assert not any("<doc" in d or "</doc>" in d for d in docs)
    _write_xz(tmp / "not-wiki.xz", "plain text\n")
    with pytest.raises(UserError, match="no <doc"):
        wikiextractor_documents(tmp / "not-wiki.xz")


def test_scisumm_bad_files_are_read_by_pattern(toy) -> None:
    cfg, tmp = toy
    docs = scisumm_documents(tmp / "mirror" / REGISTRY["acl_scisumm"].file("train").path)
    assert len(docs) == 14  # 12 papers + the latin-1 and the broken one; the empty <PAPER> is no document
    assert docs[0].split("\n")[:2][0] == "Paper 0" and len(docs[0].split("\n")) == 5
    assert not any("<S" in d or "SECTION" in d for d in docs)  # <SECTION ...> never opens a sentence
    assert scisumm_sentences(BAD["latin1.xml"]) == ["a 3 \ufffd 3 grid of the model"]
    assert scisumm_sentences(BAD["broken.xml"]) == ["AT&T uses x < y in the parser"]  # blank <S> dropped
    assert scisumm_sentences(b"<S>x &amp; &#8220;y&#8221;</S>") == ["x & \u201cy\u201d"]


def test_split_option(toy) -> None:
    cfg, _ = toy
    both = DomainConfig("w", ["enwiki:train", "enwiki:valid"])
    assert len(load_documents(DomainConfig("w", ["enwiki:valid"]), cfg)) == 6
    assert len(load_documents(both, cfg)) == 35  # the valid copy of article 3 is a duplicate
    assert len(load_documents(DomainConfig("w", ["enwiki"]), cfg)) == 39  # every split, test's 4 too
    with pytest.raises(UserError, match=r":bogus is not a split.*:train, :valid"):
        load_documents(DomainConfig("a", ["acl_scisumm:bogus"]), cfg)


def _tokenizer(cfg: DownloadConfig, tmp: Path):  # noqa: ANN202 (a transformers class)
    return train_wordpiece(load_documents(DomainConfig("w", ["enwiki:train"]), cfg), 120, tmp / "tok")


def test_validation_sources_are_the_split(toy) -> None:
    cfg, tmp = toy
    tok = _tokenizer(cfg, tmp)
    domain = DomainConfig("wikipedia", ["enwiki:train"], validation_sources=["enwiki:valid"])
    corpus = prepare_blocks(domain, tok, 16, cfg, tmp / "c", num_proc=1, seed=0)
    meta = read_meta(corpus.path)
    # every training article trains; the valid file is the held-out split, less its copy of a training article
    assert meta["train"]["documents"] == 30 and meta["validation"]["documents"] == 5
    assert meta["validation_sources"] == ["enwiki:valid"]
    flat = corpus.validation.numpy().ravel()
    assert (flat == tok.cls_token_id).sum() == 5
    # The split is the files', not the seed's: the same token files under another seed and with two workers.
    again = prepare_blocks(domain, tok, 16, cfg, tmp / "c2", num_proc=2, seed=7)
    assert read_meta(again.path)["sha256"] == meta["sha256"]
    # max_documents samples training articles only; every held-out article stays.
    sample = prepare_blocks(dataclasses.replace(domain, max_documents=10), tok, 16, cfg, tmp / "c3", seed=0)
    sampled = read_meta(sample.path)
    assert sampled["train"]["documents"] == 10 and sampled["validation"]["documents"] == 5
    assert sampled["sha256"]["validation"] == meta["sha256"]["validation"]
    with pytest.raises(UserError, match="exceeds the corpus's 30 distinct documents"):
        prepare_blocks(dataclasses.replace(domain, max_documents=31), tok, 16, cfg, tmp / "c4")


def test_two_domains_share_one_vocabulary(toy, monkeypatch: pytest.MonkeyPatch) -> None:
    from femlm.train import inputs

    cfg, tmp = toy
    seen: list[list[str]] = []
    real = train_wordpiece

    def recording(docs, vocab_size, out):  # noqa: ANN001, ANN202
        seen.append(list(docs))
        return real(docs, vocab_size, out)

    monkeypatch.setattr("femlm.data.wordpiece.train_wordpiece", recording)
    wiki = DomainConfig("wikipedia", ["enwiki:train"], validation_sources=["enwiki:valid"],
                        vocabulary_sources=["enwiki:train"])
    acl = DomainConfig("acl", ["acl_scisumm:train"], validation_sources=["acl_scisumm:valid"],
                       vocabulary_sources=["enwiki:train"], max_documents=3)

    def run_cfg(domain: DomainConfig) -> SimpleNamespace:
        return SimpleNamespace(domain=domain, download=cfg, model=SimpleNamespace(vocab_size=100),
                               data=SimpleNamespace(corpus_seed=lambda seed: seed), seed=0)

    assert inputs.shared_wordpiece(run_cfg(acl)) == inputs.shared_wordpiece(run_cfg(wiki))
    assert len(seen) == 1 and len(seen[0]) == 30  # trained once, on the Wikipedia training articles
    own = inputs.shared_wordpiece(run_cfg(dataclasses.replace(acl, vocabulary_sources=[])))
    assert own != inputs.shared_wordpiece(run_cfg(wiki)) and len(seen[1]) == 3  # ACL's own sample


def test_context_free_baseline_by_hand() -> None:
    # vocabulary: 0 [MASK], 1 special, 2..4 words; training counts 2: 5, 3: 3, 4: 0 (+1 smoothing: 6/11, 4/11, 1/11)
    counts = token_counts(np.array([2] * 5 + [3] * 3 + [1] * 9, dtype=np.uint16), 5)
    assert counts.tolist() == [0, 9, 5, 3, 0]
    labels = torch.tensor([[2, 3, 4, -100]])
    shown = torch.tensor([[0, 3, 2, 4]])  # hidden, kept, replaced (by 2), not a target
    base = context_free_baseline(counts, shown, labels, special_ids=[0, 1], mask_id=0)
    p = {2: 6 / 11, 3: 4 / 11, 4: 1 / 11}
    assert base["loss"] == pytest.approx(-(np.log(p[2]) + 0 + np.log(p[4])) / 3)
    assert base["unigram_loss"] == pytest.approx(-(np.log(p[2]) + np.log(p[3]) + np.log(p[4])) / 3)
    # without knowing which visible token was kept: P(t | v) = p(t) (0.1 [t = v] + 0.1 / 5) / (0.1 p(v) + 0.1 / 5)
    kept = p[3] * (0.1 + 0.02) / (0.1 * p[3] + 0.02)
    replaced = p[4] * 0.02 / (0.1 * p[2] + 0.02)
    assert base["bayes_loss"] == pytest.approx(-(np.log(p[2]) + np.log(kept) + np.log(replaced)) / 3)
    assert (base["hidden"], base["kept"], base["replaced"], base["targets"]) == (1, 1, 1, 3)
    assert base["loss"] < base["bayes_loss"] < base["unigram_loss"] + 1  # the oracle bound is the lowest
