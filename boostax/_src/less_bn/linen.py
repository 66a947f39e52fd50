# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN on a Flax Linen model: a wrapper that intercepts module calls.

`LinenLessBN` keeps the wrapped network's variable paths: a removed
BatchNorm applies the fixed map its fold keeps (the identity for fresh
weights) and creates no trainable variables, the FN head reuses the dense
layer's kernel, and `LinenLessBN.convert_variables` turns the original
model's variables into the wrapper's, keeping the function of trained ones
(``less_bn/weights.py``).
"""

from __future__ import annotations

import math
from typing import Any

import flax.core
import jax
import jax.numpy as jnp
from flax import linen as nn

from boostax._src import model_graph, tree_utils, validation
from boostax._src.distributed import boxed_variables
from boostax._src.less_bn import weights as less_bn_weights
from boostax._src.less_bn.fn_head import (
    check_fn_scale,
    fn_scale,
    full_normalization,
    initial_multiplier,
    multiplier_name,
)
from boostax._src.less_bn.plan import (
    BatchNormFold,
    InitialValue,
    LessBNPlan,
    path_str,
    plan_less_bn,
    running_statistics,
)
from boostax._src.tree_utils import nested_get, nested_has, nested_pop

# What a removed BatchNorm keeps of its map ``x * a + b`` (`BatchNormFold`):
# constants in its own ``batch_stats`` (as its running statistics were, and
# where a Flax TrainState's ``batch_stats`` field carries them), named apart
# from a BatchNorm's own variables: ``x * fold_scale + fold_bias``.
FOLD_COLLECTION = "batch_stats"
FOLD_NAMES = {"scale": "fold_scale", "bias": "fold_bias"}


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
    create no trainable variables; the FN head keeps the dense layer's
    kernel (same path), drops its bias and adds its scale (``multiplier``,
    or ``log_multiplier``); the BatchNorms of `zero_init` start with scale
    zero. A removed BatchNorm applies the part of its map that the layer
    before it cannot take (`BatchNormFold.keeps`): ``x * fold_scale +
    fold_bias``, constants in its ``batch_stats`` that the model reads and
    never writes (`constant_variables`). They are the identity for fresh
    weights and hold a trained BatchNorm's map after `convert_variables`,
    so the variables' structure depends on the model only.

    Attributes:
      network: the original Linen module.
      removed: paths of the removed BatchNorm modules.
      fn_head: path of the dense layer turned into an FN head, or ``None``.
      fn_scale: the FN head's initial scale (`FNHead.scale_init`).
      fn_log_scale: whether the FN head trains ``log(s)``.
      zero_init: paths of kept BatchNorms whose scale starts at zero.
      folds: one `BatchNormFold` per removed BatchNorm: what it keeps, and
        where a trained one's map goes when variables are converted.
      initial: the original model's constant-initialised variables
        (`LessBNPlan.initial`): what tells trained variables from fresh
        ones when they are converted. Empty (a wrapper built by hand): the
        BatchNorms' running statistics found in the variables, which Flax
        starts at 0 and 1.
    """

    network: nn.Module
    removed: tuple[tuple[Any, ...], ...] = ()
    fn_head: tuple[Any, ...] | None = None
    fn_scale: float = 1.0
    fn_log_scale: bool = False
    zero_init: tuple[tuple[Any, ...], ...] = ()
    folds: tuple[BatchNormFold, ...] = ()
    initial: tuple[InitialValue, ...] = ()

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
        folds = {fold.path: fold for fold in self.folds}
        scale = (self.fn_scale, self.fn_log_scale)

        def intercept(next_fun, args, kwargs, context):
            module = context.module
            path = tuple(module.path)
            if context.method_name != "__call__":
                return next_fun(*args, **kwargs)
            if path in removed:
                return _removed_batch_norm(module, args[0], folds.get(path))
            if path == fn_head:
                return _linen_fn_head(module, args[0], *scale)
            if path in zero_init:
                return _with_zero_scale(module, next_fun, args, kwargs)
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(intercept):
            return self.network(*args, **kwargs)

    def constant_variables(self, model_state) -> Any:
        """A bool per leaf of `model_state` (the variables but ``params``):
        whether this model only reads it (a removed BatchNorm's kept map).

        A train step leaves such leaves as they are: never averaged over
        devices, whose rounding would move them.
        """
        kept = {
            (FOLD_COLLECTION, *fold.path, FOLD_NAMES[part])
            for fold in self.folds
            for part in fold.keeps
        }
        return jax.tree_util.tree_map_with_path(
            lambda path, _: tree_utils.path_names(path) in kept, model_state
        )

    def convert_variables(self, variables, *, trained: bool | None = None):
        """Variables of `network` -> variables of this model.

        Weights brought in are never silently re-initialised or
        transformed: their function is kept, or the conversion is refused
        (see ``less_bn_weights``). Whether they were trained is what the
        caller says (`trained`), or else read from the variables that the
        model initialises at a constant (`LessBNPlan.initial`: running
        statistics, biases, BatchNorm scales, each against the model's own
        initialiser, so a scale the model starts at zero reads as fresh).

        - Trained: each removed BatchNorm is folded into the convolution or
          dense layer before it (kernel times ``scale / sqrt(var + eps)``
          per output channel, the shift into its bias; what the layer
          cannot take stays in the BatchNorm's ``fold_bias`` and
          ``fold_scale``, `folds`), so the model's outputs in evaluation
          are the original's; the `zero_init` scales keep their values;
          an FN head in place of the dense layer is refused.
        - Fresh: the removed BatchNorms are dropped (their kept map is the
          identity), the `zero_init` BatchNorms' scales become zero, and
          the FN head replaces the dense layer (bias dropped, scale
          `fn_scale` added).

        Variables that are already converted come back unchanged.

        Args:
          variables: the original model's variables (``module.init``'s).
          trained: ``True`` or ``False`` to say whether they were trained;
            ``None`` reads it from them.

        Raises:
          ValueError: the FN head would replace a trained dense layer, or a
            trained removed BatchNorm cannot be folded (the message says
            why and what to do); ``trained=False`` given for weights a
            variable shows were trained; ``None`` where no variable tells;
            a partitioned (boxed) variable annotated to shard over more
            than one device (`boxed_variables.unbox_linen`).
        """
        # Boxes annotated to shard refused, the others opened (the split
        # after this would; the folds read arrays).
        variables = flax.core.unfreeze(boxed_variables.unbox_linen(variables))
        params = variables.get("params", {})
        if not _is_original(variables, self):
            return variables
        # Built without the plan's record (a LinenLessBN made by hand): the
        # running statistics, which Flax starts at 0 and 1 in every model.
        initial = self.initial or _every_running_statistic(variables)
        why = less_bn_weights.why_trained(
            trained,
            *less_bn_weights.trained_evidence(
                initial, lambda value: _held(variables, value)
            ),
        )
        if self.fn_head is not None and _fn_head_unconverted(params, self):
            if why is not None:
                raise less_bn_weights.refuse_trained_fn_head(
                    path_str(self.fn_head), why
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
            fold = folds.get(tuple(path))
            if values and why is not None:
                _fold(variables, fold, path, values)
            elif fold is not None and fold.keeps:
                _keep(variables, fold, *_identity(fold))
        if why is None:
            for path in self.zero_init:
                norm = nested_get(params, path)
                if "scale" in norm:
                    norm["scale"] = jnp.zeros_like(norm["scale"])
        return variables


def _is_original(variables: dict, model: LinenLessBN) -> bool:
    """Whether `variables` are the original network's (not converted)."""
    params = variables.get("params", {})
    kept = set(FOLD_NAMES.values())
    for path in model.removed:
        for collection in variables.values():
            held = nested_get(collection, path)
            if nested_has(collection, path) and not (
                isinstance(held, dict) and set(held) <= kept
            ):
                return True
    return model.fn_head is not None and _fn_head_unconverted(params, model)


def _batch_norm_values(variables: dict, path) -> dict[str, Any]:
    """A BatchNorm's ``scale``, ``bias``, ``mean``, ``var`` (those held)."""
    values: dict[str, Any] = {}
    for collection in variables.values():
        held = nested_get(collection, path)
        if isinstance(held, dict):
            values.update(
                (k, v)
                for k, v in held.items()
                if k in less_bn_weights.BATCH_NORM_VARIABLES
            )
    return values


def _held(variables: dict, value) -> Any:
    """The value `variables` hold for an `InitialValue`, or ``None``."""
    for collection in variables.values():
        layer = nested_get(collection, value.path)
        if isinstance(layer, dict) and value.name in layer:
            return layer[value.name]
    return None


def _every_running_statistic(variables: dict) -> tuple[InitialValue, ...]:
    """The `InitialValue` of every BatchNorm's running mean and variance in
    `variables` (a module whose model-state collection holds both)."""
    found: list[InitialValue] = []

    def walk(tree, path):
        if not isinstance(tree, dict):
            return
        if "mean" in tree and "var" in tree:
            found.extend(running_statistics(path).values())
            return
        for key, value in tree.items():
            walk(value, (*path, key))

    for name, collection in variables.items():
        if name != "params":
            walk(collection, ())
    return tuple(found)


def _fold(variables: dict, fold, path, values) -> None:
    """Folds a trained removed BatchNorm's ``x * a + b`` (see `BatchNormFold`)
    into `variables`: into the layer before it, the rest kept."""
    if fold is None:
        raise ValueError(
            f"The removed BatchNorm {path_str(path)} holds trained values, "
            "and this LinenLessBN was built without its `folds`, so they "
            "cannot be folded into the layer before it: build the model with "
            "`boostax.less_bn` (which plans the folds)."
        )
    a, b = less_bn_weights.folded_affine(fold, values, jnp.float32)
    if fold.into is not None:
        into = nested_get(variables.get("params", {}), fold.into)
        shift = less_bn_weights.fold_into_layer(into, a, b)
        if (shift is None) != ("bias" not in fold.keeps):
            raise ValueError(
                f"The layer {path_str(fold.into)} before the removed "
                f"BatchNorm {path_str(path)} "
                + ("has" if shift is None else "has no")
                + " bias in the variables given, and the model's has "
                + ("none" if shift is None else "one")
                + ": pass variables of the model the step was built for."
            )
        # The layer took the scale, and the shift where it has a bias.
        b = jnp.zeros_like(b) if shift is None else shift
        a = jnp.ones_like(a)
    _keep(variables, fold, a, b)


def _identity(fold: BatchNormFold) -> tuple[jax.Array, jax.Array]:
    """A fresh removed BatchNorm's kept map: ``x * 1 + 0``."""
    return (
        jnp.ones((fold.features,), jnp.float32),
        jnp.zeros((fold.features,), jnp.float32),
    )


def _keep(variables: dict, fold: BatchNormFold, a, b) -> None:
    """Puts the parts of ``x * a + b`` that `fold` keeps at its path."""
    kept = {
        FOLD_NAMES[part]: {"scale": a, "bias": b}[part] for part in fold.keeps
    }
    if kept:
        parent = variables.setdefault(FOLD_COLLECTION, {})
        for key in fold.path[:-1]:
            parent = parent.setdefault(key, {})
        parent[fold.path[-1]] = kept


def _last_axis(x: jax.Array, channels: jax.Array) -> tuple[int, ...]:
    """The shape that broadcasts per-channel values along `x`'s last axis."""
    return (1,) * (x.ndim - 1) + channels.shape


def _removed_batch_norm(norm, x: jax.Array, fold) -> jax.Array:
    """A removed BatchNorm: the part of its map it keeps (`BatchNormFold`;
    constants, the identity at initialisation), or the identity."""
    if fold is None:
        return x
    parts = (("scale", jnp.multiply, jnp.ones), ("bias", jnp.add, jnp.zeros))
    # The model's graph has no BatchNorm here: a shift by a constant.
    with model_graph.no_layer():
        for part, combine, init in parts:
            if part in fold.keeps:
                value = norm.scope.variable(
                    FOLD_COLLECTION,
                    FOLD_NAMES[part],
                    init,
                    (fold.features,),
                    jnp.float32,
                ).value
                value = value.astype(x.dtype).reshape(_last_axis(x, value))
                x = combine(x, value)
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
    assert dense.scope is not None  # bound: intercepted in the model's call
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
