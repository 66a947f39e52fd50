# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN on a Flax Linen model: a wrapper that intercepts module calls.

`LinenLessBN` keeps the wrapped network's variable paths: a removed
BatchNorm returns its input and creates no variables, the FN head reuses
the dense layer's kernel, and `LinenLessBN.convert_variables` turns the
original model's variables into the wrapper's, keeping the function of
trained ones (``less_bn_weights.py``).
"""

from __future__ import annotations

import math
from typing import Any

import flax.core
import jax
import jax.numpy as jnp
from flax import linen as nn

from boostax._src import less_bn_weights, model_graph, validation
from boostax._src.fn_head import (
    check_fn_scale,
    fn_scale,
    full_normalization,
    initial_multiplier,
    multiplier_name,
)
from boostax._src.less_bn_plan import (
    BatchNormFold,
    LessBNPlan,
    path_str,
    plan_less_bn,
)
from boostax._src.tree_utils import nested_get, nested_has, nested_pop

# The variables a removed BatchNorm of trained weights keeps at its path
# (`BatchNormFold`): ``x * fold_scale + fold_bias``.
FOLD_SCALE, FOLD_BIAS = "fold_scale", "fold_bias"


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
    start with scale zero. A removed BatchNorm whose trained function was
    folded (`convert_variables`) and could not go entirely into the layer
    before it applies what stays at its path: ``x * fold_scale +
    fold_bias`` (either may be absent).

    Attributes:
      network: the original Linen module.
      removed: paths of the removed BatchNorm modules.
      fn_head: path of the dense layer turned into an FN head, or ``None``.
      fn_scale: the FN head's initial scale (`FNHead.scale_init`).
      fn_log_scale: whether the FN head trains ``log(s)``.
      zero_init: paths of kept BatchNorms whose scale starts at zero.
      folds: one `BatchNormFold` per removed BatchNorm, used when trained
        variables are converted.
    """

    network: nn.Module
    removed: tuple[tuple[Any, ...], ...] = ()
    fn_head: tuple[Any, ...] | None = None
    fn_scale: float = 1.0
    fn_log_scale: bool = False
    zero_init: tuple[tuple[Any, ...], ...] = ()
    folds: tuple[BatchNormFold, ...] = ()

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
        for fold in validation.check_sequence(
            "folds", self.folds, "a tuple of BatchNormFold"
        ):
            validation.check_instance(
                "folds", fold, BatchNormFold, "a tuple of BatchNormFold"
            )
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
                return _removed_batch_norm(module, args[0])
            if path == fn_head:
                return _linen_fn_head(module, args[0], *scale)
            if path in zero_init:
                return _with_zero_scale(module, next_fun, args, kwargs)
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(intercept):
            return self.network(*args, **kwargs)

    def convert_variables(self, variables):
        """Variables of `network` -> variables of this model.

        Weights brought in are never silently re-initialised or
        transformed: their function is kept, or the conversion is refused
        (see ``less_bn_weights``). So:

        - a removed BatchNorm at Flax's initial values is dropped (every
          collection); a trained one is folded into the convolution or
          dense layer before it (kernel times ``scale / sqrt(var + eps)``
          per output channel, the shift into its bias, or kept at the
          BatchNorm's path as ``fold_bias`` when it has none; `folds`), so
          the model's outputs in evaluation are the original's;
        - the `zero_init` BatchNorms' scales become zero only while they
          hold their initial values;
        - the FN head replaces the dense layer (bias dropped, scale
          `fn_scale` added) only if the weights are untrained: no
          BatchNorm has moved from its initial values and the dense bias
          is zero. Trained weights raise instead.

        Variables that are already converted come back unchanged.

        Raises:
          ValueError: the FN head would replace a trained dense layer, or a
            trained removed BatchNorm cannot be folded (the message says
            why and what to do).
        """
        variables = flax.core.unfreeze(variables)
        params = variables.get("params", {})
        if not _is_original(variables, self):
            return variables
        trained = _trained_evidence(variables, self)
        if self.fn_head is not None and _fn_head_unconverted(params, self):
            if trained is not None:
                raise less_bn_weights.refuse_trained_fn_head(
                    path_str(self.fn_head), trained
                )
            head = nested_get(params, self.fn_head)
            head.pop("bias", None)
            head[multiplier_name(self.fn_log_scale)] = initial_multiplier(
                self.fn_scale, self.fn_log_scale, head["kernel"].dtype
            )
        folds = {fold.path: fold for fold in self.folds}
        for path in self.removed:
            values = _batch_norm_values(variables, path)
            for collection in variables.values():
                nested_pop(collection, path)
            if values and not less_bn_weights.is_initial(values):
                _fold(params, folds.get(tuple(path)), path, values)
        for path in self.zero_init:
            norm = nested_get(params, path)
            values = _batch_norm_values(variables, path)
            if "scale" in norm and less_bn_weights.is_initial(values):
                norm["scale"] = jnp.zeros_like(norm["scale"])
        return variables


