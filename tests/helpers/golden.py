"""A tiny pipeline run through the real CLI whose numbers must not change when the code is reorganised.

`run_pipeline(root, cli)` pre-trains a 1-layer BERT from scratch on a local corpus (FE-MLM, 6 steps),
continues it with MLM (3 steps) and fine-tunes it on a local two-label task (1 seed, 1 epoch), all in fp32
on one thread, and returns the numbers each stage logged. `tests/data/golden_tiny_run.json` holds what the
code produced (its "recorded" field says when and why); tests/test_behaviour_unchanged.py runs the pipeline again
and compares. It was first recorded before the configuration/loader/loop reorganisation of issue 14 and that
reorganisation reproduced it; it was re-recorded once since, when issue 16 changed how corpora are split.

Regenerate (only when a change of behaviour is intended, and say so in the commit):
    python -m tests.helpers.golden --write
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden_tiny_run.json"
WORDS = 123

# The settings of each stage; speed-only settings (threads, precision, progress bar) are kept apart so the
# key names can follow the configuration without touching what is compared.
MODEL = ["preset=tiny", "model.arch.hidden_size=16", "model.arch.num_hidden_layers=1",
         "model.arch.num_attention_heads=2", "model.arch.intermediate_size=32", "data.block_size=32",
         "data.eval_blocks=4", "trainer.batch_size=8", "runtime.log_every=1", "logger.wandb.mode=disabled"]
RUNTIME = {"pretrain": ["runtime.threads=1", "runtime.precision=fp32"],
           "finetune": ["runtime.threads=1", "runtime.precision=fp32"]}
SCRATCH = ["masking=fe_subword", "trainer.max_steps=6", "runtime.eval_every=3", "runtime.save_every=3"]
CONTINUAL = ["masking=mlm_subword", "trainer.max_steps=3", "runtime.eval_every=3", "runtime.save_every=3"]
FINETUNE = ["preset=tiny", "task.name=toy", "task.labels=[pos,neg]", "task.eval_split=test", "finetune.seeds=[1]",
            "finetune.epochs=1", "finetune.batch_size=8", "finetune.max_length=32", "logger.wandb.mode=disabled"]
PRETRAIN_KEYS = ("step", "loss", "grad_norm", "masked_tokens", "eval_loss", "eval_accuracy")


def write_inputs(root: Path) -> dict[str, Path]:
    """A 128-token tokenizer, a 40-document corpus over its words and a two-label task (train/dev/test)."""
    from .tiny import tiny_tokenizer

    tiny_tokenizer(root / "tok")
    rng = random.Random(0)
    docs = ["\n".join(" ".join(f"w{rng.randrange(WORDS)}" for _ in range(30)) for _ in range(3)) for _ in range(40)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    task = root / "task"
    task.mkdir(exist_ok=True)
    for split, size in (("train", 48), ("dev", 16), ("test", 16)):
        rows = []
        for _ in range(size):
            label = rng.choice(["pos", "neg"])
            low = label == "pos"  # the label shows in the words: a learnable toy task
            words = [f"w{rng.randrange(0, 60) if low else rng.randrange(60, WORDS)}" for _ in range(12)]
            rows.append(json.dumps({"text": " ".join(words), "label": label}))
        (task / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return {"tok": root / "tok", "corpus": root / "corpus.txt", "task": task}


def _only(runs: Path, command: str) -> Path:
    (run,) = [p for p in (runs / command).iterdir() if p.is_dir()]
    return run


def _metrics(run: Path) -> list[list[Any]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [[r.get(k) for k in PRETRAIN_KEYS] for r in records if "loss" in r or "eval_loss" in r]


def run_pipeline(root: Path, cli: Callable[..., Any], runtime: dict[str, list[str]] = RUNTIME) -> dict[str, Any]:
    """Run the three stages through `cli(*args) -> result with .code/.stderr`; return their numbers."""
    inputs = write_inputs(root)
    runs = Path(os.environ["FEMLM_RUNS"])
    corpus = [f"model.tokenizer={inputs['tok']}", f"domain.sources=[file:{inputs['corpus']}]"]
    scratch = cli("pretrain-scratch", *MODEL, *runtime["pretrain"], "logger.progress=false", *corpus, *SCRATCH)
    assert scratch.code == 0, scratch.stderr[-3000:]
    scratch_run = _only(runs, "pretrain-scratch")
    continual = cli("continual-pretrain", *MODEL, *runtime["pretrain"], "logger.progress=false", *corpus, *CONTINUAL,
                    f"model.name_or_path={scratch_run / 'checkpoints' / 'final'}")
    assert continual.code == 0, continual.stderr[-3000:]
    continual_run = _only(runs, "continual-pretrain")
    finetune = cli("finetune", *FINETUNE, *runtime["finetune"], "logger.progress=false",
                   f"task.dataset={inputs['task']}",
                   f"model.name_or_path={continual_run / 'checkpoints' / 'final'}")
    assert finetune.code == 0, finetune.stderr[-3000:]
    results = json.loads((_only(runs, "finetune") / "results.json").read_text())
    scores = json.loads((_only(runs, "finetune") / "seed_1" / "scores.json").read_text())
    return {"scratch": _metrics(scratch_run), "continual": _metrics(continual_run),
            "finetune": {"dev": results["seeds"][0]["dev"], "test": results["seeds"][0]["test"],
                         "history": scores.get("history")}}


def _git_commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str]) -> None:
    import tempfile

    if argv != ["--write"]:
        raise SystemExit("usage: python -m tests.helpers.golden --write")
    # The speed-only keys as the code of the day names them (JSON like RUNTIME).
    runtime = json.loads(os.environ.get("FEMLM_GOLDEN_RUNTIME", json.dumps(RUNTIME)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ.update({"FEMLM_RUNS": str(root / "runs"), "FEMLM_CACHE": str(root / "cache"),
                           "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"})

        class Result:
            def __init__(self, proc: subprocess.CompletedProcess) -> None:
                self.code, self.stderr = proc.returncode, proc.stderr

        def cli(*args: str) -> Result:
            return Result(subprocess.run([sys.executable, "-m", "femlm.cli", *args], capture_output=True,
                                         text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)}))

        numbers = run_pipeline(root, cli, runtime)
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({"commit": _git_commit(), "runtime": runtime, "numbers": numbers}, indent=1) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main(sys.argv[1:])
