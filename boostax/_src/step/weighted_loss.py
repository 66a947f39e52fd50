# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A loss given as a sum and its weight, normalised over the whole batch.

A token-weighted loss (a language model over padded rows) is the sum of
the kept positions' losses divided by their count. Computed on each
device's rows and averaged over the devices, it is the mean of the
devices' means, which is not the batch's mean once the padding is spread
unevenly. Given as `WeightedLoss(total, weight)`, the step divides by the
weight of the whole global batch instead:

.. math::

   L = \\frac{\\sum_d T_d}{\\sum_d W_d},

where :math:`T_d` and :math:`W_d` are device :math:`d`'s sum and weight.
Each device differentiates :math:`n T_d / W` (:math:`n` devices,
:math:`W = \\sum_d W_d`, a constant of the params), so the average the
step already takes of the devices' losses and gradients is exactly
:math:`L` and :math:`\\nabla L`, whatever the reduction (the data-parallel
mean, a sharded optimizer state's reduce-scatter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp


class WeightedLoss(NamedTuple):
    """A loss as the sum over the batch and the weight it is divided by.

    Return it from ``loss(outputs, targets)`` (or ``loss_fn``; with
    ``has_aux=True``, as ``(WeightedLoss(...), metrics)``), and the step
    reports and differentiates ``total / weight`` with both summed over
    the whole global batch: over every device of a mesh, not per device.
    Each micro-step of gradient accumulation is normalised by its own
    batch's weight, as ``optax.MultiSteps`` averages the micro-steps' mean
    losses. The weight is a count, not differentiated
    (``jax.lax.stop_gradient``).

    Attributes:
      total: the scalar sum of the per-example (per-token) losses.
      weight: the scalar they are divided by (the token count).

    Example:
      >>> def loss(logits, targets):
      ...     weights = (targets > 0).astype(jnp.float32)
      ...     losses = optax.softmax_cross_entropy_with_integer_labels(
      ...         logits, targets)
      ...     return boostax.WeightedLoss((losses * weights).sum(),
      ...                                 weights.sum())
    """

    total: jax.Array
    weight: jax.Array


def check(value: WeightedLoss, name: str) -> None:
    """Raises a `TypeError` unless both fields are scalars (at trace time)."""
    for field in WeightedLoss._fields:
        if jnp.ndim(getattr(value, field)) != 0:
            raise TypeError(
                f"`{name}` returned a WeightedLoss whose `{field}` has shape "
                f"{jnp.shape(getattr(value, field))}; both `total` and "
                "`weight` must be scalars (sums over the batch)."
            )


def mean(value, axes: Sequence[str]) -> jax.Array:
    """The loss a device differentiates: `value` as given, or a
    `WeightedLoss`'s total over the weight of the batch on every device of
    `axes` (none: this device's), times their number, so that averaging
    over `axes` gives the batch's loss (module docstring)."""
    if not isinstance(value, WeightedLoss):
        return value
    weight = jax.lax.stop_gradient(jnp.asarray(value.weight, jnp.float32))
    total = jnp.asarray(value.total, jnp.float32)
    if not axes:
        return total / weight
    axes = tuple(axes)
    devices = jax.lax.psum(1, axes)
    return total * devices / jax.lax.psum(weight, axes)
