"""What a checkpoint is, found without torch: path or Hub id, config.json, weights, head, position limit.

`locate` resolves a name once into a `Checkpoint` (a local directory, inspected, or a Hub id, checked to be
obtainable); the resolver (`femlm.models.resolve`) and the loaders in `femlm.models.load` receive that value
rather than looking again, so a `--dry-run` refuses what the real run refuses with the same checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from femlm import provenance
from femlm.data.network import hub_reachable
from femlm.errors import UserError

# Models whose position ids start after the padding index (RoBERTa: 514 positions hold 512 tokens).
PADDING_OFFSET_TYPES = frozenset({"roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "xmod", "mpnet",
                                  "roberta-prelayernorm"})
HEAD_ONLY_SUFFIXES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                      "ForMultipleChoice")
MASKED_LM_SUFFIXES = ("ForMaskedLM", "ForPreTraining")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer_config.json")


def is_local(name: str) -> bool:
    """A path (absolute, ./, ../, ~, an existing directory, or with more than one /) rather than a Hub id like
    roberta-base or org/model."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name
            or Path(name).expanduser().exists())


@dataclass
class CheckpointInfo:
    """A local checkpoint directory as far as it can be known without loading it."""

    path: Path
    config: dict[str, Any]
    weight_keys: list[str] | None = None  # parameter names (safetensors files only; None: not readable cheaply)
    has_tokenizer: bool = False
    femlm: provenance.Provenance | None = field(default=None)  # femlm.json: the arm and step that made it

    @property
    def architectures(self) -> list[str]:
        return [a for a in self.config.get("architectures") or [] if isinstance(a, str)]

    @property
    def is_classifier(self) -> bool:
        archs = self.architectures
        return bool(archs) and all(a.endswith(HEAD_ONLY_SUFFIXES) for a in archs)

    @property
    def encoder_only(self) -> bool:
        """Saved as a bare encoder (e.g. MPNetModel): no masked-LM head weights."""
        archs = self.architectures
        return bool(archs) and not self.is_classifier and not any(a.endswith(MASKED_LM_SUFFIXES) for a in archs)


def _weight_keys(path: Path) -> list[str] | None:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            return sorted(json.loads(index.read_text())["weight_map"])
        except (OSError, ValueError, KeyError):
            return None
    single = path / "model.safetensors"
    if single.is_file():
        try:
            from safetensors import safe_open

            with safe_open(str(single), framework="numpy") as handle:
                return sorted(handle.keys())
        except Exception:  # noqa: BLE001 - a torn file: the loader reports it with the library's reason
            return None
    return None


