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

Weights brought in are never silently re-initialised or transformed: their
function is kept exactly, or the conversion is refused with the reason
(LessBN folds a trained removed BatchNorm into the layer before it and
refuses to put its FN head in place of a trained dense head; see
``less_bn/weights.py``). A state of another model is refused before the
step sees it, so the step stays the one model's it was built for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax.training import train_state as flax_train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from boostax._src import model_graph as model_graph_lib
from boostax._src import tree_diff, validation
from boostax._src.freezing import plan as freezing_lib
from boostax._src.less_bn import linen as less_bn_linen
from boostax._src.methods import weight_averaging
from boostax._src.step import objectives as objectives_lib
from boostax._src.step import train_step as train_step_lib
from boostax._src.tree_utils import path_names

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


def _replicated(train_step, tree):
    """`tree` with every leaf whole on every device of the mesh.

    With AdaSum (O2) each device keeps its own optimizer state: the leaves
    are stacked along a leading device axis and split over the mesh; with
    a sharded optimizer state (ZeRO-1) its leaves, and with
    ``shard_params`` the params, are split over the data axes. Code
    written for a Flax ``TrainState`` expects replicated leaves (a pmapped
    evaluation with ``in_axes=None``, ``jax_utils.replicate``, checkpoint
    code), so they are replicated; nothing is dropped, and
    `from_flax_train_state` places them as the step does again.
    """
    data_parallel = train_step.data_parallel
    if data_parallel is None or not (
        data_parallel.per_device_optimizer_state
        or data_parallel.shard_optimizer_state
    ):
        return tree
    replicated = NamedSharding(data_parallel.mesh, P())

    def replicate(x):
        if x.sharding.is_fully_replicated:
            return x
        return jax.device_put(x, replicated)

    return jax.tree.map(replicate, tree)


def _placed_like(train_step, opt_state, like):
    """`opt_state` on the mesh as `like` (the step's own) is placed there.

    Undoes `_replicated`. A state of another structure or shape
    is left as it is, for the step's state check to name its slot.
    """
    if train_step.data_parallel is None or jax.tree.structure(
        opt_state
    ) != jax.tree.structure(like):
        return opt_state

    def place(x, target):
        if np.shape(x) != np.shape(target):
            return x
        return jax.device_put(x, target.sharding)

    return jax.tree.map(place, opt_state, like)


