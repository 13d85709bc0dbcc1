"""The GPU study's data: prepared beside the data mirror, carried to a device machine that has none.

`<runs>/data/` holds what every run of the study reads, as femlm itself prepares it:

  tokenizer/            the one WordPiece vocabulary (femlm.train.inputs.shared_wordpiece: trained on the
                        warm-up domain's vocabulary sources), read by the warm-up and saved into its checkpoint
  warmup/, arms/        the warm-up's and the arms' prepared corpora (femlm.train.corpus.prepare_for: train.bin,
                        validation.bin and meta.json with each token file's sha256), uint16 ids
  mirror/dapt/...       the downstream tasks' files, laid out like the mirror (download.mirror points here)
  data.json             the settings that decided all of it, the tokenizer's fingerprint, the files' sha256

Prepared data is reused only when data.json's settings equal the experiment file's now, key for key (the
composed configs' domain and data sections, the vocabulary size, the tasks); anything else prepares it again
where the mirror is, and is refused where it is not.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.experiment.schema import Experiment
from femlm.study import gpu_configs as configs

SPLIT_FILES = ("train.bin", "validation.bin", "meta.json")


@dataclass
class Data:
    folder: Path
    info: dict[str, Any]

    @property
    def tokenizer(self) -> Path:
        return self.folder / "tokenizer"

    @property
    def mirror(self) -> Path:
        return self.folder / "mirror"

    def corpus(self, name: str) -> Any:
        """`warmup` or `arms`: the prepared corpus (femlm.data.tokens.PreparedCorpus: memory-mapped blocks)."""
        from femlm.data.tokens import PreparedCorpus

        return PreparedCorpus(self.folder / name)

    def counts(self) -> dict[str, int]:
        c = self.info["corpora"]
        return {"warmup_train_blocks": c["warmup"]["train"]["blocks"],
                "warmup_validation_blocks": c["warmup"]["validation"]["blocks"],
                "arms_train_blocks": c["arms"]["train"]["blocks"],
                "arms_validation_blocks": c["arms"]["validation"]["blocks"]}


def settings(exp: Experiment) -> dict[str, Any]:
    """Everything that decides the prepared data, from the composed configs (compared key for key on reuse)."""
    return json.loads(_settings(json.dumps(exp.raw, sort_keys=True), exp.name))


@functools.lru_cache(maxsize=4)
def _settings(raw: str, name: str) -> str:  # composed once per experiment file and process (~1 s)
    from femlm.experiment.schema import Experiment as _Experiment
    from femlm.experiment.schema import parse

    exp = parse(_Experiment, json.loads(raw), name, "experiment")
    warm = configs.warmup(exp).cfg
    arm = configs.arm(exp, exp.pretrain.reference, 1, "warmup").cfg
    out: dict[str, Any] = {"vocab_size": warm.model.vocab_size}
    for name, cfg in (("warmup", warm), ("arms", arm)):
        out[name] = {"domain": dataclasses.asdict(cfg.domain), "block_size": cfg.data.block_size,
                     "corpus_seed": cfg.data.corpus_seed(cfg.seed)}
    out["tasks"] = {t: configs.finetune(exp, t).cfg.task.dataset for t in exp.finetune.tasks} if exp.finetune else {}
    return json.dumps(out)  # the JSON form data.json holds (tuples as lists)


def prepared(exp: Experiment, runs: Path) -> Data | None:
    """The prepared data when its settings are the file's (None: not prepared, or prepared for other settings)."""
    folder = runs / "data"
    meta = folder / "data.json"
    if not meta.is_file():
        return None
    info = json.loads(meta.read_text())
    return Data(folder, info) if info.get("settings") == settings(exp) else None


