"""Where training progress goes: metrics.jsonl (via `Run.log`), a tqdm bar, wandb, and loss_curve.png.

wandb is best effort: offline by default, with its own directory inside the run, and every call wrapped, so
a broken or slow wandb costs a warning, never a crash or a hang of the training run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import warnings
from pathlib import Path
from typing import Any

from femlm.runs import read_metrics


class Wandb:
    """A wandb run that never raises; all methods are no-ops when disabled or after the first failure."""

    def __init__(self, mode: str, project: str, entity: str | None, run_dir: Path, name: str,
                 config: dict[str, Any], enabled: bool = True) -> None:
        self.run: Any = None
        if not enabled or mode == "disabled":
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_CONSOLE", "off")
        try:
            import wandb

            wandb_dir = run_dir / "wandb"
            wandb_dir.mkdir(parents=True, exist_ok=True)
            id_file = wandb_dir / "run_id"
            run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
            id_file.write_text(run_id)
            settings = wandb.Settings(init_timeout=30, silent=True, console="off", x_disable_stats=True)
            self.run = wandb.init(project=project, entity=entity, mode=mode, dir=str(run_dir), name=name,
                                  id=run_id, resume="allow", config=config, settings=settings)
        except Exception as err:  # noqa: BLE001 - any wandb failure must not stop training
            warnings.warn(f"wandb disabled ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})",
                          stacklevel=2)
            self.run = None

    def log(self, record: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            # No `step=`: after a resume steps repeat, which wandb's monotonic step would reject.
            self.run.log({k: v for k, v in record.items() if v is not None})
        except Exception as err:  # noqa: BLE001
            warnings.warn(f"wandb logging stopped ({type(err).__name__})", stacklevel=2)
            self.run = None

    def finish(self, exit_code: int = 0) -> None:
        if self.run is None:
            return
        with contextlib.suppress(Exception):  # a failing finish must not turn a good run into an error
            self.run.finish(exit_code=exit_code)
        self.run = None


class Recorder:
    """One place a pre-training run's records go: metrics.jsonl (rank 0), wandb and the progress bar.

    A context manager: on exit the bar closes and wandb finishes with the run's exit status."""

    def __init__(self, run: Any, logger: Any, run_dir: Path, name: str, config: dict[str, Any], total: int,
                 initial: int, enabled: bool) -> None:
        self.run = run
        self.wandb = Wandb(logger.wandb.mode, logger.wandb.project, logger.wandb.entity, run_dir, name, config,
                           enabled=enabled)
        self.bar = progress_bar(total, initial, logger.progress and enabled)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.bar.close()
        self.wandb.finish(exit_code=0 if exc_type is None else 1)

    def log(self, **record: Any) -> None:
        self.run.log(**record)
        self.wandb.log(record)

    def show(self, **fields: Any) -> None:
        self.bar.set_postfix({k: f"{v:.3f}" if isinstance(v, float) else v for k, v in fields.items()},
                             refresh=False)


def progress_bar(total: int, initial: int, enabled: bool) -> Any:
    """tqdm over optimizer steps (its ETA is the run's); silent when not a TTY or not wanted."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not (enabled and sys.stderr.isatty()), unit="step",
                dynamic_ncols=True, desc="pretrain")


def plot_loss_curve(metrics_path: Path, out: Path, title: str = "") -> Path | None:
    """Train loss and held-out MLM loss against optimizer step, from metrics.jsonl."""
    records = read_metrics(metrics_path)
    train = [(r["step"], r["loss"]) for r in records if r.get("loss") is not None and "step" in r]
    evals = [(r["step"], r["eval_loss"]) for r in records if r.get("eval_loss") is not None and "step" in r]
    if not train and not evals:
        return None
    from femlm.outputs import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(6.4, 4.0), dpi=120)
    if train:
        ax.plot(*zip(*train, strict=True), label="train loss", linewidth=1.0, alpha=0.8)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="held-out MLM loss", linewidth=1.5, markersize=3)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats / masked token)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    tmp = out.with_name(out.stem + ".tmp.png")
    save_figure(fig, tmp, dpi=None)  # the figure's own 120 dpi
    os.replace(tmp, out)
    return out
