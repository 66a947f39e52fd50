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
4. all-gathers the new parameter slices (``lax.all_gather``).

A reduce-scatter plus an all-gather move what one all-reduce moves,
2n(D-1)/D bytes per device, and the optimizer state takes 1/D of the
memory (MaxText's "shard optimizer over data", DeepSpeed's ZeRO-1).

Which axis of a leaf is split: the first one whose size is a multiple of
D. A leaf with none (a scalar, a ``(3, 3, 5, 7)`` kernel on 8 devices)
stays whole on every device: its gradient is averaged with ``lax.pmean``
and every device updates all of it, as without sharding. Padding was not
chosen: it would change the shapes of the optimizer state that a
checkpoint holds.

A sliced optimizer is correct only if it is elementwise: each element's
update reads that element's gradient, parameter and state and nothing
else of the leaf (SGD, momentum, Adam, AdamW, their schedules). Global
gradient clipping, trust ratios (LARS, LAMB), gradient centralization,
factored second moments (Adafactor) and orthogonalization (Muon) read a
whole leaf or tree: `check_elementwise` traces the optimizer's update on
the slices and refuses one that reduces or contracts a sliced value.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import PartitionSpec as P

# Primitives that combine several elements of an operand: run on a slice,
# they give a slice's answer, not the leaf's (reductions, contractions,
# scans, sorts, linear algebra, collectives).
MIXING_PRIMITIVES = frozenset(
    {
        "reduce_sum",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
        "reduce_and",
        "reduce_or",
        "reduce_xor",
        "reduce",
        "argmax",
        "argmin",
        "dot_general",
        "conv_general_dilated",
        "cumsum",
        "cumprod",
        "cummax",
        "cummin",
        "cumlogsumexp",
        "sort",
        "top_k",
        "reduce_window",
        "reduce_window_sum",
        "reduce_window_max",
        "reduce_window_min",
        "eigh",
        "svd",
        "qr",
        "cholesky",
        "lu",
        "triangular_solve",
        "fft",
        "psum",
        "pmax",
        "pmin",
        "all_gather",
        "all_to_all",
        "ppermute",
        "reduce_scatter",
    }
)


def _is_masked(x) -> bool:
    return isinstance(x, optax.MaskedNode)


def split_axis(shape: tuple[int, ...], num_shards: int) -> int | None:
    """The axis of a leaf of `shape` split over `num_shards` devices: the
    first whose size is a positive multiple of it; ``None``: kept whole."""
    for axis, size in enumerate(shape):
        if size and size % num_shards == 0:
            return axis
    return None


