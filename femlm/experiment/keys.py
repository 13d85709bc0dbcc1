"""The keys of a study's comparisons, ``<kind>/<where>/<what>``: how they are spelled and which ones a plan can
produce, so a typo in ``stats.confirmatory`` (or ``stats.delta``) is a one-line error when the experiment file
loads, not a declared comparison silently demoted to "no result" (issue 47).

    training_loss/<mode>/<arm>/<final_loss|mean_loss>   an arm against the reference (paired t over seeds)
    compute_ratio/<mode>/<arm>/<50%|75%|...>             compute to a target loss, arm / reference
    fe_vs_control/<mode>/<final_loss|mean_loss>          pretrain.fe_arm against pretrain.control
    downstream/<task>/<arm>                              an FE arm's test score against the reference's
    variance_ratio/<run>/K<k>                            the decomposition's predicted FE / MLM variance ratio
    context/<run>                                        the null model's residual decrease
    passes/<run>/K<k>                                    femlm analyze passes: Var(disjoint) / Var(independent)

``<run>`` is a decomposition or passes run: its checkpoint (``warmup``, ``mlm_final``) and variant name
(``warmup_r15``); ``<k>`` one of the run's ``analysis.num_masks``. femlm.study.comparisons builds exactly these.
"""

from __future__ import annotations

import difflib
import fnmatch
from typing import Any

from femlm.errors import UserError

KINDS = ("variance_ratio", "context", "passes", "training_loss", "compute_ratio", "fe_vs_control", "downstream")
# Comparisons of two arms by a t-test of a difference: the ones an equivalence margin (stats.delta) may apply to.
T_KINDS = ("training_loss", "fe_vs_control", "downstream")
METRICS = ("final_loss", "mean_loss")
TARGET_FRACTIONS = (0.5, 0.75)  # femlm.study.compare's default stats.target_fractions


def check_spelling(key: str) -> None:
    kind = key.split("/", 1)[0]
    if kind not in KINDS:
        raise UserError(f"{key!r} is no comparison key (<kind>/<where>/<what>, kind one of {', '.join(KINDS)})")


def _num_masks(overrides: list[str]) -> list[int] | None:
    from femlm.experiment.step import override_value

    value = override_value(overrides, "analysis.num_masks")
    return [int(k) for k in value] if isinstance(value, list) else None


def _runs(block: dict[str, Any], checkpoints: list[str]) -> list[tuple[str, list[int] | None]]:
    """(run key, its K values or None when the plan leaves them to the analysis' default)."""
    out = []
    for ck in checkpoints:
        for v in block.get("variants") or [{}]:
            name = v.get("name", "")
            ks = _num_masks([*block.get("overrides", []), *v.get("overrides", [])])
            out.append((f"{ck}_{name}" if name else ck, ks))
    return out


def producible(plan: dict[str, Any]) -> list[str]:
    """Every key the plan can produce; ``K*`` where the plan does not fix the K values (fnmatch patterns)."""
    from femlm.experiment.arms import masking

    out: list[str] = []
    p = plan.get("pretrain") or {}
    ref, names, modes = p.get("reference"), list(p.get("arms") or []), list(p.get("modes") or [])
    fractions = (plan.get("stats") or {}).get("target_fractions") or TARGET_FRACTIONS
    for mode in modes:
        for arm in [a for a in names if a != ref]:
            out += [f"training_loss/{mode}/{arm}/{m}" for m in METRICS]
            out += [f"compute_ratio/{mode}/{arm}/{int(round(f * 100))}%" for f in fractions]
        if p.get("fe_arm", "fe_subword") in names and p.get("control", "iid_subword") in names:
            out += [f"fe_vs_control/{mode}/{m}" for m in METRICS]
    for task in (plan.get("finetune") or {}).get("tasks") or []:
        out += [f"downstream/{task}/{arm}" for arm in names if arm != ref and _is_fe(masking(arm))]
    if plan.get("encoder") is not None:  # a CPU study: its decomposition runs at least on the warmed-up encoder
        d = plan.get("decomposition") or {}
        for run, ks in _runs(d, list(d.get("checkpoints", ["warmup"]))):
            out += [f"variance_ratio/{run}/K{k}" for k in ks] if ks else [f"variance_ratio/{run}/K*"]
            out.append(f"context/{run}")
        ps = plan.get("passes") or {}
        if ps and "warmup" in ps.get("checkpoints", ["warmup"]):
            for run, ks in _runs(ps, ["warmup"]):
                out += [f"passes/{run}/K{k}" for k in ks] if ks else [f"passes/{run}/K*"]
    return out


def _is_fe(cfg: Any) -> bool:
    return cfg is not None and cfg.role == "fe"


def check_plan(plan: dict[str, Any], where: str) -> None:
    """Every key of ``stats.confirmatory`` and ``stats.delta`` is one the plan can produce (one line otherwise),
    and a margin applies only to a t-test of a difference."""
    stats = plan.get("stats") or {}
    can = producible(plan)
    for block in ("confirmatory", "delta"):
        for key in stats.get(block) or []:
            check_spelling(str(key))
            if not any(fnmatch.fnmatchcase(str(key), pattern) for pattern in can):
                close = difflib.get_close_matches(str(key), [c.replace("K*", "K") for c in can], n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise UserError(f"{where}: stats.{block}: {key!r} is no comparison this plan makes; {hint}its arms "
                                f"{(plan.get('pretrain') or {}).get('arms') or []}, modes "
                                f"{(plan.get('pretrain') or {}).get('modes') or []} (keys: femlm/experiment/keys.py)")
    for key, delta in (stats.get("delta") or {}).items():
        if str(key).split("/", 1)[0] not in T_KINDS:
            raise UserError(f"{where}: stats.delta.{key}: an equivalence margin needs a t-test of a difference "
                            f"({', '.join(T_KINDS)})")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not delta > 0:
            raise UserError(f"{where}: stats.delta.{key}={delta!r}: give a positive margin in the comparison's units")
