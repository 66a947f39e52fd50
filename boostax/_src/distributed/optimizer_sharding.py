# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The optimizer state sharded over the data axes (ZeRO stage 1).

Under ``jax.shard_map``, each of the D devices of the data axes:

1. computes its gradients of the full parameters, as plain data
   parallelism does;
2. reduce-scatters them (``lax.psum_scatter``, then divided by D): it
   receives the mean gradient of its slice of each leaf;
3. runs the optimizer on its slices of the gradients, parameters and
   optimizer state (the state is stored sharded: 1/D of it per device);
4. all-gathers the new parameter slices (``lax.all_gather``); under a
   half-precision policy, the params are stored sliced instead and the
   next step all-gathers them, cast to the dtype its forward reads
   (`DataParallel.gather_params`).

A reduce-scatter plus an all-gather move what one all-reduce moves,
2n(D-1)/D bytes per device, and the optimizer state takes 1/D of the
memory (MaxText's "shard optimizer over data", DeepSpeed's ZeRO-1).

Which axis of a leaf is split (its *split plan*, `split_plan`, one
``int | None`` per parameter leaf, computed once when the step is built
and used by every function here): the first axis whose size is a
multiple of D and that the optimizer does not mix over, found from the
traced optimizer update. For an elementwise optimizer (SGD, momentum,
Adam, AdamW, their schedules) that is the first axis D divides. Gradient
centralization averages a kernel over its fan-in axes: a Dense kernel
``(in, out)`` or a convolution's ``(3, 3, in, out)`` is then split along
``out``, where each device's slice holds whole fan-ins. A leaf with no
such axis (a scalar, a ``(3, 3, 5, 7)`` kernel on 8 devices, a
centralized ``(16, 3)`` kernel) stays whole on every device: its
gradient is averaged with ``lax.pmean`` and every device updates all of
it, as without sharding. Padding was not chosen: it would change the
shapes of the optimizer state that a checkpoint holds.

