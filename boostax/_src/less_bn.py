# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN: fewer BatchNorms and a full-normalization (FN) classifier head.

MindSpore's LessBN removes the BatchNorms of a network that its graph pass
recognizes in 16 block patterns, turning each into the identity (no affine
either), and optionally replaces the last dense layer by an FN head. boostax
runs the same pass on the model's own data flow (`less_bn_patterns` on the
graph of `model_graph`), not on layer names:

=========================== ================================================
block                       BatchNorms removed (MindSpore's pattern numbers)
=========================== ================================================
ResNet bottleneck           the first two BNs of the residual branch and the
                            projection shortcut's BN (1-3)
ResNet basic block          the first BN of the residual branch and the
                            projection shortcut's BN (4-6)
MobileNetV2 inverted        the expansion conv's BN, when the block reads a
residual                    BN output (7, 11) or a residual add (8, 9)
MobileNetV2 head            the BN of the last conv-BN-ReLU6 before global
                            average pooling, without an FN head (10)
DenseNet layer              the BN applied to a concatenation (12, 13), a
                            max-pool transition's BN (13), the second BN of
                            a layer reading a max pool (16)
=========================== ================================================

The BN that feeds a residual add stays, and so does a DenseNet transition
with average pooling. Removed BNs disappear from the variables, so they have
no parameters, statistics or optimizer state. Training and evaluation use
the same reduced model.

References:
  MindSpore ``mindspore.boost.LessBN`` and the graph pass
  ``frontend/optimizer/irpass/less_batch_normalization.cc``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import flax.core
import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

from boostax._src import less_bn_patterns, model_graph, validation

FN_EPSILON = 1e-4


# ---------------------------------------------------------------------------
# The FN head.
# ---------------------------------------------------------------------------


def l2_normalize(x: jax.Array, axis: int, epsilon: float = FN_EPSILON):
    """``x / sqrt(max(sum(x**2, axis), epsilon))`` (MindSpore's L2Normalize)."""
    squared = jnp.sum(jnp.square(x), axis=axis, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(squared, epsilon))


def full_normalization(
    x: jax.Array, kernel: jax.Array, multiplier: jax.Array
) -> jax.Array:
    """The FN head: ``multiplier * normalize(x) @ normalize(kernel)``.

    Each sample is L2-normalized over its features and each output unit's
    weight vector over its fan-in (``kernel`` is ``(in, out)``), so the
    logits are cosine similarities scaled by the learned `multiplier`.
    Squared norms are clamped at 1e-4.
    """
    scale = jnp.reshape(multiplier, ())  # stored as (1,), like MindSpore's
    return scale * (l2_normalize(x, -1) @ l2_normalize(kernel, 0))


def check_fn_scale(scale_init, log_scale) -> tuple[float, bool]:
    """Validates the FN head's scale options (see `FNHead`)."""
    return (
        validation.check_number(
            "fn_scale", scale_init, minimum=0, open_minimum=True
        ),
        validation.check_bool("fn_log_scale", log_scale),
    )


def multiplier_name(log_scale: bool) -> str:
    """The FN head's scale parameter: ``multiplier`` or ``log_multiplier``."""
    return "log_multiplier" if log_scale else "multiplier"


def initial_multiplier(scale_init: float, log_scale: bool, dtype) -> jax.Array:
    """The stored value of the FN head's scale parameter at initialization."""
    value = math.log(scale_init) if log_scale else scale_init
    return jnp.full((1,), value, dtype)


def fn_scale(stored: jax.Array, log_scale: bool) -> jax.Array:
    """The multiplier of the logits from its stored parameter."""
    return jnp.exp(stored) if log_scale else stored


class FNHead(nn.Module):
    """Linen FN head: ``y = s * normalize(x) @ normalize(kernel)``.

    No bias. The scale ``s`` is trained: as ``multiplier`` (shape ``(1,)``,
    MindSpore's parametrisation, starting at `scale_init`), or with
    `log_scale` as ``log_multiplier`` (``s = exp(log_multiplier)``, starting
    at ``log(scale_init)``: a gradient step changes ``s`` by a fraction of
    itself, whatever its size). The kernel is ``(in, out)`` like
    ``nn.Dense``'s, so a trained Dense kernel converts as is.

    Why the scale matters: the logits are cosines in ``[-s, s]``, and with C
    classes the softmax loss cannot go below
    ``log(1 + (C - 1) exp(-C s / (C - 1)))`` (Wang et al., NormFace, 2017):
    1.38 nats at MindSpore's ``s = 1`` and C = 10, 0.03 at ``s = 5``.

    Attributes:
      features: number of outputs.
      kernel_init: initializer of the kernel.
      scale_init: the initial scale (> 0); MindSpore's is 1.
      log_scale: train ``log(s)`` instead of ``s``.
    """

    features: int
    kernel_init: Any = nn.linear.default_kernel_init
    scale_init: float = 1.0
    log_scale: bool = False
    boostax_layer_kind = "fn_head"

    def __post_init__(self):
        validation.check_int("features", self.features, minimum=1)
        validation.check_callable(
            "kernel_init", self.kernel_init, "an initializer (a callable)"
        )
        check_fn_scale(self.scale_init, self.log_scale)
        super().__post_init__()

    @nn.compact
    def __call__(self, x):
        kernel = self.param(
            "kernel", self.kernel_init, (x.shape[-1], self.features)
        )
        stored = self.param(
            multiplier_name(self.log_scale),
            lambda _, shape, dtype=jnp.float32: initial_multiplier(
                self.scale_init, self.log_scale, dtype
            ),
            (1,),
        )
        return full_normalization(x, kernel, fn_scale(stored, self.log_scale))


class NNXFNHead(nnx.Module):
    """NNX FN head (see `FNHead`).

    Args:
      in_features, out_features: sizes of the kernel ``(in, out)``.
      kernel: initial kernel, e.g. a trained ``nnx.Linear``'s (copied).
      rngs: for a random kernel when `kernel` is not given.
      scale_init: the initial scale (> 0); MindSpore's is 1.
      log_scale: train ``log(s)`` (``log_multiplier``) instead of ``s``.
    """

    boostax_layer_kind = "fn_head"

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel: jax.Array | None = None,
        rngs: nnx.Rngs | None = None,
        scale_init: float = 1.0,
        log_scale: bool = False,
    ):
        in_features = validation.check_int(
            "in_features", in_features, minimum=1
        )
        out_features = validation.check_int(
            "out_features", out_features, minimum=1
        )
        if kernel is None:
            if rngs is None:
                raise ValueError("Pass `kernel=` or `rngs=` to NNXFNHead.")
            validation.check_instance("rngs", rngs, nnx.Rngs, "an nnx.Rngs")
            kernel = nn.linear.default_kernel_init(
                rngs.params(), (in_features, out_features)
            )
        kernel = jnp.asarray(kernel)
        if kernel.shape != (in_features, out_features):
            raise ValueError(
                "`kernel` must have the shape (in_features, out_features) = "
                f"{(in_features, out_features)}, got {kernel.shape}."
            )
        scale_init, log_scale = check_fn_scale(scale_init, log_scale)
        self.log_scale = log_scale
        self.kernel = nnx.Param(kernel)
        stored = nnx.Param(
            initial_multiplier(scale_init, log_scale, self.kernel.dtype)
        )
        setattr(self, multiplier_name(log_scale), stored)

    @classmethod
    def from_linear(
        cls,
        linear: nnx.Linear,
        *,
        scale_init: float = 1.0,
        log_scale: bool = False,
    ) -> NNXFNHead:
        """Converts a (trained) ``nnx.Linear``: kernel copied, bias dropped."""
        return cls(
            linear.in_features,
            linear.out_features,
            kernel=linear.kernel[...],
            scale_init=scale_init,
            log_scale=log_scale,
        )

    def __call__(self, x):
        stored = getattr(self, multiplier_name(self.log_scale))[...]
        return full_normalization(
            x, self.kernel[...], fn_scale(stored, self.log_scale)
        )


