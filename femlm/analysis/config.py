"""Typed schema of the `analysis` section (`femlm analyze`).

The keys mirror the ``analysis:`` block of ``conf/analyze.yaml`` one for one (the CLI merges the composed
config into this dataclass, so a misspelled key fails at start-up).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError

KINDS = ("covariance", "variance", "both")
METHODS = ("auto", "hooks", "vmap")


@dataclass
class AnalysisConfig:
    kind: str = "both"  # covariance | variance | both
    sequences: int = 8  # the fixed mini-batch of sequences (validation blocks of data.block_size)
    tau: int = 128  # masked tokens per mask for the covariance study (the paper: 128 of 512)
    # tau of the K-mask variance study; None: min(tau, n // max(splits)) so that every K fits disjointly
    # (K * tau <= n); an explicit value that does not fit some K is an error, never a silent overlap.
    variance_tau: int | None = None
    budget: int = 200  # mask pairs (covariance) or K-mask draws per arm (variance)
    reference: int = 64  # i.i.d. uniform masks per sequence that estimate the mean gradient g-bar
    hamming_bins: int = 8  # strata of equal width over H in [0, H_max]; pairs are spread evenly over them
    splits: list[int] = field(default_factory=lambda: [2, 4, 6, 8])
    # Parameter-name patterns (fnmatch) whose gradients are studied.
    parameters: list[str] = field(default_factory=lambda: ["*layer.0.attention.self.query.weight",
                                                           "*layer.0.intermediate.dense.weight"])
    bootstrap: int = 1000
    # Per-example gradients: hooks (one batched forward/backward, nn.Linear weights/biases only), vmap
    # (torch.func, any parameter), auto (hooks when every selected parameter allows it, else vmap).
    method: str = "auto"
    chunk: int = 16  # rows (sequence x mask) per forward/backward pass: bounds memory
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int | None = None  # torch intra-op threads (None: leave torch's default)

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"analysis.kind={self.kind!r}: allowed {', '.join(KINDS)}")
        for key in ("sequences", "tau", "budget", "hamming_bins", "chunk"):
            if getattr(self, key) < 1:
                raise UserError(f"analysis.{key}={getattr(self, key)}: must be a positive integer")
        if self.reference < 2:
            raise UserError(f"analysis.reference={self.reference}: at least 2 masks (the mean gradient's "
                            "variance is estimated from them)")
        if self.variance_tau is not None and self.variance_tau < 1:
            raise UserError(f"analysis.variance_tau={self.variance_tau}: a positive integer, or null")
        if self.budget < 2 and self.kind in ("variance", "both"):
            raise UserError(f"analysis.budget={self.budget}: the variance study needs at least 2 draws")
        if not self.splits or min(self.splits) < 2:
            raise UserError(f"analysis.splits={self.splits}: give split numbers >= 2")
        if not self.parameters:
            raise UserError("analysis.parameters=[]: give at least one parameter-name pattern")
        if self.bootstrap < 0:
            raise UserError(f"analysis.bootstrap={self.bootstrap}: 0 (no intervals) or more resamples")
        if self.method not in METHODS:
            raise UserError(f"analysis.method={self.method!r}: allowed {', '.join(METHODS)}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise UserError(f"analysis.device={self.device!r}: allowed auto, cpu, cuda, cuda:N")
        if self.threads is not None and self.threads < 1:
            raise UserError(f"analysis.threads={self.threads}: a positive integer, or null")
