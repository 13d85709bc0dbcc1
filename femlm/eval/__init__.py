"""Fine-tuning and evaluation: `run_finetune` (femlm finetune) and `run_evaluate` (femlm evaluate)."""

from femlm.eval.evaluate import run_evaluate
from femlm.eval.metrics import compute_metrics
from femlm.eval.pipeline import finetune_checkpoint, run_finetune
from femlm.eval.results import aggregate, mean_std

__all__ = ["aggregate", "compute_metrics", "finetune_checkpoint", "mean_std", "run_evaluate", "run_finetune"]
