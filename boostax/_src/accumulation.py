# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient accumulation that runs the inner optimizer once per k steps.

``optax.MultiSteps`` computes the inner optimizer's update on every
micro-step and discards it with ``jnp.where`` unless the step emits: an
expensive inner optimizer (Muon, Shampoo) costs k times its price per
effective step. Here the inner update sits under ``lax.cond`` and runs only
on the k-th micro-step, so its schedules also count real updates.

Skipped micro-steps. A train step that drops a micro-step's gradient (not
finite under loss scaling, or ``skip_nonfinite``) passes ``skipped=True``
as an extra argument: the micro-step still counts as one of its cycle's k,
so train step ``i`` is always micro-step ``i mod k`` of update ``i // k``
(the invariant gradient freezing relies on: every micro-step of an update
trains the same depth), and the update its cycle would have made is dropped
(params and the inner optimizer's state stay as they were), as
``torch.amp.GradScaler`` drops an update whose accumulated gradient
overflowed. Every update is therefore the mean of exactly k finite
micro-gradients.

References:
  MindSpore ``mindspore.boost.GradientAccumulation``;
  ``optax.MultiSteps``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from boostax._src import tree_utils, validation

Schedule = Callable[[jax.Array], jax.typing.ArrayLike]


class GradientAccumulationState(NamedTuple):
    """State of `gradient_accumulation`.

    Attributes:
      mini_step: micro-steps accumulated since the last update, ``int32``.
      gradient_step: updates of the inner optimizer so far, ``int32``.
      inner_state: the inner optimizer's state.
      acc_grads: running mean of the micro-gradients (accumulator dtype).
      dropped: micro-steps of the current cycle whose gradient was dropped
        (``skipped``), ``int32``; when `mini_step` is 0, those of the cycle
        that just ended (a cycle with any made no update).
    """

    mini_step: jax.Array
    gradient_step: jax.Array
    inner_state: optax.OptState
    acc_grads: optax.Updates
    dropped: jax.Array


def _check_every_k(every_k_schedule) -> Schedule:
    if callable(every_k_schedule):
        return every_k_schedule
    k = validation.check_int(
        "every_k_schedule",
        every_k_schedule,
        minimum=1,
        or_else="a schedule (step -> int)",
    )
    return lambda step: k


def accumulate(updates, state: GradientAccumulationState):
    """The running mean with this micro-gradient (Welford, like MultiSteps)."""
    n = state.mini_step + 1
    return jax.tree.map(
        lambda g, acc: acc + (g.astype(acc.dtype) - acc) / n.astype(acc.dtype),
        updates,
        state.acc_grads,
    )


def gradient_accumulation(
    inner: optax.GradientTransformation,
    every_k_schedule: int | Schedule,
    *,
    accumulator_dtype: Any = jnp.float32,
) -> optax.GradientTransformationExtraArgs:
    """Averages k micro-gradients, then runs `inner` once on their mean.

    .. math::

      \\bar g_m = \\bar g_{m-1} + (g_m - \\bar g_{m-1}) / m, \\qquad
      u = \\begin{cases} \\text{inner}(\\bar g_k) & m = k \\\\
      0 & m < k \\end{cases}

    The inner update is under ``lax.cond``: it runs on the k-th micro-step
    only (``optax.MultiSteps`` runs it on every micro-step), and the only
    parameter-sized buffer added is the accumulator. Numerically the same as
    ``optax.MultiSteps(inner, k)``.

    Args:
      inner: the optimizer applied to the accumulated gradient.
      every_k_schedule: micro-steps per update: an int, or a function of the
        number of updates so far returning one.
      accumulator_dtype: dtype of the accumulator (float32 by default, so
        low-precision gradients accumulate without loss).

    Returns:
      An ``optax.GradientTransformationExtraArgs``; extra arguments go to
      `inner` on the update step, but ``skipped`` (a bool scalar, default
      False), which drops this micro-step's gradient: the micro-step still
      counts as one of the cycle's k, and the cycle makes no update; and
      ``reduce_gradients`` (default ``None``), a function applied to the
      mean of the cycle's micro-gradients before `inner` runs, on the
      updating micro-step only: a data-parallel step whose devices
      accumulate their own gradients passes its reduction (a reduce-scatter
      under ``shard_optimizer_state``), so the devices communicate once
      per update. `inner` sees what it returns (e.g. this device's
      slices), and the updates have its shapes.

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> tx = boostax.gradient_accumulation(optax.sgd(1.0), 2)
      >>> params = jnp.zeros(2)
      >>> state = tx.init(params)
      >>> u1, state = tx.update(jnp.array([1.0, 1.0]), state, params)
      >>> u2, state = tx.update(jnp.array([3.0, 3.0]), state, params)
      >>> u1, u2
      (Array([0., 0.], dtype=float32), Array([-2., -2.], dtype=float32))

    References:
      MindSpore ``mindspore.boost.GradientAccumulation``.
    """
    every_k = _check_every_k(every_k_schedule)
    validation.check_optimizer("inner", inner)
    inner = optax.with_extra_args_support(inner)
    given = accumulator_dtype
    try:
        accumulator_dtype = jnp.dtype(accumulator_dtype)
    except TypeError:
        accumulator_dtype = None
    if accumulator_dtype is None or not jnp.issubdtype(
        accumulator_dtype, jnp.floating
    ):
        raise TypeError(
            "`accumulator_dtype` must be a floating dtype (e.g. jnp.float32), "
            f"{validation.got(given)}."
        )

    def init_fn(params):
        return GradientAccumulationState(
            mini_step=jnp.zeros([], jnp.int32),
            gradient_step=jnp.zeros([], jnp.int32),
            inner_state=inner.init(params),
            acc_grads=jax.tree.map(
                lambda p: jnp.zeros(jnp.shape(p), accumulator_dtype), params
            ),
            dropped=jnp.zeros([], jnp.int32),
        )

    def update_fn(
        updates,
        state,
        params=None,
        *,
        skipped=False,
        reduce_gradients=None,
        **extra_args,
    ):
        skipped = jnp.asarray(skipped, bool)
        # A new cycle forgets the drops of the one before.
        dropped = jnp.where(state.mini_step == 0, 0, state.dropped)
        dropped = (dropped + skipped).astype(jnp.int32)
        end = state.mini_step + 1 >= every_k(state.gradient_step)
        emit = end & (dropped == 0)

        def inner_update():
            # The mean is recomputed here rather than passed in: an operand
            # of the cond computed outside it would be a parameter-sized
            # temporary; here it fuses into the inner optimizer's first op.
            mean = accumulate(updates, state)
            if reduce_gradients is not None:
                mean = reduce_gradients(mean)
            return inner.update(
                optax.tree.cast_like(mean, updates),
                state.inner_state,
                params,
                **extra_args,
            )

        def hold():
            shapes, _ = jax.eval_shape(inner_update)
            return optax.tree.zeros_like(shapes), state.inner_state

        # Only the inner optimizer is under the cond; the accumulator is
        # updated with selects, so XLA writes it in place. A dropped
        # micro-gradient (NaN or inf) never enters it.
        new_updates, inner_state = jax.lax.cond(emit, inner_update, hold)
        return new_updates, GradientAccumulationState(
            mini_step=jnp.where(
                end, 0, optax.safe_increment(state.mini_step)
            ).astype(jnp.int32),
            gradient_step=jnp.where(
                emit,
                optax.safe_increment(state.gradient_step),
                state.gradient_step,
            ).astype(jnp.int32),
            inner_state=inner_state,
            acc_grads=jax.tree.map(
                lambda new, old: jnp.where(
                    end, jnp.zeros_like(old), jnp.where(skipped, old, new)
                ),
                accumulate(updates, state),
                state.acc_grads,
            ),
            dropped=dropped,
        )

    # Read by the train step, which keeps freezing aligned with the cycles.
    # (mypy: an attribute set on a function, read by `accumulation_steps`.)
    update_fn.accumulation_steps = (  # type: ignore[attr-defined]
        None if callable(every_k_schedule) else every_k_schedule
    )
    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def accumulation_steps(optimizer: optax.GradientTransformation) -> int | None:
    """k of a `gradient_accumulation` optimizer; ``None`` for any other (or a
    schedule of k)."""
    return getattr(optimizer.update, "accumulation_steps", None)


def has_updated(state: Any) -> jax.Array:
    """Whether the last `update` ran the inner optimizer.

    Args:
      state: a `GradientAccumulationState`, or any pytree holding one: a
        `TrainState` (``has_updated(state)`` after ``state, metrics =
        train_step(state, batch)``), an optimizer state (e.g. of an
        ``optax.chain``).

    Returns:
      A bool scalar array. With per-device optimizer states (data-parallel
      AdaSum), whose counters agree, one bool for all. False after the last
      micro-step of a cycle that dropped a micro-step (no update was made).

    Raises:
      TypeError: if `state` holds no `GradientAccumulationState`.

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> tx = boostax.gradient_accumulation(optax.sgd(1.0), 2)
      >>> state = tx.init(jnp.zeros(2))
      >>> _, state = tx.update(jnp.ones(2), state)
      >>> bool(boostax.has_updated(state))
      False
      >>> _, state = tx.update(jnp.ones(2), state)
      >>> bool(boostax.has_updated(state))
      True
    """
    found = tree_utils.find_state(state, GradientAccumulationState)
    if found is None:
        raise TypeError(
            "`state` must be a GradientAccumulationState or a pytree holding "
            "one (a TrainState or optimizer state of a step with gradient "
            "accumulation, e.g. boostax.gradient_accumulation or "
            "{'boost': {'grad_accumulation': True}}), got "
            f"{type(state).__name__} without one."
        )
    updated = (
        (found.mini_step == 0)
        & (found.gradient_step > 0)
        & (found.dropped == 0)
    )
    # Per-device copies (a leading device axis) agree: one answer.
    return jnp.all(updated)
