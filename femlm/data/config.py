"""Typed schemas of the `download`, `task`, `domain` and `data` config sections (the defaults live here;
conf/task/*.yaml and conf/domain/*.yaml hold only what a task or a domain changes)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from femlm.errors import UserError, require_positive

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
    """A downstream task: its data, its metric and its fine-tuning recipe.

    The defaults are DAPT's classifier recipe (dont-stop-pretraining: 10 epochs, lr 2e-5, batch 16, early
    stopping with patience 3, 512 tokens, warmup 6%, weight decay 0.1, scored on test); conf/task/_glue.yaml
    holds the BERT GLUE recipe. ``text_fields`` and ``labels`` default to the registry dataset's own;
    regression (STS-B) is ``metric: pearson_spearman``. The paper's numbers for a task live in
    femlm.paper, the one transcription of the paper.
    """

    name: str = "custom"
    # A registry name (femlm.data.registry.REGISTRY), or a local directory (/abs, ./rel, ../rel, ~/..., any
    # path with a /) holding train/dev[/test] .jsonl|.tsv|.csv files (femlm.data.local).
    dataset: str = ""
    text_fields: list[str] | None = None  # 1 (single text) or 2 (a pair); None: the registry dataset's
    labels: list[str] | None = None  # None: the registry dataset's labels (a local dataset must give them)
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

    @property
    def regression(self) -> bool:
        return self.metric == "pearson_spearman"

    def validate(self) -> None:
        if not self.dataset:
            raise UserError(f"task.dataset is not set (task {self.name}): give a registry dataset or a local "
                            "directory of train/dev[/test] files")
        if self.metric not in METRICS:
            raise UserError(f"task.metric={self.metric!r} (task {self.name}): allowed {', '.join(METRICS)}")
        if self.main_metric not in METRIC_KEYS[self.metric]:
            raise UserError(f"task.main_metric={self.main_metric!r} (task {self.name}): metric "
                            f"{self.metric} reports {', '.join(METRIC_KEYS[self.metric])}")
        self._fill_from_registry()
        if len(self.text_fields or []) not in (1, 2):
            raise UserError(f"task.text_fields={self.text_fields} (task {self.name}): give 1 or 2 fields")
        if self.regression and self.labels is not None:
            raise UserError(f"task.labels (task {self.name}): a regression task (metric pearson_spearman) has no "
                            "label set; set task.labels=null")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise UserError(f"task.labels={list(self.labels)} (task {self.name}): labels must be distinct")
        require_positive("task", self, "epochs", "batch_size", "max_length")
        if self.lr <= 0:
            raise UserError(f"task.lr={self.lr} (task {self.name}): must be positive")
        if not 0 <= self.warmup_ratio < 1:
            raise UserError(f"task.warmup_ratio={self.warmup_ratio} (task {self.name}): must be in [0, 1)")
        if self.patience is not None and self.patience < 1:
            raise UserError(f"task.patience={self.patience} (task {self.name}): at least 1, or null")

    def _fill_from_registry(self) -> None:
        """Text fields and labels the config leaves out come from the registry entry of the dataset."""
        from femlm.data.registry import REGISTRY

        entry = REGISTRY.get(self.dataset)
        if self.text_fields is None:
            self.text_fields = list(entry.text_fields) if entry is not None and entry.text_fields else ["text"]
        if self.labels is None and not self.regression:
            if entry is None or entry.labels is None:
                raise UserError(f"task.labels is not set (task {self.name}, dataset {self.dataset}): give the "
                                "label set as it appears in the files, e.g. task.labels=[pos,neg]")
            self.labels = list(entry.labels)


@dataclass
class DomainConfig:
    name: str = "custom"
    # What is read, in order (femlm.data.sources): registry corpora, optionally with a reader option after a colon
    # (s2orc:cs keeps CS papers; these are the offline mirror's samples, "stand-ins"); local files
    # file:<path, directory or glob> of .txt (blank-line-separated documents), .jsonl ("text"), .gz of those, or
    # .parquet ("text" column), any size; Hugging Face datasets hf:<owner>/<name>[?config=..&split=..&text=..&
    # filter=..] or hf:<local dir in Hub layout>[?...] (femlm.data.hub), streamed.
    sources: list[str] = field(default_factory=list)
    paper_documents: int | None = None  # documents the paper sampled (preset=paper: domain.max_documents)
    paper_total_documents: int | None = None  # documents of the full corpus it sampled from
    paper_steps: int | None = None  # the paper's pre-training steps on this domain
    # Seeded, exactly uniform sample of this many distinct documents (femlm.data.sample); null: every document.
    # More than the corpus holds is an error.
    max_documents: int | None = None
    validation_fraction: float = 0.05  # share of documents held out (whole documents, never blocks)
    # Public sources that stand for the paper's corpus (preset=paper reads these: sources: ${domain.paper_sources}).
    paper_sources: list[str] = field(default_factory=list)
    paper_corpus: str = ""  # what the paper trained on, for notes ("S2ORC CS papers (DAPT's CS corpus)")
    # A corpus's own held-out split (same syntax as `sources`, e.g. [enwiki:valid]): when given, its documents are
    # the validation split and every document of `sources` trains (validation_fraction is not used; a held-out
    # document equal to a training one is dropped); `max_documents` then samples the training documents only.
    validation_sources: list[str] = field(default_factory=list)
    # Sources whose documents train the WordPiece vocabulary when a run trains one (pretrain-scratch without
    # model.tokenizer, `femlm prepare` without a checkpoint); empty: the domain's own (sampled) documents. Two
    # domains that name the same sources share one vocabulary (femlm.train.inputs.shared_wordpiece).
    vocabulary_sources: list[str] = field(default_factory=list)

    @property
    def all_sources(self) -> list[str]:
        """Every source a prepared corpus reads, in canonical order: `sources`, then `validation_sources`."""
        return [*self.sources, *self.validation_sources]

    def validate(self) -> None:
        from femlm.data.hub import is_hub_source, parse_hub

        if not self.sources:
            raise UserError(f"domain.sources is empty (domain {self.name}): list registry corpora, local files "
                            "or Hugging Face datasets, e.g. [s2orc:cs, csabstruct, arxiv_cs], "
                            "[file:/data/corpus/*.txt] or [hf:allenai/c4?config=realnewslike]")
        for spec in [*self.sources, *self.paper_sources, *self.validation_sources, *self.vocabulary_sources]:
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


@dataclass
class DataConfig:
    block_size: int = 512
    # Fixed held-out set: this many validation blocks, masked once with `eval_seed` for every strategy.
    eval_blocks: int = 256
    eval_seed: int = 1234
    # Seed of the corpus's document sample and train/validation split; None: the run's seed. Runs that must share
    # one held-out set (and never train on each other's held-out documents) whatever their own seeds -- e.g. a
    # warm-up and arms of several seeds continuing from it -- give the same value.
    split_seed: int | None = None

    def corpus_seed(self, run_seed: int) -> int:
        """The seed that samples and splits the corpus: `split_seed`, else the run's seed."""
        return run_seed if self.split_seed is None else int(self.split_seed)

    def validate(self) -> None:
        if self.block_size < 8:
            raise UserError(f"data.block_size={self.block_size}: must be at least 8")
        require_positive("data", self, "eval_blocks")
