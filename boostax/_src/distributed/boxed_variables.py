# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Variables annotated for sharding: refused where it matters, else unboxed.

Flax models shard their params by annotation: Linen's
``nn.with_partitioning`` / ``nn.with_logical_partitioning`` give boxed
variables (``nn.Partitioned`` / ``nn.LogicallyPartitioned`` around each
array, naming a mesh axis, or a logical axis that rules map to one, per
dimension), NNX's ``nnx.with_partitioning`` a Variable's ``out_sharding``
metadata. Placed by annotation only by the ``"jit"`` engine
(`annotated_specs` for Linen's boxes; NNX's Variables, sharded when
created, stay where they are: `placed_by_the_step`); otherwise the step
does not shard params by annotation: it
replicates them (every device holds every param whole; a data-parallel
step may split the stored params over its own mesh with
``shard_params=True``). So a variable whose annotation shards it over a
mesh axis of more than one device is refused, naming it, rather than
replicated without a word; one whose annotation shards nothing (every
dimension unnamed, or named after axes of one device) is accepted, Linen's
boxes unboxed. The size of a named axis is read from the annotation's own
mesh, the array's sharding, then the current mesh context
(``jax.set_mesh``); an axis none of them has counts as
sharding whenever there is more than one device.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable
from typing import Any

import jax
from flax import linen as nn
from flax import nnx
from flax.core import meta

from boostax._src.tree_utils import path_names


def _context_meshes() -> list[Any]:
    """The mesh of the current context (``jax.set_mesh``), if any: the
    one Flax reads too (the deprecated ``with mesh:`` sets none)."""
    abstract = jax.sharding.get_abstract_mesh()
    return [] if abstract.empty else [abstract]


def mesh_axes(spec: Iterable[Any]) -> list[str]:
    """The mesh axis names of a partition spec's entries (an entry: None,
    a name, a tuple of names, or ``UNCONSTRAINED``)."""
    axes: list[str] = []
    for entry in spec:
        if isinstance(entry, str):
            axes.append(entry)
        elif isinstance(entry, tuple | list):
            axes.extend(a for a in entry if isinstance(a, str))
    return axes


def _sharding(axes, meshes) -> str | None:
    """What of `axes` shards over more than one device, said; ``None``:
    nothing does."""
    said = []
    for axis in axes:
        size = next((m.shape[axis] for m in meshes if axis in m.shape), None)
        if size is None and jax.device_count() > 1:
            known = ", ".join(_describe_mesh(m) for m in meshes) or "none"
            said.append(
                f"mesh axis {axis!r}, which no mesh known here has (the "
                "annotation's, the array's sharding's or the current mesh "
                f"context's: {known}), with {jax.device_count()} devices"
            )
        elif size is not None and size > 1:
            mesh = next(m for m in meshes if axis in m.shape)
            said.append(
                f"mesh axis {axis!r} of {size} devices ({_describe_mesh(mesh)})"
            )
    return "; ".join(said) or None


def _describe_mesh(mesh) -> str:
    sizes = ", ".join(f"{k!r}: {v}" for k, v in dict(mesh.shape).items())
    return f"mesh {{{sizes}}}"


