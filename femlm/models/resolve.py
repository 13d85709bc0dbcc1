"""A model, resolved once: the one object every command passes from its checks to its work.

`resolve_masked_lm` (continual pre-training, analysis of a checkpoint), `resolve_scratch` (pre-training from
scratch, the analysis's initialisation panel) and `resolve_classifier` (fine-tuning) locate the checkpoint
directory or Hub id once (`femlm.models.checkpoints.locate`: a `Checkpoint` passed down from there), read its config (no weights), pick the tokenizer, the model class and the attention
implementation that class supports, and the longest input it can embed. Training, fine-tuning, analysis and
`--dry-run` all receive the same `ResolvedModel`; the loaders in `femlm.models.load` take it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from femlm import provenance
from femlm.errors import UserError
from femlm.models.checkpoints import Checkpoint, locate, position_limit
from femlm.models.load import check_mask_token, load_config, scratch_config, tokenizer_for

_SAID: set[str] = set()  # notices already printed by this process (a sweep resolves many checkpoints)


@dataclass
class ResolvedModel:
    """What a command will load, known before any weight is read."""

    origin: str  # "local" (a checkpoint directory), "hub" (a Hub id) or "scratch" (random weights from `config`)
    source: str | None  # the directory or Hub id the weights come from; None for scratch
    config: Any  # the transformers config of the model
    model_class: Any  # the transformers class that will be built (e.g. MPNetForMaskedLM)
    tokenizer: Any
    tokenizer_source: str
    attn_implementation: str  # what `model.attn_implementation` asked for, or eager where the class lacks it
    position_limit: int  # the longest input, special tokens included
    # "checkpoint" (its own head weights), "new" (model.new_mlm_head; set by load_masked_lm once the weights show
    # the head missing), "random" (scratch) or "classifier"
    head: str
    checkpoint: Checkpoint | None = None  # the checkpoint as located (None: scratch)
    new_head_allowed: bool = False  # model.new_mlm_head: a checkpoint without head weights gets a fresh head
    notes: list[str] = field(default_factory=list)

    @property
    def femlm(self) -> dict[str, Any] | None:
        """The checkpoint's femlm.json (the arm and step that made it), or None."""
        return self.checkpoint.femlm if self.checkpoint is not None else None  # a Provenance

    @property
    def model_type(self) -> str:
        return str(self.config.model_type)

    def describe(self) -> dict[str, Any]:
        """What summary.json, results.json, analysis.json and plan.json record about the model: the encoder's
        architecture (model_type) and class, the checkpoint it ran (directory or Hub id; None from scratch), and
        for a local checkpoint its weights file and that file's sha256 (femlm.provenance.weights_sha256)."""
        local = self.checkpoint is not None and self.checkpoint.info is not None
        weights = provenance.weights_sha256(self.checkpoint.info.path) if local else {"weights": None, "sha256": None}
        return {"architecture": self.model_type, "checkpoint": self.source, **weights,
                "origin": self.origin, "source": self.source, "model_type": self.model_type,
                "class": self.model_class.__name__, "attn_implementation": self.attn_implementation,
                "position_limit": self.position_limit, "tokenizer": self.tokenizer_source,
                "tokenizer_size": len(self.tokenizer), "vocab_size": self.config.vocab_size, "head": self.head,
                "notes": list(self.notes)}

    def announce(self) -> None:
        """Print each notice once per process."""
        for note in self.notes:
            if note not in _SAID:
                _SAID.add(note)
                print(f"notice: {note}", flush=True)


def model_class(config: Any, kind: str, where: str) -> Any:
    """The transformers class of `kind` ("masked_lm" or "classifier") for this config."""
    from transformers import MODEL_FOR_MASKED_LM_MAPPING, MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    mapping = MODEL_FOR_MASKED_LM_MAPPING if kind == "masked_lm" else MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
    try:
        return mapping[type(config)]
    except KeyError:
        what = "masked-LM head" if kind == "masked_lm" else "sequence-classification"
        raise UserError(f"{where}: transformers has no {what} class for model_type={config.model_type}; give an "
                        "encoder that has one (BERT, RoBERTa, MPNet, DeBERTa-v2/v3, ModernBERT, ...)") from None