class NNXIdentity(nnx.Module):
    """What a removed NNX BatchNorm becomes."""

    def __call__(self, x, *args, **kwargs):
        del args, kwargs
        return x


# ---------------------------------------------------------------------------
# Finding the BatchNorms to remove.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RemovedBatchNorm:
    """One BatchNorm LessBN removes.

    Attributes:
      path: the BN module's path, ``/``-joined.
      block: the structure recognized (e.g. ``"ResNet basic block,
        identity shortcut"``).
      reason: which BN of that structure this is.
      pattern: the number (1-16) of MindSpore's LessBN pattern that removed
        it.
    """

    path: str
    block: str
    reason: str
    pattern: int

    def __post_init__(self):
        for name in ("path", "block", "reason"):
            validation.check_str(name, getattr(self, name), allow_empty=True)
        validation.check_int_in("pattern", self.pattern, 1, 16)


@dataclasses.dataclass(frozen=True)
class LessBNReport:
    """What LessBN does to a model.

    Attributes:
      removed: the BatchNorms removed, in call order.
      kept: paths of the BatchNorms that stay.
      fn_head: path of the dense layer replaced by the FN head, or ``None``.
      removed_parameters: trainable parameters removed (BN scales and
        biases, and the dense bias when an FN head replaces it, minus the
        FN multiplier).
    """

    removed: tuple[RemovedBatchNorm, ...]
    kept: tuple[str, ...]
    fn_head: str | None
    removed_parameters: int

    def __post_init__(self):
        for r in validation.check_sequence(
            "removed", self.removed, "a tuple of RemovedBatchNorm"
        ):
            validation.check_instance(
                "removed", r, RemovedBatchNorm, "a tuple of RemovedBatchNorm"
            )
        for path in validation.check_sequence(
            "kept", self.kept, "a tuple of paths (strs)"
        ):
            validation.check_str("kept", path, allow_empty=True)
        if self.fn_head is not None:
            validation.check_str("fn_head", self.fn_head, allow_empty=True)
        # Negative when an FN head replaces a bias-free layer (+1 multiplier).
        validation.check_int("removed_parameters", self.removed_parameters)

    def __str__(self) -> str:
        lines = [
            f"LessBN: {len(self.removed)} of "
            f"{len(self.removed) + len(self.kept)} BatchNorms removed, "
            f"{self.removed_parameters} parameters fewer."
        ]
        lines += [
            f"  - {r.path}: {r.block}, {r.reason} (pattern {r.pattern})"
            for r in self.removed
        ]
        lines += [f"  = {path}: kept" for path in self.kept]
        if self.fn_head is not None:
            lines.append(f"  FN head replaces dense layer {self.fn_head}")
        return "\n".join(lines)


