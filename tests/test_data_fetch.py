"""Fetching without the network: a local http.server on 127.0.0.1 stands in for the remote hosts."""

from __future__ import annotations

import hashlib
import io
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from femlm.data import fetch
from femlm.data.catalog import FileEntry
from femlm.data.config import DownloadConfig
from femlm.data.download import download_all
from femlm.data.fetch import Unavailable, fetch_file
from femlm.errors import UserError

PAYLOAD = bytes(range(256)) * 400  # 102,400 bytes: several reads, one partial chunk


class _Server:
    """Serves `files` (path -> bytes). `cut[path] = n` sends n bytes of the body and drops the connection;
    `no_range` ignores Range headers (answers 200 with the whole body)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, int] = {}
        self.no_range = False
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.requests.append((self.path, self.headers.get("Range")))
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and not outer.no_range:
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                cut = outer.cut.pop(self.path, None)
                if cut is not None:  # the connection dies mid-body
                    self.wfile.write(body[start:start + cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def entry(self, name: str, sha256: str | None, member: str | None = None) -> FileEntry:
        return FileEntry("toyset", "train", f"toy/{name}", f"{self.url}/{name}", sha256, member=member)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "FEMLM_MIRROR"):
        monkeypatch.delenv(var, raising=False)
    srv = _Server()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_download_verifies_stamps_and_skips(server: _Server, tmp_path: Path) -> None:
    server.files["/a.bin"] = PAYLOAD
    entry = server.entry("a.bin", _sha(PAYLOAD))
    path, status = fetch.fetch(entry, tmp_path)
    assert status == "downloaded" and path == tmp_path / "toy" / "a.bin" and path.read_bytes() == PAYLOAD
    assert not path.with_name("a.bin.part").exists() and path.with_name("a.bin.sha256").exists()
    # Present and stamped: no new request; verify=False trusts the stamp, verify=True re-hashes.
    assert fetch.fetch(entry, tmp_path, verify=False)[1] == "cached"
    assert fetch.fetch(entry, tmp_path, verify=True)[1] == "verified"
    assert len(server.requests) == 1


def test_checksum_mismatch_is_refused(server: _Server, tmp_path: Path) -> None:
    server.files["/bad.bin"] = PAYLOAD
    wrong = _sha(b"something else")
    with pytest.raises(UserError) as err:
        fetch_file(server.entry("bad.bin", wrong), tmp_path)
    message = str(err.value)
    assert "checksum mismatch" in message and wrong in message and _sha(PAYLOAD) in message
    assert "bad.bin" in message
    assert not (tmp_path / "toy" / "bad.bin").exists() and not (tmp_path / "toy" / "bad.bin.part").exists()


def test_interrupted_download_leaves_no_final_file_then_resumes(server: _Server, tmp_path: Path) -> None:
    server.files["/big.bin"] = PAYLOAD
    server.cut["/big.bin"] = 30_000
    entry = server.entry("big.bin", _sha(PAYLOAD))
    final, part = tmp_path / "toy" / "big.bin", tmp_path / "toy" / "big.bin.part"
    with pytest.raises(UserError, match="interrupted|ended after"):
        fetch_file(entry, tmp_path)
    assert not final.exists()
    assert part.exists() and part.stat().st_size == 30_000
    # The next run resumes with a Range request and completes a verified file.
    assert fetch_file(entry, tmp_path).read_bytes() == PAYLOAD
    assert server.requests[-1] == ("/big.bin", "bytes=30000-")
    assert not part.exists()


def test_leftover_part_restarts_when_server_ignores_range(server: _Server, tmp_path: Path) -> None:
    server.files["/r.bin"] = PAYLOAD
    server.no_range = True
    part = tmp_path / "toy" / "r.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage" * 10)
    assert fetch_file(server.entry("r.bin", _sha(PAYLOAD)), tmp_path).read_bytes() == PAYLOAD


def test_archive_member_is_extracted_and_checked(server: _Server, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("TOY/train.tsv", "a\tb\n")
        zf.writestr("TOY/dev.tsv", "c\td\n")
    server.files["/TOY.zip"] = buf.getvalue()
    train = fetch_file(server.entry("TOY.zip", _sha(b"a\tb\n"), member="TOY/train.tsv"), tmp_path)
    assert train.read_bytes() == b"a\tb\n"
    dev = FileEntry("toyset", "dev", "toy/dev.tsv", f"{server.url}/TOY.zip", None, member="TOY/dev.tsv")
    assert fetch_file(dev, tmp_path).read_bytes() == b"c\td\n"
    assert len(server.requests) == 1  # the archive is downloaded once, kept in _archives/


def test_no_network_no_mirror_names_dataset_and_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network unreachable")

    monkeypatch.setattr(fetch, "_urlopen", refuse)
    entry = FileEntry("toyset", "train", "toy/x.jsonl", "https://example.invalid/x.jsonl", None)
    with pytest.raises(Unavailable) as err:
        fetch_file(entry, tmp_path)
    message = str(err.value)
    assert "toyset" in message and str(tmp_path / "toy" / "x.jsonl") in message
    assert "FEMLM_MIRROR=DIR" in message and "download.mirror=DIR" in message
    with pytest.raises(Unavailable, match="offline"):
        fetch_file(entry, tmp_path, offline=True)


def test_mirror_is_read_in_place_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    (mirror / "toy").mkdir(parents=True)
    (mirror / "toy" / "m.txt").write_bytes(b"mirror bytes")
    entry = FileEntry("toyset", "train", "toy/m.txt", None, _sha(b"mirror bytes"))
    monkeypatch.setenv("FEMLM_MIRROR", str(mirror))
    path, status = fetch.fetch(entry, cache)  # mirror from the environment
    assert path == mirror / "toy" / "m.txt" and status == "verified"
    assert not (cache / "toy" / "m.txt").exists()  # nothing copied
    assert fetch.fetch(entry, cache, verify=False)[1] == "cached"
    bad = FileEntry("toyset", "train", "toy/m.txt", None, _sha(b"other"))
    with pytest.raises(UserError, match="checksum mismatch"):
        fetch_file(bad, cache, mirror=mirror)
    assert (mirror / "toy" / "m.txt").exists()  # a mirror file is refused, never deleted


def test_mirror_file_is_hashed_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    (mirror / "toy").mkdir(parents=True)
    target = mirror / "toy" / "once.txt"
    target.write_bytes(b"mirror bytes")
    hashed: list[Path] = []
    real = fetch.sha256_file
    monkeypatch.setattr(fetch, "sha256_file", lambda path: hashed.append(path) or real(path))
    entry = FileEntry("toyset", "train", "toy/once.txt", None, _sha(b"mirror bytes"))
    for _ in range(3):  # e.g. the tokenizer's vocab resolved by the plan, the resolver and the loader
        assert fetch.fetch(entry, cache, mirror=mirror) == (target, "verified")
    assert hashed == [target]
    with pytest.raises(UserError, match="checksum mismatch"):  # the hash is remembered, not the verdict
        fetch_file(FileEntry("toyset", "train", "toy/once.txt", None, _sha(b"other")), cache, mirror=mirror)
    target.write_bytes(b"changed bytes")  # another size: hashed again, and refused
    with pytest.raises(UserError, match="checksum mismatch"):
        fetch_file(entry, cache, mirror=mirror)
    assert hashed == [target, target]


def test_download_all_offline_without_mirror_fails_with_hint(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEMLM_MIRROR", raising=False)
    cfg = DownloadConfig(cache_dir=str(tmp_path), offline=True)
    with pytest.raises(UserError, match="FEMLM_MIRROR"):
        download_all(["sst2"], cfg)
    with pytest.raises(UserError, match="could not be had"):
        download_all(["glue"], cfg)
    with pytest.raises(UserError, match="unknown dataset 'nope'"):
        download_all(["nope"], cfg)
