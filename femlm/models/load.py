"""Loading tokenizers and models for every command: pre-training (scratch or from a checkpoint), fine-tuning,
evaluation and analysis. A checkpoint is an ordinary Hugging Face `save_pretrained` directory or a Hub id.

Tokenizer rule, everywhere: a local checkpoint's own saved tokenizer (the vocabulary its weights were trained
with); otherwise `model.tokenizer`; otherwise `model.name_or_path`. Names are a local directory, a mirrored
tokenizer (bert-base-uncased, roberta-base, read from FEMLM_MIRROR / download.mirror) or a Hub id.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import nn

from femlm.errors import UserError
from femlm.models.checkpoints import Checkpoint, hub_reachable, is_local, locate, position_limit


# ----------------------------------------------------------------------------------------------- tokenizers
def load_tokenizer(name_or_path: str, download: Any, key: str = "model.tokenizer") -> Any:
    """A fast tokenizer from a local directory, the mirror (bert-base-uncased, roberta-base) or the Hub."""
    from transformers import AutoTokenizer

    from femlm.data.tokenizer import mirrored_tokenizer

    path = Path(name_or_path).expanduser()
    if path.is_dir():
        try:
            return _require_fast(AutoTokenizer.from_pretrained(str(path)), str(path))
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise UserError(f"{key}={name_or_path}: no tokenizer can be loaded there ({type(err).__name__}: "
                            f"{str(err)[:120]}); it needs the files save_pretrained writes (tokenizer.json or "
                            "vocab files)") from None
    if is_local(name_or_path):
        raise UserError(f"{key}={name_or_path}: no such directory")
    mirrored = mirrored_tokenizer(name_or_path, download)
    if mirrored is not None:
        return mirrored
    hint = ("give a local directory saved with save_pretrained, or bert-base-uncased / roberta-base (read from "
            "FEMLM_MIRROR / download.mirror)")
    if download.offline or not hub_reachable():
        raise UserError(f"{key}={name_or_path}: not a local directory nor a mirrored tokenizer, and the Hub is "
                        f"unreachable (or download.offline / HF_HUB_OFFLINE is set); {hint}")
    try:
        return _require_fast(AutoTokenizer.from_pretrained(name_or_path), name_or_path)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise UserError(f"{key}={name_or_path}: the Hub failed ({type(err).__name__}); {hint}") from None


def _require_fast(tokenizer: Any, where: str) -> Any:
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"tokenizer {where}: loaded a slow (Python) tokenizer; femlm needs a fast one "
                        "(a tokenizer.json, or vocab files of a BERT/RoBERTa tokenizer)")
    return tokenizer


def tokenizer_for(model_cfg: Any, download: Any, checkpoint: Checkpoint | None = None) -> tuple[Any, str]:
    """(tokenizer, where it came from) by the module's rule; `checkpoint` is the located checkpoint, located here
    from model.name_or_path when the caller has none."""
    if checkpoint is None and model_cfg.name_or_path:
        checkpoint = locate(str(model_cfg.name_or_path), hub_check=False)
    info = checkpoint.info if checkpoint is not None else None
    if info is not None and info.has_tokenizer:
        source, key = str(info.path), "model.name_or_path (its tokenizer)"
    elif model_cfg.tokenizer:
        source, key = model_cfg.tokenizer, "model.tokenizer"
    elif checkpoint is not None:
        source, key = checkpoint.name, "model.name_or_path (its tokenizer)"
    else:
        raise UserError(f"model.tokenizer is not set (model={model_cfg.name}, no checkpoint): give a tokenizer "
                        "directory or a mirrored name (bert-base-uncased, roberta-base)")
    tokenizer = load_tokenizer(source, download, key)
    return tokenizer, source


def check_mask_token(tokenizer: Any, where: str) -> None:
    if tokenizer.mask_token_id is None:
        raise UserError(f"{where}: the tokenizer has no mask token; masked-LM pre-training needs one")


# ----------------------------------------------------------------------------------------------- models
@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers prints a many-line load report for missing/unexpected keys; femlm says what matters."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # "Loading weights" bars on stderr would break the one-line error contract
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _offline(download: Any) -> bool:
    return bool(getattr(download, "offline", False)) or not hub_reachable()


def load_config(checkpoint: Checkpoint, download: Any, key: str = "model.name_or_path") -> Any:
    """`AutoConfig` of a located checkpoint: a directory, a mirrored model config (bert-base-uncased,
    roberta-base) or a Hub id, with every failure turned into one line."""
    from transformers import AutoConfig

    from femlm.data.tokenizer import mirrored_config_path

    name_or_path = checkpoint.name
    mirrored = None if checkpoint.origin == "local" else mirrored_config_path(name_or_path, download)
    local = mirrored is not None or checkpoint.origin == "local"
    source = str(mirrored) if mirrored is not None else str(Path(name_or_path).expanduser())
    try:
        return AutoConfig.from_pretrained(source, local_files_only=local or _offline(download))
    except (OSError, ValueError) as err:
        if local:
            raise UserError(f"{key}={name_or_path}: config.json is unreadable ({str(err).splitlines()[0]})") from None
        raise UserError(f"{key}={name_or_path}: could not fetch this Hub id (offline?); give a local checkpoint "
                        "directory (e.g. a pre-training run's checkpoints/final)") from None


def scratch_config(model_cfg: Any, tokenizer: Any, download: Any) -> Any:
    """The config of a model built from scratch: `model.config_name`'s config.json updated with `model.arch`,
    or a config of `model.arch.model_type` built from `model.arch` alone; special ids follow the tokenizer."""
    from transformers import AutoConfig

    arch = dict(model_cfg.arch or {})
    if model_cfg.config_name:
        located = locate(str(model_cfg.config_name), "model.config_name", hub_check=False)
        config = load_config(located, download, "model.config_name")
        arch.pop("model_type", None)
        for name, value in arch.items():
            setattr(config, name, value)
    else:
        model_type = arch.pop("model_type", None)
        if not model_type:
            raise UserError(f"model={model_cfg.name}: a model built from scratch needs model.config_name or "
                            "model.arch.model_type")
        arch.setdefault("vocab_size", len(tokenizer))
        config = AutoConfig.for_model(model_type, **arch)
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"model={model_cfg.name}: tokenizer has {len(tokenizer)} tokens but the model's vocab_size "
                        f"is {config.vocab_size}; use the model's tokenizer or a larger model.arch.vocab_size")
    # Special ids follow the tokenizer (the mirror's RoBERTa config.json predates pad_token_id; ModernBERT's
    # defaults are ids of its own 50k vocabulary): one the tokenizer lacks is dropped when out of range.
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        value, current = getattr(tokenizer, attr, None), getattr(config, attr, None)
        if value is not None:
            setattr(config, attr, value)
        elif isinstance(current, int) and current >= config.vocab_size:
            setattr(config, attr, None)
    config.architectures = None
    return config


def construct_model(resolved: Any) -> nn.Module:
    """A masked LM with random weights (seeded by the caller's torch seed) of a `resolve_scratch` model."""
    return resolved.model_class._from_config(resolved.config, attn_implementation=resolved.attn_implementation)


def load_masked_lm(resolved: Any, download: Any) -> tuple[nn.Module, list[str]]:
    """A `resolve_masked_lm` checkpoint's weights as a masked LM; also the head parameters initialised fresh
    (model.new_mlm_head on an encoder saved without its head). A checkpoint that turns out to have no head
    weights without that setting is refused."""
    key = f"model.name_or_path={resolved.source}"
    try:
        with quiet_transformers():
            model, loading = resolved.model_class.from_pretrained(
                resolved.source, config=resolved.config, attn_implementation=resolved.attn_implementation,
                local_files_only=resolved.origin == "local" or _offline(download), output_loading_info=True)
    except OSError as err:
        if resolved.origin == "local":
            raise UserError(f"{key}: no loadable weights ({str(err).splitlines()[0]})") from None
        raise UserError(f"{key}: could not fetch this Hub id (offline?); give a local checkpoint directory") from None
    fresh = sorted(loading.get("missing_keys") or [])
    encoder = model.base_model_prefix + "."
    fresh_head = [k for k in fresh if not k.startswith(encoder)]
    if fresh_head and not resolved.new_head_allowed:
        raise UserError(f"{key}: a checkpoint without masked-LM head weights (missing {fresh_head[0]}); pre-training "
                        "needs a masked-LM checkpoint (e.g. checkpoints/final of a pre-training run), not a fine-tuned "
                        "classifier; for an encoder saved without its head, model.new_mlm_head=true initialises one")
    resolved.head = "new" if fresh_head else "checkpoint"  # what the weights showed (config.json may not say)
    unused = list(loading.get("unexpected_keys") or [])
    if len(fresh) > len(fresh_head) or unused:
        warnings.warn(f"{key}: {len(fresh)} parameter(s) newly initialized (e.g. {fresh[:2]}), {len(unused)} "
                      f"unused (e.g. {unused[:2]})", stacklevel=2)
    return model, fresh_head


def check_compatible(config: Any, tokenizer: Any, block_size: int, where: str) -> None:
    """The tokenizer's ids fit the model's vocabulary (its config, so no weights are needed), and a block fits
    the position embeddings."""
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"{where}: tokenizer has {len(tokenizer)} tokens but the model's vocabulary has "
                        f"{config.vocab_size}; give the checkpoint's own tokenizer or one it was trained with")
    limit = position_limit(config)
    if block_size > limit:
        raise UserError(f"data.block_size={block_size} is beyond what {where} can hold ({limit} tokens, "
                        f"max_position_embeddings={config.max_position_embeddings}); lower data.block_size")


