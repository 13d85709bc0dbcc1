"""The masked-LM pre-training core: `run_pretrain(cfg, run)` (see femlm/train/loop.py).

Imported lazily: `femlm.config` imports `femlm.train.config` on every CLI start, and that must not pull in
torch and transformers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_pretrain"]


def __getattr__(name: str) -> Any:
    if name == "run_pretrain":
        from femlm.train.loop import run_pretrain

        return run_pretrain
    raise AttributeError(f"module 'femlm.train' has no attribute {name!r}")