def to_flax_train_state(
    train_step: train_step_lib.TrainStep,
    state: train_step_lib.TrainState,
    cls: type[flax_train_state.TrainState] = flax_train_state.TrainState,
    *,
    averaged: bool = False,
    **fields: Any,
) -> flax_train_state.TrainState:
    """The ``flax.training`` ``TrainState`` of a boostax `TrainState`.

    ``step``, ``params`` and ``opt_state`` are the boostax state's;
    ``apply_fn`` is the trained model's ``apply`` (after LessBN: the reduced
    model, whose variables these are) and ``tx`` the step's optimizer (with
    the algorithms wrapped around it, whose state ``opt_state`` is). Every
    model-state collection (``batch_stats``) goes to the field of that name,
    which `cls` must have. Every leaf is replicated on the step's mesh, as
    Flax code expects of a ``TrainState`` (a pmapped evaluation with
    ``in_axes=None`` or after ``jax_utils.replicate``, checkpoint code):
    with AdaSum (O2), whose optimizer state is per device, each
    ``opt_state`` leaf is the devices' states stacked on a leading axis,
    whole on every device; a sharded optimizer state (ZeRO-1) and params
    stored sharded are gathered whole (the memory sharding saved is spent
    on the Flax state).

    Args:
      train_step: the `TrainStep` that trains `state`.
      state: the boostax state.
      cls: the Flax ``TrainState`` class or a subclass (e.g. one with a
        ``batch_stats`` field, as in the Flax ImageNet example).
      averaged: with weight averaging (`boostax.average_params`, the
        config's ``weight_averaging``), ``params`` is the params' moving
        average, to evaluate (BatchNorm's statistics are training's, not
        averaged). Default False: the trained params, from which training
        resumes (the average is in ``opt_state`` either way).
      **fields: values of `cls`'s other fields (e.g. ``dynamic_scale=None``).

    Returns:
      An instance of `cls`. The PRNG key, loss-scale state and freeze
      position are not in it (see `from_flax_train_state`'s `like`). With
      the step's `donate_state`, its arrays are copies: the step frees the
      buffers of the state it is given, and the Flax state stays valid.

    Raises:
      TypeError: if `cls` is not a Flax ``TrainState`` class, or lacks a
        field for one of the model-state collections (nothing is dropped
        silently).
      ValueError: `averaged` True for a state without a moving average.

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
    validation.check_bool("averaged", averaged)
    params = state.params
    if averaged:
        params = weight_averaging.evaluated_params(params, state.opt_state)
        if params is None:
            raise ValueError(
                "`averaged=True` takes the params' moving average, and this "
                "state's optimizer holds none: enable the config's "
                "`weight_averaging` section (or chain "
                "`boostax.average_params` last onto the optimizer), or pass "
                "`averaged=False`."
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
    arrays = dict(
        step=state.step,
        params=_replicated(train_step, params),
        opt_state=_replicated(train_step, state.opt_state),
        **model_state,
    )
    if train_step.donate_state:
        arrays = train_step.own_copy(arrays)
    return cls(
        # None for a step of a loss function (no model), whatever Flax's
        # annotation says: `from_flax_train_state` reads it back.
        apply_fn=getattr(model, "apply", None),  # type: ignore[arg-type]
        tx=train_step.plan(state.params).optimizer,
        **arrays,
        **fields,
    )


def from_flax_train_state(
    train_step: train_step_lib.TrainStep,
    flax_state: flax_train_state.TrainState,
    *,
    like: train_step_lib.TrainState | None = None,
    init_optimizer: bool = False,
    rng: jax.Array | None = None,
    trained: bool | None = None,
) -> train_step_lib.TrainState:
    """The boostax `TrainState` of a ``flax.training`` ``TrainState``.

    The Flax state's params and collections (the fields holding dicts, e.g.
    ``batch_stats``) are the model's variables: with LessBN they may be the
    original model's, and are converted as `TrainStep.init` converts them —
    keeping their function: a trained BatchNorm that LessBN removes is
    folded into the layer before it, and a trained dense head is never
    replaced by the FN head (refused: build the step with ``less_bn``'s
    ``fn_flag`` False). Nothing of the Flax state is re-initialised.

    The variables must be those of the step's model: another model's (other
    parameter paths or shapes, or an ``apply_fn`` of another module class)
    are refused before the step sees them, so a step that has not been
    initialised yet is not bound to the wrong model. With `donate_state`,
    the state holds copies of the Flax state's arrays, which stay valid.

    On a mesh the state is placed as `TrainStep.init` places it (with
    AdaSum, the stacked optimizer state of `to_flax_train_state` is split
    over the devices again).

    Args:
      train_step: the `TrainStep` that will train the state.
      flax_state: the Flax ``TrainState`` (or subclass).
      like: a boostax state of `train_step` to take the PRNG key, loss-scale
        state and freeze position from (e.g. the one `to_flax_train_state`
        converted; its freeze position keeps the record of the plan its
        steps ran, which the step checks); ``None``: a fresh loss scale,
        the freeze position at the Flax step (its steps taken as run under
        `train_step`'s freezing plan), and `rng`.
      init_optimizer: build a fresh optimizer state for `train_step`
        instead of taking ``flax_state.opt_state`` (a checkpoint of another
        optimizer, or of training without boost). Its counts start at 0,
        so a learning-rate schedule starts again, warm-up included; where
        it should go on, set the schedule's count
        (``optax.tree_utils.tree_set(state.opt_state, count=...)`` sets
        every ``count``, Adam's bias correction's too: fresh moments want
        theirs at 0).
      rng: without `like`, the base PRNG key (default ``PRNGKey(0)``).
      trained: whether the Flax state's weights were trained (see
        `TrainStep.init`); ``None``: trained if the Flax state's ``step``
        is past 0 (it counts ``apply_gradients``), else read from the
        weights.

    Returns:
      A boostax `TrainState`, checked against `train_step`.

    Raises:
      ValueError: if the optimizer state does not fit `train_step` (say
        ``init_optimizer=True`` to start it afresh); if the variables are
        another model's (the message names the paths and shapes that
        differ); if LessBN cannot keep the trained weights' function.
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
    variables: Any  # the loss function's params: any pytree
    if isinstance(train_step.objective, objectives_lib.FunctionObjective):
        variables = flax_state.params
    else:
        variables = {"params": flax_state.params, **collections}
    check_model(train_step, variables, getattr(flax_state, "apply_fn", None))
    if trained is None and np.any(np.asarray(flax_state.step) > 0):
        trained = True  # the Flax state counted its updates
    fresh = train_step.init(variables, rng=rng, trained=trained)
    step = jnp.asarray(flax_state.step, jnp.int32)
    algorithms = fresh.algorithms
    if like is not None:
        algorithms, rng_key = like.algorithms, like.rng
    else:
        rng_key = fresh.rng
        if algorithms.freeze is not None:
            # The Flax state's steps, taken as run under this step's plan.
            freezing = train_step.plan(fresh.params).freezing
            assert freezing is not None  # the state has a freeze slot
            algorithms = algorithms._replace(
                freeze=freezing_lib.FreezeState(
                    step, jnp.asarray(freezing.settings_record)
                )
            )
    opt_state = fresh.opt_state
    if not init_optimizer:
        opt_state = _placed_like(
            train_step, flax_state.opt_state, fresh.opt_state
        )
    brought = dict(
        step=step,
        opt_state=opt_state,
        rng=rng_key,
        algorithms=algorithms,
    )
    if train_step.donate_state:
        # `init` copied the variables; these may be the caller's too.
        brought = train_step.own_copy(brought)
    state = fresh.replace(**brought)
    try:
        train_step.check_state(state)
    except ValueError as e:
        raise ValueError(
            f"{e} (from_flax_train_state: if `flax_state.opt_state` is the "
            "state of another optimizer or level, pass "
            "`init_optimizer=True` to start this step's afresh.)"
        ) from None
    return state


