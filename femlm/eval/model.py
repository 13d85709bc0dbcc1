"""Loading checkpoints for fine-tuning and scoring: pre-training checkpoints, fine-tuned ones, Hub ids."""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers import logging as hf_logging

from femlm.errors import UserError
from femlm.eval.inputs import LabelSpec

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer_config.json")
# Models whose position ids start after the padding index (RoBERTa's 514 positions hold 512 tokens).
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer")


def looks_local(name_or_path: str) -> bool:
    """An explicit path (absolute, ./, ~, or an existing one) rather than a Hub id like roberta-base."""
    return Path(name_or_path).expanduser().exists() or name_or_path.startswith(("/", ".", "~"))


@functools.lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    # A DNS look-up first: without it, a machine with no network spends ~30 s in the Hub client's retries.
    try:
        socket.getaddrinfo("huggingface.co", 443)
        return True
    except OSError:
        return False


def _offline(download: Any) -> bool:
    """Use the local HF cache only: download.offline, HF_HUB_OFFLINE, or no network."""
    if bool(getattr(download, "offline", False)):
        return True
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return True
    return not _hub_reachable()


def resolve_checkpoint(name_or_path: str | None, download: Any = None) -> str:
    """Check a checkpoint before any work: a local directory with config.json, or a Hub id."""
    if not name_or_path:
        raise UserError("model.name_or_path is not set: give a checkpoint directory (e.g. a pre-training "
                        "run's checkpoints/final) or a Hub id")
    if looks_local(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_dir():
            raise UserError(f"model.name_or_path={name_or_path}: no such checkpoint directory; give a directory "
                            "holding config.json and weights (e.g. a pre-training run's checkpoints/final) or a Hub id")
        if not (path / "config.json").is_file():
            raise UserError(f"model.name_or_path={name_or_path}: not a checkpoint (no config.json); give a "
                            "save_pretrained directory such as <pretrain run>/checkpoints/final")
        return str(path)
    return name_or_path


def _hub_error(name: str, err: Exception) -> UserError:
    return UserError(f"model.name_or_path={name}: cannot load it ({type(err).__name__}); it is not a local "
                     "directory and the Hub is unreachable or offline: give a local checkpoint directory")


def pretrain_info(checkpoint: str) -> dict[str, Any] | None:
    """The checkpoint's femlm.json (masking arm, step, ...), or None for outside checkpoints."""
    path = Path(checkpoint) / "femlm.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err.msg})") from None


def load_tokenizer(checkpoint: str, configured: str | None, download: Any = None
                   ) -> tuple[PreTrainedTokenizerBase, str]:
    """The checkpoint's own tokenizer when it saved one (the vocabulary it was trained with); else
    ``model.tokenizer`` (a directory, or a mirror/Hub name resolved by femlm.data)."""
    local = Path(checkpoint)
    if local.is_dir() and any((local / f).is_file() for f in TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(str(local)), str(local)
    source = configured or checkpoint
    try:
        from femlm.data import load_tokenizer as data_load_tokenizer  # resolves mirror names
    except ImportError:
        data_load_tokenizer = None
    try:
        if data_load_tokenizer is not None and not Path(source).is_dir():
            return data_load_tokenizer(source, download), source
        return AutoTokenizer.from_pretrained(source, local_files_only=_offline(download)), source
    except (OSError, ValueError) as err:
        if looks_local(source):
            raise UserError(f"model.tokenizer={source}: cannot load a tokenizer there ({err})") from None
        raise _hub_error(source, err) from None


def position_limit(config: Any, tokenizer: PreTrainedTokenizerBase | None = None) -> int:
    """The longest input the model can embed (tokens, special ones included)."""
    limit = int(getattr(config, "max_position_embeddings", 0) or 10**9)
    if getattr(config, "model_type", "") in OFFSET_POSITIONS:
        limit -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    if tokenizer is not None and 0 < getattr(tokenizer, "model_max_length", 10**9) < limit:
        limit = int(tokenizer.model_max_length)
    return limit


def load_classifier(checkpoint: str, spec: LabelSpec, download: Any = None) -> tuple[PreTrainedModel, list[str]]:
    """A sequence classifier on top of a checkpoint: the encoder's weights, a fresh head of the task's
    shape (num_labels; one regression output for STS-B). Also returns the newly initialized weights."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the per-seed load report is noise; the new weights go in the notes
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            checkpoint, num_labels=spec.num_labels, problem_type=spec.problem_type, id2label=spec.id2label,
            label2id=spec.label2id, local_files_only=_offline(download) or looks_local(checkpoint),
            output_loading_info=True)
    except OSError as err:
        if looks_local(checkpoint):
            raise UserError(f"model.name_or_path={checkpoint}: cannot load weights ({err})") from None
        raise _hub_error(checkpoint, err) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return model, sorted(info.get("missing_keys") or [])


def load_config(checkpoint: str, download: Any = None) -> Any:
    try:
        return AutoConfig.from_pretrained(checkpoint, local_files_only=_offline(download) or looks_local(checkpoint))
    except (OSError, ValueError) as err:
        if looks_local(checkpoint):
            raise UserError(f"{checkpoint}: cannot read config.json ({err})") from None
        raise _hub_error(checkpoint, err) from None


def is_finetuned(checkpoint: Path) -> bool:
    """A directory holding a fine-tuned classifier (config says *ForSequenceClassification)."""
    config = checkpoint / "config.json"
    if not config.is_file():
        return False
    try:
        archs = json.loads(config.read_text()).get("architectures") or []
    except json.JSONDecodeError:
        return False
    return any(a.endswith("ForSequenceClassification") for a in archs)


def load_finetuned(checkpoint: Path, spec: LabelSpec, task_name: str) -> PreTrainedModel:
    """A saved fine-tuned classifier, checked to be one for this task's labels."""
    model = AutoModelForSequenceClassification.from_pretrained(str(checkpoint), local_files_only=True)
    saved = {int(k): str(v) for k, v in (model.config.id2label or {}).items()}
    if model.config.num_labels != spec.num_labels or (not spec.regression and saved != spec.id2label):
        raise UserError(f"{checkpoint}: fine-tuned for labels {list(saved.values())}, but task {task_name} "
                        f"has {list(spec.id2label.values())}: give a checkpoint fine-tuned on this task")
    return model


def pick_device(setting: str) -> torch.device:
    from femlm.train.distributed import pick_device as pick

    return pick(setting, key="finetune.device")
