# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weight averaging: an exponential moving average of the parameters.

`average_params` is an Optax transformation chained last onto an
optimizer. It passes the updates through unchanged and keeps, in its
state, an exponential moving average (EMA) of the parameters the updates
produce, ``params + updates``. Being optimizer state, the average advances
exactly when the optimizer updates (inside gradient accumulation: once per
update; a skipped step keeps it), is sharded with the rest of the state
under ZeRO-1, and is saved and restored by any checkpoint of the state.
`averaged_params` reads it back from any optimizer state that holds one.

References:
  Polyak and Juditsky, `Acceleration of Stochastic Approximation by
  Averaging <https://doi.org/10.1137/0330046>`_, 1992.
  Izmailov et al., `Averaging Weights Leads to Wider Optima and Better
  Generalization <https://arxiv.org/abs/1803.05407>`_, 2018.
  MosaicML Composer, ``composer.algorithms.EMA`` (``half_life``);
  timm, ``timm.utils.ModelEmaV2``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from boostax._src import tree_utils, validation


class AverageParamsState(NamedTuple):
    """State of `average_params`.

    Attributes:
      count: optimizer updates seen so far, ``int32`` (it stops at the
        largest ``int32``).
      average: the moving average of the parameters, ``float32``, shaped
        as the parameters (already bias-corrected with ``debias``).
    """

    count: jax.Array  # type: ignore[assignment]  # shadows `tuple.count`
    average: optax.Params


def half_life_decay(half_life: float) -> float:
    """The EMA decay whose weights halve every `half_life` updates.

    Composer's ``EMA(half_life=...)`` spelling of the decay:

    .. math::

      d = 2^{-1 / h} = \\exp(-\\ln 2 / h).

    Args:
      half_life: updates after which a set of params weighs half as much
        in the average, a number > 0.

    Returns:
      The decay `d`, a float in (0, 1), for `average_params`.

    Example:
      >>> import boostax
      >>> round(boostax.half_life_decay(693.1), 5)
      0.999
    """
    half_life = validation.check_number(
        "half_life", half_life, minimum=0.0, open_minimum=True
    )
    return math.exp(-math.log(2.0) / half_life)


