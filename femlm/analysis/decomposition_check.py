"""The direct check of femlm.analysis.decomposition: the variance of actual batch gradients, resampled.

Each batch draws R pool sequences with replacement and, for each, one fully-explored and one i.i.d. draw of
Kmax fresh masks; every arm (MLM, FE and iid at each K, both equal-compute modes) is read off prefixes of the same
draws, so the arms' measured variances share their sampling noise.
"""

from __future__ import annotations

import numpy as np
import torch

from femlm.masking import make_generator

from .estimators import GradFn, Progress
from .masks import sample_kmasks

STREAM_CHECK = 24  # the batches' masks (femlm.analysis.decomposition's streams are 21-26)
MODES = ("same_rows", "same_sequences")


def check_rows_fit(rows: int, num_masks: list[int]) -> None:
    bad = [k for k in num_masks if rows % k]
    if bad:
        raise ValueError(f"batch rows R={rows} is not a multiple of K={bad[0]}: the same-rows arm holds R / K "
                         f"sequences x K copies (trainer.equal_compute=same_rows needs the same)")


def check_batches(grad_fn: GradFn, valid: torch.Tensor, num_masks: list[int], tau: int, rows: int, batches: int,
                  centre: torch.Tensor, seed: int, chunk: int,
                  progress: Progress | None = None) -> dict[tuple[str, int, str], np.ndarray]:
    """``|g_b - centre|^2`` of directly resampled batches, per (arm, K, mode): ``[B]`` arrays.

    Batch b draws ``rows`` pool sequences with replacement and, for each, one FE and one iid draw of Kmax
    fresh masks; all arms are read off prefixes (module doc). Memory: O(chunk x P) plus one accumulator per
    arm and K.
    """
    ks = sorted(set(num_masks))
    kmax, pool, length = ks[-1], valid.shape[0], valid.shape[1]
    check_rows_fit(rows, ks)
    gen = make_generator(seed, tau, micro_step=STREAM_CHECK)
    prefixes = {"fe": ks, "iid": sorted({1, *ks})}
    out: dict[tuple[str, int, str], np.ndarray] = {("mlm", 1, "baseline"): np.empty(batches)}
    for arm in ("fe", "iid"):
        for k in ks:
            for mode in MODES:
                out[(arm, k, mode)] = np.empty(batches)
    per_call = max(1, chunk // kmax)
    for b in range(batches):
        seqs = torch.randint(0, pool, (rows,), generator=gen)
        draws = {"fe": sample_kmasks(valid[seqs], tau, kmax, "fully_explored", 1, gen)[0],
                 "iid": sample_kmasks(valid[seqs], tau, kmax, "iid", 1, gen)[0]}  # [R, Kmax, L]
        for arm in ("fe", "iid"):
            acc = {k: torch.zeros_like(centre) for k in prefixes[arm]}
            for start in range(0, rows, per_call):
                idx = seqs[start:start + per_call]
                n = len(idx)
                grads = grad_fn(idx.repeat_interleave(kmax), draws[arm][start:start + n].reshape(-1, length))
                csum = (grads.double().to(centre.device) - centre).view(n, kmax, -1).cumsum(dim=1)
                for k in prefixes[arm]:
                    cum = acc[k] + (csum[:, k - 1] / k).cumsum(dim=0)  # running sum of the slots' K-copy means
                    stop = rows // k  # the same-rows batch: the first R / K slots
                    if k > 1 and start < stop <= start + n:
                        out[(arm, k, "same_rows")][b] = float((cum[stop - start - 1] / stop).square().sum())
                    acc[k] = cum[-1]
                if progress is not None:
                    progress.update(n * kmax)
            for k in prefixes[arm]:
                key = ("mlm", 1, "baseline") if k == 1 else (arm, k, "same_sequences")
                out[key][b] = float((acc[k] / rows).square().sum())
    return out
