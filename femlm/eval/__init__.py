"""Fine-tuning and evaluation: `run_finetune` and `run_evaluate` (the `finetune` / `evaluate` commands).

Imported lazily: `femlm.config` imports `femlm.eval.config` on every CLI start, and that must not pull in
torch and transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_evaluate": "femlm.eval.evaluate",
    "compute_metrics": "femlm.eval.metrics",
    "finetune_checkpoint": "femlm.eval.pipeline",
    "run_finetune": "femlm.eval.pipeline",
    "aggregate": "femlm.eval.results",
    "mean_std": "femlm.eval.results",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'femlm.eval' has no attribute {name!r}")