The optimizer is correct on slices only if each element's update reads
no other element along the split axis. `split_plan` follows, for every
value of the traced update, which axis of it is the split one
(`split_walk`: through elementwise ops, broadcasts, reshapes,
transposes, reductions and contractions over other axes, nested
jaxprs): a partial reduction, contraction, scan or sort over it moves
that leaf to its next axis; a reduction of a whole leaf (global-norm
clipping, LARS/LAMB trust ratios, a line search's inner products) or a
primitive it cannot follow is
refused, as is an update that computes otherwise on a slice than on the
whole leaf (a rule that reads the leaf's shape).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import PartitionSpec as P

from boostax._src import jaxpr_walk, user_warnings
from boostax._src.distributed import split_walk


def _is_masked(x) -> bool:
    return isinstance(x, optax.MaskedNode)


def _is_none(x) -> bool:
    return x is None


def split_axis(
    shape: tuple[int, ...], num_shards: int, after: int = -1
) -> int | None:
    """The first axis of `shape` after `after` whose size is a positive
    multiple of `num_shards`; ``None``: none (the leaf is kept whole)."""
    for axis, size in enumerate(shape):
        if axis > after and size and size % num_shards == 0:
            return axis
    return None


def default_plan(tree, num_shards: int):
    """The split plan of an elementwise optimizer: each leaf's first axis
    that `num_shards` divides (`split_axis`), ``None`` where none does."""
    return jax.tree.map(lambda x: split_axis(jnp.shape(x), num_shards), tree)


def _plan_map(fn, plan, *trees):
    """``fn(axis, *leaves)`` over the leaves of `plan` (``None`` included)
    and the matching subtrees of `trees` (an ``optax.MaskedNode`` too)."""
    return jax.tree.map(fn, plan, *trees, is_leaf=_is_none)


def _plan_for(tree, num_shards: int, plan):
    return default_plan(tree, num_shards) if plan is None else plan


def _slice_shape(shape, axis: int | None, num_shards: int) -> tuple:
    shape = tuple(shape)
    if axis is None:
        return shape
    return (*shape[:axis], shape[axis] // num_shards, *shape[axis + 1 :])


def abstract_slices(tree, num_shards: int, plan=None):
    """``jax.ShapeDtypeStruct`` s of one device's slices of `tree`, split
    as `plan` says (``None``: `default_plan`)."""
    return _plan_map(
        lambda axis, x: jax.ShapeDtypeStruct(
            _slice_shape(jnp.shape(x), axis, num_shards), jnp.result_type(x)
        ),
        _plan_for(tree, num_shards, plan),
        tree,
    )


def opt_state_specs(global_state, local_state, axes: tuple[str, ...]):
    """The ``PartitionSpec`` of each leaf of a sharded optimizer state.

    Args:
      global_state: the state's leaves initialized on the whole parameters
        (anything with ``.shape``).
      local_state: the same state initialized on one device's slices.
      axes: the data axes the slices are split over.

    Returns:
      A tree of ``PartitionSpec`` s like `global_state`: a leaf of the
      slices' shape is split along the axis where the two shapes differ; a
      leaf of one shape (a step count, a whole leaf's slot) is replicated.

    Raises:
      ValueError: a leaf whose shapes differ otherwise (the state does not
        follow the parameters' slices).
    """
    num_shards = None

    def spec(whole, part):
        nonlocal num_shards
        axis = _state_axis(whole, part)
        if axis is None:
            return P()
        whole, part = tuple(whole.shape), tuple(part.shape)
        if num_shards is None:
            num_shards = whole[axis] // max(part[axis], 1)
        if part[axis] * num_shards == whole[axis]:
            return P(*([None] * axis), axes)
        raise _state_error(whole, part)

    return jax.tree.map(spec, global_state, local_state)


def _state_error(whole, part) -> ValueError:
    return ValueError(
        "shard_optimizer_state: the optimizer state has a leaf of shape "
        f"{tuple(whole)} whose per-device slice would have shape "
        f"{tuple(part)}: it does not follow the parameters' slices. Use "
        "shard_optimizer_state=False with this optimizer."
    )


def _state_axis(whole, part) -> int | None:
    """The axis along which a state leaf's slice `part` differs from the
    leaf `whole` (``None``: the same shape); raises if not one axis."""
    whole, part = tuple(whole.shape), tuple(part.shape)
    if whole == part:
        return None
    differ = [
        k for k, (a, b) in enumerate(zip(whole, part, strict=False)) if a != b
    ]
    if len(whole) != len(part) or len(differ) != 1:
        raise _state_error(whole, part)
    return differ[0]


# -- inside the step (under shard_map) -------------------------------------


def reduce_scatter_mean(
    grads, axes: tuple[str, ...], num_shards: int, plan=None
):
    """Each device's slice of the mean of the devices' `grads`, split as
    `plan` says (``None``: `default_plan`).

    Leaves that are kept whole are averaged (``lax.pmean``).
    """

    def reduce(axis, g):
        if _is_masked(g):
            return g
        if axis is None:
            return lax.pmean(g, axes)
        summed = lax.psum_scatter(g, axes, scatter_dimension=axis, tiled=True)
        return summed / jnp.asarray(num_shards, summed.dtype)

    return _plan_map(reduce, _plan_for(grads, num_shards, plan), grads)


def local_slices(tree, axes: tuple[str, ...], num_shards: int, plan=None):
    """This device's slices of the replicated leaves of `tree`, split as
    `plan` says (``None``: `default_plan`; masked leaves,
    ``optax.MaskedNode``, pass through)."""
    index = lax.axis_index(axes)

    def take(axis, x):
        if axis is None or _is_masked(x):
            return x
        size = x.shape[axis] // num_shards
        return lax.dynamic_slice_in_dim(x, index * size, size, axis=axis)

    return _plan_map(take, _plan_for(tree, num_shards, plan), tree)


def gather(
    slices,
    like,
    axes: tuple[str, ...],
    num_shards: int,
    mask=None,
    plan=None,
):
    """The whole leaves of `slices`, all-gathered over the devices.

    Args:
      slices: each device's slices (``optax.MaskedNode`` leaves pass
        through).
      like: the whole leaves.
      mask: ``None``, or a bool per leaf (Python bools): where False, the
        leaf of `like` is returned and nothing is sent (a frozen leaf,
        whose slices are those of `like`).
      plan: the axis each leaf was split along (``None``: `default_plan`
        of `like`).
    """
    if mask is None:
        mask = jax.tree.map(lambda _: True, like)

    def put_together(axis, part, whole, keep):
        if _is_masked(part):
            return part
        if not keep:
            return whole
        if axis is None:
            return part
        return lax.all_gather(part, axes, axis=axis, tiled=True)

    return _plan_map(
        put_together, _plan_for(like, num_shards, plan), slices, like, mask
    )


# -- the split plan: which axis the optimizer leaves apart ------------------


def _primitives(jaxpr) -> list[str]:
    """The names of `jaxpr`'s primitives, nested jaxprs' included."""
    return [eqn.primitive.name for eqn in jaxpr_walk.equations(jaxpr)]


class _Update:
    """One optimizer's update, traced on whole leaves and on slices.

    Args:
      optimizer: the optimizer the step runs.
      params: the whole parameters (arrays or ``jax.ShapeDtypeStruct``).
      num_shards: the number of devices the slices are split over.
      scalars: an optimizer taking extra arguments gets the train step's:
        ``value``, ``grad`` and ``value_fn`` (line searches) and these
        scalar ones (``{name: jax.ShapeDtypeStruct}``).
    """

    def __init__(self, optimizer, params, num_shards: int, scalars):
        self.optimizer = optimizer
        # Strongly typed shapes: a weakly typed leaf (``jnp.array(1.0)``)
        # gives weak state leaves, which the update on whole leaves converts
        # and the one on (strong) slices does not.
        self.params = params = abstract_slices(params, 1)
        self.num_shards = num_shards
        self.extra = isinstance(
            optimizer, optax.GradientTransformationExtraArgs
        )
        scalars = dict(scalars or {}) if self.extra else {}
        if self.extra:
            scalars["value"] = jax.ShapeDtypeStruct((), jnp.float32)
        self.scalars = scalars
        self.whole_state = jax.eval_shape(optimizer.init, params)
        self.whole = self.trace(params, self.whole_state)

    def trace(self, params, state):
        def update(grads, opt_state, p, values):
            if not self.extra:
                return self.optimizer.update(grads, opt_state, p)
            return self.optimizer.update(
                grads,
                opt_state,
                p,
                grad=grads,
                value_fn=lambda _: jnp.zeros((), jnp.float32),
                **values,
            )

        return jax.make_jaxpr(update)(params, state, params, self.scalars)

    def labels(self, axes: list, local_state) -> list:
        """The `split_walk.Split` of each input of the traced update under
        the plan `axes` (one per parameter leaf), `local_state` its sliced
        state."""
        params = [
            None if a is None else split_walk.Split(a, frozenset({i}))
            for i, a in enumerate(axes)
        ]
        state = [
            None if a is None else split_walk.Split(a, frozenset({-1 - k}))
            for k, a in enumerate(
                map(
                    _state_axis,
                    jax.tree.leaves(self.whole_state),
                    jax.tree.leaves(local_state),
                )
            )
        ]
        return (
            params
            + state
            + params
            + [None] * len(jax.tree.leaves(self.scalars))
        )

    def local_state(self, plan):
        return jax.eval_shape(
            self.optimizer.init,
            abstract_slices(self.params, self.num_shards, plan),
        )

    def owners(self, axes: list, plan_of, states: set[int]) -> set[int]:
        """The parameter leaves whose split splits the state leaves
        `states`: those whose being kept whole keeps them whole."""
        found = set()
        base = jax.tree.leaves(self.local_state(plan_of(axes)))
        for i, axis in enumerate(axes):
            if axis is None:
                continue
            trial = jax.tree.leaves(
                self.local_state(plan_of(axes[:i] + [None] + axes[i + 1 :]))
            )
            if any(trial[k].shape != base[k].shape for k in states):
                found.add(i)
        return found


def _leaf_name(params, i: int) -> str:
    path, _ = jax.tree_util.tree_flatten_with_path(params)[0][i]
    return jax.tree_util.keystr(path) or "the parameters"


def _refused(error: split_walk.Refused, params) -> ValueError:
    """`_refuse` of a `split_walk.Refused`, naming the parameter leaves
    involved."""
    reason, leaves = error.args
    names = sorted(_leaf_name(params, i) for i in leaves if i >= 0)
    if names:
        reason = f"{reason} (computed from {', '.join(names)})"
    return _refuse(reason)


def _refuse(reason: str) -> ValueError:
    return ValueError(
        "shard_optimizer_state runs the optimizer on each device's slice of "
        "every leaf, which is correct only for elementwise optimizers along "
        "the split axis: each element's update may read no other element "
        "along it (SGD, momentum, Adam, AdamW; gradient centralization, a "
        f"kernel then split along its output axis); this one {reason} (e.g."
        " global-norm clipping, LARS/LAMB trust ratios, Adafactor, a line "
        "search). Use shard_optimizer_state=False with it."
    )


def split_plan(
    optimizers,
    params,
    num_shards: int,
    scalars: dict[str, Any] | None = None,
):
    """The split plan of `params` for `optimizers`: per leaf, the first axis
    `num_shards` divides that none of them mixes over, else ``None``.

    Traces each optimizer's update on the whole leaves and follows the
    split axis of every value (`split_walk.Walk`): a leaf read along its
    split axis by a partial reduction, contraction, scan or sort moves to
    its next divisible axis (or whole), and the walk repeats; then the
    update is traced on the slices, where it must run the same computation
    (`check_elementwise`). Elementwise optimizers get `default_plan`.

    Args:
      optimizers: the optimizer, or a sequence of them (FreezeOpt's per
        group), all run on the same slices.
      params: the whole parameters (arrays or ``jax.ShapeDtypeStruct``).
      num_shards: the number of devices the slices are split over.
      scalars: the train step's scalar extra arguments, as
        `check_elementwise` takes them.

    Returns:
      A pytree like `params` of ``int`` (the split axis) or ``None``.

    Raises:
      ValueError: an optimizer that no plan makes correct on slices.
    """
    if isinstance(optimizers, optax.GradientTransformation):
        optimizers = (optimizers,)
    flat, treedef = jax.tree.flatten(params)
    axes = [split_axis(jnp.shape(x), num_shards) for x in flat]

    def plan_of(axes):
        return treedef.unflatten(axes)

    updates = [_Update(tx, params, num_shards, scalars) for tx in optimizers]
    for _ in range(sum(len(jnp.shape(x)) for x in flat) + 1):
        moves: set[int] = set()
        for update in updates:
            walk = split_walk.Walk()
            local = update.local_state(plan_of(axes))
            try:
                walk.run(update.whole.jaxpr, update.labels(axes, local))
            except split_walk.Refused as e:
                raise _refused(e, params) from None
            states = {-1 - i for i in walk.moves if i < 0}
            moves |= {i for i in walk.moves if i >= 0}
            if states:
                moves |= update.owners(axes, plan_of, states)
        if not moves:
            break
        for i in moves:  # (only split leaves are read along a split axis)
            after = axes[i]
            assert after is not None
            axes[i] = split_axis(jnp.shape(flat[i]), num_shards, after)
    plan = plan_of(axes)
    for update in updates:
        _check_slices(update, plan)
    if flat and all(axis is None for axis in axes):
        _warn_nothing_split(flat, num_shards)
    return plan


def _warn_nothing_split(leaves, num_shards: int) -> None:
    """Says that the plan splits no leaf: each device would hold the whole
    optimizer state, the memory the setting was asked to save, unsaid."""
    if any(split_axis(jnp.shape(x), num_shards) is not None for x in leaves):
        why = "the optimizer reads each leaf along every axis that it divides"
    else:
        why = f"no parameter leaf has an axis whose size {num_shards} divides"
    user_warnings.warn(
        "shard_optimizer_state=True shards nothing over the "
        f"{num_shards} devices of the data axes: {why}, so every device "
        "holds the whole optimizer state, as with shard_optimizer_state="
        "False. Use a device count that divides the parameters' axes "
        "(their widths), or shard_optimizer_state=False."
    )


def _check_slices(update: _Update, plan) -> None:
    """Raises unless `update` runs on the slices of `plan` what it runs on
    the whole leaves, reading nothing along a split axis."""
    local = update.local_state(plan)
    sliced = update.trace(
        abstract_slices(update.params, update.num_shards, plan), local
    )
    walk = split_walk.Walk()
    axes = jax.tree.leaves(plan, is_leaf=_is_none)
    try:
        walk.run(sliced.jaxpr, update.labels(axes, local))
    except split_walk.Refused as e:
        raise _refused(e, update.params) from None
    if walk.moves:
        names = sorted(
            _leaf_name(update.params, i) for i in walk.moves if i >= 0
        )
        raise _refuse(
            "reads a split value along its split axis "
            f"({', '.join(names) or 'an optimizer state leaf'})"
        )
    if _primitives(sliced.jaxpr) != _primitives(update.whole.jaxpr):
        # A rule that reads a leaf's shape (centralization's fan-in test)
        # chose differently for a slice.
        leaves = ", ".join(_computed_otherwise(update, plan)) or "a leaf"
        raise _refuse(
            f"computes otherwise on a slice of {leaves} than on the whole "
            "leaf (a rule that reads the leaf's shape, e.g. "
            "centralization's fan-in test on a kernel split along a fan-in "
            "axis)"
        )


def _computed_otherwise(update: _Update, plan) -> list[str]:
    """The leaves whose slicing alone changes the traced update, for the
    error (one more trace per split leaf)."""
    axes, treedef = jax.tree.flatten(plan, is_leaf=_is_none)
    names = []
    for i in (i for i, axis in enumerate(axes) if axis is not None):
        alone = treedef.unflatten(
            [None] * i + axes[i : i + 1] + [None] * (len(axes) - i - 1)
        )
        slices = abstract_slices(update.params, update.num_shards, alone)
        sliced = update.trace(slices, update.local_state(alone))
        if _primitives(sliced.jaxpr) != _primitives(update.whole.jaxpr):
            names.append(_leaf_name(update.params, i))
    return names


def check_elementwise(
    optimizer: optax.GradientTransformation,
    params,
    num_shards: int,
    scalars: dict[str, Any] | None = None,
    plan=None,
) -> None:
    """Raises if `optimizer` reads more of a leaf than the slices `plan`
    gives each device (``None``: `default_plan`).

    Traces ``optimizer.update`` on one device's slices of `params` and
    follows the split axis of each value computed from a sliced gradient,
    parameter or state leaf (`split_plan`'s walk): a reduction,
    contraction, scan or sort along it, or a primitive the walk cannot
    follow, is refused, and so is an update that runs another computation
    on the slices than on the whole leaves. Leaves kept whole are not
    sliced, and scalars (step counts, schedules) mix freely.

    Args:
      optimizer: the optimizer the step runs.
      params: the whole parameters (arrays or ``jax.ShapeDtypeStruct``).
      num_shards: the number of devices the slices are split over.
      scalars: an optimizer taking extra arguments gets the train step's:
        ``value``, ``grad`` and ``value_fn`` (line searches) and these
        scalar ones (``{name: jax.ShapeDtypeStruct}``).
      plan: the split plan (`split_plan`).

    Raises:
      ValueError: saying what the optimizer does to a split value.
    """
    update = _Update(optimizer, params, num_shards, scalars)
    _check_slices(update, _plan_for(params, num_shards, plan))
