"""Corpus readers: each mirror format converted to plain-text documents (one string per document).

A domain's local corpus is the union of its sources' documents (`femlm.data.corpus.load_documents`).
Sources are registry names with an optional option after a colon: ``s2orc:cs`` keeps Computer Science
papers, ``hyperpartisan_news:train`` keeps the articles outside the task's dev/test splits (task text: no
domain preset uses it, since the paper and DAPT never pre-trained on task text; it is there for task-adaptive
pre-training experiments). A corpus published in splits takes the split as its option: ``enwiki:train``,
``acl_scisumm:valid`` (a domain lists its held-out split under ``validation_sources``).
"""

from __future__ import annotations

import csv
import html
import lzma
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

from femlm.data.readers import iter_jsonl, read_semeval_articles, resolve_hyperpartisan_splits
from femlm.errors import UserError


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [obj for _, obj in iter_jsonl(handle, path, "the corpus's fields")]


def _squash(text: str) -> str:
    return " ".join(text.split())


def _title_body(title: str, body: str) -> str:
    title, body = _squash(title or ""), (body or "").strip()
    return f"{title}\n{body}" if title and body else title or body


_TOP_HEADING = re.compile(r"^= (?!=)(.*\S) =$")


def wikitext_documents(path: Path) -> list[str]:
    """WikiText ``.tokens``: a document per article, split on top-level `` = Title = `` heading lines."""
    docs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if len(current) > 1:  # a heading alone is not a document
            docs.append("\n".join(current))
        current.clear()

    with open(path, encoding="utf-8") as handle:
        for line in handle:
            stripped = line.strip()
            if not stripped:
                continue
            match = _TOP_HEADING.match(stripped)
            if match:
                flush()
                current.append(match.group(1))
            else:
                current.append(stripped)
    flush()
    return docs


def csabstruct_documents(path: Path) -> list[str]:
    """CSAbstruct jsonl: an abstract is its sentences joined with spaces."""
    docs = []
    for i, obj in enumerate(_jsonl(path), 1):
        sentences = obj.get("sentences")
        if not isinstance(sentences, list):
            raise UserError(f'{path}: record {i} has no "sentences" list')
        docs.append(" ".join(str(s).strip() for s in sentences))
    return docs


def arxiv_documents(path: Path) -> list[str]:
    """arXiv CSV (titles, summaries, ...): title + abstract, the abstract's hard line wraps undone."""
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"titles", "summaries"} <= set(reader.fieldnames):
            raise UserError(f"{path}:1: expected columns titles,summaries; header is {reader.fieldnames}")
        return [_title_body(row["titles"], _squash(row["summaries"] or "")) for row in reader]


def s2orc_documents(path: Path, option: str | None = None) -> list[str]:
    """S2ORC metadata jsonl: title + abstract of papers that have one; option ``cs`` keeps CS papers."""
    if option not in (None, "cs", "all"):
        raise UserError(f"source option s2orc:{option}: allowed s2orc:cs (Computer Science only) or s2orc")
    docs = []
    for obj in _jsonl(path):
        if not obj.get("abstract"):
            continue
        if option == "cs" and "Computer Science" not in (obj.get("mag_field_of_study") or []):
            continue
        docs.append(_title_body(obj.get("title") or "", _squash(obj["abstract"])))
    return docs


def realnews_documents(path: Path) -> list[str]:
    """RealNews / Grover jsonl: title + text."""
    return [_title_body(obj.get("title") or "", obj.get("text") or "") for obj in _jsonl(path)
            if (obj.get("text") or "").strip()]


_REUTERS = re.compile(r"<REUTERS\b.*?</REUTERS>", re.S)
_TITLE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)
_CONTROL_REF = re.compile(r"&#(\d+);")


def _reuters_text(raw: str) -> str:
    # Control-character references (&#2; start, &#3; end of text, &#5;...) are transmission codes: drop.
    raw = _CONTROL_REF.sub(lambda m: "" if int(m.group(1)) < 32 else m.group(0), raw)
    return html.unescape(raw)


def reuters_documents(path: Path) -> list[str]:
    """Reuters-21578 SGML: TITLE + BODY of each record that has a BODY, trailing "Reuter" sign-off dropped."""
    # latin-1 maps every byte: some reut2-*.sgm files hold stray non-UTF-8 bytes.
    text = path.read_bytes().decode("latin-1")
    docs = []
    for record in _REUTERS.findall(text):
        body = _BODY.search(record)
        if body is None:
            continue
        title = _TITLE.search(record)
        content = _squash(_reuters_text(body.group(1)))
        content = re.sub(r"\s*\bReuter\s*$", "", content)
        docs.append(_title_body(_reuters_text(title.group(1)) if title else "", content))
    if not docs and "<REUTERS" not in text:
        raise UserError(f"{path}: no <REUTERS> records; expected a Reuters-21578 reut2-NNN.sgm file")
    return docs


