"""Models and tokenizers for pre-training, and the sparse masked-LM objective.

Any Hugging Face masked LM works: a local checkpoint directory (e.g. one `pretrain-scratch` wrote), a Hub id,
or a model built from a config (`model.arch` / the mirror's config.json for `model.config_name`). The model
stays an ordinary HF model, so `save_pretrained` checkpoints load with plain transformers.

Sparse prediction: HF's `*ForMaskedLM.forward` projects every position to the vocabulary and then ignores
85% of them in the loss. `MaskedLMObjective` runs the encoder (`model.base_model`), gathers the hidden states
of the labelled positions and applies the model's own MLM head to those rows only. Same loss, same gradients,
a fraction of the head's FLOPs and memory (the [B*L, V] logits never exist). BERT-style encoders also run
their last layer at those rows only (sparse_layer.py).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from femlm.errors import UserError
from femlm.train.sparse_layer import sparse_last_layer, sparse_layer_forward, without_last_layer

IGNORE_INDEX = -100
# Models whose position ids start after the padding index (RoBERTa: 514 positions hold 512 tokens).
_PADDING_OFFSET_TYPES = {"roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod",
                         "roberta-prelayernorm"}
_HEAD_ONLY_ARCHS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                    "ForMultipleChoice")


# ----------------------------------------------------------------------------------------------- tokenizers
def load_tokenizer(name_or_path: str, download: Any) -> Any:
    """A fast tokenizer from a local directory, the mirror/cache (bert-base-uncased, roberta-base) or the Hub."""
    from femlm.data.tokenizer import load_tokenizer as data_load_tokenizer

    return data_load_tokenizer(name_or_path, download)


def check_tokenizer(tokenizer: Any, where: str) -> None:
    if tokenizer.mask_token_id is None:
        raise UserError(f"{where}: the tokenizer has no mask token; masked-LM pre-training needs one")


# ----------------------------------------------------------------------------------------------- models
def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect instead of huggingface_hub's ~25 s of retries when there is no network."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_checkpoint_model(name_or_path: str, attn_implementation: str, offline: bool = False) -> nn.Module:
    """`AutoModelForMaskedLM.from_pretrained`, with every way it can fail turned into one line."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    path = Path(name_or_path).expanduser()
    local = path.is_dir()
    key = f"model.name_or_path={name_or_path}"
    if not local and (_looks_like_path(name_or_path) or path.exists()):
        raise UserError(f"{key}: no such checkpoint directory; give a directory holding config.json and "
                        "weights (e.g. a pretrain-scratch run's checkpoints/final) or set init=scratch")
    if local and not (path / "config.json").is_file():
        raise UserError(f"{key}: not a checkpoint directory (no config.json)")
    source = str(path) if local else name_or_path
    if not local and not offline and not hub_reachable():
        offline = True  # the HF cache may still hold it; otherwise the error below says what to do
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=offline)
    except (OSError, ValueError) as err:
        if local:
            raise UserError(f"{key}: config.json is unreadable ({str(err).splitlines()[0]})") from None
        raise UserError(f"{key}: could not fetch this Hub id (offline?); give a local checkpoint directory "
                        "(e.g. a pretrain-scratch run's checkpoints/final) or set init=scratch") from None
    archs = list(getattr(config, "architectures", None) or [])
    heads = [a for a in archs if a.endswith(_HEAD_ONLY_ARCHS)]
    if archs and len(heads) == len(archs):  # known before any weight is read
        raise UserError(f"{key}: a {heads[0]} checkpoint; pre-training needs a masked-LM checkpoint (e.g. "
                        "checkpoints/final of a pre-training run), not a fine-tuned classifier")
    try:
        # transformers prints a many-line load report for missing/unexpected keys; femlm decides below what
        # matters (a missing MLM head is an error) and says the rest in one warning.
        with _quiet_transformers():
            model, info = AutoModelForMaskedLM.from_pretrained(
                source, config=config, attn_implementation=attn_implementation, local_files_only=offline,
                output_loading_info=True)
    except ValueError as err:  # no masked-LM class for this model type
        raise UserError(f"{key}: {config.model_type} checkpoint has no masked-LM head class "
                        f"({str(err).splitlines()[0]})") from None
    except OSError as err:
        if local:
            raise UserError(f"{key}: no loadable weights ({str(err).splitlines()[0]})") from None
        raise UserError(f"{key}: could not fetch this Hub id (offline?); give a local checkpoint directory "
                        "or set init=scratch") from None
    head = find_mlm_head(model)
    head_names = {n for n, _ in head.named_parameters()} if isinstance(head, nn.Module) else set()
    head_prefix = next((n for n, m in model.named_children() if m is head), None)
    missing = [k for k in info.get("missing_keys", []) if head_prefix and k.startswith(head_prefix + ".")]
    if head_names and missing:
        kind = next((a for a in archs if a.endswith(_HEAD_ONLY_ARCHS)), None)
        what = f"a {kind} checkpoint" if kind else "a checkpoint without masked-LM head weights"
        raise UserError(f"{key}: {what} (missing {missing[0]}); pre-training needs a masked-LM checkpoint "
                        "(e.g. checkpoints/final of a pre-training run), not a fine-tuned classifier")
    fresh = list(info.get("missing_keys", []))
    unused = list(info.get("unexpected_keys", []))
    if fresh or unused:
        warnings.warn(f"{key}: {len(fresh)} parameter(s) newly initialized (e.g. {fresh[:2]}), {len(unused)} "
                      f"unused (e.g. {unused[:2]})", stacklevel=2)
    return model


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def build_scratch_model(model_cfg: Any, tokenizer: Any, download: Any, attn_implementation: str) -> nn.Module:
    """Random weights from `model.config_name` (mirror's config.json) updated with `model.arch`."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    arch = dict(model_cfg.arch or {})
    if model_cfg.config_name:
        from femlm.data.tokenizer import model_config_path

        path = model_config_path(model_cfg.config_name, download)
        source = str(path) if path is not None else model_cfg.config_name
        try:
            config = AutoConfig.from_pretrained(source, local_files_only=path is None and not hub_reachable())
        except (OSError, ValueError):
            raise UserError(f"model.config_name={model_cfg.config_name}: no config.json in the mirror or cache and "
                            "the Hub is unreachable; run `femlm download tokenizers` or set model.arch") from None
        arch.pop("model_type", None)
        for name, value in arch.items():
            setattr(config, name, value)
    else:
        model_type = arch.pop("model_type", None)
        if not model_type:
            raise UserError(f"model={model_cfg.name}: init=scratch needs model.config_name or model.arch.model_type")
        arch.setdefault("vocab_size", len(tokenizer))
        config = AutoConfig.for_model(model_type, **arch)
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"model={model_cfg.name}: tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
                        f"{config.vocab_size}; use the model's tokenizer or a larger model.arch.vocab_size")
    # Special ids follow the tokenizer (the mirror's RoBERTa config.json predates pad_token_id).
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            setattr(config, attr, value)
    config.architectures = None
    return AutoModelForMaskedLM.from_config(config, attn_implementation=attn_implementation)


def max_tokens(config: Any) -> int:
    """Longest block the position embeddings can hold."""
    positions = getattr(config, "max_position_embeddings", None)
    if positions is None:
        return 1 << 30
    if config.model_type in _PADDING_OFFSET_TYPES:
        return positions - ((config.pad_token_id or 1) + 1)
    return positions


def check_compatible(model: nn.Module, tokenizer: Any, block_size: int, where: str) -> None:
    vocab = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > vocab:
        raise UserError(f"{where}: tokenizer has {len(tokenizer)} tokens but the model's vocabulary has {vocab}; "
                        "give the checkpoint's own tokenizer (model.tokenizer=null) or one it was trained with")
    limit = max_tokens(model.config)
    if block_size > limit:
        raise UserError(f"data.block_size={block_size} is beyond what {where} can hold ({limit} tokens, "
                        f"max_position_embeddings={model.config.max_position_embeddings}); lower data.block_size")


def read_pretrain_info(path: str | Path) -> dict | None:
    info = Path(path).expanduser() / "femlm.json"
    return json.loads(info.read_text()) if info.is_file() else None


# ----------------------------------------------------------------------------------------------- objective
def find_mlm_head(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The module (or function) mapping hidden states [T, H] to vocabulary logits [T, V]."""
    for attr in ("cls", "lm_head"):  # BertForMaskedLM / RobertaForMaskedLM and their many copies
        head = getattr(model, attr, None)
        if isinstance(head, nn.Module):
            return head
    if all(hasattr(model, a) for a in ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector")):
        def distilbert_head(hidden: torch.Tensor) -> torch.Tensor:  # DistilBertForMaskedLM has no head module
            x = model.vocab_layer_norm(model.activation(model.vocab_transform(hidden)))
            return model.vocab_projector(x)
        return distilbert_head
    # Generic: the one child (besides the encoder) that holds the output embeddings.
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    owners = [m for n, m in model.named_children()
              if m is not model.base_model and out is not None and any(x is out for x in m.modules())]
    if len(owners) == 1 and owners[0] is not out:
        return owners[0]
    return None


class MaskedLMObjective(nn.Module):
    """Wraps an HF masked LM; `forward` returns the *sum* of cross-entropy over labelled positions (float32),
    the number of labelled positions and, for evaluation, how many were predicted right.

    Sums (not means) let the loop weight micro-batches and ranks by their token counts, so accumulation and
    DDP give exactly the token mean over the whole global batch. DDP wraps this module, not the HF model.
    """

    def __init__(self, model: nn.Module, sparse: bool = True) -> None:
        super().__init__()
        self.model = model
        self.head = find_mlm_head(model) if sparse else None
        if sparse and self.head is None:
            warnings.warn(f"{type(model).__name__}: MLM head not recognised; sparse prediction is off "
                          "(full vocabulary projection at every position)", stacklevel=2)
        self.sparse = self.head is not None
        # BERT-style encoders also run their last layer at the labelled rows only (femlm/train/sparse_layer.py).
        self.last_layer = sparse_last_layer(model) if self.sparse else None

    def logits_at_labels(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                         labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Vocabulary logits [T, V] at the T labelled positions, and their targets [T]."""
        keep = labels.reshape(-1) != IGNORE_INDEX
        targets = labels.reshape(-1)[keep]
        if self.sparse and self.last_layer is not None:
            with without_last_layer(self.model):
                hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
            rows = sparse_layer_forward(self.last_layer, hidden, attention_mask, labels != IGNORE_INDEX)
            return self.head(rows), targets
        if self.sparse:
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
            rows = hidden.reshape(-1, hidden.shape[-1])[keep]
            return self.head(rows), targets
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.reshape(-1, logits.shape[-1])[keep], targets

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor,
                with_accuracy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        logits, targets = self.logits_at_labels(input_ids, attention_mask, labels)
        loss_sum = F.cross_entropy(logits.float(), targets, reduction="sum")
        correct = (logits.argmax(-1) == targets).sum() if with_accuracy else None
        return loss_sum, targets.new_tensor(targets.numel()), correct


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay matrices only: no weight decay on biases and LayerNorm weights (BERT/RoBERTa recipe)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        lowered = name.lower()
        if param.ndim < 2 or "bias" in lowered or "layernorm" in lowered or "layer_norm" in lowered:
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