def path_str(path: Sequence[Any]) -> str:
    return "/".join(str(p) for p in path)


@dataclasses.dataclass(frozen=True)
class LessBNPlan:
    """The decisions of LessBN for one model.

    Attributes:
      removed: module paths of the BatchNorms to remove.
      fn_head: module path of the dense layer to turn into an FN head.
      excluded_from_gc: module paths gradient centralization leaves alone
        (grouped and depthwise convolutions, FN heads).
      report: the `LessBNReport`.
      fn_scale: the FN head's initial scale (`FNHead.scale_init`).
      fn_log_scale: whether the FN head trains ``log(s)``.
      zero_init: paths of the kept BatchNorms whose scale starts at zero
        (the last BatchNorm of each residual branch, with
        ``zero_init_residual``), so that each block starts as the identity.
    """

    removed: tuple[tuple[Any, ...], ...]
    fn_head: tuple[Any, ...] | None
    excluded_from_gc: tuple[tuple[Any, ...], ...]
    report: LessBNReport
    fn_scale: float = 1.0
    fn_log_scale: bool = False
    zero_init: tuple[tuple[Any, ...], ...] = ()


def residual_branch_ends(
    graph: model_graph.Graph, removed: Sequence[tuple[Any, ...]]
) -> tuple[tuple[Any, ...], ...]:
    """The kept BatchNorms that end a residual branch LessBN thinned.

    A BatchNorm ends a residual branch when a residual add reads its output
    (through reshapes and casts); the branch was thinned when LessBN removed
    a BatchNorm upstream of it within the same block (before the add's
    other operand joins). Zero-initialising their scales (Goyal et al.,
    2017; torchvision's ``zero_init_residual``) makes every such block start
    as the identity, the role SkipInit's and Fixup's zero gates play in
    BatchNorm-free networks.
    """
    removed = set(removed)
    ends = []
    for node in graph.layers("batch_norm"):
        if node.path in removed:
            continue
        if not any(c.kind == "add" for c in graph.data_consumers(node)):
            continue
        upstream = [
            n.path
            for n in graph.backward_chain(node)[1:]
            if n.kind == "batch_norm" or n.kind == "add"
        ]
        # Up to the previous block's add (the block's input).
        for path in upstream:
            if path is None:
                break
            if path in removed:
                ends.append(node.path)
                break
    return tuple(ends)


