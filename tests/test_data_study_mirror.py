"""The study corpora of issue 45 read from the real mirror (../shared/data; skipped when it is absent): the
`wikipedia` and `acl` domains' counts, their published splits disjoint, the ACL archive's bad files read, and
(slow) the whole preparation's token files and vocabulary against their recorded sha256."""

from __future__ import annotations

import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import load_documents
from femlm.data.documents import scisumm_sentences
from femlm.data.fetch import resolve_files

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
pytestmark = [pytest.mark.mirror,
              pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no local mirror at {MIRROR}")]


@pytest.fixture(scope="module")
def cfg() -> DownloadConfig:
    return DownloadConfig(mirror=str(MIRROR), offline=True, verify=False)


def _docs(spec: str, cfg: DownloadConfig) -> list[str]:
    return load_documents(DomainConfig("d", [spec]), cfg)


def test_wikipedia_held_out_splits(cfg: DownloadConfig) -> None:
    valid, test = _docs("enwiki:valid", cfg), _docs("enwiki:test", cfg)
    # MANIFEST.md: 248 and 234 <doc> articles; one test article is its title alone.
    assert (len(valid), len(test)) == (248, 233)
    assert not set(valid) & set(test)
    assert valid[0].split("\n")[0] == "Agriculture"


def test_acl_papers_and_bad_files(cfg: DownloadConfig) -> None:
    path = resolve_files("acl_scisumm", cfg, ("train",))["train"]
    kinds = {"not utf-8": 0, "not xml": 0, "empty": 0}
    docs, sentences = 0, 0
    with tarfile.open(path, "r:xz") as archive:
        for member in archive:
            raw = archive.extractfile(member).read()
            read = scisumm_sentences(raw)
            docs, sentences = docs + bool(read), sentences + len(read)
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                kinds["not utf-8"] += 1
                assert read and any("\ufffd" in s for s in read), member.name
            try:
                ET.fromstring(raw)
            except ET.ParseError:
                kinds["not xml"] += 1
                assert read, member.name
            kinds["empty"] += not read
    assert kinds == {"not utf-8": 55, "not xml": 75, "empty": 1}  # MANIFEST.md's caveats
    # 320,612 <S> elements (MANIFEST.md), 4,584 of them blank; 1,526 papers, the empty one no document.
    assert (docs, sentences) == (1525, 316028)


def test_acl_splits_are_paper_disjoint(cfg: DownloadConfig) -> None:
    valid = _docs("acl_scisumm:valid", cfg)
    assert len(valid) == 200 and sum(d.count("\n") + 1 for d in valid) == 34328
    titles = {d.split("\n")[0] for d in valid}
    train = _docs("acl_scisumm:train", cfg)
    assert len(train) == 1525 and not set(train) & set(valid)
    assert len(titles - {d.split("\n")[0] for d in train}) >= 195  # a few titles are generic ("Introduction")


@pytest.mark.slow
def test_wikipedia_train_articles(cfg: DownloadConfig) -> None:
    train = _docs("enwiki:train", cfg)
    assert len(train) == 10259  # 10,322 articles, 63 of them a title alone
    held = set(_docs("enwiki:valid", cfg)) | set(_docs("enwiki:test", cfg))
    assert not held & set(train)
    titles = {d.split("\n")[0] for d in train}
    assert not titles & {d.split("\n")[0] for d in held}


# What `femlm prepare preset=tiny domain=<name>` writes (128-token blocks, the 8,192-token WordPiece vocabulary
# trained on the Wikipedia training articles): a change of a reader, the vocabulary trainer or the split shows here.
VOCABULARY_SHA256 = "977b33d9312cb17def5e0fc5291901ed2217d4be407bd9c917710fa63a91ed31"
PREPARED = {
    "wikipedia": {"train": "1dac8a61fb274701ad293c313c011b173f62111861fc4d3211da6b90eb0e4207",
                  "validation": "e793e83e8bdb816fadbac2e8bdee66ff8376aafbd448b09e99f9f5b2b0cfec33"},
    "acl": {"train": "974f0be24b2d2806972e1275cb2cf5ded3b237f4bbbad94ef5f6f38edb47c03b",
            "validation": "388984770ec1ef3ca3a8e2cc1e692c645ab8b38b8142a42e441e85f5a5f2ba09"},
}
COUNTS = {"wikipedia": ((10259, 37169766, 290388), (248, 1094806, 8553)),
          "acl": ((1525, 12442603, 97207), (200, 1358826, 10615))}


@pytest.mark.slow
def test_prepared_study_corpora_fingerprints(tmp_path: Path) -> None:
    from femlm.data.tokenizer import vocabulary_fingerprint
    from femlm.train.corpus import corpus_tokenizer, prepare_for
    from helpers.configs import composed

    for name in ("wikipedia", "acl"):  # acl trains no vocabulary of its own: it finds wikipedia's in the cache
        cfg = composed("prepare", "preset=tiny", f"domain={name}")
        cfg.download.mirror, cfg.download.cache_dir = str(MIRROR), str(tmp_path)
        tokenizer = corpus_tokenizer(cfg)
        assert vocabulary_fingerprint(tokenizer) == VOCABULARY_SHA256 and len(tokenizer) == 8192
        meta = prepare_for(cfg, tokenizer).meta
        assert meta["sha256"] == PREPARED[name], name
        assert tuple(tuple(meta[s][k] for k in ("documents", "tokens", "blocks"))
                     for s in ("train", "validation")) == COUNTS[name]
    assert len(list((tmp_path / "tokenizers").iterdir())) == 1
