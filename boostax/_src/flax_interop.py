# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""To and from ``flax.training.train_state.TrainState``.

A Flax training script keeps its state in a ``TrainState`` (often a
subclass with a ``batch_stats`` field, as the Flax ImageNet example has),
and its evaluation step and checkpoint code read that. These two functions
convert a boostax `TrainState` to it and back, so that code keeps working.

What a Flax ``TrainState`` cannot hold — the step's PRNG key, the loss-scale
state and the freeze position — stays in the boostax state: pass that as
`like` when converting back, or they start afresh (the freeze position at
the Flax step, which is where an uninterrupted run would be).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax.training import train_state as flax_train_state

from boostax._src import freezing as freezing_lib
from boostax._src import objectives as objectives_lib
from boostax._src import train_step as train_step_lib
from boostax._src import validation

# The fields of flax's own TrainState; any other field of a subclass that
# holds a dict is a model-state collection (``batch_stats``).
_OWN_FIELDS = ("step", "apply_fn", "params", "tx", "opt_state")


def _check_step(train_step) -> None:
    if not isinstance(train_step, train_step_lib.TrainStep):
        raise TypeError(
            "`train_step` must be the boostax.TrainStep the state belongs to "
            f"(from auto_boost or make_train_step), got "
            f"{type(train_step).__name__}."
        )
    if isinstance(train_step.objective, objectives_lib.NNXObjective):
        raise TypeError(
            "A flax.training TrainState holds Linen variables; an NNX model "
            "keeps its state in the module: use `train_step.variables(state)`"
            " (the trained nnx.Module) instead."
        )


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def to_flax_train_state(
    train_step: train_step_lib.TrainStep,
    state: train_step_lib.TrainState,
    cls: type[flax_train_state.TrainState] = flax_train_state.TrainState,
    **fields: Any,
) -> flax_train_state.TrainState:
    """The ``flax.training`` ``TrainState`` of a boostax `TrainState`.

    ``step``, ``params`` and ``opt_state`` are the boostax state's;
    ``apply_fn`` is the trained model's ``apply`` (after LessBN: the reduced
    model, whose variables these are) and ``tx`` the step's optimizer (with
    the algorithms wrapped around it, whose state ``opt_state`` is). Every
    model-state collection (``batch_stats``) goes to the field of that name,
    which `cls` must have.

    Args:
      train_step: the `TrainStep` that trains `state`.
      state: the boostax state.
      cls: the Flax ``TrainState`` class or a subclass (e.g. one with a
        ``batch_stats`` field, as in the Flax ImageNet example).
      **fields: values of `cls`'s other fields (e.g. ``dynamic_scale=None``).

    Returns:
      An instance of `cls`. The PRNG key, loss-scale state and freeze
      position are not in it (see `from_flax_train_state`'s `like`).

    Raises:
      TypeError: if `cls` is not a Flax ``TrainState`` class, or lacks a
        field for one of the model-state collections (nothing is dropped
        silently).

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> loss_fn = lambda w, batch: jnp.sum((w - batch) ** 2)
      >>> ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=loss_fn)
      >>> state = ts.init(jnp.zeros(2))
      >>> flax_state = boostax.to_flax_train_state(ts, state)
      >>> type(flax_state).__name__, int(flax_state.step)
      ('TrainState', 0)
    """
    _check_step(train_step)
    if not (
        isinstance(cls, type) and issubclass(cls, flax_train_state.TrainState)
    ):
        raise TypeError(
            "`cls` must be flax.training.train_state.TrainState or a "
            f"subclass, got {cls!r}."
        )
    if not isinstance(state, train_step_lib.TrainState):
        raise TypeError(
            f"`state` must be a boostax.TrainState, got {type(state).__name__}."
        )
    names = _field_names(cls)
    model_state = dict(state.model_state or {})
    missing = [c for c in model_state if c not in names]
    if missing:
        raise TypeError(
            f"`cls` ({cls.__name__}) has no field for the model-state "
            f"collection(s) {missing}: subclass it with one each, as the "
            "Flax ImageNet example does (`class TrainState(train_state."
            "TrainState): batch_stats: Any`), and pass `cls=`."
        )
    unknown = [f for f in fields if f not in names or f in _OWN_FIELDS]
    if unknown:
        raise TypeError(
            f"`{unknown[0]}` is not one of `cls`'s own extra fields "
            f"{sorted(names - set(_OWN_FIELDS) - set(model_state))}."
        )
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in _OWN_FIELDS
        and f.name not in model_state
        and f.name not in fields
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if required:
        raise TypeError(
            f"`cls` ({cls.__name__}) has field(s) {required} without a "
            "default, which a boostax state does not hold: pass them as "
            f"keyword arguments, e.g. `{required[0]}=None`."
        )
    model = train_step.model
    return cls(
        step=state.step,
        apply_fn=getattr(model, "apply", None),
        params=state.params,
        tx=train_step.plan(state.params).optimizer,
        opt_state=state.opt_state,
        **model_state,
        **fields,
    )