def plan_less_bn(
    graph: model_graph.Graph,
    *,
    fn_flag: bool,
    param_counts,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
    zero_init_residual: bool = False,
) -> LessBNPlan:
    """Applies the rules to a model graph.

    Args:
      graph: the model's `model_graph.Graph`.
      fn_flag: also replace the last dense layer by an FN head.
      param_counts: ``param_counts(path) -> int``, the number of trainable
        parameters of the module at `path`.
      fn_scale, fn_log_scale: the FN head's scale (see `FNHead`).
      zero_init_residual: start each thinned residual branch's last
        BatchNorm at scale zero (`residual_branch_ends`).
    """
    fn_head_node = None
    if fn_flag:
        dense = list(graph.layers("dense"))
        if dense:
            fn_head_node = dense[-1]
        else:
            warnings.warn(
                "LessBN: fn_flag=True but the model has no dense layer to "
                "replace by an FN head.",
                UserWarning,
                stacklevel=3,
            )
    # MindSpore's FN head puts L2Normalize before its MatMul, so the dense
    # layer it replaces starts no match.
    matches = less_bn_patterns.match(
        graph, not_starts=() if fn_head_node is None else (fn_head_node.id,)
    )
    removed_paths = [graph.nodes[m.batch_norm].path for m in matches]
    kept = tuple(
        path_str(n.path)
        for n in graph.layers("batch_norm")
        if n.path not in removed_paths
    )
    removed_parameters = sum(param_counts(p) for p in removed_paths)
    fn_head = None
    if fn_head_node is not None:
        fn_head = fn_head_node.path
        # The bias goes, the multiplier comes.
        module = fn_head_node.call.module
        use_bias = getattr(module, "use_bias", True)
        features = getattr(
            module, "features", getattr(module, "out_features", 0)
        )
        removed_parameters += (features if use_bias else 0) - 1
    report = LessBNReport(
        removed=tuple(
            RemovedBatchNorm(
                path_str(path), m.pattern.block, m.role, m.pattern.number
            )
            for path, m in zip(removed_paths, matches, strict=True)
        ),
        kept=kept,
        fn_head=None if fn_head is None else path_str(fn_head),
        removed_parameters=removed_parameters,
    )
    excluded = [
        n.path for n in graph.nodes if n.kind in ("grouped_conv", "fn_head")
    ]
    if fn_head is not None:
        excluded.append(fn_head)
    return LessBNPlan(
        tuple(removed_paths),
        fn_head,
        tuple(excluded),
        report,
        fn_scale=fn_scale,
        fn_log_scale=fn_log_scale,
        zero_init=residual_branch_ends(graph, removed_paths)
        if zero_init_residual
        else (),
    )


# ---------------------------------------------------------------------------
# Linen.
# ---------------------------------------------------------------------------


