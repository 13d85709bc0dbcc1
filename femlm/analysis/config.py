"""Typed schema of the `analysis` section (`femlm analyze`); rows per gradient pass are runtime.micro_batch_size."""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError, require_choice, require_positive

KINDS = ("covariance", "variance", "both", "decomposition", "passes")
METHODS = ("auto", "hooks", "vmap")
DEFAULT_CHUNK = 16  # rows per per-example-gradient pass when runtime.micro_batch_size is null


@dataclass
class AnalysisConfig:
    kind: str = "both"  # covariance | variance | both | decomposition | passes
    sequences: int = 8  # the fixed mini-batch of sequences (validation blocks of data.block_size)
    tau: int = 128  # masked tokens per mask for the covariance study (the paper: 128 of 512)
    # tau of the K-mask variance study; None: min(tau, n // max(num_masks)) so that every K fits disjointly
    # (K * tau <= n); an explicit value that does not fit some K is an error, never a silent overlap.
    variance_tau: int | None = None
    # A masking rate instead (e.g. a masking.ratio_schedule's value at a checkpoint's step): the K-mask variance
    # study and the decomposition use tau = round(ratio * n), checked against every K (K * tau <= n).
    ratio: float | None = None
    budget: int = 200  # mask pairs (covariance) or K-mask draws per arm (variance)
    reference: int = 64  # i.i.d. uniform masks per sequence that estimate the mean gradient g-bar
    hamming_bins: int = 8  # strata of equal width over H in [0, H_max]; pairs are spread evenly over them
    num_masks: list[int] = field(default_factory=lambda: [2, 4, 6, 8])  # the K values of the variance study
    # Parameter-name patterns (fnmatch) whose gradients are studied; None: the first layer's attention query and
    # feed-forward up projection, found by structure for any encoder (femlm/analysis/parameters.py).
    parameters: list[str] | None = None
    bootstrap: int = 1000
    # Per-example gradients: hooks (one batched forward/backward, nn.Linear weights/biases only), vmap
    # (torch.func, any parameter), auto (hooks when every selected parameter allows it, else vmap).
    method: str = "auto"
    # Where covariance/variance tables and figures go besides the run directory (None: run dir only).
    results_dir: str | None = None
    # ---- kind=decomposition (femlm/analysis/decomposition.py, null_model.py); tau is variance_tau's rule.
    pool: int = 32  # S_p: validation blocks whose data/mask variance terms are measured (the null model uses
    #                 the first `sequences` of them)
    batch_rows: int = 48  # R: rows per optimizer step of the run compared (trainer.batch_size); a multiple of every K
    draws: int = 8  # D: FE and iid draws of max(num_masks) masks per pool sequence (c_FE, c_iid, sigma_m2)
    check_batches: int = 32  # B: directly resampled batches checking the predictions (0: no check)
    sketch_dim: int = 4096  # CountSketch size for cross-sequence inner products (0: exact, stores pool x P floats)
    null_groups: int = 8  # groups of i.i.d. masks per sequence estimating the additive model (null model)
    null_group_size: int = 16  # masks per group (all pairs in a group are used)
    # ---- kind=passes (femlm/analysis/passes.py): a cycle of K visits of one sequence, disjoint vs independent masks;
    # uses pool (sequences), draws (cycles per sequence and arm, >= 2; also the decomposition's draws), reference,
    # num_masks (K), ratio / variance_tau (tau), sketch_dim and bootstrap.

    def validate(self) -> None:
        require_choice("analysis", "kind", self.kind, KINDS)
        require_positive("analysis", self, "sequences", "tau", "budget", "hamming_bins")
        if self.reference < 2:
            raise UserError(f"analysis.reference={self.reference}: at least 2 masks (the mean gradient's "
                            "variance is estimated from them)")
        if self.variance_tau is not None and self.variance_tau < 1:
            raise UserError(f"analysis.variance_tau={self.variance_tau}: a positive integer, or null")
        if self.ratio is not None and not 0 < self.ratio <= 1:
            raise UserError(f"analysis.ratio={self.ratio}: a masking rate in (0, 1], or null")
        if self.ratio is not None and self.variance_tau is not None:
            raise UserError(f"analysis.ratio={self.ratio} and analysis.variance_tau={self.variance_tau}: set one of "
                            "them (both fix tau), the other null")
        if self.budget < 2 and self.kind in ("variance", "both"):
            raise UserError(f"analysis.budget={self.budget}: the variance study needs at least 2 draws")
        if not self.num_masks or min(self.num_masks) < 2:
            raise UserError(f"analysis.num_masks={self.num_masks}: give numbers of masks K >= 2")
        if self.parameters is not None and not self.parameters:
            raise UserError("analysis.parameters=[]: give at least one parameter-name pattern, or null (the first "
                            "layer's attention and feed-forward matrices, found by structure)")
        if self.bootstrap < 0:
            raise UserError(f"analysis.bootstrap={self.bootstrap}: 0 (no intervals) or more resamples")
        require_choice("analysis", "method", self.method, METHODS)
        if self.kind == "decomposition":
            self._validate_decomposition()
        if self.kind == "passes":
            require_positive("analysis", self, "draws")
            if self.draws < 2 or self.pool < 2:
                raise UserError(f"analysis.draws={self.draws}, analysis.pool={self.pool}: kind=passes needs at least "
                                "2 cycles per sequence (a sample variance) and 2 sequences (the bootstrap's unit)")
            if self.sketch_dim < 0:
                raise UserError(f"analysis.sketch_dim={self.sketch_dim}: 0 (exact) or a positive integer")

    def _validate_decomposition(self) -> None:
        require_positive("analysis", self, "batch_rows", "draws", "null_groups")
        if self.pool < 2:
            raise UserError(f"analysis.pool={self.pool}: at least 2 sequences (the data term is a variance over them)")
        if self.check_batches == 1 or self.check_batches < 0:
            raise UserError(f"analysis.check_batches={self.check_batches}: 0 (no direct check) or at least 2")
        if self.sketch_dim < 0:
            raise UserError(f"analysis.sketch_dim={self.sketch_dim}: 0 (exact) or a positive integer")
        if self.null_group_size < 2:
            raise UserError(f"analysis.null_group_size={self.null_group_size}: at least 2 masks (pairs are used)")
        bad = [k for k in self.num_masks if self.batch_rows % k]
        if bad:
            raise UserError(f"analysis.batch_rows={self.batch_rows} is not a multiple of K={bad[0]} "
                            f"(analysis.num_masks={self.num_masks}): the same-rows arm holds R / K sequences x K copies")
