# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The dtype a loss function reads each of its parameters in.

Under a `PrecisionPolicy`, the float32 parameters reach the forward pass
through casts: each Flax layer casts its own to its compute ``dtype``
(O2's normalisation layers and ``float32_modules`` keep float32), O3 casts
every one first. A parameter whose every read is a cast to the compute
dtype is used only as its rounded copy, so that copy can be made where it
is cheapest: `forward_dtypes` finds those parameters by tracing the loss
once (``jax.make_jaxpr``) and following each parameter to its uses. With
the parameters stored sharded over the data axes
(``DataParallel(shard_optimizer_state=True)`` under a half-precision
policy, `DataParallel.shard_params`), the step all-gathers each device's
slice of such a leaf already cast, half the bytes of float32, and the
forward casts nothing more: its values are the ones it read before, bit
for bit.

A read is a cast when it is a ``convert_element_type`` to the compute
dtype; a use inside a nested program whose operands map one to one onto
its inputs (``jit``, ``jax.checkpoint``, custom derivatives, ``scan``, the
branches of ``cond``) is followed into it; any other use (an arithmetic
operation, a ``while`` loop's operands, the parameter returned as it is)
reads the float32 value, and the leaf is gathered in float32.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp

from boostax._src import jaxpr_walk

PyTree = Any


def _operand_map(eqn, sub) -> list | None:
    """The operands of `eqn` that `sub`'s inputs receive, in order, or
    ``None`` where they do not map one to one (a ``while`` loop)."""
    operands = list(eqn.invars)
    if eqn.primitive.name == "cond":  # the branches: after the predicate
        operands = operands[1:]
    elif eqn.primitive.name == "while":  # constants of two bodies, carry
        return None
    return operands if len(sub.invars) == len(operands) else None


def _read_dtypes(jaxpr, var, cast_to) -> set:
    """The dtypes `var` of `jaxpr` is read in: `cast_to` for each cast to
    it, the variable's own for any other use."""
    own = var.aval.dtype
    reads: set = set()
    if any(out is var for out in jaxpr.outvars):
        reads.add(own)
    for eqn in jaxpr.eqns:
        positions = [i for i, v in enumerate(eqn.invars) if v is var]
        if not positions:
            continue
        name = eqn.primitive.name
        if name == "convert_element_type":
            new = jnp.dtype(eqn.params["new_dtype"])
            reads.add(new if new == cast_to else own)
            continue
        subs = jaxpr_walk.sub_jaxprs(eqn)
        if not subs:
            reads.add(own)
            continue
        for sub in subs:
            operands = _operand_map(eqn, sub)
            if operands is None:
                reads.add(own)
                continue
            for inner, outer in zip(sub.invars, operands, strict=True):
                if outer is var:
                    reads |= _read_dtypes(sub, inner, cast_to)
    return reads


def forward_dtypes(loss_fn, params: PyTree, compute_dtype) -> PyTree:
    """The dtype `loss_fn` reads each leaf of `params` in.

    Args:
      loss_fn: ``loss_fn(params) -> anything``, traced once (not run); it
        may close over traced values.
      params: the float32 parameters (arrays or ``jax.ShapeDtypeStruct``).
      compute_dtype: the policy's compute dtype.

    Returns:
      A tree like `params`: `compute_dtype` for a leaf that `loss_fn` only
      reads through casts to it (or never reads), the leaf's own dtype
      otherwise.
    """
    compute_dtype = jnp.dtype(compute_dtype)
    closed = jax.make_jaxpr(loss_fn)(params)
    jaxpr = closed.jaxpr
    leaves, treedef = jax.tree.flatten(params)
    if len(jaxpr.invars) != len(leaves):
        raise ValueError(
            "forward_dtypes: the traced loss has "
            f"{len(jaxpr.invars)} inputs for {len(leaves)} parameter leaves."
        )
    dtypes = []
    for var, leaf in zip(jaxpr.invars, leaves, strict=True):
        own = jnp.dtype(leaf.dtype)
        if not isinstance(var, jax_core.Var):
            dtypes.append(own)
            continue
        reads = _read_dtypes(jaxpr, var, compute_dtype)
        dtypes.append(compute_dtype if reads <= {compute_dtype} else own)
    return jax.tree.unflatten(treedef, dtypes)
