"""Whether the Hugging Face Hub can be reached, asked once per process (models and Hub corpora both ask)."""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlparse


def hub_reachable(timeout: float = 3.0) -> bool:
    """False under HF_HUB_OFFLINE; otherwise one quick TCP connect to the Hub (huggingface_hub would spend ~30 s
    in retries on a machine without network before failing)."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        return False
    return _connects(urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co",
                     timeout)


@functools.cache
def _connects(host: str, timeout: float) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False
