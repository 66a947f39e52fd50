# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The learning-rate schedule of the budget protocol, in plain Optax.

A linear warm-up over 5% of the budget, then a cosine to zero at its end.
Its own module because both `boostax.examples.speedup` (a workload's
``schedule="cosine"``) and `boostax.examples.budgets` (every budget's run)
use it, and the budgets protocol builds on `speedup`.

``optax.warmup_cosine_decay_schedule`` is not used: its boundaries are
Python numbers fixed when the schedule is built, whereas here the horizon
is a hyper-parameter in the optimizer state (``optax.inject_hyperparams``),
so the steps of every budget are the same compiled programs.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

#: Linear warm-up, as a fraction of the budget.
WARMUP_FRACTION = 0.05


def warmup_cosine(count, peak, warmup, horizon):
    """Linear warm-up over `warmup` steps, then a cosine to 0 at `horizon`."""
    count = jnp.asarray(count, jnp.float32)
    ramp = peak * (count + 1) / jnp.maximum(warmup, 1.0)
    progress = jnp.clip(
        (count - warmup) / jnp.maximum(horizon - warmup, 1.0), 0, 1
    )
    decay = 0.5 * peak * (1 + jnp.cos(jnp.pi * progress))
    return jnp.where(count < warmup, ramp, decay)


def _scheduled_sgd(learning_rate, momentum, warmup, horizon):
    return optax.sgd(
        lambda count: warmup_cosine(count, learning_rate, warmup, horizon),
        momentum=momentum,
    )


def scheduled_sgd(
    learning_rate: float, horizon_steps: int, momentum: float = 0.9
) -> optax.GradientTransformation:
    """SGD with momentum on a warm-up + cosine schedule over `horizon_steps`.

    The horizon is a hyper-parameter in the optimizer state
    (``optax.inject_hyperparams``), not a constant of the compiled step, so
    the steps of every budget are the same programs.

    Args:
      learning_rate: the peak learning rate, reached after the warm-up.
      horizon_steps: the budget, in steps: the cosine reaches 0 there.
      momentum: SGD's momentum.

    Returns:
      An ``optax.GradientTransformation`` whose state holds ``warmup`` and
      ``horizon`` in ``hyperparams``.
    """
    return optax.inject_hyperparams(_scheduled_sgd)(
        learning_rate=learning_rate,
        momentum=momentum,
        warmup=float(round(WARMUP_FRACTION * horizon_steps)),
        horizon=float(horizon_steps),
    )
