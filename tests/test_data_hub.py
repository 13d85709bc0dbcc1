"""``hf:`` sources on a small local dataset in Hub layout (parquet shards + README.md configs), streaming and not;
and the one-line errors of bad sources (unknown dataset or field, empty filter, corrupt parquet, offline Hub)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from femlm.data import hub
from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import load_documents, prepare_blocks
from femlm.data.wordpiece import train_wordpiece
from femlm.errors import UserError

README = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
- config_name: first_shard
  data_files:
  - split: train
    path: data/train-00000-of-00003.parquet
---
# toy papers
"""
FIELDS = ["Computer Science", "Biology", "Physics"]


def _row(shard: int, i: int) -> dict:
    n = shard * 100 + i
    return {"title": f"Paper {n}", "text": f"paper {n} studies masked language models and {FIELDS[n % 3].lower()} .",
            "meta": {"fos": [FIELDS[n % 3]], "year": 2000 + n % 20}, "categories": f"cs.CL x{n % 5}"}


@pytest.fixture
def hubdir(tmp_path: Path) -> Path:
    """3 shards x 40 rows (row groups of 16), fields of study cycling CS / Biology / Physics."""
    root = tmp_path / "toy-papers"
    (root / "data").mkdir(parents=True)
    for shard in range(3):
        rows = [_row(shard, i) for i in range(40)]
        pq.write_table(pa.Table.from_pylist(rows), root / "data" / f"train-0000{shard}-of-00003.parquet",
                       row_group_size=16)
    (root / "README.md").write_text(README)
    return root


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DownloadConfig:
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    monkeypatch.setattr(hub, "_OPEN", {})
    return DownloadConfig(cache_dir=str(tmp_path / "cache"), offline=True)


def _docs(spec: str, cfg: DownloadConfig) -> list[str]:
    return load_documents(DomainConfig("toy", [spec]), cfg)


@pytest.mark.parametrize("streaming", ["true", "false"])
def test_hub_layout_read_streaming_and_not(hubdir: Path, cfg: DownloadConfig, streaming: str) -> None:
    docs = _docs(f"hf:{hubdir}?streaming={streaming}", cfg)
    assert docs == [_row(s, i)["text"] for s in range(3) for i in range(40)]  # shard order, row order
    joined = _docs(f"hf:{hubdir}?text=title+text&streaming={streaming}", cfg)
    assert joined[0] == "Paper 0\n" + _row(0, 0)["text"]
    cs = _docs(f"hf:{hubdir}?filter=meta.fos==Computer Science&streaming={streaming}", cfg)
    assert len(cs) == 40 and all("computer science" in d for d in cs)
    both = _docs(f"hf:{hubdir}?filter=meta.fos!=Biology&filter=categories~=x1&streaming={streaming}", cfg)
    assert both == [r["text"] for s in range(3) for i in range(40) if (r := _row(s, i))["meta"]["fos"] != ["Biology"]
                    and r["categories"].endswith("x1")]
    assert _docs(f"hf:{hubdir}?config=first_shard&streaming={streaming}", cfg) == docs[:40]
    grouped = _docs(f"hf:{hubdir}?group=16&streaming={streaming}", cfg)
    assert "\n".join(grouped) == "\n".join(docs) and max(d.count("\n") for d in grouped) == 15