def load_classifier(resolved: Any, labels: Any, download: Any) -> tuple[nn.Module, list[str]]:
    """A sequence classifier on a `resolve_classifier` checkpoint's encoder with a fresh head of the task's shape
    (`labels` is a femlm.eval.inputs.LabelSpec); also the newly initialised parameter names."""
    try:
        with quiet_transformers():
            model, loading = resolved.model_class.from_pretrained(
                resolved.source, num_labels=labels.num_labels, problem_type=labels.problem_type,
                id2label=labels.id2label, label2id=labels.label2id, attn_implementation=resolved.attn_implementation,
                local_files_only=resolved.origin == "local" or _offline(download), output_loading_info=True)
    except OSError as err:
        if resolved.origin == "local":
            raise UserError(f"model.name_or_path={resolved.source}: cannot load weights ({err})") from None
        raise UserError(f"model.name_or_path={resolved.source}: cannot load it ({type(err).__name__}); it is not a "
                        "local directory and the Hub is unreachable or offline: give a local checkpoint directory") from None
    return model, sorted(loading.get("missing_keys") or [])


def load_finetuned(checkpoint: Path, labels: Any, task_name: str) -> nn.Module:
    """A saved fine-tuned classifier, checked to be one for this task's labels."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint), local_files_only=True)
    saved = {int(k): str(v) for k, v in (model.config.id2label or {}).items()}
    if model.config.num_labels != labels.num_labels or (not labels.regression and saved != labels.id2label):
        raise UserError(f"{checkpoint}: fine-tuned for labels {list(saved.values())}, but task {task_name} "
                        f"has {list(labels.id2label.values())}: give a checkpoint fine-tuned on this task")
    return model
