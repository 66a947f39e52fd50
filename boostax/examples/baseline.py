# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The hand-written Optax + Flax train step that boostax is measured against.

Written the way the Flax examples write it, with no boostax code, so the demo,
the benchmarks and the tests compare boostax with what a user would write.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn


class PlainState(NamedTuple):
    params: Any
    model_state: dict[str, Any]  # e.g. {"batch_stats": ...}; {} for an MLP
    opt_state: optax.OptState
    # Steps taken, as Flax's `TrainState.apply_gradients` counts them.
    step: jax.Array


def init_plain_state(variables, optimizer) -> PlainState:
    """Splits Linen `variables` into params and the rest; inits `optimizer`."""
    variables = dict(variables)
    params = variables.pop("params")
    return PlainState(
        params, variables, optimizer.init(params), jnp.zeros([], jnp.int32)
    )


def make_plain_step(
    model: nn.Module,
    optimizer: optax.GradientTransformation,
    loss: Callable[[jax.Array, jax.Array], jax.Array],
    *,
    donate_state: bool = False,
    **train_kwargs,
):
    """Returns ``jit(step)(state, (x, y)) -> (state, loss)`` for a Linen model.

    Args:
      model: a Linen module; collections other than ``params`` are mutable.
      optimizer: an Optax optimizer.
      loss: ``loss(outputs, targets) -> scalar``.
      donate_state: ``jax.jit(..., donate_argnums=0)``, as the Flax
        examples' training loops write it (the state passed in is deleted).
      **train_kwargs: passed to ``model.apply`` (e.g. ``train=True``).
    """

    @functools.partial(jax.jit, donate_argnums=0 if donate_state else ())
    def step(state: PlainState, batch):
        params, model_state, opt_state, value = _update(
            model,
            optimizer,
            loss,
            (state.params, state.model_state, state.opt_state),
            batch,
            train_kwargs,
        )
        return PlainState(params, model_state, opt_state, state.step + 1), value

    return step


def make_lean_step(
    model: nn.Module,
    optimizer: optax.GradientTransformation,
    loss: Callable[[jax.Array, jax.Array], jax.Array],
    **train_kwargs,
):
    """The lean step a careful JAX user writes, for per-call costs:
    ``jit(step, donate_argnums=0)(state, (x, y)) -> (state, loss)`` with
    the state a tuple of plain pytrees ``(params, model_state, opt_state)``
    (`init_lean_state`) and no step counter. Arguments as
    `make_plain_step`'s."""

    @functools.partial(jax.jit, donate_argnums=0)
    def step(state, batch):
        params, model_state, opt_state, value = _update(
            model, optimizer, loss, state, batch, train_kwargs
        )
        return (params, model_state, opt_state), value

    return step


def init_lean_state(variables, optimizer) -> tuple[Any, dict, optax.OptState]:
    """`make_lean_step`'s state: ``(params, model_state, opt_state)``."""
    state = init_plain_state(variables, optimizer)
    return state.params, state.model_state, state.opt_state


def _update(model, optimizer, loss, state, batch, train_kwargs):
    """One update of ``state = (params, model_state, opt_state)`` on
    ``batch = (x, y)``: the new three and the loss. Collections other
    than ``params`` are mutable."""
    params, model_state, opt_state = state
    x, y = batch
    mutable = list(model_state)

    def loss_fn(params):
        variables = {"params": params, **model_state}
        if not mutable:
            return loss(model.apply(variables, x, **train_kwargs), y), {}
        logits, new_model_state = model.apply(
            variables, x, mutable=mutable, **train_kwargs
        )
        return loss(logits, y), new_model_state

    (value, model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params
    )
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), model_state, opt_state, value


def make_plain_predict(model: nn.Module, **eval_kwargs):
    """Returns ``jit(predict)(state, x) -> outputs`` in evaluation mode."""

    @jax.jit
    def predict(state: PlainState, x):
        variables = {"params": state.params, **state.model_state}
        return model.apply(variables, x, **eval_kwargs)

    return predict


def accuracy(predict: Callable[[Any], jax.Array], x, y, batch_size=512):
    """Fraction of `x` whose arg-max prediction equals `y`."""
    correct = 0
    for start in range(0, len(x), batch_size):
        logits = predict(x[start : start + batch_size])
        correct += int(
            (
                np.asarray(logits).argmax(-1) == y[start : start + batch_size]
            ).sum()
        )
    return correct / len(x)
