"""Readers and task loading on tiny files written in tmp_path (no mirror, no network)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from femlm.data import documents, readers
from femlm.data.config import DownloadConfig, TaskConfig
from femlm.data.registry import REGISTRY
from femlm.data.tasks import load_task
from femlm.errors import UserError
from helpers.configs import TASK_NAMES, task


def _toy_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, files: dict[str, str | bytes]
                ) -> DownloadConfig:
    """Write `files` (role -> content) at `name`'s registry paths in a tmp mirror and drop the registry's
    checksums for that dataset (the toy files are not the real ones)."""
    mirror = tmp_path / "mirror"
    entry = REGISTRY[name]
    for f in entry.files:
        if f.role in files:
            path = mirror / f.path
            path.parent.mkdir(parents=True, exist_ok=True)
            content = files[f.role]
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
    unchecked = tuple(dataclasses.replace(f, sha256=None, url=None) for f in entry.files)
    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(entry, files=unchecked))
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    return DownloadConfig(mirror=str(mirror), cache_dir=str(tmp_path / "cache"), offline=True)


def _jsonl(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_malformed_jsonl_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(_jsonl({"text": "a", "label": "Uses"}) + "\n" + '{"text": "b", "label": \n')
    with pytest.raises(UserError, match=r"train\.jsonl:3: malformed JSON"):
        readers.read_dapt_jsonl(path)
    path.write_text(_jsonl({"text": "a", "label": "Uses"}, {"label": "Uses"}))
    with pytest.raises(UserError, match=r"train\.jsonl:2: expected an object"):
        readers.read_dapt_jsonl(path)


def test_dapt_task_labels_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _jsonl({"text": "x", "label": "Uses", "metadata": []}, {"text": "y", "label": "Future"})
    cfg = _toy_mirror(tmp_path, monkeypatch, "citation_intent", {"train": good, "dev": good, "test": good})
    dd = load_task(task("aclarc"), cfg)
    assert {k: len(v) for k, v in dd.items()} == {"train": 2, "dev": 2, "test": 2}
    assert dd["train"]["label"] == [5, 3] and dd["train"].column_names == ["text", "label"]
    assert dd["train"].features["label"].names == task("aclarc").labels
    # A label outside the task's label set: file, line, label and the allowed set.
    cfg = _toy_mirror(tmp_path, monkeypatch, "citation_intent",
                      {"train": good + _jsonl({"text": "z", "label": "Bogus"})})
    with pytest.raises(UserError, match=r"train\.jsonl:3: label 'Bogus' is not in task\.labels.*Background"):
        load_task(task("aclarc"), cfg)
    # An empty file.
    cfg = _toy_mirror(tmp_path, monkeypatch, "citation_intent", {"train": "\n", "dev": good, "test": good})
    with pytest.raises(UserError, match=r"train\.jsonl: no examples"):
        load_task(task("aclarc"), cfg)


def test_missing_split_and_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _jsonl({"text": "x", "label": "USED-FOR"})
    cfg = _toy_mirror(tmp_path, monkeypatch, "sciie", {"train": good, "dev": good, "test": good})
    with pytest.raises(UserError, match=r"eval_split='validation'.*train, dev, test"):
        load_task(dataclasses.replace(task("scierc"), eval_split="validation"), cfg)
    (tmp_path / "mirror" / "dapt" / "sciie" / "test.jsonl").unlink()
    with pytest.raises(UserError, match=r"sciie.*test\.jsonl not found.*FEMLM_MIRROR=DIR"):
        load_task(task("scierc"), cfg)


def test_glue_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mrpc = ("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tHe said \"hi\".\tHe said hi.\n"
            "0\t3\t4\tA\tB\n")
    cfg = _toy_mirror(tmp_path, monkeypatch, "mrpc", {"train": mrpc, "dev": mrpc})
    dd = load_task(task("mrpc"), cfg)
    assert dd["train"][0] == {"text": 'He said "hi".', "text_pair": "He said hi.", "label": 1}
    cola = "gj04\t1\t\tFine sentence.\ngj04\t0\t*\tBad sentence ."  # no header, no trailing newline
    cfg = _toy_mirror(tmp_path, monkeypatch, "cola", {"train": cola, "dev": cola})
    dd = load_task(task("cola"), cfg)
    assert dd["dev"]["text"] == ["Fine sentence.", "Bad sentence ."] and dd["dev"]["label"] == [1, 0]
    sts = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
           "0\tg\tf\ty\t1\tn\tn\tA plane.\tAn air plane.\t4.750\n")
    cfg = _toy_mirror(tmp_path, monkeypatch, "stsb", {"train": sts, "dev": sts})
    dd = load_task(task("stsb"), cfg)
    assert dd["dev"][0]["label"] == pytest.approx(4.75) and dd["dev"][0]["text_pair"] == "An air plane."
    short = "sentence\tlabel\nonly one column\n"
    cfg = _toy_mirror(tmp_path, monkeypatch, "sst2", {"train": short, "dev": short})
    with pytest.raises(UserError, match=r"train\.tsv:2: 1 tab-separated columns"):
        load_task(task("sst2"), cfg)


def test_ag_news_carve_is_stratified_and_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = "".join(f'"{c}","Title {i}","Desc\\ {i}"\n' for i in range(50) for c in (1, 2, 3, 4))
    cfg = _toy_mirror(tmp_path, monkeypatch, "ag", {"classes": "World\nSports\nBusiness\nSci/Tech\n",
                                                    "test": rows})
    dd = load_task(task("agnews"), cfg)
    assert {k: len(v) for k, v in dd.items()} == {"train": 140, "dev": 20, "test": 40}
    assert sorted(dd["test"]["label"]) == [0] * 10 + [1] * 10 + [2] * 10 + [3] * 10
    assert dd["train"][0]["text"].startswith("Title ") and "\\" not in dd["train"][0]["text"]
    assert "carved" in dd["test"].info.description
    again = load_task(task("agnews"), cfg)
    assert again["test"]["text"] == dd["test"]["text"]  # fixed carve seed


def _hp_files(n: int, splits: dict[str, list[int]]) -> dict[str, str]:
    arts = "".join(f'<article id="{i:07d}" title="T{i}"><p>Text {i} http://x.y/z more.</p> tail</article>'
                   for i in range(n))
    truth = "".join(f'<article hyperpartisan="{"true" if i % 2 else "false"}" id="{i:07d}"/>' for i in range(n))
    return {"articles": f'<?xml version="1.0"?><articles>{arts}</articles>',
            "ground_truth": f"<articles>{truth}</articles>", "splits": json.dumps(splits)}


def test_hyperpartisan_overlap_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    caplog: pytest.LogCaptureFixture) -> None:
    # ids 0-9: train lists 0-5, dev 5-7, test 4,5,8; id 9 unassigned.
    files = _hp_files(10, {"train": [0, 1, 2, 3, 4, 5], "dev": [5, 6, 7], "test": [4, 5, 8]})
    cfg = _toy_mirror(tmp_path, monkeypatch, "hyperpartisan_news", files)
    with caplog.at_level(logging.WARNING):
        dd = load_task(task("hyperpartisan"), cfg)
    assert {k: len(v) for k, v in dd.items()} == {"train": 4, "dev": 2, "test": 3}
    assert "2 ids in train and test, 1 in dev and test" in caplog.text and "1 articles are unassigned" in caplog.text
    assert dd["test"]["text"][0] == "Text 4 more. tail" and dd["test"]["label"] == [0, 1, 0]
    docs = documents.hyperpartisan_documents(
        {"articles": tmp_path / "mirror" / REGISTRY["hyperpartisan_news"].file("articles").path,
         "splits": tmp_path / "mirror" / REGISTRY["hyperpartisan_news"].file("splits").path}, "train")
    assert [d.split("\n")[0] for d in docs] == ["T0", "T1", "T2", "T3", "T9"]  # no dev/test article


def test_task_config_validation() -> None:
    for task_cfg in (task(name) for name in TASK_NAMES):
        task_cfg.validate()
    with pytest.raises(UserError, match="main_metric"):
        dataclasses.replace(task("cola"), main_metric="accuracy").validate()
    with pytest.raises(UserError, match="regression"):
        dataclasses.replace(task("stsb"), labels=["0", "1"]).validate()
    with pytest.raises(UserError, match="1 or 2 fields"):
        TaskConfig(dataset="./mine", labels=["a", "b"], text_fields=["a", "b", "c"]).validate()
    with pytest.raises(UserError, match="task.labels is not set"):
        TaskConfig(dataset="./mine").validate()  # a local dataset names its labels


def test_corpus_readers(tmp_path: Path) -> None:
    wt = tmp_path / "wiki.valid.tokens"
    wt.write_text(" \n = Alpha = \n \n First para . \n = = Sub = = \n More . \n = Beta = \n Beta text . \n")
    assert documents.wikitext_documents(wt) == ["Alpha\nFirst para .\n= = Sub = =\nMore .", "Beta\nBeta text ."]
    sgm = tmp_path / "reut2-001.sgm"
    sgm.write_bytes(b'<REUTERS NEWID="1">\n<TEXT>&#2;\n<TITLE>CO &lt;ABC&gt; UP</TITLE>\n<BODY>Shares\nrose '
                    b'\xfc 5 pct.\n Reuter\n&#3;</BODY></TEXT>\n</REUTERS>\n<REUTERS NEWID="2"><TEXT>'
                    b'<TITLE>BRIEF</TITLE></TEXT></REUTERS>')
    assert documents.reuters_documents(sgm) == ["CO <ABC> UP\nShares rose \u00fc 5 pct."]
    s2 = tmp_path / "meta.jsonl"
    s2.write_text(_jsonl({"title": "A", "abstract": "x  y", "mag_field_of_study": ["Computer Science"]},
                         {"title": "B", "abstract": "z", "mag_field_of_study": ["Medicine"]},
                         {"title": "C", "abstract": None, "mag_field_of_study": None}))
    assert documents.s2orc_documents(s2, "cs") == ["A\nx y"]
    assert documents.s2orc_documents(s2) == ["A\nx y", "B\nz"]


@pytest.mark.parametrize("task, header, row, expected", [
    ("mnli", "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
             "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
     "0\t1\t1e\tgov\t( a )\t( b )\t(ROOT a)\t(ROOT b)\tA \"quoted\" premise.\tA hypothesis.\tneutral\tneutral\t"
     "neutral\tneutral\tneutral\tneutral", ('A "quoted" premise.', "A hypothesis.", "neutral")),
    ("qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "7\t1\t2\tWhy?\tHow?\t1", ("Why?", "How?", "1")),
    ("qnli", "index\tquestion\tsentence\tlabel", "0\tWho?\tHim.\tentailment", ("Who?", "Him.", "entailment")),
    ("wnli", "index\tsentence1\tsentence2\tlabel", "0\tA.\tB.\t0", ("A.", "B.", "0")),
])
def test_other_glue_layouts(tmp_path: Path, task: str, header: str, row: str, expected: tuple) -> None:
    path = tmp_path / "dev.tsv"
    path.write_text(f"{header}\n{row}\n")
    rows = readers.read_glue_tsv(path, task)
    assert (rows.text[0], rows.text_pair[0], rows.label[0]) == expected and rows.line == [2]
