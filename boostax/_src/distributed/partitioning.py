# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Where the ``"jit"`` engine places the state: ``PartitionSpec`` s by rule
and by annotation.

With ``DataParallel(engine="jit")`` the one-device step is jitted over the
global batch and XLA's SPMD partitioner inserts the collectives; what the
step decides is only where each leaf of the state lives:

- params as their annotations say (Linen's ``nn.with_logical_partitioning``
  through Flax's logical axis rules, or ``nn.with_partitioning``'s mesh
  axes), replicated where they have none;
- with ``shard_params`` (FSDP), also split over the batch axes, along the
  largest axis that the annotation leaves free and the batch devices
  divide (`global_specs`);
- the optimizer state like the params it shapes (`specs_like_params`),
  and with ``shard_optimizer_state`` (ZeRO-1) split over the batch axes by
  the same rule. Any Optax optimizer: XLA partitions what it computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from boostax._src import validation
from boostax._src.distributed import boxed_variables
from boostax._src.tree_utils import path_names


def _is_spec(x) -> bool:
    return isinstance(x, P)


def rule_axes(target) -> tuple[str, ...]:
    """A logical rule's mesh axes: a name, a tuple of names, or None."""
    if target is None:
        return ()
    return (target,) if isinstance(target, str) else tuple(target)


def check_rules(rules, mesh: Mesh, engine: str) -> tuple:
    """`rules` as a tuple of ``(str, axes)`` pairs, checked: mesh axes of
    `mesh`, a ``"batch"`` rule, and the ``"jit"`` engine."""
    if engine != "jit":
        raise ValueError(
            "`logical_axis_rules` place params by their annotations, which "
            "the step jitted over the global batch does: it needs "
            f"engine='jit', got engine={engine!r}."
        )
    try:
        pairs = tuple((name, target) for name, target in rules)
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or not all(isinstance(n, str) for n, _ in pairs):
        raise TypeError(
            "`logical_axis_rules` must be a sequence of (logical name, mesh "
            "axis, tuple of mesh axes or None) pairs, as "
            f"flax.linen.logical_axis_rules takes, {validation.got(rules)}."
        )
    for name, target in pairs:
        if target is not None and not isinstance(target, str | tuple | list):
            raise TypeError(
                f"`logical_axis_rules`: the rule for {name!r} must map to a "
                f"mesh axis, a tuple of them or None, got {target!r}."
            )
        unknown = [a for a in rule_axes(target) if a not in mesh.axis_names]
        if unknown:
            raise ValueError(
                f"`logical_axis_rules`: the rule for {name!r} names "
                f"{unknown}, not axes of the mesh {tuple(mesh.axis_names)}."
            )
    if "batch" not in dict(pairs):
        raise ValueError(
            "`logical_axis_rules` must say which mesh axes split the batch: "
            "add a ('batch', axes) rule (e.g. ('batch', 'data')); the "
            "others replicate it."
        )
    return tuple(
        (n, t if t is None or isinstance(t, str) else tuple(t))
        for n, t in pairs
    )


def global_specs(
    tree, batch_axes: tuple[str, ...], batch_devices: int, base=None
):
    """Each leaf of `tree` split over `batch_axes` (of `batch_devices`
    devices) along its largest axis whose size they divide (the first of
    equal ones), among the axes its `base` spec (a tree of
    ``PartitionSpec`` s of `tree`'s structure, e.g. the params'
    annotations; default none) leaves unsharded; as `base` says where none
    does (scalars, counts, odd shapes) or where it splits over the batch
    axes already. The same rule for the params and the optimizer state
    they shape, so an update meets its param split alike."""
    if base is None:
        base = jax.tree.map(lambda _: P(), tree)
    batch = set(batch_axes)

    def spec(x, given):
        if batch & set(boxed_variables.mesh_axes(given)):
            return given
        shape = jnp.shape(x)
        entries = list(given) + [None] * (len(shape) - len(given))
        fits = [
            (size, -axis)
            for axis, size in enumerate(shape)
            if entries[axis] is None
            and size >= batch_devices
            and size % batch_devices == 0
        ]
        if batch_devices == 1 or not fits:
            return P(*entries) if any(entries) else P()
        entries[-max(fits)[1]] = batch_axes
        return P(*entries)

    return jax.tree.map(spec, tree, base, is_leaf=_is_spec)


def specs_like_params(opt_state, params, param_specs):
    """Each leaf of `opt_state` (shapes) spec'd as the param it shapes:
    the param whose path is the end of the leaf's path, of the same shape
    (Adam's moments, an average of the params); ``P()`` for the others
    (counts, scalars)."""
    by_path = {
        path_names(path): (jnp.shape(p), spec)
        for (path, p), spec in zip(
            jax.tree_util.tree_leaves_with_path(params),
            jax.tree.leaves(param_specs, is_leaf=_is_spec),
            strict=True,
        )
    }

    def spec(path, x):
        names = path_names(path)
        for start in range(len(names)):
            shape, found = by_path.get(names[start:], (None, None))
            if found is not None and shape == jnp.shape(x):
                return found
        return P()

    return jax.tree_util.tree_map_with_path(spec, opt_state)


