"""An arm's masking config, read from its one home: femlm/conf/masking/<arm>.yaml (cached per process).

The experiment layer reads it to know which keys a plan produces (femlm.experiment.keys); the study layer names and
reads arms through it (femlm.study.arms: label and role).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from femlm import CONF_DIR
from femlm.masking.config import MaskingConfig


@cache
def masking(arm: str) -> MaskingConfig | None:
    """The arm's masking config as its YAML writes it (None: no such YAML, e.g. a baseline row)."""
    path = CONF_DIR / "masking" / f"{arm}.yaml"
    if not path.is_file():
        return None
    data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return MaskingConfig.from_dict(data)
