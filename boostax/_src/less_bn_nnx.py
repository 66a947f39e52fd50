# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN on a Flax NNX model: a rewritten copy of the module.

Removed BatchNorms become `NNXIdentity`, the FN head replaces the last
``nnx.Linear`` (`NNXFNHead.from_linear`, its kernel carried over), and the
model's current weights come along; the given module is not modified.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from boostax._src import model_graph
from boostax._src.fn_head import NNXFNHead
from boostax._src.less_bn_plan import LessBNPlan, plan_less_bn


class NNXIdentity(nnx.Module):
    """What a removed NNX BatchNorm becomes."""

    def __call__(self, x, *args, **kwargs):
        del args, kwargs
        return x


def nnx_plan(model, sample_inputs, **options) -> LessBNPlan:
    """The LessBN plan of an NNX module (see `less_bn_plan.plan_less_bn`)."""
    graph = model_graph.model_graph(model, sample_inputs)
    modules = dict(nnx.iter_modules(model))

    def count(path):
        module = modules[tuple(path)]
        _, params, _ = nnx.split(module, nnx.Param, ...)
        return sum(math.prod(x.shape) for x in jax.tree.leaves(params))

    return plan_less_bn(graph, param_counts=count, **options)


def _set_submodule(root, path, value) -> None:
    parent = root
    for key in path[:-1]:
        parent = parent[key] if isinstance(key, int) else getattr(parent, key)
    if isinstance(path[-1], int):
        parent[path[-1]] = value
    else:
        setattr(parent, path[-1], value)


def apply_nnx_plan(model: nnx.Module, plan: LessBNPlan) -> nnx.Module:
    """A copy of `model` with `plan` applied (its weights carried over)."""
    model = nnx.clone(model)
    modules = dict(nnx.iter_modules(model))
    for path in plan.removed:
        _set_submodule(model, path, NNXIdentity())
    if plan.fn_head is not None:
        _set_submodule(
            model,
            plan.fn_head,
            NNXFNHead.from_linear(
                modules[plan.fn_head],
                scale_init=plan.fn_scale,
                log_scale=plan.fn_log_scale,
            ),
        )
    for path in plan.zero_init:
        norm = modules[path]
        norm.scale[...] = jnp.zeros_like(norm.scale[...])
    return model
