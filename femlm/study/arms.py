"""What a study's arm is, read from its one home: its masking YAML (femlm/conf/masking/<arm>.yaml).

* ``label(arm)``: how tables and figures name it (the YAML's ``label``; its name when it has none);
* ``role(arm)``: ``fe``, ``mlm`` or ``control``, from its ``strategy`` (`femlm.masking.config.ROLES`), never from
  its name: an FE arm called anything is read as FE, a control called ``fe_*`` is not.

The study's *reference* arm (the MLM baseline every arm is compared with) is the plan's ``pretrain.reference``, not
a role: only a comparison of an ``fe`` arm with the reference may read *favours FE* / *against FE*
(femlm.study.verdicts). The rows a study fine-tunes that are not masking arms (the encoder as released, the
warm-up alone) are named by ``ROWS``.
"""

from __future__ import annotations

from typing import Any

from femlm.experiment.arms import masking

# Rows of a study's tables and figures that are no masking arm.
ROWS = {"no_continual": "no continual pre-training", "warmup_only": "warm-up only", "warmup": "warm-up",
        "head_warmup": "head warm-up"}


def order(plan: dict[str, Any]) -> list[str]:
    """The rows of a study's downstream tables and figures, in order: the two baseline rows, then its arms."""
    return ["no_continual", "warmup_only", *(plan.get("pretrain") or {}).get("arms", [])]


def label(arm: str) -> str:
    """How tables and figures name ``arm``: its YAML's label, a baseline row's name, else the name itself."""
    cfg = masking(arm)
    if cfg is not None:
        return cfg.label or cfg.name
    return ROWS.get(arm, arm)


def role(arm: str) -> str:
    """``fe`` / ``mlm`` / ``control`` from the arm's strategy; ``other`` for a row that is no masking arm."""
    cfg = masking(arm)
    return cfg.role if cfg is not None else "other"


def is_fe(arm: str) -> bool:
    return role(arm) == "fe"
