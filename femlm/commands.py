"""The one registry of femlm's commands: the sections each reads, the function that runs it and the one that
plans it (the checks a `--dry-run` performs, which the real run performs first too).

Adding a command is one entry here and one ``femlm/conf/<name>.yaml`` (its defaults list); the CLI builds its
subcommand, its --help and its validation from this table.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from femlm.train.config import PRETRAIN_SECTIONS as PRETRAIN

FINETUNE = ("model", "task", "finetune", "runtime", "download", "logger")


@dataclass(frozen=True)
class Command:
    summary: str
    sections: tuple[str, ...]  # the FemlmConfig sections the command reads (besides seed, dry_run, ...)
    run: str  # "module:function", called as function(cfg, run) -> result
    plan: str  # "module:function", called as function(cfg) -> dict: every check of a real run, no work
    positional: str | None = None  # the key that bare (non key=value) arguments fill
    # What bare arguments may be (--help lists it): "module:NAME", NAME a text, a sequence of the allowed values or
    # a function returning the text: the same object the command's validation uses.
    accepts: str | None = None
    resumable: bool = False
    # Whether its long loops poll femlm.stop (SIGTERM / SIGUSR1 / SIGUSR2 then stop it at a safe point; a command
    # that does not poll keeps the signals' default action: it ends at once).
    stoppable: bool = True
    # Options that replace the command with another function (no config, no run directory): ("--option",
    # "module:function") pairs; the function is called with the other arguments and returns the exit status.
    modes: tuple[tuple[str, str], ...] = ()
    # "module:function", called as function(cfg) before `run` or `plan` is imported: the checks of the run's inputs
    # that need no torch (a checkpoint path), so the CLI refuses them in a second rather than after the imports.
    check: str | None = None

    def load(self, which: str) -> Any:
        module, name = (dict(self.modes).get(which) or getattr(self, which)).split(":")
        return getattr(importlib.import_module(module), name)

    def accepted(self) -> str:
        """What bare arguments may be, as one line (empty for a command that takes none)."""
        if self.accepts is None:
            return ""
        value = self.load("accepts")
        value = value() if callable(value) else value
        return value if isinstance(value, str) else ", ".join(value)


COMMANDS: dict[str, Command] = {
    "download": Command("Fetch datasets, tokenizers and model configs (or verify them in a local mirror).",
                        ("download", "logger"), "femlm.data.download:run_download", "femlm.data.download:plan_download",
                        positional="download.datasets", accepts="femlm.data.registry:bare_names", stoppable=False),
    "prepare": Command("Read, sample and tokenize a domain corpus into the cache ahead of training; print its plan.",
                       PRETRAIN, "femlm.train.corpus:run_prepare", "femlm.train.corpus:plan_prepare"),
    "pretrain-scratch": Command("Pre-train a masked LM from random weights (BERT-base on general text).",
                                PRETRAIN, "femlm.train.loop:run_pretrain", "femlm.train.plan:plan_pretrain", resumable=True),
    "continual-pretrain": Command("Continue pre-training a checkpoint on a domain corpus (CS, News).",
                                  PRETRAIN, "femlm.train.loop:run_pretrain", "femlm.train.plan:plan_pretrain",
                                  resumable=True, check="femlm.models.checkpoints:check_masked_lm_checkpoint"),
    "finetune": Command("Fine-tune a checkpoint on a downstream task (DAPT tasks, GLUE) with several seeds.",
                        FINETUNE, "femlm.eval.finetune:run_finetune", "femlm.eval.finetune:plan_finetune",
                        check="femlm.models.checkpoints:check_checkpoint"),
    "evaluate": Command("Score fine-tuned checkpoints, or sweep a pre-training run's checkpoints.",
                        (*FINETUNE, "evaluate"), "femlm.eval.evaluate:run_evaluate", "femlm.eval.evaluate:plan_evaluate",
                        check="femlm.eval.checkpoints:check_evaluate"),
    "analyze": Command("Gradient covariance vs Hamming distance, K-mask variance (FE vs i.i.d.), the variance "
                       "decomposition, and disjoint masks across passes.",
                       ("model", "domain", "data", "masking", "analysis", "runtime", "download", "logger"),
                       "femlm.analysis.run:run_analyze", "femlm.analysis.run:plan_analyze", positional="analysis.kind",
                       accepts="femlm.analysis.config:KINDS", check="femlm.models.checkpoints:check_masked_lm_checkpoint"),
    "report": Command("Collect run results into the paper's tables and figures (Markdown, LaTeX, CSV, PNG).",
                      ("report", "logger"), "femlm.report.report:run_report", "femlm.report.report:plan_report",
                      positional="report.inputs", accepts="femlm.report.config:INPUTS", stoppable=False,
                      modes=(("--compare", "femlm.report.compare:main"),)),  # femlm report --compare A B
}


def config_name(command: str) -> str:
    """The primary config of a command: femlm/conf/<name>.yaml (continual-pretrain -> continual_pretrain)."""
    return command.replace("-", "_")
