"""Typed schema of the `model` section (conf/model/*.yaml hold only what a model changes)."""

# ruff: noqa: UP045 - Optional[...]: OmegaConf structured configs read these annotations at run time
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from femlm.errors import UserError, require_choice


@dataclass
class ModelConfig:
    name: str = "custom"
    # A local checkpoint directory (e.g. one `pretrain-scratch` wrote) or a Hub id. None: build from `arch`.
    name_or_path: Optional[str] = None
    # Tokenizer: a directory, a Hub id / mirror name (bert-base-uncased, roberta-base), or None (the
    # checkpoint's own; `pretrain-scratch` trains a WordPiece tokenizer of `vocab_size` on the corpus).
    tokenizer: Optional[str] = None
    # Architecture of models built from scratch: a Hub id / mirror name whose config.json to read
    # (`config_name`), updated with the explicit fields in `arch`.
    config_name: Optional[str] = None
    arch: dict[str, Any] = field(default_factory=dict)
    vocab_size: int = 8192  # of the WordPiece vocabulary pretrain-scratch trains when `tokenizer` is None
    attn_implementation: str = "sdpa"
    # Continual pre-training from an encoder checkpoint that has no masked-LM head (e.g. a sentence encoder
    # saved as BertModel): true initialises a fresh head, as run_mlm.py does; false refuses the checkpoint.
    new_mlm_head: bool = False

    def validate(self) -> None:
        if self.vocab_size < 16:
            raise UserError(f"model.vocab_size={self.vocab_size}: must be at least 16")
        require_choice("model", "attn_implementation", self.attn_implementation, ("sdpa", "eager"))
