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
from boostax._src.less_bn import weights as less_bn_weights
from boostax._src.less_bn.fn_head import NNXFNHead
from boostax._src.less_bn.plan import LessBNPlan, path_str, plan_less_bn


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


def _values(module) -> dict:
    """An NNX BatchNorm's (or layer's) variables held, as arrays."""
    names = ("scale", "bias", "mean", "var")
    return {
        name: getattr(module, name)[...]
        for name in names
        if getattr(module, name, None) is not None
    }


def _held(modules: dict, value) -> jax.Array | None:
    """The value the module at ``value.path`` holds for an `InitialValue`."""
    module = modules.get(tuple(value.path))
    variable = getattr(module, value.name, None)
    return None if variable is None else variable[...]


def _fold(modules: dict, fold, norm) -> None:
    """Folds a trained removed BatchNorm into the layer before it (in place),
    or raises: an NNX model keeps its structure, so a shift needs a layer
    with a bias to go into."""
    layer = None if fold.into is None else modules[fold.into]
    a, b = less_bn_weights.folded_affine(fold, _values(norm), jnp.float32)
    if not (jnp.any(a != 1) or jnp.any(b)):
        return  # the identity (epsilon 0): nothing to fold
    has_bias = getattr(layer, "bias", None) is not None
    # A BatchNorm at zero mean and bias shifts nothing: a bias-free layer
    # takes its scale alone.
    if layer is None or not (has_bias or not jnp.any(b)):
        raise ValueError(
            f"The trained BatchNorm {path_str(fold.path)} that LessBN removes"
            " cannot be folded into the layer before it "
            + (
                "(there is no single convolution or dense layer whose output "
                "only it reads)"
                if layer is None
                else f"({path_str(fold.into)} has no bias to take its shift)"
            )
            + ", and its trained function is never dropped silently: switch "
            "less_bn off for this model (auto_boost config {'boost': "
            "{'less_bn': False}}), or start from fresh weights "
            "(`trained=False`)."
        )
    values = {"kernel": layer.kernel[...]}
    if has_bias:
        values["bias"] = layer.bias[...]
    less_bn_weights.fold_into_layer(values, a, b)
    layer.kernel[...] = values["kernel"]
    if has_bias:
        layer.bias[...] = values["bias"]


def apply_nnx_plan(
    model: nnx.Module, plan: LessBNPlan, *, trained: bool | None = None
) -> nnx.Module:
    """A copy of `model` with `plan` applied (its weights carried over).

    The weights are kept as ``less_bn_weights`` says. Trained weights
    (`trained`, or read from the model's constant-initialised variables,
    `LessBNPlan.initial`): each removed BatchNorm is folded into the layer
    before it (a shift needs a bias there), the `zero_init` BatchNorms
    keep their scales, and a dense layer is not replaced by an FN head
    (`ValueError`). Fresh ones: removed BatchNorms dropped, `zero_init`
    scales set to zero, the FN head in place.
    """
    model = nnx.clone(model)
    modules: dict = dict(nnx.iter_modules(model))  # the plan says which kind
    why = less_bn_weights.why_trained(
        trained,
        *less_bn_weights.trained_evidence(
            plan.initial, lambda value: _held(modules, value)
        ),
    )
    if plan.fn_head is not None and why is not None:
        raise less_bn_weights.refuse_trained_fn_head(
            path_str(plan.fn_head), why
        )
    folds = {fold.path: fold for fold in plan.folds}
    for path in plan.removed:
        if why is not None:
            _fold(modules, folds[tuple(path)], modules[path])
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
    if why is None:
        for path in plan.zero_init:
            norm = modules[path]
            norm.scale[...] = jnp.zeros_like(norm.scale[...])
    return model
