"""The `femlm` command line: typer subcommands in front of Hydra's own entry point.

Each subcommand collects Hydra overrides as free arguments, checks them (composition + typed schema) so that
bad input fails fast with one line and exit status 2, then hands ``sys.argv`` to a ``@hydra.main`` app built
for that command. Hydra therefore does what it does best, unchanged: ``-m`` sweeps with its sweeper and any
``hydra/launcher=...`` plugin, ``--cfg job`` printing, run/sweep directories and job logging.
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import yaml

from femlm.errors import UserError

CONF_DIR = Path(os.environ.get("FEMLM_CONF", Path(__file__).resolve().parent.parent / "conf")).resolve()


@dataclass(frozen=True)
class Command:
    config_name: str
    target: str  # "module:function", called as function(typed_cfg, run)
    summary: str
    positional: str | None = None  # the key that bare (non key=value) arguments fill


COMMANDS: dict[str, Command] = {
    "download": Command("download", "femlm.cli:run_download",
                        "Fetch datasets, tokenizers and model configs (or verify them in a local mirror).",
                        positional="download.datasets"),
    "pretrain-scratch": Command("pretrain_scratch", "femlm.train:run_pretrain",
                                "Pre-train a masked LM from random weights (BERT-base on general text)."),
    "continual-pretrain": Command("continual_pretrain", "femlm.train:run_pretrain",
                                  "Continue pre-training a checkpoint on a domain corpus (CS, News)."),
    "finetune": Command("finetune", "femlm.eval:run_finetune",
                        "Fine-tune a checkpoint on a downstream task (DAPT tasks, GLUE) with several seeds."),
    "evaluate": Command("evaluate", "femlm.eval:run_evaluate",
                        "Score fine-tuned checkpoints, or sweep a pre-training run's checkpoints."),
    "analyze": Command("analyze", "femlm.analysis:run_analyze",
                       "Gradient covariance vs Hamming distance, and K-mask variance (FE vs i.i.d.).",
                       positional="analysis.kind"),
    "report": Command("report", "femlm.report:run_report",
                      "Collect run results into the paper's tables and figures (Markdown, LaTeX, CSV, PNG).",
                      positional="report.inputs"),
}

app = typer.Typer(
    help="femlm: fully-explored masked language modelling (Zheng et al., 2020), end to end.\n\n"
         "Every subcommand takes Hydra overrides (key=value, group=option), -m to sweep, --cfg job to "
         "print the composed config, and --dry-run to validate and plan without training.",
    no_args_is_help=True, add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
)


# Errors of the machine rather than of the input: reported in one line with exit status 1, not a traceback.
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, then exit: the contract for every user error."""
    typer.echo(f"femlm: error: {message}", err=True)
    raise SystemExit(code)


def config_groups(config_name: str) -> dict[str, list[str]]:
    """The groups a primary config composes, with the options found in conf/ (for --help)."""
    primary = yaml.safe_load((CONF_DIR / f"{config_name}.yaml").read_text()) or {}
    groups: dict[str, list[str]] = {}
    for entry in primary.get("defaults", []):
        if isinstance(entry, dict):
            group = next(iter(entry)).replace("optional ", "").strip()
            folder = CONF_DIR / group
            if group != "hydra" and folder.is_dir():
                groups[group] = sorted(p.stem for p in folder.glob("*.yaml"))
    return groups


def _help_text(name: str, command: Command) -> str:
    # "\b" tells click to keep a paragraph's line breaks instead of re-wrapping it.
    groups = [f"  {group}: {', '.join(options) or '(none yet)'}"
              for group, options in config_groups(command.config_name).items()]
    usage = [f"Any key can be set too (e.g. trainer.max_steps=100); see: femlm {name} --cfg job",
             f"Sweep: femlm {name} -m key=a,b   (hydra/launcher=joblib runs the jobs in parallel)"]
    if command.positional:
        usage.append(f"Bare arguments set {command.positional}.")
    return "\n\n".join([command.summary, "\b\nConfig groups (choose with group=option):\n" + "\n".join(groups),
                        "\b\n" + "\n".join(usage)])


def _new_run_uid() -> str:
    # Date-time for humans, a random suffix so that two runs started in the same second never collide.
    return f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{secrets.token_hex(3)}"


def _positional_to_overrides(command: Command, args: list[str]) -> list[str]:
    bare = [a for a in args if "=" not in a and not a.startswith("-")]
    rest = [a for a in args if a not in bare]
    if not bare:
        return rest
    if command.positional is None:
        fail(f"unexpected argument {bare[0]!r}: give Hydra overrides as key=value or group=option")
    if command.positional == "analysis.kind":
        if len(bare) > 1:
            fail(f"analyze takes one analysis kind, got {bare}; allowed covariance, variance, both")
        return [f"analysis.kind={bare[0]}", *rest]
    return [f"{command.positional}=[{','.join(bare)}]", *rest]


def _runs_root() -> Path:
    return Path(os.environ.get("FEMLM_RUNS", "runs"))


