"""The `femlm` command line: one typer subcommand per entry of femlm.commands, in front of Hydra.

Each subcommand collects Hydra overrides as free arguments and composes (and validates) every job they
describe, so bad input fails fast with one line and exit status 2; then it hands ``sys.argv`` to a
``@hydra.main`` app, so Hydra does what it does best, unchanged: ``-m`` sweeps with any
``hydra/launcher=...`` plugin, run and sweep directories, job logging. A run directory gets the config of
the command's own sections, ``run.json`` and ``metrics.jsonl`` (femlm.runs); ``--dry-run`` runs the
command's plan (every check of a real run, no work) and writes ``plan.json`` instead.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
import yaml

from femlm.commands import COMMANDS, Command, config_name
from femlm.errors import UserError
from femlm.runs import is_finished, launcher_job_of
from femlm.runtime.cluster import process_rank, submitit_job_id
from femlm.stop import handoff, launcher_handler, signal_name, stop_signals

app = typer.Typer(
    help="femlm: fully-explored masked language modelling (Zheng et al., 2020), end to end.\n\n"
         "Every subcommand takes Hydra overrides (key=value, group=option), -m to sweep, --cfg job to "
         "print the composed config, and --dry-run to run every check of a real run without training.",
    no_args_is_help=True, add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
)
# Errors of the machine rather than of the input: reported in one line with exit status 1, not a traceback.
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, then exit: the contract for every user error."""
    typer.echo(f"femlm: error: {message}", err=True)
    raise SystemExit(code)


def _help_text(name: str, command: Command) -> str:
    from femlm.compose import config_groups

    # "\b" tells click to keep a paragraph's line breaks instead of re-wrapping it.
    groups = [f"  {group}: {', '.join(options) or '(none yet)'}" for group, options in config_groups(name).items()]
    usage = [f"Any key can be set too (e.g. trainer.max_steps=100); every key and default: femlm {name} --cfg job",
             f"Sweep: femlm {name} -m key=a,b   (hydra/launcher=joblib runs the jobs in parallel)",
             "SLURM: -m hydra/launcher=slurm_gpu (a GPU per job) or slurm_node (a node per job, a task per GPU); "
             "hydra/launcher=submitit_local tries the same here"]
    if command.positional:
        usage.append(f"Bare arguments set {command.positional}: {command.accepted()}.")
    else:
        usage.append("No bare arguments: every setting is key=value or group=option.")
    if command.resumable:
        usage.append(f"Continue a stopped run: femlm {name} resume=true (the newest) or resume=<run directory>.")
    for _option, target in command.modes:  # e.g. femlm report --compare: its one-paragraph help
        usage.append(getattr(importlib.import_module(target.split(":")[0]), "HELP", f"{_option}: {target}"))
    return "\n\n".join([command.summary, "\b\nConfig groups (choose with group=option):\n" + "\n".join(groups),
                        "\b\n" + "\n".join(usage)])


def _runs_root() -> Path:
    return Path(os.environ.get("FEMLM_RUNS", "runs"))