def from_flax_train_state(
    train_step: train_step_lib.TrainStep,
    flax_state: flax_train_state.TrainState,
    *,
    like: train_step_lib.TrainState | None = None,
    init_optimizer: bool = False,
    rng: jax.Array | None = None,
) -> train_step_lib.TrainState:
    """The boostax `TrainState` of a ``flax.training`` ``TrainState``.

    The Flax state's params and collections (the fields holding dicts, e.g.
    ``batch_stats``) are the model's variables: with LessBN they may be the
    original model's, and are converted as `TrainStep.init` converts them.

    Args:
      train_step: the `TrainStep` that will train the state.
      flax_state: the Flax ``TrainState`` (or subclass).
      like: a boostax state of `train_step` to take the PRNG key, loss-scale
        state and freeze position from (e.g. the one `to_flax_train_state`
        converted); ``None``: a fresh loss scale, the freeze position at the
        Flax step, and `rng`.
      init_optimizer: build a fresh optimizer state for `train_step`
        instead of taking ``flax_state.opt_state`` (a checkpoint of another
        optimizer, or of training without boost).
      rng: without `like`, the base PRNG key (default ``PRNGKey(0)``).

    Returns:
      A boostax `TrainState`, checked against `train_step`.

    Raises:
      ValueError: if the optimizer state does not fit `train_step` (say
        ``init_optimizer=True`` to start it afresh).
    """
    _check_step(train_step)
    validation.check_bool("init_optimizer", init_optimizer)
    if not isinstance(flax_state, flax_train_state.TrainState):
        raise TypeError(
            "`flax_state` must be a flax.training.train_state.TrainState, "
            f"got {type(flax_state).__name__}."
        )
    if like is not None and rng is not None:
        raise ValueError("Pass `like=` or `rng=`, not both: `like` has a key.")
    if like is not None and not isinstance(like, train_step_lib.TrainState):
        raise TypeError(
            "`like` must be None or a boostax.TrainState of `train_step` "
            f"(e.g. the one converted by to_flax_train_state), "
            f"{validation.got(like)}."
        )
    collections = {
        f.name: getattr(flax_state, f.name)
        for f in dataclasses.fields(flax_state)
        if f.name not in _OWN_FIELDS
        and isinstance(getattr(flax_state, f.name), Mapping)
    }
    if isinstance(train_step.objective, objectives_lib.FunctionObjective):
        variables = flax_state.params
    else:
        variables = {"params": flax_state.params, **collections}
    fresh = train_step.init(variables, rng=rng)
    step = jnp.asarray(flax_state.step, jnp.int32)
    algorithms = fresh.algorithms
    if like is not None:
        algorithms, rng_key = like.algorithms, like.rng
    else:
        rng_key = fresh.rng
        if algorithms.freeze is not None:
            algorithms = algorithms._replace(
                freeze=freezing_lib.FreezeState(step)
            )
    state = fresh.replace(
        step=step,
        opt_state=fresh.opt_state if init_optimizer else flax_state.opt_state,
        rng=rng_key,
        algorithms=algorithms,
    )
    try:
        train_step.check_state(state)
    except ValueError as e:
        raise ValueError(
            f"{e} (from_flax_train_state: if `flax_state.opt_state` is the "
            "state of another optimizer or level, pass "
            "`init_optimizer=True` to start this step's afresh.)"
        ) from None
    return state
