# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`step_bytes`: the dtype-aware bytes of one program of a `TrainStep`.

What is read, and why before compiling, is `step_bytes.py`'s (which works
on traced functions alone); this module picks the program of a train step
and the function its backward pass differentiates.
"""

from __future__ import annotations

from boostax._src.measure.step_bytes import StepBytes, read_step_bytes
from boostax._src.step import train_step as train_step_lib


def step_bytes(
    train_step: train_step_lib.TrainStep, state, batch, depth=None
) -> StepBytes:
    """`StepBytes` of `train_step` (a `TrainStep`) at freeze `depth`.

    The saved activations are those of the batch given, on one device
    (for a data-parallel step, pass one device's share of the batch for the
    per-device figure); the collectives are read from the step as lowered
    for its mesh. Nothing is compiled.

    Args:
      train_step: a `TrainStep`.
      state: its state (arrays or shapes).
      batch: a batch (arrays or shapes).
      depth: the freeze depth (default: the first of the sequence, or the
        only step without freezing); with a sequence-length warm-up, a
        ``(depth, length)`` program (its batch truncated to `length`).

    Returns:
      `StepBytes`.
    """
    if depth is None and train_step.freezing is not None:
        depth = 0
    # First: `trace` checks the state (a wrong one is named, not an
    # AttributeError inside the builder).
    traced = train_step.trace(state, batch, depth)
    truncate = None
    if isinstance(depth, tuple):  # a sequence-length warm-up's program
        depth, length = depth
        # The leaves the step cuts (`trace` bound its lengths to `batch`).
        lengths = train_step.program_lengths
        assert lengths is not None
        truncate = lengths.truncate(length)

    def differentiated(state, batch):
        if truncate is not None:
            batch = truncate(batch)
        # Traced: the residuals' shapes need no values, so `state` may be
        # shapes alone (a baseline's, from `jax.eval_shape`).
        return train_step.builder.differentiated(state, batch, depth)

    return read_step_bytes(traced, differentiated, state, batch)
