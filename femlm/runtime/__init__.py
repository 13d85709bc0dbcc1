"""What changes how fast a run goes, not what it computes: device, threads, precision, compilation,
micro-batches, host-memory reuse and how often a run logs, evaluates and saves (the `runtime` config group).

A resumed run may change any of these (femlm.train.resume compares everything else). Imports stay light:
`RuntimeConfig` is read on every CLI start; torch is imported by the functions that need it.
"""

from femlm.runtime.config import RuntimeConfig

__all__ = ["RuntimeConfig"]
