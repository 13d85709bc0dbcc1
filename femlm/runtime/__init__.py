"""How a run computes, not what it is asked to compute: device, threads, precision, TF32, compilation, attention
kernels, micro-batches, host-memory reuse and how often a run logs, evaluates and saves (the `runtime` config group).
These change speed and float bits (kernel choice, fusion, accumulation order), never the masking law, the data
order or the recipe.

A resumed run may change any of these (femlm.train.resume compares everything else). Imports stay light:
`RuntimeConfig` is read on every CLI start; torch is imported by the functions that need it.
"""

from femlm.runtime.config import RuntimeConfig

__all__ = ["RuntimeConfig"]