def test_hub_source_to_blocks_in_parallel(hubdir: Path, cfg: DownloadConfig, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    domain = DomainConfig("toy", [f"hf:{hubdir}?text=title+text"], None, None, None, validation_fraction=0.1)
    tokenizer = train_wordpiece(load_documents(domain, cfg), 90, tmp_path / "tok")
    corpus = prepare_blocks(domain, tokenizer, 16, cfg, tmp_path / "c1", num_proc=2)  # hf: -> 2 spawned workers
    assert corpus.meta["workers"] == 2 and corpus.meta["train"]["documents"] == 108
    assert corpus.meta["stand_in"] is False and corpus.meta["stand_in_note"] == ""
    single = prepare_blocks(domain, tokenizer, 16, cfg, tmp_path / "c2", num_proc=1)
    assert (single.train.numpy() == corpus.train.numpy()).all()
    assert (single.validation.numpy() == corpus.validation.numpy()).all()


def test_bad_hub_sources_are_one_line_errors(hubdir: Path, cfg: DownloadConfig, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(spec: str, match: str) -> None:
        with pytest.raises(UserError, match=match) as err:
            _docs(spec, cfg)
        assert "\n" not in str(err.value)

    fails(f"hf:{hubdir}?text=abstract", r"unknown text field 'abstract'; the dataset's columns are \['title'")
    fails(f"hf:{hubdir}?filter=fos==Computer Science", "unknown filter field 'fos'")
    with pytest.raises(UserError, match=r"the filter meta.fos==Chemistry kept none of its 120 rows"):
        prepare_blocks(DomainConfig("toy", [f"hf:{hubdir}?filter=meta.fos==Chemistry"]), _tok(tmp_path), 8, cfg,
                       tmp_path / "c")
    fails(f"hf:{hubdir}?colour=red", r"unknown option 'colour' \(allowed: config, split")
    fails(f"hf:{hubdir}?filter=meta.fos", "filter='meta.fos': write <field>==<value>")
    fails(f"hf:{hubdir}?group=0", "group='0'")
    fails("hf:not a name", "is not a Hub dataset id")
    fails(f"hf:{tmp_path}/missing", "the local dataset directory .*missing does not exist")
    fails(f"hf:{hubdir}?split=validation", "split")
    # A corrupt shard: named with the source, in one line.
    (hubdir / "data" / "train-00001-of-00003.parquet").write_bytes(b"PAR1 this is not parquet")
    for streaming in ("true", "false"):
        fails(f"hf:{hubdir}?streaming={streaming}", r"train-00001-of-00003\.parquet is not a readable parquet file")
    # Hub ids: offline -> how to point domain.sources at local files; unknown dataset -> not found.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fails("hf:allenai/c4?config=realnewslike", r"the Hub corpus hf:allenai/c4\?config=realnewslike is unreachable "
          r".*point domain.sources at the local copy, e.g. 'domain.sources=\[\"hf:/data/c4\?config=realnewslike\"\]'")
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)

    def not_found(*args: object, **kwargs: object) -> None:
        from datasets.exceptions import DatasetNotFoundError

        raise DatasetNotFoundError("Dataset 'nobody/nothing' doesn't exist on the Hub or cannot be accessed.")

    monkeypatch.setattr("datasets.load_dataset", not_found)
    fails("hf:nobody/nothing", r"dataset 'nobody/nothing' not found on the Hub")


def _tok(tmp_path: Path):  # noqa: ANN202 (a transformers class)
    return train_wordpiece(["paper studies masked language models"] * 3, 40, tmp_path / "tok-small")


def test_corrupt_local_parquet_file(tmp_path: Path, cfg: DownloadConfig) -> None:
    good = tmp_path / "files" / "a.parquet"
    good.parent.mkdir()
    pq.write_table(pa.table({"text": ["one document", "another document"]}), good)
    assert load_documents(DomainConfig("toy", [f"file:{good}"]), cfg) == ["one document", "another document"]
    bad = tmp_path / "files" / "b.parquet"
    bad.write_bytes(b"not a parquet file at all")
    with pytest.raises(UserError, match=r"b\.parquet: not a readable parquet file .*leave it out of domain.sources"):
        load_documents(DomainConfig("toy", [f"file:{tmp_path}/files/*.parquet"]), cfg)
    pq.write_table(pa.table({"body": ["x"]}), bad)
    with pytest.raises(UserError, match=r'b\.parquet: no "text" column; the columns are \[\'body\'\]'):
        load_documents(DomainConfig("toy", [f"file:{bad}"]), cfg)


def test_domain_validate_parses_hub_specs() -> None:
    DomainConfig("x", ["hf:allenai/c4?config=realnewslike&text=text"]).validate()
    with pytest.raises(UserError, match="unknown option 'txt'"):
        DomainConfig("x", ["hf:allenai/c4?txt=text"]).validate()
    with pytest.raises(UserError, match="given twice"):
        dataclasses.replace(DomainConfig("x", ["s2orc:cs"]), paper_sources=["hf:a/b?split=x&split=y"]).validate()
    spec = hub.parse_hub("hf:a/b?data_files=ComputerScience,*/train-*.parquet&filter=x%26y==1%3D2")
    assert spec.data_files == "ComputerScience,*/train-*.parquet" and str(spec.filters[0]) == "x&y==1=2"


def test_prepared_hub_corpus_keys_offline_on_the_remembered_commit(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    spec = hub.parse_hub("hf:allenai/c4?config=realnewslike")
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info",
                        lambda self, repo, revision=None: type("Info", (), {"sha": "abc123"})())
    assert hub.hub_key(spec, tmp_path)["commit"] == "abc123"
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    assert hub.hub_key(spec, tmp_path)["commit"] == "abc123"  # offline: the commit it was prepared from
    with pytest.raises(UserError, match="is unreachable"):
        hub.hub_key(spec, tmp_path / "elsewhere")
