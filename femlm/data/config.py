"""Typed schemas of the `download`, `task` and `domain` config sections.

The YAML files in ``conf/task/`` and ``conf/domain/`` must match these dataclasses key for key (the CLI
merges every composed config into them). Presets with the paper's values live in `femlm.data.presets`;
the YAML files are written from them and a test keeps the two equal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from femlm.errors import UserError

DEFAULT_CACHE_DIR = "~/.cache/femlm"
METRICS = ("macro_f1", "micro_f1", "accuracy", "accuracy_f1", "matthews", "pearson_spearman")
# The keys each metric family reports; `main_metric` must be one of them.
METRIC_KEYS: dict[str, tuple[str, ...]] = {
    "macro_f1": ("macro_f1", "accuracy"),
    "micro_f1": ("micro_f1", "accuracy"),
    "accuracy": ("accuracy",),
    "accuracy_f1": ("accuracy", "f1"),
    "matthews": ("mcc",),
    "pearson_spearman": ("pearson", "spearman"),
}


@dataclass
class DownloadConfig:
    # A local directory laid out like shared/data (dapt/, glue/, corpus/, tokenizers/). None: $FEMLM_MIRROR.
    mirror: str | None = None
    # Where downloads, checksum stamps and tokenized blocks go. The default gives way to $FEMLM_CACHE.
    cache_dir: str = DEFAULT_CACHE_DIR
    verify: bool = True  # re-hash files already present instead of trusting their checksum stamp
    force: bool = False  # download again (or re-hash mirror files) even when a verified copy exists
    datasets: list[str] = field(default_factory=lambda: ["all"])
    offline: bool = False  # never touch the network: mirror and cache only

    def mirror_dir(self) -> Path | None:
        value = self.mirror or os.environ.get("FEMLM_MIRROR") or None
        return Path(value).expanduser() if value else None

    def cache_path(self) -> Path:
        value = self.cache_dir
        if value == DEFAULT_CACHE_DIR and os.environ.get("FEMLM_CACHE"):
            value = os.environ["FEMLM_CACHE"]
        return Path(value).expanduser()

    def validate(self) -> None:
        if not self.datasets:
            raise UserError("download.datasets is empty: give registry names or groups "
                            "(all, dapt, glue, corpora, tokenizers)")
        mirror = self.mirror_dir()
        if mirror is not None and not mirror.is_dir():
            raise UserError(f"download.mirror={str(mirror)!r} (or $FEMLM_MIRROR) is not a directory: "
                            "point it at a local copy laid out like shared/data, or unset it")


@dataclass
class TaskConfig:
    name: str = "aclarc"
    # A registry name (femlm.data.registry.REGISTRY), or a local directory (/abs, ./rel, ../rel, ~/..., any
    # path with a /) holding train/dev[/test] .jsonl|.tsv|.csv files (femlm.data.local).
    dataset: str = "citation_intent"
    text_fields: list[str] = field(default_factory=lambda: ["text"])  # 1 (single text) or 2 (a pair)
    labels: list[str] | None = field(default_factory=lambda: [
        "Background", "CompareOrContrast", "Extends", "Future", "Motivation", "Uses"])  # None: regression
    metric: str = "macro_f1"
    main_metric: str = "macro_f1"  # key used for early stopping and reporting
    eval_split: str = "test"
    epochs: int = 10
    lr: float = 2e-5
    batch_size: int = 16
    patience: int | None = 3
    max_length: int = 512
    warmup_ratio: float = 0.06
    weight_decay: float = 0.1
    paper: dict[str, Any] = field(default_factory=dict)  # the FE-MLM paper's numbers for this task

    def validate(self) -> None:
        if self.metric not in METRICS:
            raise UserError(f"task.metric={self.metric!r} (task {self.name}): allowed {', '.join(METRICS)}")
        if self.main_metric not in METRIC_KEYS[self.metric]:
            raise UserError(f"task.main_metric={self.main_metric!r} (task {self.name}): metric "
                            f"{self.metric} reports {', '.join(METRIC_KEYS[self.metric])}")
        if len(self.text_fields) not in (1, 2):
            raise UserError(f"task.text_fields={list(self.text_fields)} (task {self.name}): give 1 or 2 fields")
        if (self.labels is None) != (self.metric == "pearson_spearman"):
            raise UserError(f"task.labels (task {self.name}): set labels: null only for regression "
                            "(metric pearson_spearman), a label list otherwise")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise UserError(f"task.labels={list(self.labels)} (task {self.name}): labels must be distinct")
        for key in ("epochs", "batch_size", "max_length"):
            if getattr(self, key) < 1:
                raise UserError(f"task.{key}={getattr(self, key)} (task {self.name}): must be at least 1")
        if self.lr <= 0:
            raise UserError(f"task.lr={self.lr} (task {self.name}): must be positive")
        if not 0 <= self.warmup_ratio < 1:
            raise UserError(f"task.warmup_ratio={self.warmup_ratio} (task {self.name}): must be in [0, 1)")
        if self.patience is not None and self.patience < 1:
            raise UserError(f"task.patience={self.patience} (task {self.name}): at least 1, or null")


@dataclass
class DomainConfig:
    name: str = "cs"
    # What is read, in order (femlm.data.sources): registry corpora, optionally with a reader option after a colon
    # (s2orc:cs keeps CS papers; these are the offline mirror's samples, "stand-ins"); local files
    # file:<path, directory or glob> of .txt (blank-line-separated documents), .jsonl ("text"), .gz of those, or
    # .parquet ("text" column), any size; Hugging Face datasets hf:<owner>/<name>[?config=..&split=..&text=..&
    # filter=..] or hf:<local dir in Hub layout>[?...] (femlm.data.hub), streamed.
    sources: list[str] = field(default_factory=lambda: ["s2orc:cs", "csabstruct", "arxiv_cs"])
    paper_documents: int | None = 72_000  # documents the paper sampled (preset=paper: domain.max_documents)
    paper_total_documents: int | None = 2_220_000  # documents of the full corpus it sampled from
    paper_steps: int | None = 40_000
    # Seeded, exactly uniform sample of this many distinct documents (femlm.data.sample); null: every document.
    # More than the corpus holds is an error.
    max_documents: int | None = None
    validation_fraction: float = 0.05  # share of documents held out (whole documents, never blocks)
    # Public sources that stand for the paper's corpus (preset=paper reads these: sources: ${domain.paper_sources}).
    paper_sources: list[str] = field(default_factory=list)
    paper_corpus: str = ""  # what the paper trained on, for notes ("S2ORC CS papers (DAPT's CS corpus)")

    def validate(self) -> None:
        from femlm.data.hub import is_hub_source, parse_hub

        if not self.sources:
            raise UserError(f"domain.sources is empty (domain {self.name}): list registry corpora, local files "
                            "or Hugging Face datasets, e.g. [s2orc:cs, csabstruct, arxiv_cs], "
                            "[file:/data/corpus/*.txt] or [hf:allenai/c4?config=realnewslike]")
        for spec in [*self.sources, *self.paper_sources]:
            if spec.startswith("file:") and not spec[5:].strip():
                raise UserError(f"domain.sources entry {spec!r} (domain {self.name}): give a file, directory or "
                                "glob after file:, e.g. file:/data/corpus/*.txt")
            if is_hub_source(spec):
                parse_hub(spec)
        if self.max_documents is not None and self.max_documents < 2:
            raise UserError(f"domain.max_documents={self.max_documents} (domain {self.name}): "
                            "at least 2 (one train, one validation document), or null for all")
        if not 0 < self.validation_fraction < 1:
            raise UserError(f"domain.validation_fraction={self.validation_fraction} (domain {self.name}): "
                            "must be in (0, 1)")