def state_specs(
    data_parallel,
    params,
    opt_state,
    annotations: dict | None,
    shards_params: bool,
) -> tuple[Any, Any, dict | None]:
    """``(param specs or None, optimizer-state specs, gradient specs or
    None)`` of the ``"jit"``
    engine's placement (the module docstring).

    Args:
      data_parallel: the `DataParallel` plan (``engine="jit"``).
      params: the params (or their shapes).
      opt_state: the optimizer state's shapes.
      annotations: ``{param path names: mesh PartitionSpec}`` of the
        annotated params (`boxed_variables.annotated_specs`), or None.
      shards_params: whether the params are also split over the batch
        axes (FSDP).

    Returns:
      The params' specs (``None`` where every param is replicated), the
      optimizer state's, and with a sharded optimizer state the
      gradients' as the optimizer reads them (``{param path names:
      spec}``, split like its state: XLA then reduce-scatters them, where
      it would all-reduce and slice), else ``None``.
    """
    annotations = annotations or {}
    base = jax.tree_util.tree_map_with_path(
        lambda path, _: annotations.get(path_names(path), P()), params
    )
    param_specs = base
    if shards_params:
        param_specs = data_parallel.global_specs(params, base)
    opt_specs = specs_like_params(opt_state, params, param_specs)
    grad_specs = None
    if data_parallel.shard_optimizer_state:
        opt_specs = data_parallel.global_specs(opt_state, opt_specs)
        split = data_parallel.global_specs(params, param_specs)
        grad_specs = {
            path_names(path): spec
            for (path, _), spec in zip(
                jax.tree_util.tree_leaves_with_path(params),
                jax.tree.leaves(split, is_leaf=_is_spec),
                strict=True,
            )
        }
    leaves = jax.tree.leaves(param_specs, is_leaf=_is_spec)
    replicated = all(spec == P() for spec in leaves)
    return (None if replicated else param_specs), opt_specs, grad_specs


def constrain_by_path(tree, specs: dict, mesh: Mesh):
    """`tree` (params-like, some leaves masked out) with each leaf whose
    path names are in `specs` constrained to its spec on `mesh` (inside
    the ``"jit"`` engine's step)."""

    def constrain(path, x):
        spec = specs.get(path_names(path))
        if spec is None or not isinstance(x, jax.Array):
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    return jax.tree_util.tree_map_with_path(constrain, tree)


def constrain_state(data_parallel, state, opt_state_specs, param_specs):
    """`state` (inside the ``"jit"`` engine's step) kept where
    `DataParallel.place_state` placed it, so that the step's outputs keep
    its inputs' shardings."""
    specs = data_parallel.state_specs(state, opt_state_specs, param_specs)
    mesh = data_parallel.auto_mesh
    return jax.tree.map(
        lambda spec, tree: jax.lax.with_sharding_constraint(
            tree, NamedSharding(mesh, spec)
        ),
        specs,
        state,
        is_leaf=_is_spec,
    )


def placed_specs(params, mesh: Mesh) -> dict:
    """``{param path names: spec}`` of the params already placed on
    `mesh`'s devices by a ``NamedSharding`` that splits them (a model
    initialised under ``jax.jit`` with ``out_shardings``), so that the
    ``"jit"`` engine keeps them where they are; replicated and host
    params are absent."""
    devices = set(mesh.devices.flat)
    specs = {}
    for path, x in jax.tree_util.tree_leaves_with_path(params):
        sharding = getattr(x, "sharding", None)
        if not isinstance(sharding, NamedSharding):
            continue
        if sharding.is_fully_replicated or set(sharding.device_set) != devices:
            continue
        unknown = set(boxed_variables.mesh_axes(sharding.spec)) - set(
            mesh.axis_names
        )
        if unknown:
            continue  # another mesh's axis names: nothing to keep
        specs[path_names(path)] = sharding.spec
    return specs


def read_placements(data_parallel, objective, variables) -> tuple[Any, dict]:
    """`variables` unboxed, and ``{param path names: spec}`` of where the
    ``"jit"`` engine places each param as the variables say: Linen's
    annotations (`boxed_variables.annotated_specs`, through the plan's
    logical axis rules), and the split of params placed on the step's mesh
    already (`placed_specs`: a ``jax.jit`` init with ``out_shardings``,
    NNX Variables sharded when created; `variables` ``None``: the NNX
    objective's module). Without that engine: `variables` as given, no
    specs (the model's split refuses annotations that shard)."""
    if data_parallel is None or data_parallel.explicit:
        return variables, {}
    module = getattr(objective, "module", None)
    if isinstance(module if variables is None else variables, nnx.Module):
        params = nnx.state(
            module if variables is None else variables, nnx.Param
        )
        return variables, placed_specs(params, data_parallel.mesh)
    if not isinstance(variables, Mapping):
        return variables, {}
    variables, specs = boxed_variables.annotated_specs(
        variables, data_parallel.logical_axis_rules
    )
    placed = placed_specs(variables.get("params"), data_parallel.mesh)
    return variables, {**placed, **specs}