def _value_mesh(value) -> list[Any]:
    sharding = getattr(value, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    return [] if mesh is None else [mesh]


def _box_sharding(box) -> str | None:
    """`_sharding` of a Linen partitioning box."""
    if isinstance(box, nn.LogicallyPartitioned):
        rules = box.rules
        # Logical names without a rule shard nothing (Flax's own mapping).
        spec = nn.logical_to_mesh_axes(box.names, rules)
    else:
        spec = box.names
    meshes = [m for m in (box.mesh,) if m is not None]
    meshes += _value_mesh(box.value) + _context_meshes()
    return _sharding(mesh_axes(spec or ()), meshes)


def _name(path) -> str:
    return "/".join(path_names(path))


_WAY_OUT = (
    "This step does not shard params by annotation: it replicates them, "
    "every device holding every param whole, which would drop the "
    "annotation. To place them as annotated, build the step with the "
    "config's {{'data_parallel': {{'engine': 'jit', 'logical_axis_rules': "
    "rules}}}} (the one-device step jitted over the global batch, XLA "
    "partitioning it; NNX Variables stay as they were sharded when "
    "created). To train them replicated, {unbox}. To "
    "hold 1/D of the stored params and optimizer state on each of D "
    "devices instead, do so and build the step data-parallel with "
    "`boostax.auto_boost(..., mesh=mesh)` and the config's "
    "{{'data_parallel': {{'shard_optimizer_state': True, 'shard_params': "
    "True}}}} (boostax's own split over the step's mesh: each "
    "step all-gathers the whole params it reads)."
)


def _refuse(kind: str, found: list[tuple[str, str, str]], unbox: str):
    path, annotation, why = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise ValueError(
        f"`variables` hold {kind} whose annotation shards them over more "
        f"than one device: {path} is {annotation}, over {why}{more}. "
        + _WAY_OUT.format(unbox=unbox)
    )


def _is_box(x) -> bool:
    return isinstance(x, meta.AxisMetadata)


def unbox_linen(variables: Any) -> Any:
    """Linen `variables` with their boxes opened, or refused.

    Variables without boxes come back as given. A partitioning box
    (``nn.Partitioned``, ``nn.LogicallyPartitioned``) whose annotation
    shards nothing (see the module) gives its value, as does any other
    box (``AxisMetadata``) of Flax's, which holds no sharding.

    Raises:
      ValueError: a box's annotation shards it over a mesh axis of more
        than one device (or one no known mesh has, on more than one
        device); the message names the leaf, the annotation, the axis
        and the ways out.
    """
    leaves = jax.tree_util.tree_leaves_with_path(variables, is_leaf=_is_box)
    boxes = [(p, x) for p, x in leaves if _is_box(x)]
    if not boxes:
        return variables
    found = []
    for path, box in boxes:
        if not isinstance(box, nn.Partitioned):
            continue
        why = _box_sharding(box)
        if why is not None:
            annotation = f"{type(box).__name__}(names={tuple(box.names)!r})"
            if isinstance(box, nn.LogicallyPartitioned):
                spec = nn.logical_to_mesh_axes(box.names, box.rules)
                axes = tuple(spec or ())
                annotation += f" (mesh axes {axes!r} by the rules)"
            found.append((_name(path), annotation, why))
    if found:
        _refuse(
            "partitioned (boxed) variables",
            found,
            "unbox them first: `variables = flax.linen.meta.unbox("
            "variables)` outside any mesh context (inside one, Flax applies "
            "each annotation as a sharding constraint)",
        )

    def opened(x):
        if isinstance(x, nn.Partitioned):
            return x.value  # no constraint applied: it shards nothing
        return x.unbox() if _is_box(x) else x

    return jax.tree.map(opened, variables, is_leaf=_is_box)


# Set while a step that places params where they are (the "jit" engine)
# splits its model: annotations that shard are then kept, not refused.
_PLACED = contextvars.ContextVar("boostax_params_placed", default=False)


@contextlib.contextmanager
def placed_by_the_step(placed: bool = True):
    """While `placed`, `check_nnx` lets sharding annotations through: the
    step places each param as its array is split
    (`partitioning.placed_specs`)."""
    token = _PLACED.set(placed)
    try:
        yield
    finally:
        _PLACED.reset(token)


def check_nnx(params: Any) -> None:
    """Refuses NNX `params` (a state of ``nnx.Param`` Variables) whose
    ``out_sharding`` annotation shards them (see the module), unless the
    step places them where they are (`placed_by_the_step`).

    Raises:
      ValueError: naming the Variable, its annotation, the axis and the
        ways out.
    """
    if _PLACED.get():
        return
    leaves = jax.tree_util.tree_leaves_with_path(
        params, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    found = []
    for path, variable in leaves:
        if not isinstance(variable, nnx.Variable):
            continue
        names = variable.get_metadata().get("out_sharding")
        if not names:
            continue
        spec = nnx.spmd.get_var_pspec(variable) or ()
        own = variable.get_metadata().get("mesh")
        meshes = [own] if own is not None else []
        meshes += _value_mesh(variable.get_value()) + _context_meshes()
        why = _sharding(mesh_axes(spec), meshes)
        if why is not None:
            annotation = f"an nnx.Param with out_sharding={tuple(names)!r}"
            found.append((_name(path), annotation, why))
    if found:
        _refuse(
            "NNX params",
            found,
            "build the model without the annotations "
            "(`nnx.with_partitioning`) and outside any mesh context "
            "(`jax.set_mesh`, which places its arrays on the mesh's devices)",
        )


def annotated_specs(variables: Any, rules) -> tuple[Any, dict]:
    """Linen `variables` unboxed, and their params' annotations as mesh
    ``PartitionSpec`` s: ``{param path names: spec}``.

    For a step that places the params as their annotations say
    (``DataParallel(engine="jit", logical_axis_rules=...)``): an
    ``nn.LogicallyPartitioned`` box's names go through `rules` (its own
    rules first, as Flax maps them), an ``nn.Partitioned`` one's are mesh
    axes already. Params without a box are absent from the dict.
    """
    leaves = jax.tree_util.tree_leaves_with_path(variables, is_leaf=_is_box)
    specs = {}
    for path, box in leaves:
        names = path_names(path)
        if not isinstance(box, nn.Partitioned) or names[:1] != ("params",):
            continue
        if isinstance(box, nn.LogicallyPartitioned):
            spec = nn.logical_to_mesh_axes(
                box.names, tuple(box.rules or ()) + tuple(rules or ())
            )
        else:
            spec = jax.sharding.PartitionSpec(*box.names)
        specs[names[1:]] = spec
    opened = jax.tree.map(
        lambda x: x.value if isinstance(x, nn.Partitioned) else x,
        variables,
        is_leaf=_is_box,
    )
    return meta.unbox(opened), specs