def _linen_plan(module, sample_inputs, **options) -> LessBNPlan:
    graph = model_graph.model_graph(module, sample_inputs)
    params = model_graph.param_shapes(module, sample_inputs)

    def count(path):
        subtree = params
        for key in path:
            subtree = subtree.get(key, {})
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
        original = any(_has_path(params, p) for p in self.removed) or (
            self.fn_head is not None and _fn_head_unconverted(params, self)
        )
        if not original:
            return variables
        for path in self.removed:
            for collection in variables.values():
                _pop_path(collection, path)
        if self.fn_head is not None:
            head = _get_path(params, self.fn_head)
            if "kernel" in head:
                head.pop("bias", None)
                head[multiplier_name(self.fn_log_scale)] = initial_multiplier(
                    self.fn_scale, self.fn_log_scale, head["kernel"].dtype
                )
        for path in self.zero_init:
            norm = _get_path(params, path)
            if "scale" in norm:
                norm["scale"] = jnp.zeros_like(norm["scale"])
        return variables


def _get_path(tree: dict, path) -> dict:
    for key in path:
        tree = tree.get(key, {})
    return tree


def _has_path(tree: dict, path) -> bool:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return False
        tree = tree[key]
    return True


def _fn_head_unconverted(params: dict, model: LinenLessBN) -> bool:
    head = _get_path(params, model.fn_head)
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


def _pop_path(tree: dict, path) -> None:
    for key in path[:-1]:
        tree = tree.get(key)
        if not isinstance(tree, dict):
            return
    tree.pop(path[-1], None)


# ---------------------------------------------------------------------------
# NNX.
# ---------------------------------------------------------------------------


def _nnx_plan(model, sample_inputs, **options) -> LessBNPlan:
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


def _apply_nnx_plan(model: nnx.Module, plan: LessBNPlan) -> nnx.Module:
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


# ---------------------------------------------------------------------------
# Public entry points.
# ---------------------------------------------------------------------------


def plan(
    model,
    sample_inputs,
    *,
    fn_flag: bool = False,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
    zero_init_residual: bool = False,
) -> LessBNPlan:
    """The LessBN decisions for a Linen or NNX `model` (shapes only)."""
    validation.check_bool("fn_flag", fn_flag)
    fn_scale, fn_log_scale = check_fn_scale(fn_scale, fn_log_scale)
    validation.check_bool("zero_init_residual", zero_init_residual)
    if not fn_flag and (fn_scale != 1.0 or fn_log_scale):
        raise ValueError(
            "`fn_scale` and `fn_log_scale` set the FN head, which only "
            "`fn_flag=True` builds: got fn_flag=False with "
            f"fn_scale={fn_scale!r}, fn_log_scale={fn_log_scale!r}."
        )
    options = dict(
        fn_flag=fn_flag,
        fn_scale=fn_scale,
        fn_log_scale=fn_log_scale,
        zero_init_residual=zero_init_residual,
    )
    if isinstance(model, LinenLessBN):
        model = model.network
    if isinstance(model, nn.Module):
        return _linen_plan(model, sample_inputs, **options)
    if isinstance(model, nnx.Module):
        return _nnx_plan(model, sample_inputs, **options)
    raise TypeError(
        "`model` must be a Flax Linen or NNX module, got "
        f"{type(model).__name__}."
    )


def less_bn_report(model, sample_inputs, *, fn_flag: bool = False):
    """Says which BatchNorms `less_bn` removes from `model`, and why.

    Args:
      model: a Flax Linen or NNX module.
      sample_inputs: one batch of inputs (or a tuple of positional inputs);
        only shapes and dtypes are used.
      fn_flag: whether the last dense layer becomes an FN head.

    Returns:
      A `LessBNReport`; ``print(report)`` lists each BatchNorm.
    """
    return plan(model, sample_inputs, fn_flag=fn_flag).report