def local_shape(shape: tuple[int, ...], num_shards: int) -> tuple[int, ...]:
    """The shape of one device's slice of a leaf of `shape`."""
    axis = split_axis(shape, num_shards)
    if axis is None:
        return tuple(shape)
    return (*shape[:axis], shape[axis] // num_shards, *shape[axis + 1 :])


def abstract_slices(tree, num_shards: int):
    """``jax.ShapeDtypeStruct`` s of one device's slices of `tree`."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            local_shape(jnp.shape(x), num_shards), jnp.result_type(x)
        ),
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
        whole, part = tuple(whole.shape), tuple(part.shape)
        if whole == part:
            return P()
        differ = [
            k
            for k, (a, b) in enumerate(zip(whole, part, strict=False))
            if a != b
        ]
        if len(whole) == len(part) and len(differ) == 1:
            axis = differ[0]
            if num_shards is None:
                num_shards = whole[axis] // max(part[axis], 1)
            if part[axis] * num_shards == whole[axis]:
                return P(*([None] * axis), axes)
        raise ValueError(
            "shard_optimizer_state: the optimizer state has a leaf of shape "
            f"{whole} whose per-device slice would have shape {part}: it "
            "does not follow the parameters' slices. Use "
            "shard_optimizer_state=False with this optimizer."
        )

    return jax.tree.map(spec, global_state, local_state)


# -- inside the step (under shard_map) -------------------------------------


def reduce_scatter_mean(grads, axes: tuple[str, ...], num_shards: int):
    """Each device's slice of the mean of the devices' `grads`.

    Leaves that are kept whole are averaged (``lax.pmean``).
    """

    def reduce(g):
        axis = split_axis(g.shape, num_shards)
        if axis is None:
            return lax.pmean(g, axes)
        summed = lax.psum_scatter(g, axes, scatter_dimension=axis, tiled=True)
        return summed / jnp.asarray(num_shards, summed.dtype)

    return jax.tree.map(reduce, grads)


def local_slices(tree, axes: tuple[str, ...], num_shards: int):
    """This device's slices of the replicated leaves of `tree` (masked
    leaves, ``optax.MaskedNode``, pass through)."""
    index = lax.axis_index(axes)

    def take(x):
        axis = split_axis(x.shape, num_shards)
        if axis is None:
            return x
        size = x.shape[axis] // num_shards
        return lax.dynamic_slice_in_dim(x, index * size, size, axis=axis)

    return jax.tree.map(take, tree)


def gather(slices, like, axes: tuple[str, ...], num_shards: int, mask=None):
    """The whole leaves of `slices`, all-gathered over the devices.

    Args:
      slices: each device's slices (``optax.MaskedNode`` leaves pass
        through).
      like: the whole leaves: which axis each leaf was split along.
      mask: ``None``, or a bool per leaf (Python bools): where False, the
        leaf of `like` is returned and nothing is sent (a frozen leaf,
        whose slices are those of `like`).
    """
    if mask is None:
        mask = jax.tree.map(lambda _: True, like)

    def put_together(part, whole, keep):
        if _is_masked(part):
            return part
        if not keep:
            return whole
        axis = split_axis(jnp.shape(whole), num_shards)
        if axis is None:
            return part
        return lax.all_gather(part, axes, axis=axis, tiled=True)

    return jax.tree.map(put_together, slices, like, mask, is_leaf=_is_masked)


# -- the elementwise check ---------------------------------------------------


def _sub_jaxprs(eqn) -> list:
    found = []
    for value in eqn.params.values():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, jax_core.ClosedJaxpr):
                found.append(v.jaxpr)
            elif isinstance(v, jax_core.Jaxpr):
                found.append(v)
    return found


def _primitives(jaxpr) -> list[str]:
    """The names of `jaxpr`'s primitives, nested jaxprs' included."""
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for sub in _sub_jaxprs(eqn):
            names.extend(_primitives(sub))
    return names


def _size(var) -> int:
    return math.prod(getattr(var.aval, "shape", ()))


def _find_mixing(jaxpr, tainted: list[bool]) -> tuple[str | None, list[bool]]:
    """The first mixing primitive applied to a tainted value of `jaxpr`.

    `tainted` says which of its inputs are sliced values; a value computed
    from a tainted one is tainted. Returns ``(primitive name or None, the
    taint of each output)``.
    """
    taint = dict(zip(jaxpr.invars, tainted, strict=True))

    def is_tainted(v) -> bool:
        return isinstance(v, jax_core.Var) and taint.get(v, False)

    for eqn in jaxpr.eqns:
        inputs = [is_tainted(v) for v in eqn.invars]
        if not any(inputs):
            continue
        name = eqn.primitive.name
        if name in MIXING_PRIMITIVES and any(
            t and _size(v) > 1 for t, v in zip(inputs, eqn.invars, strict=True)
        ):
            return name, []
        outputs = [True] * len(eqn.outvars)
        subs = _sub_jaxprs(eqn)
        if subs:
            merged = [False] * len(eqn.outvars)
            for sub in subs:
                # Operands map one to one (jit, custom derivatives), or
                # after a predicate (cond's branches); otherwise (loops)
                # every input of the body is taken as tainted.
                if len(sub.invars) == len(inputs):
                    sub_taint = inputs
                elif len(sub.invars) == len(inputs) - 1:
                    sub_taint = inputs[1:]
                else:
                    sub_taint = [True] * len(sub.invars)
                found, out = _find_mixing(sub, sub_taint)
                if found:
                    return found, []
                if len(out) == len(merged):
                    merged = [a or b for a, b in zip(merged, out, strict=True)]
                else:
                    merged = [True] * len(merged)
            outputs = merged
        for v, t in zip(eqn.outvars, outputs, strict=True):
            taint[v] = t
    return None, [is_tainted(v) for v in jaxpr.outvars]


def check_elementwise(
    optimizer: optax.GradientTransformation,
    params,
    num_shards: int,
    scalars: dict[str, Any] | None = None,
) -> None:
    """Raises if `optimizer` reads more of a leaf than the element it updates.

    Traces ``optimizer.update`` on one device's slices of `params` and looks
    for a reduction, contraction, sort, scan or collective applied to a
    value computed from a sliced gradient, parameter or state leaf. Leaves
    kept whole are not sliced, and scalars (step counts, schedules) mix
    freely.

    Args:
      optimizer: the optimizer the step runs.
      params: the whole parameters (arrays or ``jax.ShapeDtypeStruct``).
      num_shards: the number of devices the slices are split over.
      scalars: an optimizer taking extra arguments gets the train step's:
        ``value``, ``grad`` and ``value_fn`` (line searches) and these
        scalar ones (``{name: jax.ShapeDtypeStruct}``).

    Raises:
      ValueError: naming the primitive found.
    """
    local = abstract_slices(params, num_shards)
    state = jax.eval_shape(optimizer.init, local)
    extra = isinstance(optimizer, optax.GradientTransformationExtraArgs)
    scalars = dict(scalars or {}) if extra else {}

    def update(grads, opt_state, p, values):
        if not extra:
            return optimizer.update(grads, opt_state, p)
        return optimizer.update(
            grads,
            opt_state,
            p,
            grad=grads,
            value_fn=lambda _: jnp.zeros((), jnp.float32),
            **values,
        )

    if extra:
        scalars["value"] = jax.ShapeDtypeStruct((), jnp.float32)
    closed = jax.make_jaxpr(update)(local, state, local, scalars)

    def sliced(tree, whole):
        return [
            tuple(a.shape) != tuple(jnp.shape(b))
            for a, b in zip(
                jax.tree.leaves(tree), jax.tree.leaves(whole), strict=True
            )
        ]

    param_taint = sliced(local, params)
    state_taint = sliced(state, jax.eval_shape(optimizer.init, params))
    tainted = (
        param_taint
        + state_taint
        + param_taint
        + [False] * len(jax.tree.leaves(scalars))
    )
    found, _ = _find_mixing(closed.jaxpr, tainted)
    if not found and _primitives(closed.jaxpr) != _primitives(
        jax.make_jaxpr(update)(
            abstract_slices(params, 1),
            jax.eval_shape(optimizer.init, params),
            abstract_slices(params, 1),
            scalars,
        ).jaxpr
    ):
        # The slices run another computation than the whole leaves: a rule
        # that reads a leaf's shape (centralization's fan-in test) chose
        # differently for a slice.
        found = (
            "computes otherwise on a slice than on the whole leaf (a rule "
            "that reads the leaf's shape, e.g. centralization's fan-in test)"
        )
    elif found:
        found = f"applies `{found}` to a sliced value"
    if found:
        raise ValueError(
            "shard_optimizer_state runs the optimizer on each device's "
            "slice of every leaf, which is correct only for elementwise "
            f"optimizers (SGD, momentum, Adam, AdamW); this one {found} "
            "(e.g. global-norm clipping, LARS/LAMB trust ratios, gradient "
            "centralization, Adafactor, Muon, a line search). Use "
            "shard_optimizer_state=False with it."
        )
