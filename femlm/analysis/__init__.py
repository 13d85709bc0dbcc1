"""Gradient-variance study of the FE-MLM paper: covariance vs Hamming distance, K-mask variance.

Entry point ``run_analyze(cfg, run)`` (femlm/analysis/run.py). Modules: ``masks`` (mask pairs at a controlled
Hamming distance, K-mask draws), ``gradients`` (per-example gradients), ``estimators`` (unbiased centred
Gram statistics, bootstrap), ``studies`` (the two studies on any gradient function), ``figures``.

Imported lazily: `femlm.config` imports `femlm.analysis.config` on every CLI start, and that must not pull
in torch, transformers and matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_analyze"]


def __getattr__(name: str) -> Any:
    if name == "run_analyze":
        from femlm.analysis.run import run_analyze

        return run_analyze
    raise AttributeError(f"module 'femlm.analysis' has no attribute {name!r}")
