# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The metrics a train step reports beside the loss's own: the names it
reserves, and the statistics boostax's optimizer stages keep in their
states."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from boostax._src import accumulation as accumulation_lib
from boostax._src import tree_utils
from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from boostax._src.distributed import adasum as adasum_lib

# The metrics a step reports itself; a loss's own metrics may not reuse them.
STEP_METRICS = (
    "loss",
    "overflow",
    "loss_scale",
    "frozen_groups",
    "updated",
    "adasum_cosine",
    "dim_reduce_step_size",
    "dim_reduce_trials",
)


def check_names(metrics) -> None:
    """Refuses loss metrics named like the step's own (`STEP_METRICS`)."""
    clash = sorted(set(metrics) & set(STEP_METRICS))
    if clash:
        raise ValueError(
            f"The loss's metrics (`has_aux=True`) use the name(s) {clash}, "
            "which the step reports itself (one would silently replace the "
            "other): rename them, e.g. 'train_loss'. Reserved: "
            f"{list(STEP_METRICS)}."
        )


def optimizer_metrics(opt_state, finite=None) -> dict[str, jax.Array]:
    """The statistics boostax's optimizer stages keep in their states.

    Args:
      opt_state: the optimizer state after the step.
      finite: with loss scaling, whether the step was applied (a skipped
        step leaves the state, and so these statistics, as they were).

    Returns:
      ``updated`` (gradient accumulation: whether this micro-step ran the
      optimizer), ``adasum_cosine`` (`boostax.adasum`: the mean cosine
      between the updates the last AdaSum combined), ``dim_reduce_step_size``
      and ``dim_reduce_trials`` (DimReduce: the last update's Armijo step,
      0 when no trial was accepted, and its line-search trials), for the
      stages present.
    """
    metrics = {}
    acc = tree_utils.find_state(
        opt_state, accumulation_lib.GradientAccumulationState
    )
    if acc is not None:
        updated = accumulation_lib.has_updated(acc)
        metrics["updated"] = updated if finite is None else updated & finite
    adasum = tree_utils.find_state(opt_state, adasum_lib.AdaSumState)
    if adasum is not None:
        metrics["adasum_cosine"] = jnp.reshape(adasum.cosine, ())
    dim_reduce = tree_utils.find_state(opt_state, dim_reduce_lib.DimReduceState)
    if dim_reduce is not None:
        metrics["dim_reduce_step_size"] = dim_reduce.step_size
        metrics["dim_reduce_trials"] = dim_reduce.trials
    return metrics
