"""Live gradient-variance probe: how noisy is the gradient of this step's batch across mask draws?

Every `trainer.variance_probe.every` steps the current batch (the same sequences) is re-masked `remasks` times
with the run's own strategy; each draw gives one stochastic gradient g_i of the (token-mean) loss. We log

  probe_grad_var   = 1/R * sum_i ||g_i - mean(g)||^2   (trace of the mask-sampling covariance, biased)
  probe_grad_norm2 = ||mean(g)||^2                      (its scale, for a relative reading)

For FE-MLM one draw is K disjoint masks, so g_i is the K-mask gradient of the paper's Eq. 5 and the probe
measures exactly the variance Theorem 1 is about, live, for MLM and FE alike. Dropout is off during the
probe (mask randomness only) and the draws use mask streams the training step never uses, so turning the
probe on does not change the training trajectory.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import torch


def probe_parameters(model: torch.nn.Module, patterns: list[str] | None) -> list[torch.nn.Parameter]:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not patterns:
        return [p for _, p in named]
    chosen = [p for n, p in named if any(fnmatch.fnmatch(n, pat) for pat in patterns)]
    return chosen or [p for _, p in named]


def gradient_variance(core: Any, step: int, remasks: int, patterns: list[str] | None = None) -> dict[str, float]:
    """Run the probe for optimizer step `step` on this rank's batch (no collectives, no .grad writes)."""
    objective = core.objective
    params = probe_parameters(objective.model, patterns)
    grads = []
    was_training = objective.training
    objective.eval()
    try:
        for i in range(remasks):
            rows = core.batch(step, redraw=i)
            count = float((rows["labels"] != -100).sum())
            flat = None
            for start in range(0, rows["labels"].shape[0], core.micro_rows):
                with core.autocast():
                    loss_sum, _, _ = objective(*core.probe_inputs(rows, start, start + core.micro_rows))
                # autograd.grad leaves .grad (and DDP's accumulation hooks) untouched
                parts = torch.autograd.grad(loss_sum / max(count, 1.0), params, allow_unused=True)
                vec = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1).float()
                                 for g, p in zip(parts, params, strict=True)])
                flat = vec if flat is None else flat + vec
            grads.append(flat)
    finally:
        objective.train(was_training)
    stacked = torch.stack(grads).double()
    mean = stacked.mean(0)
    var = ((stacked - mean) ** 2).sum(1).mean()
    return {"probe_grad_var": float(var), "probe_grad_norm2": float((mean**2).sum()),
            "probe_remasks": remasks, "probe_params": int(sum(p.numel() for p in params))}