def attention_for(cls: Any, requested: str) -> tuple[str, str | None]:
    """(implementation, notice): `requested` when the class supports it, else eager with a one-line notice."""
    if requested == "sdpa" and not getattr(cls, "_supports_sdpa", False):
        return "eager", (f"model.attn_implementation=sdpa: {cls.__name__} has no SDPA attention in transformers; "
                         "using eager attention")
    return requested, None


def _resolve(origin: str, source: str | None, config: Any, kind: str, tokenizer: Any, tokenizer_source: str,
             model_cfg: Any, head: str, checkpoint: Checkpoint | None, where: str) -> ResolvedModel:
    cls = model_class(config, kind, where)
    attn, notice = attention_for(cls, model_cfg.attn_implementation)
    return ResolvedModel(origin, source, config, cls, tokenizer, tokenizer_source, attn,
                         position_limit(config, tokenizer), head, checkpoint,
                         bool(getattr(model_cfg, "new_mlm_head", False)), [notice] if notice else [])


def resolve_masked_lm(model_cfg: Any, download: Any) -> ResolvedModel:
    """`model.name_or_path` as a masked LM to continue: every check made before reading weights (a classifier,
    or an encoder without head weights unless `model.new_mlm_head`, is refused here)."""
    name = str(model_cfg.name_or_path)
    checkpoint = locate(name, masked_lm=True, new_mlm_head=model_cfg.new_mlm_head)
    config = load_config(checkpoint, download)
    tokenizer, tokenizer_source = tokenizer_for(model_cfg, download, checkpoint)
    check_mask_token(tokenizer, f"tokenizer {tokenizer_source}")
    info = checkpoint.info
    head = "new" if model_cfg.new_mlm_head and info is not None and info.encoder_only else "checkpoint"
    return _resolve(checkpoint.origin, checkpoint.source, config, "masked_lm", tokenizer, tokenizer_source,
                    model_cfg, head, checkpoint, f"model.name_or_path={name}")


def resolve_scratch(model_cfg: Any, tokenizer: Any, tokenizer_source: str, download: Any) -> ResolvedModel:
    """A masked LM built from `model.config_name` / `model.arch` with random weights."""
    check_mask_token(tokenizer, "the tokenizer")
    config = scratch_config(model_cfg, tokenizer, download)
    return _resolve("scratch", None, config, "masked_lm", tokenizer, tokenizer_source, model_cfg, "random", None,
                    f"model={model_cfg.name}")


def resolve_classifier(name: str | None, model_cfg: Any, download: Any) -> ResolvedModel:
    """A checkpoint to fine-tune: a local save_pretrained directory with weights, or a fetchable Hub id."""
    if not name:
        raise UserError("model.name_or_path is not set: give a checkpoint directory (e.g. a pre-training run's "
                        "checkpoints/final) or a Hub id")
    checkpoint = locate(name)
    config = load_config(checkpoint, download)
    tokenizer, tokenizer_source = tokenizer_for(model_cfg, download, checkpoint)
    return _resolve(checkpoint.origin, checkpoint.source, config, "classifier", tokenizer, tokenizer_source,
                    model_cfg, "classifier", checkpoint, f"model.name_or_path={name}")


def resolve_finetuned(checkpoint: Checkpoint, config: Any, tokenizer: Any, tokenizer_source: str,
                      model_cfg: Any) -> ResolvedModel:
    """A saved fine-tuned classifier that `femlm evaluate` scores, from its located checkpoint and loaded config."""
    return _resolve(checkpoint.origin, checkpoint.source, config, "classifier", tokenizer, tokenizer_source,
                    model_cfg, "classifier", checkpoint, f"evaluate.checkpoints={checkpoint.name}")
