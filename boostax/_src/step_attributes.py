# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The attributes a Flax model runs with inside a train step.

Collectives over named axes. A model may average over a named axis itself:
``BatchNorm(axis_name="batch")`` (synchronised BatchNorm) in the Flax
examples. In the step, an axis name that is bound where the step runs (the
axis of a mesh the step runs on, or of the user's own ``shard_map``) is kept;
one that is not is mapped to the step's data-parallel axes (every device of
its mesh), or to no axis on a single device, where the statistics are the
local ones. This applies to every module with an ``axis_name`` attribute
(Linen and NNX), so a model written for ``pmap`` trains unchanged at every
level, with or without a mesh.

Under a precision policy, every layer with a ``dtype`` attribute also
computes in the policy's dtype (`PrecisionPolicy.module_dtype`). Both are
set while the step is traced: a Linen method interceptor
(`linen_step_attributes`), or on the merged copy of an NNX module
(`set_nnx_step_attributes`); the model itself is not changed.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
from flax import linen as nn
from flax import nnx

from boostax._src import precision as precision_lib
from boostax._src import step_context

# ---------------------------------------------------------------------------
# Collectives over named axes.
# ---------------------------------------------------------------------------


def _is_bound(name) -> bool:
    try:
        jax.lax.axis_size(name)
    except NameError:
        return False
    return True


def map_axis_name(name):
    """The axes a model's collective over `name` runs over in the step.

    Names bound where the step runs are kept; the others become the step's
    data-parallel axes (`step_context.current`; none on one device, where a
    mean over no axis is the value itself).

    Args:
      name: a module's ``axis_name``: ``None``, a name or a tuple of names.

    Returns:
      `name` unchanged when every name is bound, else a tuple of axes.
    """
    if name is None:
        return None
    names = (name,) if isinstance(name, str) else tuple(name)
    mapped: list[str] = []
    data_axes = step_context.current().data_axes
    for n in names:
        for axis in (n,) if _is_bound(n) else data_axes:
            if axis not in mapped:
                mapped.append(axis)
    return name if mapped == list(names) else tuple(mapped)


def _has_axis_name(module) -> bool:
    name = getattr(module, "axis_name", None)
    return isinstance(name, (str, tuple, list))


def _step_attributes(module, policy) -> dict[str, Any]:
    """The attributes `module` runs with in the step, where they differ
    from its own: its ``axis_name`` mapped (`map_axis_name`) and, under a
    precision `policy`, its compute ``dtype`` (`PrecisionPolicy.module_dtype`).
    """
    changed = {}
    if _has_axis_name(module):
        mapped = map_axis_name(module.axis_name)
        if mapped != module.axis_name:
            changed["axis_name"] = mapped
    if policy is not None and precision_lib.has_compute_dtype(module):
        changed["dtype"] = policy.module_dtype(module)
    return changed


@contextlib.contextmanager
def linen_step_attributes(policy=None):
    """Every Linen module called within it runs with `_step_attributes`."""

    def intercept(next_fun, args, kwargs, context):
        module = context.module
        changed = _step_attributes(module, policy)
        if not changed:
            return next_fun(*args, **kwargs)
        # The module instance lives for this trace only (Linen rebuilds
        # submodules on every apply); its attributes are restored anyway.
        previous = {name: getattr(module, name) for name in changed}
        for name, value in changed.items():
            object.__setattr__(module, name, value)
        try:
            return next_fun(*args, **kwargs)
        finally:
            for name, value in previous.items():
                object.__setattr__(module, name, value)

    with nn.intercept_methods(intercept):
        yield


def set_nnx_step_attributes(module: nnx.Module, policy=None) -> None:
    """Sets `_step_attributes` on every submodule of a merged NNX copy."""
    for _, sub in nnx.iter_modules(module):
        for name, value in _step_attributes(sub, policy).items():
            setattr(sub, name, value)
