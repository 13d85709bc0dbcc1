"""A catalogue of bad invocations of every subcommand, through the CLI.

Each case runs the CLI in this process (`cli_in_process`, or `cli_in_process_with_hydra` for command lines that
get as far as Hydra's run) and the cases marked `subprocess` through the real CLI in a subprocess: one per
subcommand that gets past composition and one per kind of failure (a missing file or checkpoint, a malformed
input, a failed download check, an unreachable source), so exit codes and stderr are also checked as a user
sees them.

Every case must: exit with status 2; print exactly one non-empty line on stderr (``femlm: error: ...``) that
names the key or file and what is allowed; print no traceback; and leave nothing behind: no run directory
(no file at all under $FEMLM_RUNS) and nothing half-written in the cache ($FEMLM_CACHE). The fixtures
(tiny checkpoints, corpora, task directories, a damaged mirror copy, one finished run) are built once per
module. docs/hardening.md lists each case with its message; set FEMLM_BAD_INPUT_LOG=<file> to record the
messages of a run (one JSON object per case).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("femlm_env")

# A pre-training run small enough to build a few blocks from a 40-document corpus in seconds.
SMALL = ["preset=tiny", "trainer.max_steps=2", "data.eval_blocks=4", "runtime.threads=1", "logger.progress=false",
         "logger.wandb.mode=disabled"]
TINY_MODEL = ["model.arch.hidden_size=16", "model.arch.num_hidden_layers=1", "model.arch.num_attention_heads=2",
              "model.arch.intermediate_size=32", "data.block_size=32", "trainer.batch_size=4"]
LOCAL_TASK = ["preset=tiny", "model.name_or_path={mlm}", "task.labels=[pos,neg]", "task.eval_split=dev",
              "finetune.seeds=[1]", "logger.progress=false"]
REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "data"
PARTIAL_MARKERS = (".part", ".tmp", "tmp-", ".incomplete", ".lock")


@dataclass
class Case:
    id: str
    args: list[str]
    needles: list[str]  # substrings the one error line must hold (after {placeholders} are filled)
    mirror: bool = False  # needs the data mirror (skipped without it)
    env: dict[str, str] = field(default_factory=dict)
    # The corpus was prepared completely before the refusal: a valid cache entry (what `femlm prepare` leaves).
    keeps_prepared_corpus: bool = False
    subprocess: bool = False  # through the real CLI in a subprocess (see the module's docstring)


BEFORE_HYDRA = [
    # --- composition and the typed schema (caught before Hydra starts: run in-process, `cli_in_process`) ---
    Case("unknown-group-option", ["pretrain-scratch", *SMALL, "masking=nope"],
         ["masking=nope", "fe_subword", "mlm_span"]),
    Case("misspelled-key", ["pretrain-scratch", *SMALL, "trainer.mx_steps=3"], ["trainer.mx_steps", "did you mean trainer.max_steps"]),
    Case("wrong-type", ["pretrain-scratch", *SMALL, "trainer.max_steps=abc"],
         ["trainer.max_steps='abc'", "expected an integer"]),
    Case("num-masks-times-ratio-above-1", ["pretrain-scratch", *SMALL, "masking.num_masks=8", "masking.ratio=0.2"],
         ["masking.num_masks", "masking.ratio", "<= 1"]),
    Case("num-masks-zero", ["pretrain-scratch", *SMALL, "masking.num_masks=0"], ["masking.num_masks=0", ">= 1"]),
    Case("ratio-zero", ["pretrain-scratch", *SMALL, "masking.ratio=0"], ["masking.ratio=0", "0 < ratio <= 1"]),
    Case("ratio-negative", ["continual-pretrain", *SMALL, "masking.ratio=-0.1"],
         ["masking.ratio=-0.1", "0 < ratio <= 1"]),
    Case("unknown-task", ["finetune", "preset=tiny", "task=nope"], ["task=nope", "aclarc", "sst2"]),
    Case("unknown-domain", ["pretrain-scratch", *SMALL, "domain=mars"], ["domain=mars", "cs", "news"]),
    Case("seeds-empty", ["finetune", "preset=tiny", "finetune.seeds=[]"], ["finetune.seeds=[]", "at least one"]),
    Case("cfg-nonsense", ["pretrain-scratch", "--cfg", "nonsense"], ["--cfg", "nonsense", "job, hydra, all"]),
    Case("bare-argument", ["pretrain-scratch", "preset=tiny", "foo"], ["'foo'", "key=value"]),
    Case("resume-true-no-earlier-run", ["pretrain-scratch", *SMALL, "resume=true"],
         ["resume=true", "no earlier pretrain-scratch run"]),
    Case("analyze-unknown-kind", ["analyze", "nonsense"], ["analysis.kind", "nonsense", "covariance, variance"]),
    Case("analyze-two-kinds", ["analyze", "covariance", "variance"], ["analyze", "covariance, variance, both"]),
    Case("evaluate-without-checkpoints", ["evaluate", "preset=tiny"], ["evaluate.checkpoints", "not set"]),
    Case("unknown-launcher", ["pretrain-scratch", "-m", *SMALL, "hydra/launcher=nope"],
         ["hydra/launcher=nope", "basic"]),
    Case("download-mirror-missing", ["download", "citation_intent", "download.mirror=/nonexistent"],
         ["download.mirror", "/nonexistent", "not a directory"]),
    Case("download-nothing", ["download", "download.datasets=[]"], ["download.datasets", "all, dapt"]),
    Case("report-unknown-table", ["report", "report.tables=[table9]"], ["report.tables", "table9", "glue, continual, glue_average"]),
    Case("output-dir-not-writable", ["pretrain-scratch", *SMALL], ["output directory", "{afile}",
         "not a directory", "FEMLM_RUNS"], env={"FEMLM_RUNS": "{afile}/runs"}),
]

CASES = [
    *BEFORE_HYDRA,
    # --- found when the command starts (a run directory exists for a moment and is removed) ---------------
    Case("block-size-beyond-positions", ["pretrain-scratch", *SMALL, "data.block_size=1024"],
         ["data.block_size=1024", "512", "lower data.block_size"], mirror=True),  # scratch: a tokenizer from the corpus
    Case("download-unknown-dataset", ["download", "no_such_dataset"], ["'no_such_dataset'", "citation_intent"]),
    Case("download-checksum-mismatch", ["download", "citation_intent", "download.mirror={bad_mirror}"],
         ["checksum mismatch", "{bad_mirror}/dapt/citation_intent/dev.jsonl", "expected sha256"], mirror=True,
         subprocess=True),
    Case("report-input-missing", ["report", "/nonexistent/runs"], ["report.inputs", "/nonexistent/runs"],
         subprocess=True),
    Case("checkpoint-dir-missing", ["continual-pretrain", *SMALL, "model.name_or_path=/nonexistent/ckpt"],
         ["model.name_or_path=/nonexistent/ckpt", "no such checkpoint directory", "Hub id"], subprocess=True),
    Case("continual-without-checkpoint", ["continual-pretrain", *SMALL], ["model=tiny", "model.name_or_path",
         "continual pre-training", "femlm pretrain-scratch"]),
    Case("checkpoint-dir-junk", ["continual-pretrain", *SMALL, "model.name_or_path={junk}"],
         ["model.name_or_path={junk}", "no config.json"]),
    Case("classifier-checkpoint-to-pretraining", ["continual-pretrain", *SMALL, *TINY_MODEL,
         "model.name_or_path={cls}"], ["model.name_or_path={cls}", "BertForSequenceClassification",
                                       "masked-LM checkpoint"]),
    Case("classifier-checkpoint-without-architectures", ["continual-pretrain", *SMALL, *TINY_MODEL,
         "model.name_or_path={cls_noarch}"], ["model.name_or_path={cls_noarch}", "without masked-LM head weights",
                                              "masked-LM checkpoint"]),
    Case("tokenizer-model-vocab-mismatch", ["continual-pretrain", *SMALL, *TINY_MODEL, "model.name_or_path={vocab50}"],
         ["model.name_or_path={vocab50}", "128 tokens", "has 50"]),
    Case("block-size-beyond-checkpoint-positions", ["continual-pretrain", *SMALL, "model.name_or_path={mlm}",
         "data.block_size=1024"], ["data.block_size=1024", "128 tokens", "lower data.block_size"]),
    Case("empty-corpus", ["pretrain-scratch", *SMALL, *TINY_MODEL, "model.tokenizer={tok}",
         "domain.sources=[file:{data}/empty.txt]"], ["{data}/empty.txt", "no documents"], subprocess=True),
    Case("corpus-shorter-than-one-block", ["pretrain-scratch", *SMALL, *TINY_MODEL, "model.tokenizer={tok}",
         "domain.sources=[file:{data}/short.txt]"], ["short.txt", "shorter than one block of 32 tokens"]),
    Case("resume-different-config", ["pretrain-scratch", *SMALL, *TINY_MODEL, "model.tokenizer={tok}",
         "domain.sources=[file:{data}/corpus.txt]", "masking=mlm_subword", "resume={earlier}"],
         ["resume", "masking.name='mlm_subword' differs", "'fe_subword'"]),
    Case("finetune-checkpoint-missing", ["finetune", "preset=tiny", "model.name_or_path=/nonexistent/ckpt",
         "finetune.seeds=[1]"], ["model.name_or_path=/nonexistent/ckpt", "no such checkpoint directory", "Hub id"],
         subprocess=True),
    Case("task-malformed-jsonl", ["finetune", *LOCAL_TASK, "task.dataset={data}/task_malformed"],
         ["{data}/task_malformed/train.jsonl:2", "malformed JSON"]),
    Case("task-label-outside-label-set", ["finetune", *LOCAL_TASK, "task.dataset={data}/task_badlabel"],
         ["{data}/task_badlabel/train.jsonl:2", "'maybe'", "['pos', 'neg']"]),
    Case("task-missing-split", ["finetune", *LOCAL_TASK, "task.dataset={data}/task_nodev"],
         ["task.dataset", "no dev file", "dev.jsonl"]),
    # --- the corpus plan (issue 16) and dry runs through the real run's checks (issue 14) ------------------
    Case("prepare-hub-unreachable", ["prepare", "preset=paper", "domain=cs"],
         ["domain cs: the Hub corpus", "unreachable", "domain.sources"], env={"HF_HUB_OFFLINE": "1"},
         subprocess=True),
    Case("too-many-passes", ["pretrain-scratch", *SMALL, *TINY_MODEL, "model.tokenizer={tok}",
         "domain.sources=[file:{data}/corpus.txt]", "trainer.max_steps=100000"],
         ["passes over the", "trainer.max_passes=20", "domain.max_documents", "trainer.max_passes=null"],
         keeps_prepared_corpus=True),
    Case("corrupt-parquet", ["pretrain-scratch", *SMALL, *TINY_MODEL, "model.tokenizer={tok}",
         "domain.sources=[file:{data}/bad.parquet]"], ["{data}/bad.parquet"]),
    Case("finetune-empty-checkpoint-dry-run", ["finetune", "--dry-run", "preset=tiny", "task=aclarc",
         "model.name_or_path={data}/empty_ckpt"], ["model.name_or_path={data}/empty_ckpt", "no config.json"]),
    Case("evaluate-checkpoints-missing", ["evaluate", "preset=tiny", "evaluate.checkpoints=/nonexistent/dir"],
         ["evaluate.checkpoints=/nonexistent/dir", "no such file or directory", "evaluate.sweep=true"],
         subprocess=True),
]


# ----------------------------------------------------------------------------------------------- fixtures
def _save_tiny(root: Path) -> dict[str, Path]:
    """Tiny BERT checkpoints saved with save_pretrained, each with a 128-token tokenizer."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

    from helpers.tiny import tiny_tokenizer

    torch.manual_seed(0)
    tok = tiny_tokenizer(root / "tok")  # [specials] + w0..w122: 128 tokens
    arch = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
            "max_position_embeddings": 128}
    models = {
        "cls": BertForSequenceClassification(BertConfig(vocab_size=len(tok), num_labels=3, **arch)),
        "vocab50": BertForMaskedLM(BertConfig(vocab_size=50, **arch)),  # saved with the 128-token tokenizer
        "mlm": BertForMaskedLM(BertConfig(vocab_size=len(tok), **arch)),
    }
    paths = {"tok": root / "tok"}
    for name, model in models.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        paths[name] = root / name
    return paths