def apply_plan(model, less_bn_plan: LessBNPlan):
    """Builds the reduced model from a plan (see `less_bn`)."""
    if not less_bn_plan.removed and less_bn_plan.fn_head is None:
        warnings.warn(
            "LessBN found no BatchNorm structure it knows (ResNet, "
            "MobileNetV2, DenseNet blocks) in the model; it is returned "
            "unchanged.",
            UserWarning,
            stacklevel=3,
        )
        return model
    if isinstance(model, nn.Module):
        return LinenLessBN(
            model,
            less_bn_plan.removed,
            less_bn_plan.fn_head,
            fn_scale=less_bn_plan.fn_scale,
            fn_log_scale=less_bn_plan.fn_log_scale,
            zero_init=less_bn_plan.zero_init,
        )
    return _apply_nnx_plan(model, less_bn_plan)


def is_reduced(model) -> bool:
    """Whether LessBN already reduced `model`."""
    if isinstance(model, LinenLessBN):
        return True
    if isinstance(model, nnx.Module):
        return any(
            isinstance(m, (NNXIdentity, NNXFNHead))
            for _, m in nnx.iter_modules(model)
        )
    return False


def variables_converter(reduced_model, less_bn_plan: LessBNPlan):
    """A function turning the original model's variables into the reduced's.

    Linen: ``reduced_model.convert_variables``. NNX: LessBN applied to the
    given module (its weights carried over); a module that already has the
    reduced structure is returned as is.
    """
    if isinstance(reduced_model, LinenLessBN):
        return reduced_model.convert_variables
    if isinstance(reduced_model, nnx.Module):
        graphdef = nnx.graphdef(reduced_model)

        def convert(module):
            if nnx.graphdef(module) == graphdef:
                return module
            return _apply_nnx_plan(module, less_bn_plan)

        return convert
    return None


def less_bn(
    model,
    sample_inputs,
    *,
    fn_flag: bool = False,
    fn_scale: float = 1.0,
    fn_log_scale: bool = False,
    zero_init_residual: bool = False,
):
    """Removes BatchNorms by MindSpore's LessBN rules.

    MindSpore's 16 patterns are matched on the model's data flow on
    `sample_inputs` (see the module docstring). A model with none of them is
    returned unchanged, with a warning.

    Args:
      model: a Flax Linen or NNX module.
      sample_inputs: one batch of inputs (or a tuple of positional inputs);
        only shapes and dtypes are used.
      fn_flag: replace the last dense layer by an FN head (kernel copied,
        bias dropped, scale `fn_scale`).
      fn_scale: the FN head's initial scale (MindSpore: 1; see `FNHead`).
      fn_log_scale: train the FN head's ``log(s)`` instead of ``s``.
      zero_init_residual: start the BatchNorm that ends each thinned residual
        branch at scale zero, so each block starts as the identity (for
        training from scratch).

    Returns:
      Linen: a `LinenLessBN` wrapping `model` (same variable paths minus the
      removed BNs; ``.convert_variables`` converts the original's
      variables). NNX: a new module in which removed BatchNorms are
      identities and the FN head replaces the last ``nnx.Linear``, carrying
      `model`'s current weights (`model` is not modified).

    Example:
      >>> import jax, jax.numpy as jnp, boostax
      >>> from boostax.examples import models
      >>> x = jnp.zeros((1, 8, 8, 1))
      >>> model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
      >>> reduced = boostax.less_bn(model, x, fn_flag=True)
      >>> report = boostax.less_bn_report(model, x, fn_flag=True)
      >>> [r.path for r in report.removed]
      ['BasicBlock_0/BatchNorm_0', 'BasicBlock_1/BatchNorm_0', \
'BasicBlock_1/BatchNorm_2']
      >>> variables = reduced.init(jax.random.PRNGKey(0), x, train=False)
      >>> sorted(variables["params"]["Dense_0"])
      ['kernel', 'multiplier']
    """
    return apply_plan(
        model,
        plan(
            model,
            sample_inputs,
            fn_flag=fn_flag,
            fn_scale=fn_scale,
            fn_log_scale=fn_log_scale,
            zero_init_residual=zero_init_residual,
        ),
    )
