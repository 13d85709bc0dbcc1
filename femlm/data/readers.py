"""Readers for the labelled-task formats of the mirror: DAPT jsonl, GLUE TSVs, AG News CSV, SemEval XML.

Every reader returns `Rows`: parallel lists of text, optional text pair, the raw label string and the
line it came from, so a bad label can be reported with its file and line. Malformed input raises
`UserError` naming the file and line.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from femlm.errors import UserError

log = logging.getLogger(__name__)
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # MNLI parse columns are long


@dataclass
class Rows:
    path: Path
    text: list[str] = field(default_factory=list)
    text_pair: list[str | None] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    line: list[int] = field(default_factory=list)

    def add(self, text: str, pair: str | None, label: str, line: int) -> None:
        self.text.append(text)
        self.text_pair.append(pair)
        self.label.append(label)
        self.line.append(line)

    def __len__(self) -> int:
        return len(self.text)


def _nonempty(rows: Rows, what: str) -> Rows:
    if not rows:
        raise UserError(f"{rows.path}: no examples ({what}); the file is empty or has only a header; "
                        "restore it from the registry URL or the mirror")
    return rows


def iter_jsonl(handle: Iterable[str], path: Path, expect: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-empty line; a line that is not a JSON object is a UserError naming
    ``path:line`` and what each line must hold (``expect``)."""
    for lineno, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{lineno}: malformed JSON ({err.msg} at column {err.colno}); each line "
                            f"must be one object with {expect}") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object with {expect}, got {type(obj).__name__}")
        yield lineno, obj


def read_dapt_jsonl(path: Path) -> Rows:
    """One JSON object per line with "text" and "label" (DAPT / SciBERT format; other keys ignored)."""
    rows = Rows(path)
    with open(path, encoding="utf-8") as handle:
        for lineno, obj in iter_jsonl(handle, path, '"text" and "label"'):
            if not isinstance(obj.get("text"), str) or "label" not in obj:
                raise UserError(f'{path}:{lineno}: expected an object with a string "text" and a "label", '
                                f"got {str(obj)[:80]!r}")
            rows.add(obj["text"], None, str(obj["label"]), lineno)
    return _nonempty(rows, "jsonl lines")


@dataclass(frozen=True)
class TsvLayout:
    header: bool
    text: tuple[str | int, ...]  # column names (header files) or indices
    label: str | int
    columns: int = 0  # expected column count for files without a header


# GLUE TSV layouts (as in the GLUE zips; SST-2/MRPC/RTE/STS-B are in the mirror).
GLUE_LAYOUTS: dict[str, TsvLayout] = {
    "sst2": TsvLayout(True, ("sentence",), "label"),
    "cola": TsvLayout(False, (3,), 1, columns=4),  # source, label, original mark, sentence
    "mrpc": TsvLayout(True, ("#1 String", "#2 String"), "Quality"),  # header after a UTF-8 BOM
    "stsb": TsvLayout(True, ("sentence1", "sentence2"), "score"),  # 10 columns, score in [0, 5]
    "rte": TsvLayout(True, ("sentence1", "sentence2"), "label"),
    "mnli": TsvLayout(True, ("sentence1", "sentence2"), "gold_label"),
    "qnli": TsvLayout(True, ("question", "sentence"), "label"),
    "qqp": TsvLayout(True, ("question1", "question2"), "is_duplicate"),
    "wnli": TsvLayout(True, ("sentence1", "sentence2"), "label"),
}


def read_glue_tsv(path: Path, task: str) -> Rows:
    """A GLUE TSV by its task's layout (no quoting: GLUE text contains bare quote characters)."""
    layout = GLUE_LAYOUTS[task]
    rows = Rows(path)
    # utf-8-sig drops MRPC's byte-order mark, which would otherwise glue itself to the first column name.
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        index: dict[str | int, int] = {}
        if layout.header:
            header = next(reader, None)
            if header is None:
                return _nonempty(rows, "tsv rows")
            index = {name: i for i, name in enumerate(header)}
            missing = [c for c in (*layout.text, layout.label) if c not in index]
            if missing:
                raise UserError(f"{path}:1: header lacks column(s) {missing} for GLUE {task}; "
                                f"header is {header}")
        else:
            index = {i: i for i in range(layout.columns)}
        need = max(index[c] for c in (*layout.text, layout.label)) + 1
        for row in reader:
            lineno = reader.line_num
            if not row or row == [""]:
                continue
            if len(row) < need:
                raise UserError(f"{path}:{lineno}: {len(row)} tab-separated columns, GLUE {task} needs at "
                                f"least {need}")
            texts = [row[index[c]] for c in layout.text]
            rows.add(texts[0], texts[1] if len(texts) > 1 else None, row[index[layout.label]].strip(), lineno)
    return _nonempty(rows, "tsv rows")


