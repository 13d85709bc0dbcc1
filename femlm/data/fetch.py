"""Get registry files: from a local mirror, the cache, or the network; always checked against their sha256.

Order: a mirror (``download.mirror`` or ``$FEMLM_MIRROR``) is read in place: nothing is copied, since
the mirror already is a verified local copy and duplicating it would only cost disk. Otherwise the cache
(``download.cache_dir`` / ``$FEMLM_CACHE``, same layout as the mirror), otherwise an HTTP download.

Downloads stream into ``<dest>.part`` while hashing, and only a complete file whose sha256 matches is
renamed into place (`os.replace`, atomic), so an interrupted or corrupted download never leaves a file
that looks complete. A leftover ``.part`` is resumed with an HTTP Range request (or restarted when the
server ignores it). A checksum mismatch deletes the temporary file and raises `UserError`.

Checksum stamps (``<file>.sha256``, JSON with sha256 + size + mtime) record a file already verified; with
``verify=False`` a file whose stamp still matches is trusted without re-hashing ("cached"), with
``verify=True`` (default) it is re-hashed ("verified"). Mirror stamps live under
``<cache>/stamps/<mirror-hash>/`` because a mirror may be read-only. A mirror file is hashed at most once per
process (while its size and mtime stay the same): a command that resolves the same tokenizer files several times
verifies them once.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from tqdm import tqdm

from femlm.data.catalog import FileEntry
from femlm.data.config import DownloadConfig
from femlm.data.registry import get_entry
from femlm.errors import UserError

CHUNK = 1 << 20
TIMEOUT_S = 60
_urlopen = urllib.request.urlopen  # tests may monkeypatch this; they never touch the network


class Unavailable(UserError):
    """A file is in neither the mirror nor the cache and could not be downloaded."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _read_stamp(stamp: Path, path: Path) -> str | None:
    """The stamped sha256 if the stamp still describes `path` (same size and mtime), else None."""
    try:
        data = json.loads(stamp.read_text())
        st = path.stat()
        if data["size"] == st.st_size and data["mtime_ns"] == st.st_mtime_ns:
            return str(data["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _write_stamp(stamp: Path, path: Path, digest: str) -> None:
    st = path.stat()
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
        os.replace(tmp, stamp)
    except OSError:
        pass  # a stamp only saves a re-hash; a read-only cache must not stop the run


def _mismatch(entry: FileEntry, path: Path, got: str, fix: str) -> UserError:
    return UserError(f"dataset {entry.dataset}: checksum mismatch for {path}: expected sha256 "
                     f"{entry.sha256}, got {got}; the file was refused; {fix}")


# sha256 of the mirror files this process has hashed, by (path, size, mtime_ns).
_MIRROR_HASHED: dict[tuple[str, int, int], str] = {}


def _mirror_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _MIRROR_HASHED:
        _MIRROR_HASHED[key] = sha256_file(path)
    return _MIRROR_HASHED[key]


def _check_existing(entry: FileEntry, path: Path, stamp: Path, verify: bool, fix: str, once: bool = False) -> str:
    """Check a file already on disk; return its status (cached / verified / unverified). `once`: a mirror file,
    hashed at most once per process."""
    stamped = _read_stamp(stamp, path)
    if not verify and stamped is not None and (entry.sha256 is None or stamped == entry.sha256):
        return "cached"
    got = _mirror_sha256(path) if once else sha256_file(path)
    if entry.sha256 is not None and got != entry.sha256:
        stamp.unlink(missing_ok=True)
        raise _mismatch(entry, path, got, fix)
    _write_stamp(stamp, path, got)
    return "verified" if entry.sha256 is not None else "unverified"


def _mirror_stamp(cache_dir: Path, mirror: Path, rel: str) -> Path:
    tag = hashlib.sha1(str(mirror.resolve()).encode()).hexdigest()[:12]
    return cache_dir / "stamps" / tag / f"{rel}.sha256"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _http_download(url: str, dest: Path, expected: str | None, label: str, _retry: bool = True) -> str:
    """Stream `url` to ``dest.part`` (resuming a leftover part), check it, rename it to `dest`; return sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "femlm-download"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = _urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset and _retry:  # the part is bogus (longer than the file): restart
            part.unlink()
            return _http_download(url, dest, expected, label, _retry=False)
        raise Unavailable(f"{label}: download from {url} failed: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as err:
        raise Unavailable(f"{label}: download from {url} failed: {getattr(err, 'reason', err)}") from None
    digest = hashlib.sha256()
    with response:
        resumed = bool(offset) and getattr(response, "status", 200) == 206
        if resumed:  # hash what the part already holds, then append the rest
            with open(part, "rb") as handle:
                while block := handle.read(CHUNK):
                    digest.update(block)
        else:
            offset = 0
        length = response.headers.get("Content-Length")
        total = int(length) + offset if length is not None else None
        try:
            with open(part, "ab" if resumed else "wb") as handle, tqdm(
                    total=total, initial=offset, unit="B", unit_scale=True, desc=label, disable=None,
                    leave=False) as bar:
                while block := response.read(CHUNK):
                    handle.write(block)
                    digest.update(block)
                    bar.update(len(block))
        except (OSError, http.client.HTTPException) as err:
            raise UserError(f"{label}: download from {url} was interrupted after {part.stat().st_size} "
                            f"bytes ({type(err).__name__}); the partial file {part} is kept and the next "
                            "run resumes it") from None
    size = part.stat().st_size
    if total is not None and size != total:
        raise UserError(f"{label}: download from {url} ended after {size} of {total} bytes; the partial "
                        f"file {part} is kept and the next run resumes it")
    got = digest.hexdigest()
    if expected is not None and got != expected:
        part.unlink()
        raise UserError(f"{label}: checksum mismatch for {dest} downloaded from {url}: expected sha256 "
                        f"{expected}, got {got}; the file was refused and deleted")
    os.replace(part, dest)
    return got


def _extract_member(archive: Path, member: str, dest: Path, label: str) -> None:
    """Copy one member of a .zip or .tar(.gz) archive to `dest`, atomically."""
    tmp = dest.with_name(dest.name + ".part")
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf, zf.open(member) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
        else:
            with tarfile.open(archive) as tf:
                src = tf.extractfile(member)
                if src is None:
                    raise KeyError(member)
                with src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
    except (KeyError, zipfile.BadZipFile, tarfile.TarError) as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{label}: archive {archive} has no usable member {member!r} ({err}); delete the "
                        "archive to download it again") from None
    os.replace(tmp, dest)


def _download(entry: FileEntry, dest: Path, cache_dir: Path) -> str:
    label = f"{entry.dataset}/{Path(entry.path).name}"
    assert entry.url is not None
    if entry.member is None:
        return _http_download(entry.url, dest, entry.sha256, label)
    # Archives are kept (several registry files come from one archive) under _archives/.
    key = hashlib.sha1(entry.url.encode()).hexdigest()[:12]
    archive = cache_dir / "_archives" / f"{key}-{entry.url.rsplit('/', 1)[-1]}"
    if not archive.is_file():
        _http_download(entry.url, archive, None, label)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _extract_member(archive, entry.member, dest, label)
    got = sha256_file(dest)
    if entry.sha256 is not None and got != entry.sha256:
        dest.unlink()
        raise _mismatch(entry, dest, got, f"the archive {archive} differs from the registry's; delete it")
    return got


def fetch(entry: FileEntry, cache_dir: str | Path, mirror: str | Path | None = None, verify: bool = True,
          force: bool = False, offline: bool = False, network: bool = True) -> tuple[Path, str]:
    """Like `fetch_file`, also returning the status: verified, cached, unverified or downloaded."""
    cache = Path(cache_dir).expanduser()
    mirror_value = mirror if mirror is not None else os.environ.get("FEMLM_MIRROR") or None
    mirror_dir = Path(mirror_value).expanduser() if mirror_value else None
    if mirror_dir is not None and (mirror_dir / entry.path).is_file():
        path = mirror_dir / entry.path
        stamp = _mirror_stamp(cache, mirror_dir, entry.path)
        fix = "the mirror copy is damaged or another version: restore it, or remove it to use the cache"
        return path, _check_existing(entry, path, stamp, verify or force, fix, once=not force)
    dest = cache / entry.path
    if dest.is_file() and not force:
        fix = "re-run with download.force=true to download it again"
        return dest, _check_existing(entry, dest, _stamp(dest), verify, fix)
    where = (f"mirror {mirror_dir / entry.path}" if mirror_dir is not None
             else "no mirror (FEMLM_MIRROR unset)") + f", cache {dest}"
    hint = "set FEMLM_MIRROR=DIR or download.mirror=DIR (a directory laid out like shared/data)"
    if offline or not network or entry.url is None:
        why = ("download.offline=true" if offline else "not downloaded for a group when a mirror is set"
               if not network else "no public download URL")
        raise Unavailable(f"dataset {entry.dataset}: {entry.path} not found (looked in {where}; {why}); {hint}")
    try:
        digest = _download(entry, dest, cache)
    except Unavailable as err:
        raise Unavailable(f"dataset {entry.dataset}: {entry.path} not found (looked in {where}) and {err}; "
                          f"{hint}") from None
    _write_stamp(_stamp(dest), dest, digest)
    return dest, "downloaded"


def fetch_file(entry: FileEntry, cache_dir: str | Path, mirror: str | Path | None = None, verify: bool = True,
               force: bool = False, offline: bool = False) -> Path:
    """A local path holding `entry`'s verified bytes: the mirror's copy, the cache's, or a fresh download.

    `mirror` defaults to ``$FEMLM_MIRROR``. Raises `UserError` on a checksum mismatch, and `Unavailable`
    (a `UserError`) naming the dataset and where it looked when the file cannot be had.
    """
    return fetch(entry, cache_dir, mirror, verify, force, offline)[0]


def resolve_files(name: str, download: DownloadConfig, roles: tuple[str, ...] | None = None
                  ) -> dict[str, Path]:
    """Local paths of a dataset's files by role. Optional files that cannot be had are left out."""
    entry = get_entry(name)
    out: dict[str, Path] = {}
    for f in entry.files:
        if roles is not None and f.role not in roles:
            continue
        try:
            out[f.role] = fetch_file(f, download.cache_path(), download.mirror_dir(), download.verify,
                                     download.force, download.offline)
        except Unavailable:
            if not f.optional:
                raise
    return out