def _is_original(variables: dict, model: LinenLessBN) -> bool:
    """Whether `variables` are the original network's (not converted)."""
    params = variables.get("params", {})
    for path in model.removed:
        if nested_has(params, path):
            held = nested_get(params, path)
            if not set(held) <= {FOLD_SCALE, FOLD_BIAS}:
                return True
        stats = (c for name, c in variables.items() if name != "params")
        if any(nested_has(c, path) for c in stats):
            return True
    return model.fn_head is not None and _fn_head_unconverted(params, model)


def _batch_norm_values(variables: dict, path) -> dict[str, Any]:
    """A BatchNorm's ``scale``, ``bias``, ``mean``, ``var`` (those held)."""
    values = {}
    for collection in variables.values():
        held = nested_get(collection, path)
        if isinstance(held, dict):
            values.update(
                (k, v)
                for k, v in held.items()
                if k in less_bn_weights.INITIAL_BATCH_NORM
            )
    return values


def _trained_evidence(variables: dict, model: LinenLessBN) -> str | None:
    """Why `variables` count as trained, or ``None`` if they look fresh.

    Trained: a BatchNorm's variables differ from Flax's initial values, or
    the dense layer the FN head replaces has a bias that is not zero (Flax
    initialises biases at zero).
    """
    for path, values in _all_batch_norms(variables):
        if not less_bn_weights.is_initial(values):
            return f"BatchNorm {path_str(path)} is not at its initial values"
    if model.fn_head is not None:
        head = nested_get(variables.get("params", {}), model.fn_head)
        if "bias" in head and not less_bn_weights.is_initial(
            {"bias": head["bias"]}
        ):
            return "its bias is not zero"
    return None


def _all_batch_norms(variables: dict):
    """``(path, values)`` of every BatchNorm in the variables (a module
    whose model-state collection holds ``mean`` and ``var``)."""
    found = []

    def walk(tree, path):
        if not isinstance(tree, dict):
            return
        if "mean" in tree and "var" in tree:
            found.append((path, _batch_norm_values(variables, path)))
            return
        for key, value in tree.items():
            walk(value, (*path, key))

    for name, collection in variables.items():
        if name != "params":
            walk(collection, ())
    return found


def _fold(params: dict, fold, path, values) -> None:
    """Folds a trained removed BatchNorm's ``x * a + b`` (see `BatchNormFold`)
    into `params`."""
    if fold is None:
        raise ValueError(
            f"The removed BatchNorm {path_str(path)} holds trained values, "
            "and this LinenLessBN was built without its `folds`, so they "
            "cannot be folded into the layer before it: build the model with "
            "`boostax.less_bn` (which plans the folds)."
        )
    into = None if fold.into is None else nested_get(params, fold.into)
    dtype = jnp.result_type(
        into["kernel"] if into and "kernel" in into else values["var"]
    )
    a, b = less_bn_weights.folded_affine(fold, values, dtype)
    kept = {}
    if into and "kernel" in into:
        b = less_bn_weights.fold_into_layer(into, a, b)
    else:
        kept[FOLD_SCALE] = a
    if b is not None:
        kept[FOLD_BIAS] = b
    if kept:
        parent = params
        for key in path[:-1]:
            parent = parent.setdefault(key, {})
        parent[path[-1]] = kept


def _last_axis(x: jax.Array, channels: jax.Array) -> tuple[int, ...]:
    """The shape that broadcasts per-channel values along `x`'s last axis."""
    return (1,) * (x.ndim - 1) + channels.shape


def _removed_batch_norm(norm, x: jax.Array) -> jax.Array:
    """A removed BatchNorm: the identity, or the folded map it keeps."""
    for name, combine in ((FOLD_SCALE, jnp.multiply), (FOLD_BIAS, jnp.add)):
        if norm.scope.has_variable("params", name):
            value = jnp.asarray(norm.scope.get_variable("params", name))
            x = combine(x, value.astype(x.dtype).reshape(_last_axis(x, value)))
    return x


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