def _original_model(train_step):
    model = train_step.model
    return (
        model.network if isinstance(model, less_bn_linen.LinenLessBN) else model
    )


def _reference_variables(train_step):
    """The abstract variables of the step's model, or ``None`` where the
    step has no sample inputs to build them from."""
    sample = train_step.sample_inputs
    objective = train_step.objective
    if sample is None or not isinstance(
        objective, objectives_lib.LinenObjective
    ):
        return None
    inputs = model_graph_lib.as_inputs(sample)
    return jax.eval_shape(
        lambda *x: objective.module.init(
            model_graph_lib.init_rngs(), *x, **objective.eval_kwargs
        ),
        *inputs,
    )


def _shapes(tree) -> dict[str, tuple[int, ...]]:
    return {
        "/".join(path_names(path)): jnp.shape(leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def check_model(train_step, variables, apply_fn=None) -> None:
    """Refuses variables of another model than `train_step`'s.

    Checked before `TrainStep.init` sees them, so that a step is never bound
    to another model (its first `init` records the model's structure).
    Compared: the module class of `apply_fn` (a bound Linen ``apply``), the
    structure the step's `init` recorded, and, where the step knows its
    sample inputs (`auto_boost`'s `sample_inputs`), every variable's path
    and shape.

    Raises:
      ValueError: naming the module classes, or the paths and shapes that
        differ.
    """
    module = getattr(apply_fn, "__self__", None)
    models = [train_step.model, _original_model(train_step)]
    if isinstance(module, nn.Module) and all(
        isinstance(m, nn.Module) and type(m) is not type(module) for m in models
    ):
        raise ValueError(
            "`flax_state` belongs to another model: its `apply_fn` is "
            f"{type(module).__name__}.apply, and this step trains "
            f"{type(models[1]).__name__}. Convert a state of the step's own "
            "model, or build the step for that model."
        )
    params, model_state = train_step.objective.split(variables)
    plan = train_step.builder.current_plan
    template = None if plan is None else plan.template
    if template is not None:
        for name, tree in (("params", params), ("model_state", model_state)):
            treedef = template[name]
            if jax.tree.structure(tree) != treedef:
                built = jax.tree.unflatten(treedef, [0] * treedef.num_leaves)
                raise ValueError(
                    f"`flax_state` belongs to another model: its {name} "
                    f"are {tree_diff.describe(tree)}, the step's `init` "
                    f"built {tree_diff.describe(built)}."
                )
    reference = _reference_variables(train_step)
    if reference is None:
        return
    got = _shapes(train_step.objective.merge(params, model_state))
    want = _shapes(reference)
    differences = [
        f"{path}: shape {got[path]}, the model's is {want[path]}"
        for path in want
        if path in got and got[path] != want[path]
    ]
    differences += [
        f"{path} (shape {shape}) is missing"
        for path, shape in want.items()
        if path not in got
    ]
    differences += [
        f"{path} (shape {shape}) is not the model's"
        for path, shape in got.items()
        if path not in want
    ]
    if differences:
        # The parameters first: they name the layers that differ.
        differences.sort(key=lambda d: not d.startswith("params/"))
        shown = "; ".join(differences[:6])
        more = len(differences) - 6
        raise ValueError(
            "`flax_state` holds the variables of another model than this "
            f"step's {type(models[1]).__name__}: {shown}"
            + (f"; and {more} more" if more > 0 else "")
            + ". Convert a state of the step's own model."
        )
