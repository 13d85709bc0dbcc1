"""A seeded CountSketch: inner products of P-dimensional gradients from d-dimensional images, without bias.

``S x`` adds ``sign[i] * x[i]`` into bucket ``bucket[i]`` (one random bucket in ``[0, d)`` and one random
sign per coordinate, all independent): a sparse Johnson-Lindenstrauss map that costs O(P) per vector and
O(P) memory, where a dense Gaussian projection would need a P x d matrix (10^6 x 4096 floats = 16 GB).

Unbiased: ``<Sx, Sy> = sum_{i,j} sign_i sign_j x_i y_j [bucket_i = bucket_j]`` and ``E[sign_i sign_j] =
[i = j]``, so ``E_S <Sx, Sy> = <x, y>`` for every fixed pair -- and so is every linear combination of inner
products (a Gram-matrix statistic) as long as the vectors do not depend on S. The error of one inner product
has variance ``(|x|^2 |y|^2 + <x, y>^2 - 2 sum_i x_i^2 y_i^2) / d``, relative size about ``sqrt(2 / d)``;
sketch *after* subtracting a common vector (translation in the sketch space is exact, S is linear) so that
this error scales with the spread of the vectors, not with their common mean.

``dim = 0`` is the identity (exact inner products, the vectors themselves are stored).
"""

from __future__ import annotations

import torch


class CountSketch:
    def __init__(self, numel: int, dim: int, generator: torch.Generator,
                 device: str | torch.device = "cpu") -> None:
        self.numel, self.dim = int(numel), int(dim)
        if self.dim < 0:
            raise ValueError(f"sketch dimension {dim}: 0 (exact) or a positive integer")
        if self.dim:
            self.bucket = torch.randint(0, self.dim, (self.numel,), generator=generator).to(device)
            self.sign = (torch.randint(0, 2, (self.numel,), generator=generator) * 2 - 1).to(device)

    @property
    def exact(self) -> bool:
        return self.dim == 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., P] -> [..., d]`` (the identity when exact)."""
        if self.exact:
            return x
        flat = x.reshape(-1, self.numel)
        out = torch.zeros(flat.shape[0], self.dim, dtype=x.dtype, device=x.device)
        out.index_add_(1, self.bucket.to(x.device), flat * self.sign.to(x.device, x.dtype))
        return out.view(*x.shape[:-1], self.dim)


def gram(rows: torch.Tensor, block: int = 1 << 16) -> torch.Tensor:
    """``rows[N, D] -> [N, N]`` float64 inner products, accumulated over column blocks (bounded memory)."""
    out = torch.zeros(rows.shape[0], rows.shape[0], dtype=torch.float64, device=rows.device)
    for start in range(0, rows.shape[1], block):
        part = rows[:, start:start + block].double()
        out += part @ part.T
    return out
