"""The per-unit arrays behind every interval (``units.npz`` in the run directory) and their robust summaries.

A study recomputes estimates and intervals from these without rerunning any gradient: the decomposition's
per-pool-sequence terms (``pool_*``, the units of its bootstrap) and the null model's per-sequence curves and
per-group D2 (``null_*``; sequences are its units, the groups of masks within a sequence are not independent
of the sequence). Names and shapes:

* ``pool_mask_var[S_p]`` v'_s, ``pool_single_fe[S_p]``, ``pool_c_fe[S_p, len(K)]``, ``pool_c_iid[S_p, len(K)]``,
  ``pool_c_fe_all[S_p]``, ``pool_c_iid_all[S_p]``, ``pool_gram[S_p, S_p]``, ``pool_between`` (scalar),
  ``pool_pooled_masks`` (J'), ``pool_num_masks`` (the K values); see `decomposition.PoolTerms`.
* ``null_bin_cov[S, bins]`` each sequence's mean covariance per Hamming bin, ``null_overlap_bins[bins]``,
  ``null_d2[G, S]`` one unbiased D2 per group and sequence, ``null_var_single[S]`` Var(g(m)) per sequence,
  ``null_n_valid[S]``, ``null_tau``; see `null_model`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .intervals import largest_share, median_of_means

if TYPE_CHECKING:
    from .decomposition import PoolTerms


def robust_terms(terms: PoolTerms) -> dict[str, Any]:
    """Beside each per-sequence mean: its median of means over blocks of pool sequences (`intervals`) and the
    largest sequence's share, the heavy-tail diagnostics of the mask term."""
    out: dict[str, Any] = {}
    for name, values in (("sigma_m2", terms.mask_var), ("sigma_m2_from_fe_masks", terms.single_fe),
                         ("c_fe", terms.c_fe_all)):
        out[name] = {"mean": float(values.mean()), "median_of_means": median_of_means(values)}
    out["sigma_m2"]["largest_sequence_share"] = largest_share(terms.mask_var)
    out["sigma_m2_from_fe_masks"]["largest_sequence_share"] = largest_share(terms.single_fe)
    return out


def pool_unit_arrays(terms: PoolTerms) -> dict[str, np.ndarray]:
    """The per-pool-sequence terms (module doc)."""
    return {"pool_mask_var": terms.mask_var, "pool_c_fe": terms.c_fe, "pool_c_iid": terms.c_iid,
            "pool_c_fe_all": terms.c_fe_all, "pool_c_iid_all": terms.c_iid_all, "pool_single_fe": terms.single_fe,
            "pool_gram": terms.gram, "pool_between": np.array(terms.between),
            "pool_pooled_masks": np.array(terms.pooled), "pool_num_masks": np.array(terms.num_masks)}


def write_units(path: Path, *parts: dict[str, np.ndarray]) -> Path:
    """``units.npz`` from the studies' unit arrays (names must not collide)."""
    merged: dict[str, np.ndarray] = {}
    for part in parts:
        clash = set(merged) & set(part)
        if clash:
            raise ValueError(f"units.npz: {sorted(clash)} written twice")
        merged.update(part)
    np.savez_compressed(path, **{k: np.asarray(v) for k, v in merged.items()})
    return path
