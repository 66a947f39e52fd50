# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN on a Flax Linen model: a wrapper that intercepts module calls.

`LinenLessBN` keeps the wrapped network's variable paths: a removed
BatchNorm returns its input and creates no variables, the FN head reuses
the dense layer's kernel, and `LinenLessBN.convert_variables` turns the
original model's variables into the wrapper's.
"""

from __future__ import annotations

import math
from typing import Any

import flax.core
import jax
import jax.numpy as jnp
from flax import linen as nn

from boostax._src import model_graph, validation
from boostax._src.fn_head import (
    check_fn_scale,
    fn_scale,
    full_normalization,
    initial_multiplier,
    multiplier_name,
)
from boostax._src.less_bn_plan import LessBNPlan, plan_less_bn
from boostax._src.tree_utils import nested_get, nested_has, nested_pop


def linen_plan(module, sample_inputs, **options) -> LessBNPlan:
    """The LessBN plan of a Linen module (see `less_bn_plan.plan_less_bn`)."""
    graph = model_graph.model_graph(module, sample_inputs)
    params = model_graph.param_shapes(module, sample_inputs)

    def count(path):
        subtree = nested_get(params, path)
        return sum(math.prod(x.shape) for x in jax.tree.leaves(subtree))

    return plan_less_bn(graph, param_counts=count, **options)


class LinenLessBN(nn.Module):
    """A Linen model with LessBN applied (see `less_bn`).

    Wraps `network` without changing its variable paths: removed BatchNorms
    return their input and create no variables; the FN head keeps the dense
    layer's kernel (same path), drops its bias and adds its scale
    (``multiplier``, or ``log_multiplier``); the BatchNorms of `zero_init`
    start with scale zero.

    Attributes:
      network: the original Linen module.
      removed: paths of the removed BatchNorm modules.
      fn_head: path of the dense layer turned into an FN head, or ``None``.
      fn_scale: the FN head's initial scale (`FNHead.scale_init`).
      fn_log_scale: whether the FN head trains ``log(s)``.
      zero_init: paths of kept BatchNorms whose scale starts at zero.
    """

    network: nn.Module
    removed: tuple[tuple[Any, ...], ...] = ()
    fn_head: tuple[Any, ...] | None = None
    fn_scale: float = 1.0
    fn_log_scale: bool = False
    zero_init: tuple[tuple[Any, ...], ...] = ()

    def __post_init__(self):
        validation.check_instance(
            "network", self.network, nn.Module, "a Flax Linen module"
        )
        for name in ("removed", "zero_init"):
            for path in validation.check_sequence(
                name, getattr(self, name), "a tuple of module paths"
            ):
                validation.check_instance(
                    name, path, (tuple, list), "a tuple of module paths"
                )
        if self.fn_head is not None:
            validation.check_instance(
                "fn_head", self.fn_head, (tuple, list), "a module path or None"
            )
        check_fn_scale(self.fn_scale, self.fn_log_scale)
        super().__post_init__()

    def setup(self):
        nn.share_scope(self, self.network)

    def __call__(self, *args, **kwargs):
        # A plain function: a module method would itself be intercepted.
        removed, fn_head = set(self.removed), self.fn_head
        zero_init = set(self.zero_init)
        scale = (self.fn_scale, self.fn_log_scale)

        def intercept(next_fun, args, kwargs, context):
            module = context.module
            path = tuple(module.path)
            if context.method_name != "__call__":
                return next_fun(*args, **kwargs)
            if path in removed:
                return args[0]
            if path == fn_head:
                return _linen_fn_head(module, args[0], *scale)
            if path in zero_init:
                return _with_zero_scale(module, next_fun, args, kwargs)
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(intercept):
            return self.network(*args, **kwargs)

    def convert_variables(self, variables):
        """Variables of `network` -> variables of this model.

        Drops the removed BatchNorms' entries (every collection) and, for the
        FN head, the dense bias, adding its scale (`fn_scale`); the scales
        of the `zero_init` BatchNorms become zero (the model trains from
        scratch: these are initial values). Variables that are already
        converted come back unchanged.
        """
        variables = flax.core.unfreeze(variables)
        params = variables.get("params", {})
        original = any(nested_has(params, p) for p in self.removed) or (
            self.fn_head is not None and _fn_head_unconverted(params, self)
        )
        if not original:
            return variables
        for path in self.removed:
            for collection in variables.values():
                nested_pop(collection, path)
        if self.fn_head is not None:
            head = nested_get(params, self.fn_head)
            if "kernel" in head:
                head.pop("bias", None)
                head[multiplier_name(self.fn_log_scale)] = initial_multiplier(
                    self.fn_scale, self.fn_log_scale, head["kernel"].dtype
                )
        for path in self.zero_init:
            norm = nested_get(params, path)
            if "scale" in norm:
                norm["scale"] = jnp.zeros_like(norm["scale"])
        return variables


def _fn_head_unconverted(params: dict, model: LinenLessBN) -> bool:
    head = nested_get(params, model.fn_head)
    return "kernel" in head and multiplier_name(model.fn_log_scale) not in head


def _with_zero_scale(norm, next_fun, args, kwargs):
    """Calls a BatchNorm whose scale is initialised at zero."""
    initializer = norm.scale_init
    # The module instance lives for this trace only; restored anyway.
    object.__setattr__(norm, "scale_init", nn.initializers.zeros)
    try:
        return next_fun(*args, **kwargs)
    finally:
        object.__setattr__(norm, "scale_init", initializer)


def _linen_fn_head(
    dense: nn.Dense, x: jax.Array, scale_init=1.0, log_scale=False
) -> jax.Array:
    """The FN head in place of `dense`, reusing its kernel variable."""
    kernel = dense.scope.param(
        "kernel",
        dense.kernel_init,
        (x.shape[-1], dense.features),
        dense.param_dtype,
    )
    stored = dense.scope.param(
        multiplier_name(log_scale),
        lambda _, shape, dtype: initial_multiplier(
            scale_init, log_scale, dtype
        ),
        (1,),
        dense.param_dtype,
    )
    return full_normalization(x, kernel, fn_scale(stored, log_scale))