def hyperpartisan_documents(paths: dict[str, Path], option: str | None = None) -> list[str]:
    """HyperPartisan articles as news text (title + text): task text, for task-adaptive pre-training only (no
    domain preset reads it). Option ``train`` drops the task's dev and test articles; ``all`` keeps every article."""
    if option not in (None, "train", "all"):
        raise UserError(f"source option hyperpartisan_news:{option}: allowed :train or :all")
    articles = read_semeval_articles(paths["articles"])
    keep = set(articles)
    if option != "all":
        splits, _ = resolve_hyperpartisan_splits(paths["splits"], set(articles))
        keep -= set(splits["dev"]) | set(splits["test"])
    return [_title_body(a.title, a.text) for i, a in articles.items() if i in keep and a.text]


def wikiextractor_documents(path: Path) -> list[str]:
    """WikiExtractor output (xz): a document per ``<doc ...>`` ... ``</doc>`` article, its title line and
    paragraphs one per line, blank lines dropped; an article that is its title alone is not a document."""
    docs: list[str] = []
    current: list[str] | None = None
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("<doc "):
                current = []
            elif line.startswith("</doc>"):
                if current is not None and len(current) > 1:
                    docs.append("\n".join(current))
                current = None
            elif current is not None and line.strip():
                current.append(line.strip())
    if not docs:
        raise UserError(f"{path}: no <doc ...> articles; expected WikiExtractor output compressed with xz")
    return docs


# A sentence element <S ...>...</S>, by pattern on the raw bytes: 75 of the ACL files are not well-formed XML and
# 55 not UTF-8 (shared/data/MANIFEST.md). `<S(\s...)?>` and not `<S[^>]*>`, which also opens at <SECTION ...> and
# would glue the section tag and the section's first sentence together; DOTALL: a few sentences span lines.
_SENTENCE = re.compile(rb"<S(?:\s[^>]*)?>(.*?)</S>", re.S)


def scisumm_sentences(raw: bytes) -> list[str]:
    """The sentences of one CL-SciSumm paper XML: decoded with replacement characters (legacy 8-bit bytes),
    entities resolved, whitespace squashed, empty ones dropped."""
    out = []
    for match in _SENTENCE.findall(raw):
        sentence = _squash(html.unescape(match.decode("utf-8", errors="replace")))
        if sentence:
            out.append(sentence)
    return out


def scisumm_documents(path: Path) -> list[str]:
    """CL-SciSumm paper XMLs in a tar.xz: a document per paper, its ``<S>`` sentences one per line, in member
    order; a paper without sentences (one file is an empty ``<PAPER>``) is no document."""
    docs = []
    with tarfile.open(path, "r:xz") as archive:
        for member in archive:
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            with handle:
                sentences = scisumm_sentences(handle.read())
            if sentences:
                docs.append("\n".join(sentences))
    if not docs:
        raise UserError(f"{path}: no <S> sentences in any member; expected a tar.xz of CL-SciSumm paper XML files")
    return docs


# format -> reader(paths by role, option) for every corpus format of the registry.
SourceReader = Callable[[dict[str, Path], str | None], list[str]]


def _per_file(fn: Callable[[Path], list[str]], suffixes: tuple[str, ...]) -> SourceReader:
    def read(paths: dict[str, Path], option: str | None) -> list[str]:
        if option:
            raise UserError(f"source option :{option} is not supported by this corpus (only s2orc:cs, "
                            "hyperpartisan_news:train|all and the split of a corpus published in splits, e.g. "
                            "enwiki:train)")
        return [doc for role in sorted(paths) if paths[role].name.endswith(suffixes) for doc in fn(paths[role])]
    return read


def _by_role(fn: Callable[[Path], list[str]]) -> SourceReader:
    """A corpus published in splits (one file per role): the option picks a split (``enwiki:train``); none reads
    every file, in the registry's order."""
    def read(paths: dict[str, Path], option: str | None) -> list[str]:
        if option is not None and option not in paths:
            raise UserError(f"source option :{option} is not a split of this corpus; allowed "
                            f"{', '.join(f':{role}' for role in paths)} (or none: every split)")
        return [doc for role in paths if option in (None, role) for doc in fn(paths[role])]
    return read


READERS: dict[str, SourceReader] = {
    "wikitext_tokens": _per_file(wikitext_documents, (".tokens",)),
    "csabstruct": _per_file(csabstruct_documents, (".jsonl",)),
    "arxiv_csv": _per_file(arxiv_documents, (".csv",)),
    "realnews_jsonl": _per_file(realnews_documents, (".jsonl",)),
    "reuters_sgm": _per_file(reuters_documents, (".sgm",)),
    "s2orc_metadata": lambda paths, option: s2orc_documents(paths["metadata"], option),
    "semeval_hyperpartisan": hyperpartisan_documents,
    "wikiextractor_xz": _by_role(wikiextractor_documents),
    "scisumm_xml_tar": _by_role(scisumm_documents),
}
