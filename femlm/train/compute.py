"""Equal compute: how an arm with K masked copies per sequence fits its rows into optimizer steps.

The paper compares MLM and FE-MLM at "batch size 48" and "the same computation", which admits two readings;
femlm offers both (``trainer.equal_compute``) and records which one a run used:

* ``same_rows`` (default): ``trainer.batch_size`` counts model rows. A K-copy arm (FE-MLM, the i.i.d. control)
  holds batch_size / K sequences x K copies per step, for the same steps: the same FLOPs and masked targets per
  step as MLM, from K times fewer distinct sequences per step. It asks "is a K-copy batch a better use of the
  same rows per step?".
* ``same_sequences``: ``trainer.batch_size`` counts sequences. A K-copy arm holds batch_size sequences x K
  copies per step (K times the rows of an MLM step) and runs max_steps / K steps: the same sequences per step as
  MLM, the same FLOPs and masked targets in all, in K times fewer optimizer steps. Its log/eval/save cadences
  are divided by K too, so its evaluations fall at the same compute as MLM's. It asks "does a batch of the same
  sequences, each masked K disjoint ways, beat K plain MLM steps of the same compute?".

At equal compute either way a K-copy arm reads K times fewer sequences in all than MLM: that is the trade the
paper's variance argument weighs (femlm analyze decomposition measures both sides of it). MLM (K = 1) is the same
run in both modes, so one set of MLM runs serves both comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

from femlm.errors import UserError

MODES = ("same_rows", "same_sequences")


@dataclass(frozen=True)
class StepLayout:
    mode: str
    copies: int  # K: masked copies of each sequence
    sequences: int  # source sequences per optimizer step, all processes together
    steps: int  # optimizer steps of the run
    divide: int  # cadences (log/eval/save) are divided by this: K under same_sequences, else 1

    @property
    def rows(self) -> int:
        """Model rows per optimizer step, all processes together."""
        return self.sequences * self.copies

    def every(self, steps: int) -> int:
        """A cadence given in MLM steps, in this arm's steps."""
        return max(1, steps // self.divide)


def step_layout(mode: str, batch_size: int, max_steps: int, copies: int, world_size: int = 1) -> StepLayout:
    """The layout of a run, or a one-line UserError naming the key that does not divide."""
    if mode not in MODES:
        raise UserError(f"trainer.equal_compute={mode!r}: allowed {', '.join(MODES)}")
    if mode == "same_rows":
        if batch_size % copies:
            raise UserError(f"trainer.batch_size={batch_size} is not a multiple of masking.num_masks={copies}: with "
                            "trainer.equal_compute=same_rows a step holds batch_size / K sequences x K copies")
        layout = StepLayout(mode, copies, batch_size // copies, max_steps, 1)
    else:
        if max_steps % copies:
            raise UserError(f"trainer.max_steps={max_steps} is not a multiple of masking.num_masks={copies}: with "
                            "trainer.equal_compute=same_sequences a K-copy arm runs max_steps / K steps")
        layout = StepLayout(mode, copies, batch_size, max_steps // copies, copies)
    if layout.sequences % world_size:
        raise UserError(f"trainer.batch_size={batch_size}: {layout.sequences} sequences per step do not split over "
                        f"{world_size} processes")
    return layout