def load(exp: Experiment, runs: Path) -> Data:
    """The prepared data, or a one-line error saying why it cannot be used."""
    data = prepared(exp, runs)
    if data is not None:
        return data
    folder = runs / "data"
    if not (folder / "data.json").is_file():
        raise UserError(f"{folder}: not prepared (run `python benchmarks/gpu_bundle.py` beside the data mirror, "
                        "or the study with FEMLM_MIRROR set)")
    old = json.loads((folder / "data.json").read_text()).get("settings", {})
    new = settings(exp)
    differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    raise UserError(f"{folder} was prepared with other settings ({', '.join(differ)} differ from "
                    f"femlm/conf/experiment/{exp.name}.yaml): prepare it again beside the mirror "
                    "(python benchmarks/gpu_bundle.py)")


def prepare(exp: Experiment, runs: Path) -> str:
    """Prepare <runs>/data unless it holds this experiment's data already (one line saying what happened)."""
    data = prepared(exp, runs)
    folder = runs / "data"
    if data is not None:
        return f"{folder}: prepared already ({_describe(data.info)})"
    if not os.environ.get("FEMLM_MIRROR"):
        load(exp, runs)  # raises: why the folder cannot be used
    from femlm.data.prepare import tokenizer_fingerprint
    from femlm.data.tokenizer import vocabulary_fingerprint
    from femlm.data.tokens import file_sha256
    from femlm.models.load import load_tokenizer
    from femlm.train.corpus import prepare_for
    from femlm.train.inputs import shared_wordpiece

    warm = configs.warmup(exp).cfg
    vocab = shared_wordpiece(warm)
    tokenizer = load_tokenizer(str(vocab), warm.download)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(vocab, tmp / "tokenizer")
    corpora = {}
    for name, cfg in (("warmup", warm), ("arms", configs.arm(exp, exp.pretrain.reference, 1, "warmup").cfg)):
        corpus = prepare_for(cfg, tokenizer)
        (tmp / name).mkdir()
        for f in SPLIT_FILES:
            shutil.copy2(corpus.path / f, tmp / name / f)
        meta = corpus.meta
        corpora[name] = {"domain": cfg.domain.name, "sha256": meta.get("sha256"), "documents": meta.get("documents"),
                         **{s: {k: meta[s][k] for k in ("documents", "tokens", "blocks")} for s in
                            ("train", "validation")}}
    tasks = _copy_tasks(exp, tmp / "mirror", warm.download)
    info = {"settings": settings(exp), "tokenizer": tokenizer_fingerprint(tokenizer),
            "vocabulary_sha256": vocabulary_fingerprint(tokenizer), "corpora": corpora, "tasks": tasks,
            "files": {str(p.relative_to(tmp)): file_sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}}
    (tmp / "data.json").write_text(json.dumps(info, indent=2) + "\n")
    if folder.exists():
        shutil.rmtree(folder)  # derived data prepared for other settings: the mirror makes it again
    os.replace(tmp, folder)
    return f"{folder}: {_describe(info)}"


def _copy_tasks(exp: Experiment, mirror: Path, download: Any) -> dict[str, list[str]]:
    from femlm.data.fetch import resolve_files
    from femlm.data.registry import get_entry

    out: dict[str, list[str]] = {}
    for task in exp.finetune.tasks if exp.finetune else []:
        dataset = configs.finetune(exp, task).cfg.task.dataset
        entry, paths = get_entry(dataset), resolve_files(dataset, download)
        for f in entry.files:
            if f.role in paths:
                (mirror / f.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(paths[f.role], mirror / f.path)
        out[task] = [f.path for f in entry.files if f.role in paths]
    return out


def _describe(info: dict[str, Any]) -> str:
    c = info["corpora"]
    return (f"warm-up {c['warmup']['domain']} {c['warmup']['train']['blocks']:,} training and "
            f"{c['warmup']['validation']['blocks']:,} held-out blocks; arms {c['arms']['domain']} "
            f"{c['arms']['train']['blocks']:,} and {c['arms']['validation']['blocks']:,}; tasks "
            f"{', '.join(info['tasks']) or 'none'}")