def average_params(
    decay: float = 0.999,
    *,
    start_step: int = 0,
    debias: bool = True,
) -> optax.GradientTransformationExtraArgs:
    """An exponential moving average of the parameters, kept in the state.

    Chain it last: ``optax.chain(optimizer, average_params(0.999))``. It
    returns the updates unchanged and, at optimizer update ``t`` (counted
    from 1; ``n = t - start_step``), averages the new parameters
    ``x_t = params + updates``:

    .. math::

      \\bar{x}_t = \\bar{x}_{t-1} + w_t (x_t - \\bar{x}_{t-1}), \\qquad
      w_t = \\begin{cases}
        1 & n \\le 0 \\text{ (a copy)} \\\\
        \\dfrac{1 - d}{1 - d^{\\,n}} & \\texttt{debias} \\\\
        1 - d & \\text{otherwise.}
      \\end{cases}

    With ``debias`` (default) this is Adam's bias-corrected EMA
    ``m_t / (1 - d^n)`` of ``m_t = d m_{t-1} + (1 - d) x_t``, ``m = 0``
    before the start: the normalised average of the params since
    `start_step`, with no pull toward the initial weights. Without it, the
    average starts as a copy of the params at `start_step` (the initial
    ones by default) and decays from there, as ``timm.utils.ModelEmaV2``
    does. The average is stored bias-corrected, in ``float32``; a leaf
    that does not update (a frozen one: the step hands the optimizer
    ``optax.MaskedNode`` there) keeps its average.

    Model state that is not a parameter (BatchNorm's running statistics)
    is not averaged: evaluate the averaged params with the running
    statistics the training kept.

    Args:
      decay: ``d``, in [0, 1): the weight of the past average at each
        update (0.999: a window of about 1000 updates; `half_life_decay`
        turns Composer's half-life into it). 0 copies the params.
      start_step: the update from which the params are averaged; before
        it, the average is a copy of the params (Composer's ``ema_start``,
        SWA's late start). An int >= 0.
      debias: correct the bias of the average's first updates (see above).

    Returns:
      An ``optax.GradientTransformationExtraArgs`` whose state is an
      `AverageParamsState`. Its ``update`` needs ``params``.

    Raises:
      ValueError, TypeError: `decay` outside [0, 1), `start_step` not an
        int >= 0, `debias` not a bool.

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> tx = optax.chain(optax.sgd(1.0), boostax.average_params(0.5))
      >>> params = jnp.array([0.0])
      >>> state = tx.init(params)
      >>> for _ in range(2):
      ...   updates, state = tx.update(jnp.array([-1.0]), state, params)
      ...   params = optax.apply_updates(params, updates)
      >>> average = boostax.averaged_params(state)  # (2 + 0.5 * 1) / 1.5
      >>> float(params[0]), round(float(average[0]), 4)
      (2.0, 1.6667)

    References:
      Polyak and Juditsky, `Acceleration of Stochastic Approximation by
      Averaging <https://doi.org/10.1137/0330046>`_, 1992.
      Izmailov et al., `Averaging Weights Leads to Wider Optima and
      Better Generalization <https://arxiv.org/abs/1803.05407>`_, 2018.
      MosaicML Composer, ``composer.algorithms.EMA``; timm,
      ``timm.utils.ModelEmaV2``.
    """
    decay = validation.check_number(
        "decay", decay, minimum=0.0, maximum=1.0, open_maximum=True
    )
    start_step = validation.check_int("start_step", start_step, minimum=0)
    validation.check_bool("debias", debias)
    # Host constants in float64: 1 - d^n = -expm1(n log d) keeps its
    # relative precision for d near 1, where float32 d^n would not.
    log_decay = math.log(decay) if decay > 0 else -math.inf

    def init_fn(params):
        return AverageParamsState(
            count=jnp.zeros([], jnp.int32),
            average=optax.tree.cast(params, jnp.float32),
        )

    def weight(count):
        n = count + 1 - start_step  # updates averaged, this one included
        if decay == 0.0:
            return jnp.ones([], jnp.float32)
        if debias:
            nf = jnp.maximum(n, 1).astype(jnp.float32)
            w = (1.0 - decay) / -jnp.expm1(nf * log_decay)
        else:
            w = jnp.asarray(1.0 - decay, jnp.float32)
        return jnp.where(n <= 0, 1.0, w).astype(jnp.float32)

    def update_fn(updates, state, params=None, **extra_args):
        del extra_args
        if params is None:
            raise ValueError(
                "`average_params` averages the parameters: its update needs "
                "`params`: call `tx.update(updates, state, params)`."
            )
        w = weight(state.count)
        average = jax.tree.map(
            lambda a, p, u: (
                a + w * (p.astype(jnp.float32) + u.astype(jnp.float32) - a)
            ),
            state.average,
            params,
            updates,
        )
        count = optax.safe_increment(state.count)
        return updates, AverageParamsState(count=count, average=average)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def averaged_params(opt_state: Any) -> optax.Params | None:
    """The parameters' moving average an optimizer state holds, or ``None``.

    Finds the `AverageParamsState` of `average_params` anywhere in
    `opt_state` (a chain, gradient accumulation, AdaSum or another
    wrapper).

    Args:
      opt_state: an optimizer state (a boostax state's ``state.opt_state``).

    Returns:
      The ``float32`` average, shaped as the params (with AdaSum's
      per-device optimizer state, the devices' equal averages stacked on a
      leading axis); ``None`` if no `average_params` is in the state.

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> boostax.averaged_params(optax.sgd(0.1).init(jnp.zeros(2))) is None
      True
    """
    state = tree_utils.find_state(opt_state, AverageParamsState)
    return None if state is None else state.average


def _like(average: jax.Array, param: jax.Array) -> jax.Array:
    if average.shape != param.shape and average.shape[1:] == param.shape:
        # A per-device optimizer state (AdaSum's) stacks the devices' equal
        # averages on a leading axis.
        average = average[0]
    return average.astype(param.dtype)


def evaluated_params(params: optax.Params, opt_state: Any):
    """The moving average in `opt_state`, as `params` (their dtypes and
    shapes), to evaluate; ``None`` if `opt_state` holds none."""
    average = averaged_params(opt_state)
    if average is None:
        return None
    return jax.tree.map(_like, average, params)
