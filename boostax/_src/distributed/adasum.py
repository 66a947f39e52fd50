# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""AdaSum: adaptive summation of per-device updates (Maleki et al., 2021).

Averaging the gradients of P data-parallel workers throws away magnitude
when they point in different directions; summing them overshoots when they
agree. AdaSum combines two vectors with

.. math::

  \\operatorname{AdaSum}(a, b) = \\Bigl(1 - \\frac{a^\\top b}{2\\|a\\|^2}
  \\Bigr) a + \\Bigl(1 - \\frac{a^\\top b}{2\\|b\\|^2}\\Bigr) b,

the sum when they are orthogonal and the mean when they are equal, and
P vectors by a binary tree in device order. Dot products are taken per
leaf of the pytree (per layer, as Horovod and MindSpore do).

`adasum_reduce` runs inside ``jax.shard_map`` and moves about twice the
gradient bytes per device, like a ring all-reduce: it halves the vector at
each level of the tree (vector halving, distance doubling; Horovod's
algorithm), sums the per-leaf dot products over the devices that hold the
pieces, and all-gathers the pieces at the end. `adasum` wraps an Optax
optimizer so that each device's update (its weight delta) is AdaSum'd, as
MindSpore and Horovod do; `adasum_gradients` reduces raw gradients.

References:
  Maleki et al., `Scaling Distributed Training with Adaptive Summation
  <https://arxiv.org/abs/2006.02924>`_, MLSys 2021;
  Horovod ``hvd.Adasum`` (``horovod/common/ops/adasum``);
  MindSpore ``mindspore.boost.AdaSum``.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax
from jax import lax

from boostax._src import validation
from boostax._src.distributed.adasum_collective import (
    AdaSumState,
    AxisName,
    NodeSlices,
    adasum_pair,
    adasum_reduce,
    canonical_axes,
    check_eps,
    check_node_and_local,
    hierarchical_adasum_reduce,
    node_slices,
    reduce_node_slices,
    reduce_tree,
)
from boostax._src.step import context as step_context

__all__ = (
    "AdaSumState",
    "NodeSlices",
    "adasum",
    "adasum_gradients",
    "adasum_pair",
    "adasum_reduce",
    "check_eps",
    "hierarchical_adasum_reduce",
    "node_slices",
)