def inspect_checkpoint(name: str, key: str = "model.name_or_path") -> CheckpointInfo:
    """Check a local checkpoint directory: it exists, has a readable config.json and weights. `key` names the
    setting in the one-line errors."""
    path = Path(name).expanduser()
    if not path.exists():
        raise UserError(f"{key}={name}: no such checkpoint directory; give a directory holding config.json and "
                        "weights (e.g. a pre-training run's checkpoints/final) or a Hub id")
    if not path.is_dir():
        raise UserError(f"{key}={name}: not a directory; give a checkpoint directory holding config.json and weights")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UserError(f"{key}={name}: not a checkpoint directory (no config.json); give a save_pretrained "
                        "directory such as <pre-training run>/checkpoints/final")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{key}={name}: config.json is unreadable ({str(err).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise UserError(f"{key}={name}: config.json is not a JSON object")
    if not any((path / f).is_file() for f in WEIGHT_FILES):
        raise UserError(f"{key}={name}: no weights ({' or '.join(WEIGHT_FILES[:2])}) next to config.json")
    return CheckpointInfo(path, config, _weight_keys(path), any((path / f).is_file() for f in TOKENIZER_FILES),
                          provenance.read(path))


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint name resolved once, passed down to whatever reads it: origin "local" (a directory, inspected:
    `info`) or "hub" (a Hub id; `info` is None). A model built from scratch has no Checkpoint."""

    name: str  # as given
    origin: str  # "local" or "hub"
    source: str  # where the weights are read from: the directory, or the Hub id
    info: CheckpointInfo | None = None
    femlm: provenance.Provenance | None = None  # the directory's femlm.json, if any


def locate(name: str, key: str = "model.name_or_path", hub_check: bool = True, masked_lm: bool = False,
           new_mlm_head: bool = False) -> Checkpoint:
    """Resolve `name` once: a local directory is inspected (config.json, weights, femlm.json), a Hub id must be
    obtainable (unless `hub_check` is False: a tokenizer or config name the loader tries itself); with
    `masked_lm` a checkpoint pre-training cannot continue is refused (`check_masked_lm`)."""
    if is_local(name):
        info = inspect_checkpoint(name, key)
        if masked_lm:
            check_masked_lm(info, name, new_mlm_head, key)
        return Checkpoint(name, "local", str(info.path), info, info.femlm)
    if hub_check:
        ensure_obtainable(name, key)
    return Checkpoint(name, "hub", name)


def check_checkpoint(cfg: Any, masked_lm: bool = False) -> None:
    """The `check` entry of the commands that read `model.name_or_path` (femlm.commands): a local directory is
    inspected before the command imports torch, so a wrong path is one line in about a second; a Hub id, or the
    key not set, is left to the run's resolver, which locates it again and keeps the result. `masked_lm`:
    pre-training and analysis refuse what they cannot continue (`check_masked_lm`)."""
    name = cfg.model.name_or_path
    if name and is_local(str(name)):
        locate(str(name), masked_lm=masked_lm, new_mlm_head=bool(cfg.model.new_mlm_head))


def check_masked_lm_checkpoint(cfg: Any) -> None:
    check_checkpoint(cfg, masked_lm=True)


def ensure_obtainable(name: str, key: str = "model.name_or_path") -> None:
    """A Hub id must be fetchable: the Hub answers, or the local Hugging Face cache already holds it."""
    if is_local(name) or hub_reachable():
        return
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id: the loader says so
        cached = None
    if not isinstance(cached, str):
        raise UserError(f"{key}={name}: a Hub id, but the Hub is unreachable and the local Hugging Face cache does "
                        "not hold it; give a local checkpoint directory (e.g. a pre-training run's checkpoints/final)")


def check_masked_lm(info: CheckpointInfo | None, name: str, new_mlm_head: bool,
                    key: str = "model.name_or_path") -> None:
    """Refuse, before loading, a checkpoint that pre-training or analysis cannot continue: a fine-tuned
    classifier, or an encoder without masked-LM head weights unless `model.new_mlm_head` allows a fresh one."""
    if info is None:
        return
    if info.is_classifier:
        raise UserError(f"{key}={name}: a {info.architectures[0]} checkpoint; pre-training needs a masked-LM "
                        "checkpoint (e.g. checkpoints/final of a pre-training run), not a fine-tuned classifier")
    if info.encoder_only and not new_mlm_head:
        raise UserError(f"{key}={name}: a {info.architectures[0]} checkpoint without masked-LM head weights; pre-training needs a "
                        "masked-LM checkpoint, or model.new_mlm_head=true to initialise a fresh head on this encoder")


def position_limit(config: Any, tokenizer: Any = None) -> int:
    """The longest input a model can embed, special tokens included (a config object or its dict)."""
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    positions = get("max_position_embeddings")
    limit = int(positions) if positions else 1 << 30
    if get("model_type") in PADDING_OFFSET_TYPES:
        limit -= int(get("pad_token_id") or 1) + 1
    max_length = getattr(tokenizer, "model_max_length", None) if tokenizer is not None else None
    if isinstance(max_length, int) and 0 < max_length < limit:
        limit = max_length
    return limit
