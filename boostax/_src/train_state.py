# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainState`: everything a train step reads and writes, as one pytree.

Everything that changes during training lives here, so a state saved at
step n and restored continues exactly as the uninterrupted run.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax
import optax

PyTree = Any


class AlgorithmStates(NamedTuple):
    """One slot for each algorithm whose state lives outside the optimizer.

    A slot is ``None`` while its algorithm is off. Algorithms that are Optax
    transforms (accumulation, AdaSum, DimReduce, gradient centralization)
    keep their state in ``TrainState.opt_state`` instead.

    Attributes:
      loss_scale: loss-scaling state (static, dynamic or per group).
      freeze: position in the gradient-freezing sequence.
    """

    loss_scale: PyTree = None
    freeze: PyTree = None


class TrainState(flax.struct.PyTreeNode):
    """Everything a train step reads and writes, as one pytree.

    Only arrays: it goes through ``jax.jit``, ``jax.tree.map`` and
    checkpointing (Orbax) unchanged. Use ``state.replace(...)`` to change a
    field.

    Attributes:
      step: number of train steps taken (calls of the step), ``int32``
        scalar; with gradient accumulation over k micro-steps these are
        micro-steps, and ``step // k`` is the update (the optimizer's own
        count, and its schedules, count updates).
      params: the trainable parameters.
      opt_state: the optimizer's state.
      model_state: non-trainable model variables (BatchNorm statistics,
        NNX RNG counters); ``None`` for a plain loss function.
      rng: the base PRNG key; step ``i`` uses ``fold_in(rng, i)``.
      algorithms: the `AlgorithmStates` of the boost algorithms.
    """

    step: jax.Array
    params: PyTree
    opt_state: optax.OptState
    model_state: PyTree
    rng: jax.Array
    algorithms: AlgorithmStates = AlgorithmStates()
