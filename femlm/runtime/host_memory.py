"""Keep freed host memory for reuse instead of handing it back to the kernel (glibc malloc only).

glibc serves every allocation above its mmap threshold (at most 32 MiB, 128 KiB until it adapts) with a
fresh `mmap`, returns it with `munmap` when freed, and trims the top of its heap the same way. A CPU
training step allocates and frees the same large buffers every time (BERT-base: the 94 MB tied-embedding
gradients, 12 MB activations), so the next step page-faults them back in: ~93,000 minor faults per BERT-base
step here, each a few microseconds in a VM. With the mmap threshold raised and trimming off, those pages stay
in malloc's heap: 5,000-9,000 faults per step, and the BERT-base step runs 1.1-1.5x faster on this 2-core VM
(benchmarks/bench_train.py --allocator tuned vs default). Turning trimming off accounts for much of that.
PyTorch's CPU tuning guide recommends jemalloc/tcmalloc for the same reason; this needs no preloaded
library. The cost: the process keeps its peak footprint (RSS does not shrink after a spike), which a
training process reaches every step anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# mallopt(3) parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_BELOW = 1 << 30  # blocks up to 1 GiB come from the heap; larger ones are still mmapped
_NEVER_TRIM = (1 << 31) - 1  # mallopt takes an int


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False (and nothing changed) where the C
    library is not glibc or refuses. Idempotent: the settings are process-wide."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - raises AttributeError outside glibc (musl, macOS)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # Older glibc caps the mmap threshold at 32 MiB: take the largest value it accepts.
    if not any(mallopt(_M_MMAP_THRESHOLD, value) for value in (_KEEP_BELOW, 32 << 20)):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))
