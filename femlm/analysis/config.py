"""Typed schema of the `analysis` section (`femlm analyze`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError


@dataclass
class AnalysisConfig:
    kind: str = "covariance"  # covariance | variance | both
    sequences: int = 8  # the fixed mini-batch of sequences
    tau: int = 128  # masked tokens per mask (the paper: 128 of 512)
    budget: int = 200  # mask pairs (covariance) or K-mask draws (variance) per setting
    hamming_bins: int = 8
    splits: list[int] = field(default_factory=lambda: [2, 4, 6, 8])
    # Parameter-name patterns (fnmatch) whose gradients are studied.
    parameters: list[str] = field(default_factory=lambda: ["*layer.0.attention.self.query.weight",
                                                           "*layer.0.intermediate.dense.weight"])
    bootstrap: int = 1000

    def validate(self) -> None:
        if self.kind not in ("covariance", "variance", "both"):
            raise UserError(f"analysis.kind={self.kind!r}: allowed covariance, variance, both")
        for key in ("sequences", "tau", "budget", "hamming_bins"):
            if getattr(self, key) < 1:
                raise UserError(f"analysis.{key}={getattr(self, key)}: must be a positive integer")
        if not self.splits or min(self.splits) < 2:
            raise UserError(f"analysis.splits={self.splits}: give split numbers >= 2")
        if not self.parameters:
            raise UserError("analysis.parameters=[]: give at least one parameter-name pattern")
