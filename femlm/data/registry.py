"""Registry of every dataset, corpus and tokenizer the paper uses, and the rules for the imperfect ones.

Entries (`femlm.data.catalog` holds the tables): DAPT tasks ``citation_intent`` (ACL-ARC), ``sciie``
(SciERC), ``hyperpartisan_news``, ``ag`` plus ``chemprot`` and ``rct``; GLUE ``mnli`` (dev_matched /
dev_mismatched), ``qqp``, ``qnli``, ``sst2``, ``cola``, ``stsb``, ``mrpc``, ``rte``, ``wnli``; corpora
``s2orc``, ``csabstruct``, ``arxiv_cs`` (cs domain), ``realnews``, ``reuters21578`` (news domain), ``wikitext2`` (general domain); tokenizers/model configs ``bert-base-uncased``,
``roberta-base``. Groups: ``all``, ``dapt``, ``glue``, ``corpora``, ``tokenizers``; the domain names
``cs``, ``news``, ``general`` expand to their corpora, and task names (``aclarc``, ``agnews``, ...) to
their dataset.

Domains (the paper's sizes; femlm/conf/domain/*.yaml): cs = S2ORC CS papers, 72k documents sampled
of DAPT's 2.22M, ~40k steps; news = RealNews, 623k of 11.90M, ~20k steps; general = Wikipedia +
BookCorpus (16 GB), 1M steps, with WikiText-2 as the local stand-in. The local mirror holds only samples
of these corpora (a few thousand documents); see ``shared/data/MANIFEST.md``.

HyperPartisan split rule (``hp-splits.json``, Longformer/DAPT): the stored split is not disjoint. 51 ids
are listed in both train and test, 7 in both dev and test, and 58 of the 645 articles are in no split.
Longformer's ``hp_preprocess.py`` writes an article into every split that lists it, so test articles leak
into train/dev. femlm keeps the published test set whole and removes the overlap: an id listed in test is
only in test; an id in dev (and not test) is only in dev; the rest of train stays train; unlisted ids are
dropped. Result: train 465, dev 57, test 65 (587 articles). A warning with these counts is logged.

AG News: only the original 7,600-row test CSV is mirrored. With the train CSV (fast.ai's copy of Zhang
et al.'s archive) femlm makes DAPT's split: a seeded stratified 5,000-example dev set carved from the
120,000 training rows (115,000 train) and the 7,600 test rows. Without it, the test CSV is carved (seed 0,
stratified, per class 70/10/20%) into train 5,320 / dev 760 / test 1,520 for small runs, and
`femlm.data.tasks.task_data_notes` says so (outputs must print those notes).
"""

from __future__ import annotations

from femlm.data.catalog import DatasetEntry, FileEntry, load_catalog
from femlm.errors import UserError

REGISTRY: dict[str, DatasetEntry] = load_catalog()


def _conf(group: str) -> dict[str, dict]:
    """The package's femlm/conf/<group>/*.yaml options (shared blocks excluded), by name."""
    import yaml

    from femlm import CONF_DIR

    return {p.stem: yaml.safe_load(p.read_text()) or {} for p in sorted((CONF_DIR / group).glob("*.yaml"))
            if not p.stem.startswith("_")}


GROUPS: dict[str, tuple[str, ...]] = {
    "all": tuple(REGISTRY),
    **{group: tuple(n for n, e in REGISTRY.items() if e.group == group) for group in ("dapt", "glue", "corpora",
                                                                                       "tokenizers")},
    # Domains (femlm/conf/domain): the registry corpora a domain's stand-in corpus is built from.
    **{name: tuple(dict.fromkeys(str(s).split(":")[0] for key in ("sources", "validation_sources", "vocabulary_sources")
                                 for s in d.get(key, []) if str(s).split(":")[0] in REGISTRY))
       for name, d in _conf("domain").items()},
}
# Names that mean a registry dataset: every task config's name (femlm/conf/task), and common spellings.
ALIASES: dict[str, str] = {
    **{name: d["dataset"] for name, d in _conf("task").items() if d.get("dataset") in REGISTRY and name != d["dataset"]},
    "acl-arc": "citation_intent", "ag_news": "ag", "rct-20k": "rct", "sst-2": "sst2", "sts-b": "stsb",
    "google-bert/bert-base-uncased": "bert-base-uncased", "FacebookAI/roberta-base": "roberta-base",
}

__all__ = ["ALIASES", "GROUPS", "REGISTRY", "DatasetEntry", "FileEntry", "bare_names", "expand_names", "get_entry"]


def bare_names() -> str:
    """Every name `femlm download` takes (its --help lists them)."""
    return (f"dataset names ({', '.join(REGISTRY)}), their aliases ({', '.join(ALIASES)}) or groups "
            f"({', '.join(GROUPS)})")


def get_entry(name: str) -> DatasetEntry:
    """The registry entry for a dataset name or alias; UserError listing the known names otherwise."""
    key = ALIASES.get(name, name)
    if key not in REGISTRY:
        raise UserError(f"unknown dataset {name!r}: known datasets are {', '.join(sorted(REGISTRY))}; "
                        f"groups {', '.join(GROUPS)}")
    return REGISTRY[key]


def expand_names(names: list[str]) -> list[tuple[str, bool]]:
    """Registry names for `names` (names, aliases or groups), in order, without repeats.

    Each comes with ``explicit``: True when the user named it (so its absence is an error), False when it
    came from a group (its absence is only reported).
    """
    out: dict[str, bool] = {}
    for name in names:
        if name in GROUPS:
            for member in GROUPS[name]:
                out.setdefault(member, False)
        else:
            out[get_entry(name).name] = True
    return list(out.items())