def _positional_to_overrides(command: Command, args: list[str]) -> list[str]:
    bare = [a for a in args if "=" not in a and not a.startswith("-")]
    rest = [a for a in args if a not in bare]
    if not bare:
        return rest
    if command.positional is None:
        fail(f"unexpected argument {bare[0]!r}: give Hydra overrides as key=value or group=option")
    if command.positional == "analysis.kind":
        if len(bare) > 1:
            fail(f"analyze takes one analysis kind, got {bare}; allowed {command.accepted()}")
        return [f"analysis.kind={bare[0]}", *rest]
    return [f"{command.positional}=[{','.join(bare)}]", *rest]


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _resume_overrides(name: str, overrides: list[str], multirun: bool = False) -> list[str]:
    """`resume=true|DIR` continues a run in its own directory, recomposed from the overrides that started it
    (keys given again on this command line win, e.g. a longer trainer.max_steps). With -m (a job of a sweep
    resubmitted through a launcher, e.g. to SLURM) the directory is the sweep's one job. `resume=auto`: the newest
    run of this command started with the same overrides continues if it is unfinished; without one a new run
    starts; a finished one is not run again (femlm.autoresume)."""
    value = next((o.split("=", 1)[1] for o in overrides if _override_key(o) == "resume"), None)
    if value in (None, "null", "None", "false", "False"):
        return overrides
    if value.lower() == "auto":
        from femlm.autoresume import auto_resume_dir

        found = auto_resume_dir(_runs_root() / name, overrides, multirun)
        if found is None:
            return [o for o in overrides if _override_key(o) != "resume"]
        if is_finished(found):
            typer.echo(f"femlm: resume=auto: {found} (same command and overrides) already finished; nothing to do",
                       err=True)
            raise SystemExit(0)
        value = str(found)
    if value.lower() == "true":
        candidates = sorted((_runs_root() / name).glob("*/run.json"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            fail(f"resume=true: no earlier {name} run under {_runs_root() / name} to continue")
        run_dir = candidates[-1].parent
    else:
        run_dir = Path(value)
        if not (run_dir / "run.json").is_file():
            fail(f"resume={value}: not a femlm run directory (no run.json); give a run directory or resume=true")
    placed = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.output_subdir")
    new = [o for o in overrides if _override_key(o) not in ("resume", *placed)]
    saved_file = run_dir / ".hydra" / "overrides.yaml"
    saved = yaml.safe_load(saved_file.read_text()) or [] if saved_file.is_file() else []
    skip = {_override_key(o) for o in new} | {"resume", "dry_run", *placed}
    saved = [o for o in saved if _override_key(o) not in skip and not o.startswith("hydra/")]
    # hydra.output_subdir=null: the run's .hydra/ keeps the composition that started it.
    where = ([f"hydra.sweep.dir={run_dir.parent}", f"hydra.sweep.subdir={run_dir.name}"] if multirun
             else [f"hydra.run.dir={run_dir}"])
    return [*saved, *new, f"resume={run_dir}", *where, "hydra.output_subdir=null"]


def _check_output_dir(cfg: Any, multirun: bool) -> None:
    """Refuse, before Hydra starts, a run directory that cannot be created (Hydra would crash with a traceback:
    it makes the directory before any femlm code runs)."""
    from omegaconf import OmegaConf

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        value = OmegaConf.select(cfg, key, default=None)
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} resolves only inside Hydra's run: Hydra checks it then
        return
    if value is None:
        return
    for parent in (path := Path(str(value)).expanduser().absolute(), *path.parents):
        if parent.exists():
            if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                what = "is not a directory" if not parent.is_dir() else "is not writable"
                raise UserError(f"output directory {value}: {parent} {what}; set FEMLM_RUNS or {key} to a "
                                "writable directory")
            return


def _check_launcher(cfg: Any, multirun: bool) -> None:
    """A launcher other than Hydra's own runs sweeps only: without -m Hydra would ignore it and train right here
    (on a login node, say). A SLURM launcher needs SLURM's commands; the plugin would fail with a traceback."""
    import shutil

    choice = cfg.hydra.runtime.choices.get("hydra/launcher")
    if choice != "basic" and not multirun:
        raise UserError(f"hydra/launcher={choice} launches sweeps: add -m (a single run is a sweep of one)")
    missing = [c for c in ("sbatch", "srun") if shutil.which(c) is None]
    if cfg.hydra.launcher.get("_target_", "").endswith(".SlurmLauncher") and missing:
        raise UserError(f"hydra/launcher={choice}: no {' or '.join(missing)} on PATH (not a SLURM login node); "
                        "submit from one, or try the sweep here with hydra/launcher=submitit_local")


def _check_all(name: str, overrides: list[str], multirun: bool, print_job: bool, launch: bool = True) -> None:
    """Compose and validate every job of the command line before Hydra starts any of them (`launch`: and the
    launcher that would start them; not when --cfg only prints the config)."""
    from femlm.compose import compose_jobs, sweep_jobs
    from femlm.config import command_config, validate

    try:
        jobs = sweep_jobs(overrides) if multirun else [overrides]
        for number, cfg in enumerate(compose_jobs(name, jobs, with_hydra=True)):
            typed = validate(cfg, name)
            if process_rank() == 0:
                _check_output_dir(cfg, multirun)
                if launch:
                    _check_launcher(cfg, multirun)
                    if multirun and cfg.hydra.runtime.choices.get("hydra/launcher") != "basic" and not typed.dry_run:
                        _plan_job(name, number, jobs[number], typed)
            if print_job:  # --cfg job: the command's own sections, every key with its (validated) value
                typer.echo(yaml.safe_dump(command_config(typed, name), sort_keys=False).rstrip())
    except UserError as err:
        fail(str(err))


def _plan_job(name: str, number: int, job: list[str], typed: Any) -> None:
    """A sweep queued to a launcher is checked before anything is queued: each job's plan, as its --dry-run would
    run it (in a scratch directory, its printout dropped); a refused job is one line naming it and the key."""
    import io
    import tempfile

    from femlm.runs import Run

    with tempfile.TemporaryDirectory(prefix="femlm-sweep-check-") as scratch, \
            contextlib.redirect_stdout(io.StringIO()):
        try:
            COMMANDS[name].load("plan")(typed, Run(dir=Path(scratch), command=name))
        except UserError as err:
            shown = " ".join(o for o in job if not o.startswith("hydra"))
            raise UserError(f"sweep job #{number} ({shown}): {err}; nothing was queued") from None


def _task(name: str, command: Command) -> Callable[[Any], Any]:
    def task(cfg: Any) -> Any:
        from hydra.core.hydra_config import HydraConfig

        from femlm.config import command_config, validate
        from femlm.runs import start_run

        with stop_signals() if command.stoppable else contextlib.nullcontext():
            try:
                typed = validate(cfg, name)
                run_dir = Path(HydraConfig.get().runtime.output_dir)
                job = submitit_job_id()
                requeued = job is not None and launcher_job_of(run_dir) == job
                if requeued:  # preempted or timed out, requeued by submitit into its own directory: continue it
                    typed.resume = str(run_dir) if command.resumable else None
                    if process_rank() == 0:
                        typer.echo(f"femlm: job {job} was requeued: continuing {run_dir}"
                                   + (" from its newest state" if command.resumable else " from the start"), err=True)
                run = start_run(command_config(cfg, name), run_dir, name, is_main=process_rank() == 0,
                                resume=typed.resume is not None or requeued, launcher_job=job)
            except UserError as err:
                fail(str(err))
            return _run_command(name, command, typed, run)

    return task


def _stopped(command: Command, run: Any, err: KeyboardInterrupt) -> None:
    """A stop request honoured (the state saved where the command keeps one): say so in one line, then hand the
    stop to the launcher (submitit requeues the job) or exit with 128 + the signal's number."""
    signum = getattr(err, "signum", None) or signal.SIGINT
    what = f"{err}; " if str(err) else ""
    resumable = command.resumable and run.dir.exists()
    launcher = launcher_handler(signum)
    if launcher is not None and process_rank() == 0 and getattr(launcher, "__name__", "") == "checkpoint_and_try_requeue":
        then = "; submitit requeues the job and it continues here" + (" from this state" if resumable else "")
    elif resumable:
        then = f"; continue with resume={run.dir} (or resume=auto)"
    else:  # analyze, finetune, evaluate, prepare: what they finished is kept, their result files say complete
        then = "; the same command run again completes it"
    typer.echo(f"femlm: interrupted ({signal_name(signum)}); {what}the run directory {run.dir} keeps what was saved"
               f"{then}", err=True)
    try:
        status = handoff(signum)
    except Exception as exc:
        if type(exc).__name__ != "UncompletedJobError":
            raise
        reason = str(exc).removeprefix("Job not requeued because: ").rstrip(".")
        fail(f"job not requeued: {reason} (hydra.launcher.max_num_timeout of slurm_gpu / slurm_node; "
             "submitit_local allows 3); "
             + (f"continue it with resume={run.dir}" if resumable else "run it again"), code=1)
    raise SystemExit(status)


def _run_command(name: str, command: Command, typed: Any, run: Any) -> Any:
    try:
        if command.check:  # a wrong checkpoint path: refused before the command's code (torch, transformers) loads
            command.load("check")(typed)
        if typed.dry_run:
            plan = {"command": name, "run_dir": str(run.dir), **command.load("plan")(typed, run)}
            run.write_json("plan.json", plan)
            typer.echo(yaml.safe_dump(plan, sort_keys=False, width=110).rstrip())
            typer.echo(f"[dry run] {name}: every check passed; config and plan written to {run.dir}")
            return plan
        return command.load("run")(typed, run)
    except UserError as err:
        run.discard()
        fail(str(err))
    except KeyboardInterrupt as err:
        # Pre-training finishes the step and saves a state first (femlm.train.interrupt) and says so.
        _stopped(command, run, err)
    except OSError as err:
        if err.errno not in ENVIRONMENT_ERRNOS:
            raise
        # A full disk (or a quota, a read-only remount) is not a bug: one line, the run keeps what it has.
        run.discard()
        where = f" writing {err.filename}" if err.filename else ""
        kept = f"; the run directory {run.dir} keeps what was saved" if run.dir.exists() else ""
        fix = "make the file system writable" if err.errno == errno.EROFS else "free space"
        then = (f"; {fix}, then continue with resume={run.dir}" if run.dir.exists() and command.resumable
                else f"; {fix} and run it again")
        fail(f"{err.strerror or err}{where} (errno {errno.errorcode.get(err.errno, err.errno)}){kept}{then}",
             code=1)


def dispatch(name: str, args: list[str], multirun: bool = False, cfg: str | None = None,
             dry_run: bool = False) -> None:
    import hydra

    from femlm.compose import CONF_DIR
    from femlm.config import register_schema

    command = COMMANDS[name]
    overrides = _positional_to_overrides(command, list(args))
    if dry_run:
        overrides = [o for o in overrides if not o.startswith("dry_run=")] + ["dry_run=true"]
    if command.resumable:
        overrides = _resume_overrides(name, overrides, multirun)
    os.environ["FEMLM_RUN_UID"] = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{secrets.token_hex(3)}"
    if process_rank() > 0:
        # Under torchrun only rank 0 owns a run directory; the others write nothing (see femlm.train).
        overrides += ["hydra.output_subdir=null", "hydra/job_logging=disabled",
                      "hydra/hydra_logging=disabled", "hydra.run.dir=."]
    _check_all(name, overrides, multirun, print_job=cfg == "job", launch=cfg is None)
    if multirun:
        from femlm.launch import report_failed_jobs_in_one_line

        report_failed_jobs_in_one_line()
    if cfg == "job":
        return
    register_schema()
    sys.argv = [f"femlm {name}", *overrides, *(["--multirun"] if multirun else []),
                *(["--cfg", cfg] if cfg else [])]
    hydra.main(config_path=str(CONF_DIR), config_name=config_name(name), version_base="1.3")(_task(name, command))()


def _register(name: str, command: Command) -> None:
    def run(
        ctx: typer.Context,
        multirun: bool = typer.Option(False, "-m", "--multirun", help="Sweep: one job per combination of "
                                      "comma-separated override values (Hydra's sweeper and launcher)."),
        cfg: str | None = typer.Option(None, "--cfg", "-c", help="Print the composed config and exit: job (this "
                                       "command's sections), hydra or all."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Run every check a real run makes (configs, files, "
                                     "checkpoints, tokenizers, data), write the config and plan.json; train nothing."),
    ) -> None:
        if cfg is not None and cfg not in ("job", "hydra", "all"):
            fail(f"--cfg {cfg!r}: allowed job, hydra, all")
        mode = next((m for m, _ in command.modes if m in ctx.args), None)  # e.g. femlm report --compare A B
        if mode is not None:
            args = list(ctx.args)
            try:
                raise typer.Exit(command.load(mode)(args[args.index(mode) + 1:] + args[:args.index(mode)]))
            except UserError as err:
                fail(str(err))
        dispatch(name, list(ctx.args), multirun=multirun, cfg=cfg, dry_run=dry_run)

    app.command(name, help=_help_text(name, command), context_settings={
        "allow_extra_args": True, "ignore_unknown_options": True})(run)


for _name, _command in COMMANDS.items():
    _register(_name, _command)


@app.command("experiment", add_help_option=False, context_settings={
    "allow_extra_args": True, "ignore_unknown_options": True},
    help="Run experiment files end to end, resumably: femlm experiment NAME... [--plan] (femlm experiment --help; "
         "the same as python -m femlm.experiment).")
def experiment(ctx: typer.Context) -> None:
    from femlm.experiment.cli import parser, run

    raise typer.Exit(run(parser("femlm experiment").parse_args(list(ctx.args))))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
