"""Bring-your-own data: ``file:`` corpus sources and local task directories (tiny files in tmp_path)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from femlm.data import local, prepare
from femlm.data.config import DomainConfig, DownloadConfig, TaskConfig
from femlm.data.corpus import blocks_dir, blocks_meta, load_documents, prepare_blocks
from femlm.data.registry import REGISTRY
from femlm.data.tasks import load_task, task_data_notes
from femlm.data.wordpiece import train_wordpiece
from femlm.errors import UserError

WORDS = ["the", "model", "masks", "tokens", "and", "predicts", "them", "from", "context", "with", "lower",
         "gradient", "variance", "local", "corpus"]


def _sentence(rng: np.random.Generator, n: int = 10) -> str:
    return " ".join(rng.choice(WORDS, n)) + " ."


def _write_corpus(root: Path) -> tuple[list[str], list[str]]:
    """a.txt: 6 blank-line-separated documents (two lines each); b.jsonl: 6 records; c.txt.gz: 2 documents."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    txt = [f"{_sentence(rng)}\n{_sentence(rng)}" for _ in range(6)]
    (root / "a.txt").write_text("\n\n".join(txt) + "\n\n\n")
    jsonl = [_sentence(rng, 14) for _ in range(6)]
    (root / "b.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(jsonl)))
    gz = [_sentence(rng), _sentence(rng)]
    with gzip.open(root / "c.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join(gz))
    return txt + gz, jsonl


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    txt, jsonl = _write_corpus(tmp_path / "corpus")
    cfg = DownloadConfig(cache_dir=str(tmp_path / "cache"), offline=True)
    domain = DomainConfig("mine", [f"file:{tmp_path}/corpus/*.txt*", f"file:{tmp_path}/corpus/b.jsonl"],
                          None, None, None, validation_fraction=0.25)
    return domain, cfg, tmp_path, txt, jsonl


@pytest.fixture
def tokenizer(env):  # noqa: ANN201 (a transformers class)
    domain, cfg, tmp, _, _ = env
    return train_wordpiece(load_documents(domain, cfg), 80, tmp / "tok")


def test_local_txt_jsonl_gz_corpus_to_blocks(env, tokenizer) -> None:
    domain, cfg, tmp, txt, jsonl = env
    docs = load_documents(domain, cfg)
    # a.txt then c.txt.gz (sorted glob), then b.jsonl; lines of a .txt document joined with a newline.
    assert docs == [*txt, *jsonl] and docs[0].count("\n") == 1
    dd = prepare_blocks(domain, tokenizer, 16, cfg, tmp / "blocks", num_proc=1)
    assert set(dd) == {"train", "validation"} and len(dd["train"]) > 0 and len(dd["validation"]) > 0
    assert dd["train"].numpy().shape[1] == 16
    meta = blocks_meta(blocks_dir(domain, tokenizer, 16, cfg, tmp / "blocks"))
    assert meta["documents"] == 14 and meta["validation"]["documents"] == 4
    files = [f["path"] for s in meta["key"]["sources"] for f in s[1]["files"]]
    assert files == [str(tmp / "corpus" / n) for n in ("a.txt", "c.txt.gz", "b.jsonl")]
    # A directory means its corpus files, in sorted order (a.txt, b.jsonl, c.txt.gz).
    by_dir = load_documents(dataclasses.replace(domain, sources=[f"file:{tmp}/corpus"]), cfg)
    assert by_dir == [*txt[:6], *jsonl, *txt[6:]]


def test_mixed_with_registry_source(env, monkeypatch: pytest.MonkeyPatch) -> None:
    domain, cfg, tmp, txt, jsonl = env
    entry = REGISTRY["wikitext2"]
    mirror = tmp / "mirror"
    for role in ("valid", "test"):
        path = mirror / entry.file(role).path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f" = Wiki {role} = \n \n the model masks tokens . \n")
    unchecked = tuple(dataclasses.replace(f, sha256=None, url=None) for f in entry.files)
    monkeypatch.setitem(REGISTRY, "wikitext2", dataclasses.replace(entry, files=unchecked))
    mixed = dataclasses.replace(domain, sources=["wikitext2", f"file:{tmp}/corpus/b.jsonl"])
    docs = load_documents(mixed, dataclasses.replace(cfg, mirror=str(mirror)))
    assert len(docs) == 2 + len(jsonl) and docs[0].startswith("Wiki")


def test_editing_a_file_invalidates_the_cache(env, tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    domain, cfg, tmp, _, _ = env
    first = prepare_blocks(domain, tokenizer, 16, cfg, tmp / "blocks", num_proc=1)
    before = blocks_dir(domain, tokenizer, 16, cfg, tmp / "blocks")
    real = prepare.plan_units
    monkeypatch.setattr(prepare, "plan_units", lambda *a, **k: pytest.fail("documents were read again"))
    again = prepare_blocks(domain, tokenizer, 16, cfg, tmp / "blocks", num_proc=1)  # from the cache
    assert (again["train"].numpy() == first["train"].numpy()).all()
    monkeypatch.setattr(prepare, "plan_units", real)
    path = tmp / "corpus" / "b.jsonl"
    stat = path.stat()
    path.write_text(path.read_text() + json.dumps({"text": "a brand new local document ."}) + "\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: the sha256 still tells
    after = blocks_dir(domain, tokenizer, 16, cfg, tmp / "blocks")
    assert after != before
    prepare_blocks(domain, tokenizer, 16, cfg, tmp / "blocks", num_proc=1)
    assert blocks_meta(after)["documents"] == blocks_meta(before)["documents"] + 1
    # Large files are keyed by size and mtime instead of sha256.
    monkeypatch.setattr(local, "HASH_LIMIT", 0)
    keyed = blocks_dir(domain, tokenizer, 16, cfg, tmp / "blocks")
    assert "mtime_ns" in local.local_source_key(f"file:{path}")["files"][0]
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert blocks_dir(domain, tokenizer, 16, cfg, tmp / "blocks") != keyed


def test_corpus_errors_name_the_files(env, tokenizer) -> None:
    domain, cfg, tmp, _, _ = env
    bad = tmp / "bad"
    bad.mkdir()

    def docs(*sources: str) -> list[str]:
        return load_documents(dataclasses.replace(domain, sources=list(sources)), cfg)

    with pytest.raises(UserError, match=r"pattern .*/nothing/\*\.txt matches nothing"):
        docs(f"file:{tmp}/nothing/*.txt")
    with pytest.raises(UserError, match="does not exist"):
        docs(f"file:{tmp}/missing.txt")
    (bad / "m.jsonl").write_text('{"text": "fine"}\n{"text": "broken"\n')
    with pytest.raises(UserError, match=rf"{bad}/m\.jsonl:2: malformed JSON"):
        docs(f"file:{bad}/m.jsonl")
    (bad / "k.jsonl").write_text('\n{"body": "x", "title": "y"}\n')
    with pytest.raises(UserError, match=r"k\.jsonl:2: no \"text\" field; the object has keys \['body', 'title'\]"):
        docs(f"file:{bad}/k.jsonl")
    (bad / "notes.md").write_text("x")
    with pytest.raises(UserError, match=r"notes\.md .*unsupported file type"):
        docs(f"file:{bad}/*")
    (bad / "dangling.txt").symlink_to(bad / "gone.txt")
    with pytest.raises(UserError, match=r"dangling\.txt .*not a readable file"):
        docs(f"file:{bad}/dangling.txt")
    with pytest.raises(UserError, match="looks like a file path"):
        docs(f"{tmp}/corpus/a.txt")
    (bad / "blank.txt").write_text("\n  \n\n")
    (bad / "empty.jsonl").write_text('{"text": ""}\n{"text": null}\n')
    with pytest.raises(UserError, match=r"domain mine: sources .*blank\.txt.*empty\.jsonl.* hold no documents"):
        docs(f"file:{bad}/blank.txt", f"file:{bad}/empty.jsonl")
    (bad / "one.txt").write_text("a single document\nover two lines\n")
    with pytest.raises(UserError, match=r"one\.txt.*1 document\(s\)"):
        prepare_blocks(dataclasses.replace(domain, sources=[f"file:{bad}/one.txt"]), tokenizer, 16, cfg,
                       tmp / "blocks")
    with pytest.raises(UserError, match=r"a\.txt.*the corpus has \d+ tokens in 14 documents, shorter than one "
                                        r"block of 4096"):
        prepare_blocks(domain, tokenizer, 4096, cfg, tmp / "blocks")
    with pytest.raises(UserError, match="give a file, directory or glob"):
        DomainConfig("mine", ["file:"]).validate()


# --- local tasks -------------------------------------------------------------------------------------

def _task(dataset: str | Path, **kw: object) -> TaskConfig:
    values: dict = dict(name="mine", dataset=str(dataset), text_fields=["text"], labels=["neg", "pos"],
                        metric="macro_f1", main_metric="macro_f1", eval_split="test")
    return TaskConfig(**{**values, **kw})


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    root = tmp_path / "mytask"
    root.mkdir()
    _jsonl(root / "train.jsonl", [{"text": "good film", "label": "pos"}, {"text": "bad film", "label": "neg"},
                                  {"text": "great", "label": "pos"}])
    (root / "dev.tsv").write_text("label\ttext\nneg\tdull plot\npos\tfine acting\n")
    (root / "test.csv").write_text('text,label\n"awful, really",neg\n')
    return root


def test_local_task_loads_all_splits(task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = DownloadConfig(cache_dir=str(tmp_path / "cache"), offline=True)
    monkeypatch.chdir(tmp_path)
    dd = load_task(_task("./mytask"), cfg)
    assert set(dd) == {"train", "dev", "test"}
    assert dd["train"]["label"] == [1, 0, 1] and dd["dev"]["label"] == [0, 1] and dd["test"]["label"] == [0]
    assert dd["dev"]["text"] == ["dull plot", "fine acting"] and dd["test"]["text"] == ["awful, really"]
    assert dd["train"].features["label"].names == ["neg", "pos"]
    notes = task_data_notes(_task("./mytask"), cfg)
    assert len(notes) == 1 and "local directory" in notes[0] and str(task_dir) in notes[0]
    assert "local directory" in dd["train"].info.description
    with pytest.raises(UserError, match=r"write task\.dataset=\./mytask"):
        load_task(_task("mytask"), cfg)


def test_local_pair_regression_task(tmp_path: Path) -> None:
    root = tmp_path / "sts"
    root.mkdir()
    for split in ("train", "dev"):
        _jsonl(root / f"{split}.jsonl", [{"sentence1": "a cat", "sentence2": "a dog", "label": 2.5},
                                         {"sentence1": "x", "sentence2": "x", "label": 5}])
    task = _task(root, text_fields=["sentence1", "sentence2"], labels=None, metric="pearson_spearman",
                 main_metric="pearson", eval_split="dev")
    dd = load_task(task, DownloadConfig(cache_dir=str(tmp_path / "cache"), offline=True))
    assert set(dd) == {"train", "dev"} and dd["dev"]["label"] == [2.5, 5.0]
    assert dd["train"]["text_pair"] == ["a dog", "x"]
    _jsonl(root / "dev.jsonl", [{"sentence1": "a cat", "label": 1}])
    with pytest.raises(UserError, match=r"dev\.jsonl:1: missing field 'sentence2'"):
        load_task(task, DownloadConfig(offline=True))


def test_local_task_errors_name_the_file(task_dir: Path, tmp_path: Path) -> None:
    cfg = DownloadConfig(cache_dir=str(tmp_path / "cache"), offline=True)
    task = _task(task_dir)
    with pytest.raises(UserError, match=r"local task directory .*/nope does not exist"):
        load_task(_task(tmp_path / "nope"), cfg)
    _jsonl(task_dir / "train.jsonl", [{"text": "ok", "label": "pos"}, {"text": "meh", "label": "neutral"}])
    with pytest.raises(UserError, match=r"train\.jsonl:2: label 'neutral' is not in task\.labels .*allowed "
                                        r"\['neg', 'pos'\]"):
        load_task(task, cfg)
    (task_dir / "train.jsonl").write_text('{"text": "ok", "label": "pos"}\n{"text": "ok" "label"}\n')
    with pytest.raises(UserError, match=r"train\.jsonl:2: malformed JSON"):
        load_task(task, cfg)
    _jsonl(task_dir / "train.jsonl", [{"sentence": "ok", "label": "pos"}])
    with pytest.raises(UserError, match=r"train\.jsonl:1: missing field 'text'.*keys \['label', 'sentence'\]"):
        load_task(task, cfg)
    (task_dir / "train.jsonl").write_text("\n")
    with pytest.raises(UserError, match=r"train\.jsonl: no examples"):
        load_task(task, cfg)
    (task_dir / "dev.tsv").write_text("label\ttext\n")
    (task_dir / "train.jsonl").write_text('{"text": "ok", "label": "pos"}\n')
    with pytest.raises(UserError, match=r"dev\.tsv: no examples"):
        load_task(task, cfg)
    (task_dir / "dev.tsv").write_text("label\tsentence\npos\tok\n")
    with pytest.raises(UserError, match=r"dev\.tsv:1: the header lacks column\(s\) \['text'\]"):
        load_task(task, cfg)
    (task_dir / "dev.tsv").write_text("text\tlabel\nok\n")
    with pytest.raises(UserError, match=r"dev\.tsv:2: 1 tab-separated columns.*missing field 'label'"):
        load_task(task, cfg)
    (task_dir / "dev.tsv").unlink()
    with pytest.raises(UserError, match=r"has no dev file; expected train\.jsonl .*dev\.jsonl"):
        load_task(task, cfg)
