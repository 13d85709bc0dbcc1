"""The ``hf:`` source syntax: one string a ``domain.sources`` entry holds, parsed into a `HubSpec`.

One string, so ``domain.sources`` stays a list of strings that works on the command line and in the
cache key. Hub ids contain '/', so options go in a query string after '?', '&'-separated, values
percent-decoded (``%26`` for '&')::

    hf:<owner>/<name>[?key=value&...]        a Hub dataset, e.g. hf:allenai/c4?config=realnewslike
    hf:</abs|./rel|~/path>[?key=value&...]   a local directory laid out like a Hub repo (data/*.parquet, ...)

Keys (each once, except ``filter``):

* ``config``: the dataset config (``realnewslike``, ``20231101.en``); default: the dataset's default;
* ``split``: default ``train``;
* ``text``: the text field, or several joined with '+' (``title+abstract``: non-empty parts joined with a
  newline); dotted paths reach into structs (``metadata.title``); default ``text``;
* ``filter``: ``<field><op><value>``, op ``==`` (equal; for a list field: holds an element equal to it),
  ``!=`` (the negation) or ``~=`` (contains the substring; for a list: some element does). Repeat to AND
  them: ``filter=metadata.s2fieldsofstudy==Computer Science&filter=source==s2orc``;
* ``data_files``: a glob inside the repo, for repos whose configs are folders (``ComputerScience,*/train-*``);
* ``revision``: a branch, tag or commit to pin (the cache key holds the resolved commit either way);
* ``streaming``: ``true`` (default) or ``false`` (download and convert into ``<cache>/hf`` first, then read);
* ``group``: join every N consecutive rows (after filtering) into one document, for sentence-per-row
  corpora such as BookCorpus, where one row is far shorter than a document.

On the command line, quote such a source: Hydra's override grammar does not take '=' or '&' unquoted, so
``'domain.sources=["hf:allenai/c4?config=realnewslike"]'`` (in YAML files no quoting is needed).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from femlm.errors import UserError

HF_PREFIX = "hf:"
KEYS = ("config", "split", "text", "filter", "data_files", "revision", "streaming", "group")
OPS = ("==", "!=", "~=")
_REPO = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: str

    def keep(self, value: Any) -> bool:
        values = value if isinstance(value, (list, tuple)) else [value]
        texts = ["" if v is None else str(v) for v in values]
        if self.op == "~=":
            return any(self.value in t for t in texts)
        hit = self.value in texts
        return hit if self.op == "==" else not hit

    def __str__(self) -> str:
        return f"{self.field}{self.op}{self.value}"


@dataclass(frozen=True)
class HubSpec:
    spec: str
    path: str
    local: bool
    config: str | None = None
    split: str = "train"
    text: tuple[str, ...] = ("text",)
    filters: tuple[Filter, ...] = ()
    data_files: str | None = None
    revision: str | None = None
    streaming: bool = True
    group: int = 1
    fields: tuple[str, ...] = field(default=())  # every field read: text fields, then filter fields

    @property
    def repo(self) -> str:
        """The dataset's last path component (a name for a local copy)."""
        return self.path.rstrip("/").split("/")[-1]


def is_hub_source(spec: str) -> bool:
    return spec.startswith(HF_PREFIX)


def _bad(spec: str, what: str) -> UserError:
    return UserError(f"domain source {spec!r}: {what}; write hf:<owner>/<name>[?config=..&split=..&text=..&"
                     "filter=..] (see femlm.data.hub)")


def parse_hub(spec: str) -> HubSpec:
    """The `HubSpec` of an ``hf:`` source; one-line UserError for anything malformed."""
    body = spec[len(HF_PREFIX):].strip()
    target, _, query = body.partition("?")
    if not target:
        raise _bad(spec, "no dataset after hf:")
    local = target.startswith(("/", "./", "../", "~")) or target in (".", "..")
    if local:
        target = str(Path(os.path.expanduser(target)).absolute())
    elif not _REPO.match(target):
        raise _bad(spec, f"{target!r} is not a Hub dataset id (owner/name)")
    opts: dict[str, Any] = {"filter": []}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or key not in KEYS:
            raise _bad(spec, f"unknown option {key!r} (allowed: {', '.join(KEYS)})")
        value = unquote(value).strip()
        if key == "filter":
            opts["filter"].append(_parse_filter(spec, value))
        elif key in opts:
            raise _bad(spec, f"option {key!r} given twice")
        else:
            opts[key] = value
    text = tuple(f.strip() for f in opts.get("text", "text").split("+"))
    if not all(text):
        raise _bad(spec, f"text={opts.get('text')!r} has an empty field name")
    streaming = opts.get("streaming", "true").lower()
    if streaming not in ("true", "false"):
        raise _bad(spec, f"streaming={streaming!r}: allowed true or false")
    group = opts.get("group", "1")
    if not group.isdigit() or int(group) < 1:
        raise _bad(spec, f"group={group!r}: a whole number of rows, at least 1")
    filters = tuple(opts["filter"])
    fields = tuple(dict.fromkeys([*text, *(f.field for f in filters)]))
    return HubSpec(spec, target, local, opts.get("config") or None, opts.get("split") or "train", text, filters,
                   opts.get("data_files") or None, opts.get("revision") or None, streaming == "true", int(group),
                   fields)


def _parse_filter(spec: str, value: str) -> Filter:
    for op in OPS:
        name, found, wanted = value.partition(op)
        if found:
            if not name.strip() or not wanted.strip():
                break
            return Filter(name.strip(), op, wanted.strip())
    raise _bad(spec, f"filter={value!r}: write <field>==<value>, <field>!=<value> or <field>~=<substring>")
