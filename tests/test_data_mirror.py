"""Against the real local mirror (../shared/data): skipped when it is absent. Offline throughout."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import load_documents
from femlm.data.download import download_all
from femlm.data.registry import REGISTRY
from femlm.data.tasks import load_task, task_data_notes
from femlm.data.tokenizer import mirrored_config_path
from femlm.errors import UserError
from femlm.models.load import load_tokenizer
from helpers.configs import DOMAIN_NAMES, STUDY_DOMAINS, TASK_NAMES, domain, task

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.mirror,
              pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no local mirror at {MIRROR}")]

# MANIFEST.md's counts (HyperPartisan: the registry's overlap rule; AG News: the documented carve).
EXPECTED = {
    "aclarc": {"train": 1688, "dev": 114, "test": 139},
    "scierc": {"train": 3219, "dev": 455, "test": 974},
    "chemprot": {"train": 4169, "dev": 2427, "test": 3469},
    "hyperpartisan": {"train": 465, "dev": 57, "test": 65},
    "agnews": {"train": 5320, "dev": 760, "test": 1520},
    "sst2": {"train": 67349, "dev": 872},
    "cola": {"train": 8551, "dev": 1043},
    "mrpc": {"train": 3668, "dev": 408},
    "stsb": {"train": 5749, "dev": 1500},
    "rte": {"train": 2490, "dev": 277},
}


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> DownloadConfig:
    return DownloadConfig(mirror=str(MIRROR), cache_dir=str(tmp_path_factory.mktemp("cache")), offline=True)


def test_download_all_offline(cfg: DownloadConfig, capsys: pytest.CaptureFixture[str]) -> None:
    rows = download_all(["all"], cfg)
    present = [r for r in rows if r["status"] != "absent"]
    # Every mirrored file the registry uses: 56 minus AG readme.txt and the 4 CoLA v1.1 cola_public copies.
    assert len(present) == 51
    assert all(r["status"] == "verified" for r in present)
    absent = {r["dataset"] for r in rows if r["status"] == "absent"}
    assert absent == {"rct", "ag", "mnli", "qqp", "qnli", "wnli", "wikitext2"}
    assert "absent from the mirror" in capsys.readouterr().out
    with pytest.raises(UserError, match="mnli.*not found"):
        download_all(["mnli"], cfg)  # named explicitly: an error


@pytest.mark.parametrize("name", list(EXPECTED))
def test_split_sizes_and_labels(cfg: DownloadConfig, name: str) -> None:
    task_cfg = task(name)
    dd = load_task(task_cfg, cfg)
    assert {k: len(v) for k, v in dd.items()} == EXPECTED[name]
    assert ("text_pair" in dd["train"].column_names) == (len(task_cfg.text_fields) == 2)
    if task_cfg.labels is None:
        assert min(dd["dev"]["label"]) >= 0.0 and max(dd["dev"]["label"]) <= 5.0
    else:
        assert dd["train"].features["label"].names == task_cfg.labels
        seen = set().union(*(set(d["label"]) for d in dd.values()))
        assert seen == set(range(len(task_cfg.labels))) or name == "chemprot"


def test_label_counts_match_manifest(cfg: DownloadConfig) -> None:
    aclarc = load_task(task("aclarc"), cfg)["train"]
    names = task("aclarc").labels
    assert Counter(names[i] for i in aclarc["label"]) == {"Background": 867, "Uses": 317, "CompareOrContrast": 305,
                                                          "Motivation": 76, "Extends": 63, "Future": 60}
    rte = load_task(task("rte"), cfg)["dev"]
    assert Counter(rte["label"]) == {0: 146, 1: 131}
    hp = load_task(task("hyperpartisan"), cfg)
    assert sum(len(d) for d in hp.values()) == 587
    assert any("HyperPartisan" in n for n in task_data_notes(task("hyperpartisan"), cfg))
    assert any("carved" in n for n in task_data_notes(task("agnews"), cfg))


def test_tokenizers_and_configs(cfg: DownloadConfig) -> None:
    from transformers import AutoTokenizer

    text = "Fully-explored MLM reduces gradient variance, doesn't it? Héllo wörld."
    for name in ("bert-base-uncased", "roberta-base"):
        ours = load_tokenizer(name, cfg)
        reference = AutoTokenizer.from_pretrained(str(MIRROR / "tokenizers" / name))
        assert ours(text)["input_ids"] == reference(text)["input_ids"]
        assert ours.is_fast and ours.model_max_length == 512
        assert mirrored_config_path(name, cfg) == MIRROR / "tokenizers" / name / "config.json"
    assert load_tokenizer("bert-base-uncased", cfg)("a b")["input_ids"][0] == 101
    assert load_tokenizer("roberta-base", cfg)("a b")["input_ids"][0] == 0


def test_domains_have_documents(cfg: DownloadConfig) -> None:
    # The study's corpora (wikipedia, acl): exact counts in tests/test_data_study_mirror.py.
    sizes = {name: len(load_documents(domain(name), cfg)) for name in DOMAIN_NAMES if name not in STUDY_DOMAINS}
    # News: RealNews + Reuters samples only (the HyperPartisan articles are task text, not corpus text).
    assert sizes["cs"] > 3000 and sizes["news"] > 2500 and sizes["general"] > 100
    small = load_documents(DomainConfig("cs", ["s2orc:cs"], max_documents=10), cfg, seed=3)
    assert len(small) == 10 and small == load_documents(
        DomainConfig("cs", ["s2orc:cs"], max_documents=10), cfg, seed=3)


def test_every_task_and_domain_names_registry_data() -> None:
    for name in TASK_NAMES:
        assert task(name).dataset in REGISTRY, name
    for name in DOMAIN_NAMES:
        d = domain(name)
        assert all(s.split(":")[0] in REGISTRY for s in [*d.sources, *d.validation_sources]), name


def test_roberta_blocks_use_its_own_special_tokens(cfg: DownloadConfig, tmp_path: Path) -> None:
    from femlm.data.corpus import prepare_blocks

    tokenizer = load_tokenizer("roberta-base", cfg)
    domain = DomainConfig("cs", ["s2orc:cs"], max_documents=20, validation_fraction=0.1)
    dd = prepare_blocks(domain, tokenizer, 64, cfg, tmp_path, num_proc=1)
    first = dd["train"][0].tolist()
    assert len(first) == 64 and first[0] == tokenizer.bos_token_id == 0
    flat = dd["train"].numpy().ravel().tolist()
    assert flat.count(tokenizer.cls_token_id) == 18  # one <s> per training document (18 of 20)