def read_ag_news_csv(path: Path, classes: list[str]) -> Rows:
    """Zhang et al.'s CSV: class (1-based), title, description; label string = classes[class - 1]."""
    rows = Rows(path)
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        for row in reader:
            lineno = reader.line_num
            if not row:
                continue
            if len(row) < 3 or not row[0].strip().isdigit() or not 1 <= int(row[0]) <= len(classes):
                raise UserError(f"{path}:{lineno}: expected class (1-{len(classes)}),title,description; "
                                f"got {row[:3]}")
            # A backslash marks a line break in this corpus ("second\team"): make it a space.
            text = f"{row[1].strip()} {' '.join(row[2:]).strip()}".replace("\\", " ")
            rows.add(" ".join(text.split()), None, classes[int(row[0]) - 1], lineno)
    return _nonempty(rows, "csv rows")


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    if not lines:
        raise UserError(f"{path}: empty; expected one class name per line")
    return lines


# --- HyperPartisan (SemEval-2019 Task 4 by-article) ---------------------------------------------------

def clean_hyperpartisan(text: str) -> str:
    """Longformer's hp_preprocess.py cleaning, which DAPT's hyperpartisan_news jsonl went through."""
    text = re.sub(r"[a-zA-Z]+/[a-zA-Z]+", " ", text)
    text = text.replace("\n", " ").replace("&#160;", "")
    text = re.sub(r"(http|www|href)\S+", "", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"([!?.]){2,}", r"\1", text)
    text = re.sub(r"\b(\S*?)(.)\2{2,}\b", r"\1\2", text)
    return text.strip()


@dataclass
class Article:
    id: int
    title: str
    text: str  # all text of the <article> element (every paragraph, link text included), cleaned


def read_semeval_articles(path: Path) -> dict[int, Article]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise UserError(f"{path}:{err.position[0]}: malformed XML ({err})") from None
    out: dict[int, Article] = {}
    for el in root.iter("article"):
        raw_id = el.get("id", "")
        if not raw_id.isdigit():
            raise UserError(f"{path}: <article> with id {raw_id!r}; ids must be digits")
        out[int(raw_id)] = Article(int(raw_id), el.get("title", ""), clean_hyperpartisan("".join(el.itertext())))
    if not out:
        raise UserError(f"{path}: no <article> elements")
    return out


def read_semeval_labels(path: Path) -> dict[int, str]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise UserError(f"{path}:{err.position[0]}: malformed XML ({err})") from None
    labels = {int(el.get("id", "-1")): el.get("hyperpartisan", "") for el in root.iter("article")}
    if not labels:
        raise UserError(f"{path}: no <article> ground-truth elements")
    return labels


def resolve_hyperpartisan_splits(path: Path, known: set[int]) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Apply the registry's rule to hp-splits.json: test > dev > train, unlisted ids dropped.

    Returns the disjoint splits (ids in file order) and the overlap counts, which are also logged.
    """
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: malformed JSON ({err.msg})") from None
    if not isinstance(raw, dict) or not {"train", "dev", "test"} <= set(raw):
        raise UserError(f"{path}: expected an object with train, dev and test id lists")
    listed = {s: [int(i) for i in raw[s]] for s in ("train", "dev", "test")}
    unknown = sorted({i for ids in listed.values() for i in ids} - known)
    if unknown:
        raise UserError(f"{path}: ids {unknown[:5]} are not articles of the XML (ids {min(known)}-{max(known)})")
    test, dev = set(listed["test"]), set(listed["dev"])
    counts = {"train_and_test": len(set(listed["train"]) & test), "dev_and_test": len(dev & test),
              "train_and_dev": len((set(listed["train"]) - test) & dev),
              "unassigned": len(known - test - dev - set(listed["train"]))}
    splits = {"train": [i for i in dict.fromkeys(listed["train"]) if i not in test and i not in dev],
              "dev": [i for i in dict.fromkeys(listed["dev"]) if i not in test],
              "test": list(dict.fromkeys(listed["test"]))}
    if any(counts.values()):
        log.warning("%s: splits overlap (%d ids in train and test, %d in dev and test, %d in train and dev) "
                    "and %d articles are unassigned; rule: test > dev > train, unassigned dropped -> "
                    "train %d, dev %d, test %d", path.name, counts["train_and_test"], counts["dev_and_test"],
                    counts["train_and_dev"], counts["unassigned"], len(splits["train"]), len(splits["dev"]),
                    len(splits["test"]))
    return splits, counts


def read_hyperpartisan(articles: Path, ground_truth: Path, splits_file: Path) -> dict[str, Rows]:
    """train/dev/test `Rows` from the SemEval XML, its ground truth and hp-splits.json."""
    docs = read_semeval_articles(articles)
    labels = read_semeval_labels(ground_truth)
    if set(docs) != set(labels):
        raise UserError(f"{ground_truth}: labels for {len(labels)} articles, but {articles} has {len(docs)} "
                        "(ids differ); use the matching ground-truth file")
    splits, _ = resolve_hyperpartisan_splits(splits_file, set(docs))
    out: dict[str, Rows] = {}
    for split, ids in splits.items():
        rows = Rows(ground_truth)
        for i in ids:
            rows.add(docs[i].text, None, labels[i], i)  # "line" is the article id here
        out[split] = rows
    return out
