"""Plans that tell the truth: what corpus a run trains on, how often it will see it, and whether it is the
paper's corpus or a stand-in.

* `corpus_plan`: documents, tokens and blocks per split of a prepared corpus and the number of passes the run
  makes over its training blocks, ``passes = max_steps * sequences_per_step / train_blocks``. A continual
  pre-training run of the paper (40k steps of 48 sequences at 512 tokens) over the mirror's ~1.5k CS blocks
  makes ~1,250 passes: a memorisation run, not the paper's;
* `check_passes`: past ``max_passes`` (20 by default; the paper's CS run makes about 11 over 72k documents,
  and its News run about 3) the run stops with one line naming ``domain.max_documents``, ``trainer.max_steps``
  and the key that allows it anyway (``trainer.max_passes=null``);
* `stand_in`: a corpus built (partly) from registry corpora is the offline mirror's sample of the paper's
  corpus, a few thousand documents. `stand_in_note` is the phrase every summary and report scale line must
  carry for such runs; the corpus's ``meta.json`` holds it (``stand_in``, ``stand_in_note``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from femlm.data.config import DomainConfig
from femlm.data.tokens import corpus_fingerprints
from femlm.errors import UserError

DEFAULT_MAX_PASSES = 20.0
OVERRIDE_KEY = "trainer.max_passes"


def is_stand_in(sources: list[str]) -> bool:
    """True when any source is a registry corpus: the offline mirror's small samples of the paper's corpora."""
    from femlm.data.sources import kind_of

    return any(kind_of(spec) == "registry" for spec in sources)


def stand_in_note(domain: DomainConfig, documents: int | None = None) -> str:
    """The phrase that says a run used a stand-in corpus (empty when it did not)."""
    from femlm.data.sources import kind_of

    if not is_stand_in(list(domain.sources)):
        return ""
    mirror = [s for s in domain.sources if kind_of(s) == "registry"]
    size = f", {documents:,} documents" if documents is not None else ""
    paper = domain.paper_corpus or "the paper's corpus"
    if domain.paper_documents and domain.paper_total_documents:
        paper += f" ({domain.paper_documents:,} of {domain.paper_total_documents:,} documents)"
    return (f"stand-in corpus: the offline mirror's samples ({', '.join(mirror)}{size}), not {paper}; "
            "results do not reproduce the paper's scale")


@dataclass
class CorpusPlan:
    domain: str
    block_size: int
    max_steps: int
    sequences_per_step: int
    prepared: bool
    splits: dict[str, dict[str, int]] = field(default_factory=dict)  # documents, tokens, blocks per split
    passes: float | None = None
    stand_in: bool = False
    note: str = ""
    sources: list[str] = field(default_factory=list)
    max_documents: int | None = None
    path: str | None = None
    sha256: dict[str, str] | None = None  # of each split's token file (femlm.data.tokens.corpus_fingerprints)

    def lines(self) -> list[str]:
        """Human-readable plan lines (the dry run and the start of training print them)."""
        out = [f"corpus {self.domain}: sources {', '.join(self.sources)}"
               + (f"; sample of {self.max_documents:,} documents" if self.max_documents else "")]
        if self.prepared:
            for split, s in self.splits.items():
                out.append(f"  {split}: {s['documents']:,} documents, {s['tokens']:,} tokens, {s['blocks']:,} "
                           f"blocks of {self.block_size}")
            out.append(f"  {self.max_steps:,} steps x {self.sequences_per_step} blocks/step = "
                       f"{self.max_steps * self.sequences_per_step:,} blocks read: {self.passes:,.2f} passes "
                       "over the training blocks")
        else:
            out.append("  not prepared yet: `femlm prepare` (or the start of training) tokenizes it and counts "
                       "documents, tokens, blocks and passes")
        if self.note:
            out.append(f"  {self.note}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def corpus_plan(meta: dict[str, Any] | None, domain: DomainConfig, block_size: int, max_steps: int,
                sequences_per_step: int) -> CorpusPlan:
    """The plan of a run over a prepared corpus (`meta`: its meta.json) or, with `meta=None`, an unprepared one."""
    plan = CorpusPlan(domain.name, block_size, max_steps, sequences_per_step, prepared=meta is not None,
                      sources=list(domain.sources), max_documents=domain.max_documents,
                      stand_in=is_stand_in(list(domain.sources)))
    if meta is None:
        plan.note = stand_in_note(domain)
        return plan
    plan.splits = {s: {k: int(meta[s][k]) for k in ("documents", "tokens", "blocks")} for s in ("train", "validation")}
    blocks = plan.splits["train"]["blocks"]
    plan.passes = max_steps * sequences_per_step / blocks if blocks else float("inf")
    plan.note = meta.get("stand_in_note") or stand_in_note(domain, int(meta.get("documents", 0)) or None)
    plan.path = meta.get("path")
    plan.sha256 = corpus_fingerprints(meta)
    return plan


def check_passes(plan: CorpusPlan, max_passes: float | None = DEFAULT_MAX_PASSES, key: str = OVERRIDE_KEY) -> None:
    """One-line UserError when the run would make more than `max_passes` passes over its training blocks."""
    if max_passes is None or plan.passes is None or plan.passes <= max_passes:
        return
    train = plan.splits["train"]
    raise UserError(
        f"domain {plan.domain}: trainer.max_steps={plan.max_steps:,} x {plan.sequences_per_step} blocks/step makes "
        f"{plan.passes:,.1f} passes over the {train['blocks']:,} training blocks ({train['documents']:,} "
        f"documents){' of a stand-in corpus' if plan.stand_in else ''}, more than {key}={max_passes:g}; use a "
        f"larger corpus (domain.sources, domain.max_documents), lower trainer.max_steps, or set {key}=null to "
        "allow it")


def corpus_summary(meta: dict[str, Any]) -> dict[str, Any]:
    """What a run's summary.json should record under "corpus" (femlm.report.scale reads "train")."""
    out = {split: {k: meta[split][k] for k in ("documents", "tokens", "blocks")} for split in ("train", "validation")}
    out.update({"stand_in": bool(meta.get("stand_in")), "note": meta.get("stand_in_note", ""),
                "sources": meta.get("sources", []), "sample": meta.get("sample"), "path": meta.get("path"),
                "sha256": corpus_fingerprints(meta)})
    return out
