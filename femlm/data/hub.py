"""``hf:`` corpus sources: a Hugging Face dataset (on the Hub, or a local directory in Hub layout) read with
`datasets`, streaming by default, so tokenization starts without downloading or holding the whole corpus.

The source syntax (``hf:<owner>/<name>?config=..&split=..&text=..&filter=..``) is femlm.data.hub_spec. A row is
one document. Units of parallel work are the dataset's shards after `IterableDataset.reshard`
(parquet: one per row group), in the order `datasets` lists them; each worker opens the dataset once.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from femlm.data.hub_spec import HF_PREFIX, Filter, HubSpec, is_hub_source, parse_hub
from femlm.data.network import hub_reachable as network_reachable
from femlm.errors import UserError

__all__ = ["HF_PREFIX", "Filter", "HubSpec", "is_hub_source", "parse_hub"]  # the syntax, re-exported

HUB_READER_VERSION = 1  # bump when this reader's output changes (invalidates cached corpora)
_OPEN: dict[tuple[str, str], Any] = {}  # (spec, local files) -> opened IterableDataset, per process


# --------------------------------------------------------------------------------------------- opening
def hub_reachable() -> bool:
    """Whether Hub datasets can be fetched: the offline flags, then femlm.data.network's one quick connect."""
    if os.environ.get("HF_DATASETS_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        return False
    return network_reachable()


def unreachable(h: HubSpec, domain: str = "") -> UserError:
    where = f"domain {domain}: " if domain else ""
    return UserError(
        f"{where}the Hub corpus {h.spec} is unreachable (no network, or HF_HUB_OFFLINE set); on a machine with "
        f"internet run `hf download --repo-type dataset {h.path} --local-dir /data/{h.repo}` (or `femlm prepare`), "
        f"then point domain.sources at the local copy, e.g. 'domain.sources=[\"hf:/data/{h.repo}?{_query(h)}\"]' "
        f"or 'domain.sources=[\"file:/data/{h.repo}/*.parquet\"]'")


def _query(h: HubSpec) -> str:
    return h.spec.partition("?")[2] or "split=train"


def check_available(h: HubSpec, domain: str = "") -> None:
    """UserError unless the source can be opened: the local directory exists, or the Hub answers."""
    if h.local:
        if not Path(h.path).is_dir():
            raise UserError(f"domain source {h.spec!r}: the local dataset directory {h.path} does not exist")
    elif not hub_reachable():
        raise unreachable(h, domain)


def open_dataset(h: HubSpec, cache_dir: Path | None = None) -> Any:
    """The source as an `IterableDataset` of shards (reshard: row groups), opened once per process (a local
    directory again when its files change)."""
    handle = (h.spec, str(_local_files(h)) if h.local else "")
    if handle in _OPEN:
        return _OPEN[handle]
    import datasets

    check_available(h)
    kwargs: dict[str, Any] = {"split": h.split, "streaming": h.streaming, "revision": h.revision}
    if h.data_files:
        kwargs["data_files"] = {h.split: h.data_files}
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with _quiet_datasets():
            ds = datasets.load_dataset(h.path, h.config, **kwargs)
            if not h.streaming:
                ds = ds.to_iterable_dataset(num_shards=max(1, min(256, -(-len(ds) // 50_000))))
            ds = ds.reshard()
    except Exception as err:  # noqa: BLE001 - every failure of datasets becomes one line naming the source
        raise open_error(h, err) from None
    finally:
        if enabled:
            datasets.enable_progress_bars()
    _OPEN[handle] = ds
    return ds


def _corrupt_file(h: HubSpec) -> str | None:
    """The first parquet file of a local dataset directory that pyarrow cannot open (None: all open)."""
    if not h.local:
        return None
    import pyarrow.parquet as pq

    for path in sorted(Path(h.path).rglob("*.parquet")):
        try:
            pq.ParquetFile(path)
        except Exception:  # noqa: BLE001
            return str(path)
    return None


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets logs a failed file as an error line before raising; we raise one line of our own instead."""
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def open_error(h: HubSpec, err: Exception) -> UserError:
    from datasets.exceptions import DataFilesNotFoundError, DatasetNotFoundError

    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, UserError):
        return err
    corrupt = _corrupt_file(h)
    if corrupt is not None:
        return UserError(f"domain source {h.spec!r}: {corrupt} is not a readable parquet file (corrupt or "
                         "truncated); download it again or remove it")
    if isinstance(err, DatasetNotFoundError):
        return UserError(f"domain source {h.spec!r}: dataset {h.path!r} not found on the Hub (a typo, or a gated "
                         "/ private dataset: accept its terms and run `hf auth login`)")
    if isinstance(err, (DataFilesNotFoundError, FileNotFoundError)):
        return UserError(f"domain source {h.spec!r}: no data files ({text}); check data_files=, config= and "
                         "split=")
    if isinstance(err, ValueError) and ("split" in text.lower() or "config" in text.lower()):
        return UserError(f"domain source {h.spec!r}: {text}")
    return UserError(f"domain source {h.spec!r}: cannot be read ({type(err).__name__}: {text[:200]})")


def column_names(h: HubSpec, ds: Any) -> list[str]:
    """Top-level columns: from the features when `datasets` knows them, else from the first rows."""
    if ds.features is not None:
        return list(ds.features)
    for table in ds.with_format("arrow").iter(batch_size=1):
        return list(table.column_names)
    return []


def check_fields(h: HubSpec, ds: Any) -> None:
    """UserError naming an unknown text or filter field and the dataset's columns."""
    names = column_names(h, ds)
    for name in h.fields:
        if name not in names and name.split(".")[0] not in names:
            role = "text field" if name in h.text else "filter field"
            raise UserError(f"domain source {h.spec!r}: unknown {role} {name!r}; the dataset's columns are "
                            f"{names[:20]}")


def _local_files(h: HubSpec) -> list[list[Any]]:
    """Each file of a local dataset directory: relative path, size, mtime (hidden files and caches left out)."""
    root = Path(h.path)
    if not root.is_dir():
        return []
    return [[str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".") and ".cache" not in p.relative_to(root).parts]


def _commits_file(cache_dir: Path | None) -> Path | None:
    return Path(cache_dir) / "commits.json" if cache_dir is not None else None


def remembered_commit(h: HubSpec, cache_dir: Path | None) -> str | None:
    """The commit this source resolved to when it was last reached (so a prepared corpus opens offline)."""
    path = _commits_file(cache_dir)
    try:
        return json.loads(path.read_text()).get(f"{h.path}@{h.revision or 'main'}") if path else None
    except (OSError, ValueError):
        return None


def _remember(h: HubSpec, commit: str, cache_dir: Path | None) -> None:
    path = _commits_file(cache_dir)
    if path is None:
        return
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
        known[f"{h.path}@{h.revision or 'main'}"] = commit
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # only an optimisation for offline use


def hub_key(h: HubSpec, cache_dir: Path | None = None) -> dict[str, Any]:
    """Cache-key part: the spec, plus the resolved commit (Hub) or each file's size and mtime (local).

    Offline, a Hub source keys on the commit it resolved to when last reached (remembered under `cache_dir`),
    so a corpus prepared online opens offline; never reached before, it is the one-line unreachable error."""
    key: dict[str, Any] = {"spec": h.spec, "reader": HUB_READER_VERSION}
    if h.local:
        check_available(h)
        key["files"] = _local_files(h)
        return key
    if not hub_reachable():
        commit = remembered_commit(h, cache_dir)
        if commit is None:
            raise unreachable(h)
        key["commit"] = commit
        return key
    try:
        from huggingface_hub import HfApi

        key["commit"] = HfApi().dataset_info(h.path, revision=h.revision).sha
    except Exception as err:  # noqa: BLE001
        name = type(err).__name__
        if "NotFound" in name:
            raise UserError(f"domain source {h.spec!r}: dataset {h.path!r} (revision {h.revision or 'main'}) not "
                            "found on the Hub (a typo, or a gated / private dataset: `hf auth login`)") from None
        raise unreachable(h) from None
    _remember(h, key["commit"], cache_dir)
    return key


# --------------------------------------------------------------------------------------------- reading
def shard_count(h: HubSpec, cache_dir: Path | None = None) -> int:
    """Units of work of the source; also checks that its text and filter fields exist."""
    ds = open_dataset(h, cache_dir)
    check_fields(h, ds)
    return ds.num_shards


def read_shard(h: HubSpec, index: int, cache_dir: Path | None = None) -> Any:
    """Batches of (documents, rows read) of shard `index`; `group` joins consecutive kept rows."""
    ds = open_dataset(h, cache_dir)
    shard = ds.shard(num_shards=ds.num_shards, index=index, contiguous=True)
    pending: list[str] = []
    try:
        for table in shard.with_format("arrow").iter(batch_size=1000):
            docs = table_documents(h, table)
            if h.group > 1:
                pending.extend(docs)
                cut = len(pending) - len(pending) % h.group
                docs = ["\n".join(pending[i:i + h.group]) for i in range(0, cut, h.group)]
                pending = pending[cut:]
            yield docs, table.num_rows
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - a corrupt shard or a broken connection: one line
        if _corrupt_file(h) is not None:
            raise open_error(h, err) from None
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"domain source {h.spec!r}: shard {index} of {ds.num_shards} cannot be read "
                        f"({type(err).__name__}: {text[:200]})") from None
    if pending:
        yield ["\n".join(pending)], 0


def _values(table: Any, name: str) -> list[Any]:
    if name in table.column_names:
        return table.column(name).to_pylist()
    head, *rest = name.split(".")
    out = []
    for value in table.column(head).to_pylist():
        for key in rest:
            value = value.get(key) if isinstance(value, dict) else None
        out.append(value)
    return out


def table_documents(h: HubSpec, table: Any) -> list[str]:
    """The documents of an Arrow batch: rows passing every filter, text fields joined with newlines."""
    n = table.num_rows
    keep = [True] * n
    for flt in h.filters:
        values = _values(table, flt.field)
        keep = [k and flt.keep(v) for k, v in zip(keep, values, strict=True)]
    columns = [_values(table, name) for name in h.text]
    docs = []
    for i in range(n):
        if not keep[i]:
            continue
        parts = [str(col[i]).strip() for col in columns if col[i] is not None and str(col[i]).strip()]
        docs.append("\n".join(parts))
    return docs


def declared_rows(h: HubSpec) -> int | None:
    """Rows of the split as the dataset card declares them (before any filter), when it does."""
    try:
        ds = open_dataset(h)
        splits = ds.info.splits or {}
        info = splits.get(h.split)
        return int(info.num_examples) if info is not None and info.num_examples else None
    except (UserError, AttributeError, KeyError, TypeError):
        return None
