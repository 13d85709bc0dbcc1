"""Model FLOPs per training step and the machine's measured matmul throughput (for MFU).

Formula (forward + backward = 3x forward, a multiply-add = 2 FLOPs; PaLM appendix B / nanoGPT convention):

  encoder   6 * N_enc * tokens                 N_enc: parameters of the encoder's matmuls
                                               (embedding tables excluded: a lookup is not a matmul)
  attention 12 * layers * hidden * seq * tokens  (QK^T and AV, forward 4*L*h per token and layer, x3)
  MLM head  6 * N_head * predicted             N_head: head matmul parameters incl. the decoder (H*V);
                                               predicted = masked tokens with sparse prediction,
                                               every token with HF's full projection
  sparse last layer (femlm, BERT-style models): its keys and values (2*H^2 per token) at every token,
            the rest of the layer and its attention scores only at the predicted tokens

MFU = model FLOPs per second / achievable FLOP/s, the latter measured by timing a large square matmul in the
training dtype on this device (not a datasheet peak), so on a CPU it reads "share of what GEMM can do here".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class FlopCounts:
    encoder_params: int
    head_params: int
    layers: int
    hidden: int

    def per_step(self, rows: int, seq: int, predicted: int, sparse_last_layer: bool = False) -> float:
        tokens = rows * seq
        flops = (6.0 * self.encoder_params * tokens + 12.0 * self.layers * self.hidden * seq * tokens
                 + 6.0 * self.head_params * predicted)
        if sparse_last_layer and self.layers:
            layer_params = self.encoder_params / self.layers
            skipped = layer_params - 2.0 * self.hidden**2  # all but the key and value projections
            flops -= (6.0 * skipped + 12.0 * self.hidden * seq) * (tokens - predicted)
        return flops


def _matmul_params(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def flop_counts(model: nn.Module) -> FlopCounts:
    """Split an HF masked LM into encoder and head matmul parameters."""
    encoder = model.base_model
    head_params = _matmul_params(model) - _matmul_params(encoder)
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is not None and not any(m is out for m in model.modules() if isinstance(m, nn.Linear)):
        head_params += out.weight.numel()
    cfg = model.config
    return FlopCounts(encoder_params=_matmul_params(encoder), head_params=head_params,
                      layers=int(getattr(cfg, "num_hidden_layers", 0)), hidden=int(getattr(cfg, "hidden_size", 0)))


def measured_matmul_flops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                          n: int = 2048, seconds: float = 2.0) -> float:
    """Achievable FLOP/s of an n x n x n matmul (best of repeated timings)."""
    device = torch.device(device)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(2):
        a @ b
    sync()
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best
