"""`femlm download`: fetch (or verify in the mirror) the named datasets and groups, one table line per file
(fetching itself, with its checksums, is femlm.data.fetch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from femlm.data.config import DownloadConfig
from femlm.data.fetch import Unavailable, fetch
from femlm.data.registry import expand_names, get_entry
from femlm.errors import UserError


def download_all(names: list[str], cfg: DownloadConfig) -> list[dict[str, Any]]:
    """Fetch (or verify in the mirror) every file of `names` (datasets or groups); print one line per file.

    A dataset named explicitly must be complete (UserError otherwise). A dataset that came from a group is
    only fetched from the mirror or cache when a mirror is set, and its absence is listed, not an error;
    without a mirror, group members are downloaded and any failure is an error.
    """
    mirror = cfg.mirror_dir()
    rows: list[dict[str, Any]] = []
    missing: dict[str, list[str]] = {}
    failures: list[str] = []
    for name, explicit in expand_names(list(names)):
        for f in get_entry(name).files:
            try:
                path, status = fetch(f, cfg.cache_path(), mirror, cfg.verify, cfg.force, cfg.offline,
                                     network=explicit or mirror is None)
                size: int | None = path.stat().st_size
            except Unavailable as err:
                if explicit and not f.optional:
                    raise
                path, status, size = None, "absent", None
                missing.setdefault(name, []).append(Path(f.path).name)
                if not f.optional and mirror is None:
                    failures.append(str(err))
            row = {"dataset": name, "role": f.role, "file": f.path, "path": str(path) if path else None,
                   "status": status, "bytes": size, "sha256": f.sha256, "optional": f.optional}
            rows.append(row)
            shown = f"{size:>10,d} B" if size is not None else f"{'-':>12}"
            print(f"{name:<20} {f.role:<18} {status:<10} {shown}  {path or f.path}", flush=True)
    if missing:
        where = f"mirror {mirror} and cache" if mirror is not None else "cache, and not downloadable"
        listed = "; ".join(f"{n} ({', '.join(files)})" for n, files in missing.items())
        print(f"absent from the {where}: {listed}. Name a dataset explicitly (femlm download NAME) to "
              "download it.", flush=True)
    if failures:
        raise UserError(f"{len(failures)} file(s) could not be had, e.g. {failures[0]}")
    return rows


def plan_download(cfg: Any, run: Any) -> dict[str, Any]:
    """The datasets a `femlm download` would fetch or verify (names and groups expanded, unknown ones refused)."""
    expanded = expand_names(list(cfg.download.datasets))
    return {"datasets": [name for name, _ in expanded], "mirror": str(cfg.download.mirror_dir() or ""),
            "cache": str(cfg.download.cache_path()), "files": sum(len(get_entry(n).files) for n, _ in expanded)}


def run_download(cfg: Any, run: Any) -> list[dict[str, Any]]:
    """`femlm download`: fetch or verify each named dataset; the table goes to the run directory too."""
    rows = download_all(list(cfg.download.datasets), cfg.download)
    run.write_json("download.json", rows)
    return rows
