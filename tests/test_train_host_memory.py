"""keep_freed_memory: large freed blocks stay in malloc's heap, so reallocating them costs no page faults."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Allocate, touch and free a 64 MiB tensor many times; print the minor page faults of the last five.
_FAULTS = """
import resource, sys, torch
from femlm.runtime.host_memory import keep_freed_memory
if sys.argv[1] == "keep":  # applied twice (the uncached function, then the cached one): the effect holds
    assert keep_freed_memory.__wrapped__() and keep_freed_memory()
for _ in range(10):  # warm-up: malloc's heap settles (aligned blocks split a few times first)
    torch.ones(16 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.ones(16 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_keep_freed_memory_stops_refaulting_large_blocks() -> None:
    plain, kept = _faults("plain"), _faults("keep")
    pages = 5 * (64 << 20) // 4096
    assert plain > pages // 2  # glibc mmaps each 64 MiB block afresh: every page faults again
    assert kept < pages // 10, (plain, kept)