def adasum(
    inner: optax.GradientTransformation,
    axis_name: AxisName,
    *,
    local_axis_name: AxisName | None = None,
    eps: float = 1e-12,
) -> optax.GradientTransformationExtraArgs:
    """Runs `inner` on each device, then AdaSums the updates over devices.

    .. math::

      u = \\operatorname{AdaSum}_{i}\\bigl(
      \\text{inner}_i(g_i)\\bigr)

    The updates (weight deltas) are reduced, not the gradients: an adaptive
    optimizer is not linear in the gradient, so MindSpore and Horovod apply
    AdaSum after the local optimizer step. With `local_axis_name`, the
    gradients are first averaged within the node (``pmean``) and the
    updates AdaSum'd across nodes (`hierarchical_adasum_reduce`'s scheme:
    the updates are then equal within the node, so each local device takes
    its 1/D slice without communication, reduces it across nodes and
    all-gathers the slices).

    Use it inside ``jax.shard_map``. The inner state is per device (never
    synchronized): keep it with a leading device axis, e.g. ``out_specs``
    ``P(axis)`` for ``jax.tree.map(lambda x: x[None], state)`` and the
    reverse on the way in. Stateless inner optimizers (``optax.sgd``) need
    nothing. The updates come out the same on every device.

    Inside `node_slices` (the train step with
    ``DataParallel(reduction="adasum", shard_optimizer_state=True)``), the
    gradients are this device's slices of its node's mean: `inner` runs
    on the slices, and each slice of the updates is AdaSum'd with the
    same slice on the other nodes, per leaf with the dot products and
    norms of the whole leaves (summed over the node's slices); the
    updates come out as this device's slices of the same result.

    Args:
      inner: the optimizer run on each device's gradients.
      axis_name: the mesh axis (or tuple of axes) of the devices, or of the
        nodes with `local_axis_name`.
      local_axis_name: optional axis (or tuple) of devices within a node,
        averaged before `inner`.
      eps: added to the dot products and squared norms.

    Returns:
      An ``optax.GradientTransformationExtraArgs``; extra arguments go to
      `inner`. Its `AdaSumState` also records the mean cosine between the
      vectors each update combined (``cosine``; boostax's train step
      reports it as ``metrics["adasum_cosine"]``), for one scalar
      ``psum`` per update.

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> n = len(jax.devices())
      >>> mesh = jax.make_mesh((n,), ("data",))
      >>> tx = boostax.adasum(optax.sgd(0.5), "data")
      >>> params = jnp.zeros(2)
      >>> grads = jax.device_put(
      ...     jnp.tile(jnp.array([2.0, 4.0]), (n, 1)),
      ...     NamedSharding(mesh, P("data")),
      ... )
      >>> @jax.jit
      ... @jax.shard_map(
      ...     mesh=mesh, in_specs=(P(), P("data")), out_specs=P()
      ... )
      ... def step(params, grads):
      ...     updates, _ = tx.update(grads[0], tx.init(params), params)
      ...     return optax.apply_updates(params, updates)
      >>> step(params, grads)
      Array([-1., -2.], dtype=float32)

    References:
      Maleki et al., `Scaling Distributed Training with Adaptive Summation
      <https://arxiv.org/abs/2006.02924>`_, MLSys 2021;
      Horovod ``hvd.DistributedOptimizer(..., op=hvd.Adasum)``;
      MindSpore ``mindspore.boost.AdaSum``.
    """
    validation.check_optimizer("inner", inner)
    node, local = check_node_and_local(axis_name, local_axis_name)
    eps = check_eps(eps)
    inner = optax.with_extra_args_support(inner)

    def init_fn(params):
        return AdaSumState(
            inner_state=inner.init(params),
            cosine=jnp.full([], jnp.nan, jnp.float32),
        )

    def update_fn(updates, state, params=None, **extra_args):
        sliced = step_context.current().node_slices
        if sliced is not None and local is None:
            raise ValueError(
                "AdaSum with a sharded optimizer state needs the local "
                "axis its slices are split over: build it with "
                "`local_axis_name` (DataParallel(local_axis=...))."
            )
        if local is not None and sliced is None:
            updates = lax.pmean(updates, canonical_axes(local))
        updates, inner_state = inner.update(
            updates, state.inner_state, params, **extra_args
        )
        if sliced is None:
            updates, cosine = reduce_tree(
                updates,
                node,
                local,
                eps,
                local_identical=True,
                with_cosine=True,
            )
        elif sliced.reduce:
            assert local is not None  # refused above
            updates, cosine = reduce_node_slices(
                updates, sliced, node, local, eps
            )
        else:  # only the inner optimizer is being checked
            cosine = state.cosine
        return updates, AdaSumState(inner_state=inner_state, cosine=cosine)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def adasum_gradients(
    axis_name: AxisName,
    *,
    local_axis_name: AxisName | None = None,
    eps: float = 1e-12,
) -> optax.GradientTransformation:
    """AdaSums raw gradients over devices (stateless).

    `adasum_reduce` (or `hierarchical_adasum_reduce` with
    `local_axis_name`) as an Optax transform, to chain before an optimizer
    whose state stays replicated: ``optax.chain(adasum_gradients("data"),
    optax.sgd(0.1))``. `adasum` (reducing the optimizer's updates) is what
    MindSpore and Horovod do; this is the cheaper variant for optimizers
    linear in the gradient.

    Args:
      axis_name: the mesh axis (or tuple of axes) of the devices, or of the
        nodes with `local_axis_name`.
      local_axis_name: optional axis (or tuple) of devices within a node,
        averaged first.
      eps: added to the dot products and squared norms.

    Returns:
      An ``optax.GradientTransformation`` (stateless).

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> n = len(jax.devices())
      >>> mesh = jax.make_mesh((n,), ("data",))
      >>> tx = optax.chain(boostax.adasum_gradients("data"), optax.sgd(1.0))
      >>> grads = jax.device_put(
      ...     jnp.tile(jnp.array([1.0, -1.0]), (n, 1)),
      ...     NamedSharding(mesh, P("data")),
      ... )
      >>> @jax.jit
      ... @jax.shard_map(mesh=mesh, in_specs=P("data"), out_specs=P())
      ... def updates(grads):
      ...     u, _ = tx.update(grads[0], tx.init(grads[0]))
      ...     return u
      >>> updates(grads)
      Array([-1.,  1.], dtype=float32)

    References:
      Maleki et al., `Scaling Distributed Training with Adaptive Summation
      <https://arxiv.org/abs/2006.02924>`_, MLSys 2021.
    """
    node, local = check_node_and_local(axis_name, local_axis_name)
    eps = check_eps(eps)

    def update_fn(updates, state, params=None):
        del params
        return reduce_tree(updates, node, local, eps), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)