def _resume_overrides(name: str, overrides: list[str]) -> list[str]:
    """`trainer.resume=true|DIR` continues a run in its own directory (Hydra's run dir is pointed there)."""
    value = next((o.split("=", 1)[1] for o in overrides if o.startswith("trainer.resume=")), None)
    if value in (None, "null", "None", "false", "False"):
        return overrides
    if value.lower() == "true":
        candidates = sorted((_runs_root() / name).glob("*/run.json"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            fail(f"trainer.resume=true: no earlier {name} run under {_runs_root() / name} to continue")
        run_dir = candidates[-1].parent
    else:
        run_dir = Path(value)
        if not (run_dir / "run.json").is_file():
            fail(f"trainer.resume={value}: not a femlm run directory (no run.json); give a run directory "
                 "or trainer.resume=true")
    # hydra.output_subdir=null: the run's .hydra/ keeps the composition that started it (a refused resume must
    # not overwrite it; config.yaml and run.json record each resumed session).
    rest = [o for o in overrides if not o.startswith(("trainer.resume=", "hydra.run.dir=", "hydra.output_subdir="))]
    return [*_saved_overrides(run_dir, rest), *rest, f"trainer.resume={run_dir}", f"hydra.run.dir={run_dir}",
            "hydra.output_subdir=null"]


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _saved_overrides(run_dir: Path, new: list[str]) -> list[str]:
    """The overrides that started `run_dir`, so `trainer.resume=DIR` alone recomposes the same config.

    Keys given again on this command line win (e.g. a longer trainer.max_steps)."""
    saved_file = run_dir / ".hydra" / "overrides.yaml"
    if not saved_file.is_file():
        return []
    saved = yaml.safe_load(saved_file.read_text()) or []
    skip = {_override_key(o) for o in new} | {"trainer.resume", "hydra.run.dir", "hydra.output_subdir", "dry_run"}
    return [o for o in saved if _override_key(o) not in skip and not o.startswith("hydra/")]


def _compose_all(command: Command, name: str, overrides: list[str], multirun: bool) -> None:
    """Compose (and validate) every job a command line describes, before Hydra starts any of them."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from femlm.config import validate

    try:
        if multirun:
            parsed = OverridesParser.create().parse_overrides(overrides)
            jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
        else:
            jobs = [overrides]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            for job in jobs:
                cfg = compose(config_name=command.config_name, overrides=list(job), return_hydra_config=True)
                validate(cfg, name)
                _check_output_dir(cfg, multirun)
    except UserError as err:
        fail(str(err))
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        fail(_hydra_message(err, name))
    finally:
        GlobalHydra.instance().clear()


def _unwritable(path: Path) -> str | None:
    """Why a directory could not be created at `path` (None: it can): the nearest existing ancestor decides."""
    path = path.expanduser().absolute()
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is not a directory"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable"
            return None
    return None


def _check_output_dir(cfg: Any, multirun: bool) -> None:
    """Refuse, before Hydra starts, a run directory that cannot be created (Hydra itself would crash with a
    traceback: it makes the directory before any femlm code runs)."""
    from omegaconf import OmegaConf

    if int(os.environ.get("RANK", "0")) > 0:
        return
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        value = OmegaConf.select(cfg, key, default=None)
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} resolves only inside Hydra's run: Hydra checks it then
        return
    if value is None:
        return
    reason = _unwritable(Path(str(value)))
    if reason is not None:
        raise UserError(f"output directory {value}: {reason}; set FEMLM_RUNS or {key} to a writable directory")


def _hydra_message(err: Exception, name: str | None = None) -> str:
    """Hydra's messages span lines (a sentence, then the available options); fold them into one, and say the
    two common ones (an unknown group option, an unknown key) in femlm's `key=value: problem; allowed` form."""
    from femlm.config import unknown_key_message

    causes = []
    cause: BaseException | None = err
    while cause is not None:
        causes.append(str(cause))
        cause = cause.__cause__
    # Hydra sometimes wraps the useful message as the cause of an empty one.
    while not str(err).strip() and err.__cause__ is not None:
        err = err.__cause__
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    missing = re.search(r"Could not find '([^']+)/([^'/]+)'\s*Available options in '[^']+':\s*(.*?)\s*"
                        r"(Config search path|$)", text)
    if missing:
        group, option, options = missing.group(1), missing.group(2), missing.group(3).split()
        where = f" in conf/{group}/" if (CONF_DIR / group).is_dir() else ""
        return f"{group}={option}: no such option{where}; allowed {', '.join(options) or '(none)'}"
    override = re.match(r"Could not override '([^']+)'", text)
    if override and name is not None and any("not in struct" in c for c in causes):
        return unknown_key_message(name, override.group(1))
    if override and name is not None and "No match in the defaults list" in text:
        groups = config_groups(COMMANDS[name].config_name)
        return (f"{override.group(1)}=...: {name} has no config group {override.group(1)!r}; its groups are "
                f"{', '.join(groups)} (set a key with key=value)")
    text = re.sub(r"\s*Config search path:.*$", "", text)
    text = text.replace("To append to your config use +", "to add a new key use +")
    return text or type(err).__name__


def _load_target(target: str) -> Callable[..., Any]:
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


def _task(name: str, command: Command) -> Callable[[Any], Any]:
    def task(cfg: Any) -> Any:
        from hydra.core.hydra_config import HydraConfig

        from femlm.config import validate
        from femlm.runs import start_run

        try:
            typed = validate(cfg, name)
            rank = int(os.environ.get("RANK", "0"))
            run_dir = Path(HydraConfig.get().runtime.output_dir)
            resume = bool(getattr(getattr(typed, "trainer", None), "resume", None))
            run = start_run(cfg, run_dir, name, is_main=rank == 0, resume=resume)
        except UserError as err:
            fail(str(err))
        try:
            if typed.dry_run:
                plan = {"command": name, "run_dir": str(run.dir), "would_run": command.target,
                        "summary": command.summary}
                run.write_json("plan.json", plan)
                typer.echo(f"[dry run] {name}: config and plan written to {run.dir}")
                return plan
            return _load_target(command.target)(typed, run)
        except UserError as err:
            run.discard()
            fail(str(err))
        except KeyboardInterrupt as err:
            # Pre-training finishes the step and saves a state first (femlm.train.loop.StopRequest) and says so.
            what = f"{err}; " if str(err) else ""
            then = (f"; continue with trainer.resume={run.dir}" if name in ("pretrain-scratch", "continual-pretrain")
                    and run.dir.exists() else "")
            typer.echo(f"femlm: interrupted; {what}the run directory {run.dir} keeps what was saved{then}", err=True)
            raise SystemExit(130) from None
        except OSError as err:
            if err.errno not in ENVIRONMENT_ERRNOS:
                raise
            # A full disk (or a quota, a read-only remount) is not a bug: one line, the run keeps what it has.
            run.discard()
            where = f" writing {err.filename}" if err.filename else ""
            kept = (f"; the run directory {run.dir} keeps what was saved" if run.dir.exists()
                    else "")
            fix = "make the file system writable" if err.errno == errno.EROFS else "free space"
            then = (f"; {fix}, then continue with trainer.resume={run.dir}" if run.dir.exists()
                    and name in ("pretrain-scratch", "continual-pretrain") else f"; {fix} and run it again")
            fail(f"{err.strerror or err}{where} (errno {errno.errorcode.get(err.errno, err.errno)}){kept}{then}",
                 code=1)

    return task


def dispatch(name: str, args: list[str], multirun: bool = False, cfg: str | None = None,
             dry_run: bool = False) -> None:
    import hydra

    command = COMMANDS[name]
    overrides = _positional_to_overrides(command, list(args))
    if dry_run:
        overrides = [o for o in overrides if not o.startswith("dry_run=")] + ["dry_run=true"]
    overrides = _resume_overrides(name, overrides)
    os.environ["FEMLM_RUN_UID"] = _new_run_uid()
    if int(os.environ.get("RANK", "0")) > 0:
        # Under torchrun only rank 0 owns a run directory; the others write nothing (see femlm.train).
        overrides += ["hydra.output_subdir=null", "hydra/job_logging=disabled",
                      "hydra/hydra_logging=disabled", "hydra.run.dir=."]
    if cfg is None:
        _compose_all(command, name, overrides, multirun)
    hydra_argv = [f"femlm {name}", *overrides]
    if multirun:
        hydra_argv.append("--multirun")
    if cfg is not None:
        hydra_argv += ["--cfg", cfg]
    sys.argv = hydra_argv
    entry = hydra.main(config_path=str(CONF_DIR), config_name=command.config_name, version_base="1.3")
    entry(_task(name, command))()


def _register(name: str, command: Command) -> None:
    def run(
        ctx: typer.Context,
        multirun: bool = typer.Option(False, "-m", "--multirun", help="Sweep: one job per combination of "
                                      "comma-separated override values (Hydra's sweeper and launcher)."),
        cfg: str | None = typer.Option(None, "--cfg", "-c", help="Print the composed config and exit: "
                                          "job, hydra or all."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Validate, resolve, write the config and the "
                                     "plan of what would run into the run directory; train nothing."),
    ) -> None:
        if cfg is not None and cfg not in ("job", "hydra", "all"):
            fail(f"--cfg {cfg!r}: allowed job, hydra, all")
        dispatch(name, list(ctx.args), multirun=multirun, cfg=cfg, dry_run=dry_run)

    app.command(name, help=_help_text(name, command), context_settings={
        "allow_extra_args": True, "ignore_unknown_options": True})(run)


for _name, _command in COMMANDS.items():
    _register(_name, _command)


def run_download(cfg: Any, run: Any) -> list[dict]:
    """`femlm download`: fetch or verify each named dataset; the table goes to the run directory too."""
    from femlm.data import run_download as fetch_all

    rows = fetch_all(list(cfg.download.datasets), cfg.download)
    run.write_json("download.json", rows)
    return rows


def main() -> None:
    app()


if __name__ == "__main__":
    main()