def _write_data(data: Path) -> None:
    data.mkdir()
    (data / "empty.txt").write_text("")
    (data / "short.txt").write_text("w1 w2 w3.\n\nw4 w5 w6.\n\nw7 w8 w9 w10.\n")  # 3 documents, 19 tokens
    rng = random.Random(0)
    docs = ["\n".join(" ".join(f"w{rng.randrange(123)}" for _ in range(30)) for _ in range(3)) for _ in range(40)]
    (data / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    (data / "bad.parquet").write_bytes(b"PAR1 this is not a parquet file")
    (data / "empty_ckpt").mkdir()
    good = '{"text": "w1 w2 w3", "label": "pos"}\n{"text": "w4 w5", "label": "neg"}\n'
    for name, train, dev in [
        ("task_malformed", good.replace('"neg"}', '"neg"'), good),  # line 2 lacks its closing brace
        ("task_badlabel", good.replace('"neg"', '"maybe"'), good),
        ("task_nodev", good, None),
    ]:
        (data / name).mkdir()
        (data / name / "train.jsonl").write_text(train)
        if dev is not None:
            (data / name / "dev.jsonl").write_text(dev)


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad-input")
    paths = _save_tiny(root)
    junk = root / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a model\n")
    (junk / "weights.bin").write_bytes(os.urandom(64))
    _write_data(root / "data")
    (root / "afile").write_text("a regular file where a directory is expected\n")
    # The same classifier with no `architectures` in its config.json: only loading the weights tells.
    shutil.copytree(paths["cls"], root / "cls_noarch")
    config = json.loads((root / "cls_noarch" / "config.json").read_text())
    config.pop("architectures", None)
    (root / "cls_noarch" / "config.json").write_text(json.dumps(config))
    values = {**{k: str(v) for k, v in paths.items()}, "cls_noarch": str(root / "cls_noarch"),
              "junk": str(junk), "data": str(root / "data"),
              "afile": str(root / "afile"), "root": str(root)}
    if MIRROR.is_dir():
        # A copy of one dataset of the mirror with one byte of dev.jsonl flipped.
        bad = root / "bad_mirror"
        shutil.copytree(MIRROR / "dapt" / "citation_intent", bad / "dapt" / "citation_intent")
        dev = bad / "dapt" / "citation_intent" / "dev.jsonl"
        content = bytearray(dev.read_bytes())
        content[100] ^= 1
        dev.write_bytes(bytes(content))
        values["bad_mirror"] = str(bad)
    return values


@pytest.fixture
def earlier(fx: dict[str, str], cli_in_process_with_hydra, tmp_path_factory: pytest.TempPathFactory,
            monkeypatch: pytest.MonkeyPatch) -> Path:
    """A finished 2-step pretrain-scratch run (masking fe_subword) on the local corpus, in its own runs folder
    (run in-process: the one case that resumes it checks the refusal, not the run)."""
    root = tmp_path_factory.mktemp("earlier")
    args = [*SMALL, *TINY_MODEL, f"model.tokenizer={fx['tok']}", f"domain.sources=[file:{fx['data']}/corpus.txt]"]
    with monkeypatch.context() as env:
        env.setenv("FEMLM_RUNS", str(root / "runs"))
        env.setenv("FEMLM_CACHE", str(root / "cache"))
        result = cli_in_process_with_hydra("pretrain-scratch", *args)
    assert result.code == 0, result.stderr[-3000:]
    (run,) = (root / "runs" / "pretrain-scratch").iterdir()
    return run


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------------------------- the cases
def test_catalogue_covers_every_subcommand() -> None:
    from femlm.cli import COMMANDS

    assert len({case.id for case in CASES}) == len(CASES)
    assert {case.args[0] for case in CASES} == set(COMMANDS)
    # one real subprocess per subcommand that gets past composition
    assert {c.args[0] for c in CASES if c.subprocess} == {c.args[0] for c in CASES if c not in BEFORE_HYDRA}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case: Case, cli, femlm_env: dict[str, str], fx: dict[str, str], tmp_path: Path,
                   request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if case.mirror and "bad_mirror" not in fx:
        pytest.skip("needs the data mirror at ../shared/data")
    values = dict(fx)
    before: dict[str, str] = {}
    if "{earlier}" in " ".join(case.args):
        run = request.getfixturevalue("earlier")
        values["earlier"] = str(run)
        before = _tree_digest(run)
    for key, value in case.env.items():
        femlm_env[key] = _fill(value, values)
        if not case.subprocess:
            monkeypatch.setenv(key, _fill(value, values))

    in_process = "cli_in_process" if case in BEFORE_HYDRA else "cli_in_process_with_hydra"
    run_cli = cli if case.subprocess else request.getfixturevalue(in_process)
    result = run_cli(*[_fill(arg, values) for arg in case.args])

    lines = [line for line in result.stderr.splitlines() if line.strip()]
    log = os.environ.get("FEMLM_BAD_INPUT_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"id": case.id, "code": result.code, "stderr": lines}) + "\n")
    assert result.code == 2, (result.code, result.stderr[-3000:])
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("femlm: error: "), lines[0]
    for needle in case.needles:
        assert _fill(needle, values) in lines[0], (needle, lines[0])

    # Nothing left behind: no run directory, nothing half-written in the cache.
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    assert not [p for p in runs.rglob("*") if p.is_file()] if runs.exists() else True
    if cache.exists():
        partial = [p for p in cache.rglob("*") if any(m in p.name for m in PARTIAL_MARKERS)]
        assert not partial, partial
        if not case.keeps_prepared_corpus:
            assert not list(cache.glob("blocks/*")), "blocks cached for a run that failed"
        if case.id == "download-checksum-mismatch":
            assert not list(cache.rglob("dev.jsonl*")), "the damaged file was stamped or copied"
    if before:  # the refused resume left the earlier run exactly as it was
        assert _tree_digest(Path(values["earlier"])) == before
