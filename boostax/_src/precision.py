# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Mixed precision: the dtype a train step computes its forward and backward in.

A `PrecisionPolicy` keeps the parameters, the optimizer state and the model
state (BatchNorm statistics) in float32 and runs the model in a half
precision *compute dtype*::

    inputs   -> compute dtype            (floating leaves of the inputs)
    layers   -> dtype = compute dtype    (every Flax layer but the
                                          normalisations: it casts its own
                                          float32 parameters and inputs)
    outputs  -> float32                  (the loss is computed in float32)
    grads    :  float32                  (the transpose of each cast)

so the optimizer, accumulation, DimReduce and the loss scales see float32
gradients, as with float32 training. Flax's normalisation layers
(`NORMALIZATION_LAYERS`) run in float32 under O2 (MindSpore's
``keep_batchnorm_fp32``): parameters, statistics and arithmetic; the next
layer casts their output to the compute dtype. A layer whose class is named
in ``float32_modules`` runs entirely in float32 too. At every half level the
softmax of Flax's attention layers (with Flax's own ``attention_fn``) runs
in float32, its two matmuls in the compute dtype
(`step_attributes.float32_softmax_attention`); a model's own softmax and an
``attention_fn`` it sets itself compute in the compute dtype.

MindSpore's amp levels by name (`precision_policy`):

======  ==============================================================
``O0``  float32 everywhere (the step is unchanged, bit for bit)
``O2``  half precision; parameters float32, cast by each layer;
        normalisation layers, attention softmax and the loss in
        float32; a dynamic loss scale when the compute dtype is
        float16
``O3``  every parameter cast to half precision before the forward
        (normalisation parameters too); attention softmax and the
        loss in float32; a dynamic loss scale by default with float16
        (MindSpore's O3 sets none)
======  ==============================================================

MindSpore's ``O1`` casts a white list of operators; it is not built
(`precision_policy` raises ``NotImplementedError``).

A precision that can underflow brings or demands its loss scale: float16's
gradients round to zero below 6e-8, so a float16 policy brings a dynamic
loss scale unless told otherwise, and a step built from a float16 policy
without one (``loss_scale=None``) and without the step's own `loss_scale`
raises. ``loss_scale="off"`` is the explicit way to train float16
unscaled. bfloat16 has float32's exponent range and needs none.

References:
  Micikevicius et al., "Mixed Precision Training", ICLR 2018.
  MindSpore, ``mindspore.amp.build_train_network`` (``amp_level``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from boostax._src import tree_diff, validation
from boostax._src.step import context as step_context

PyTree = Any

FLOAT32 = jnp.dtype(jnp.float32)
COMPUTE_DTYPES = {
    "float32": FLOAT32,
    "bfloat16": jnp.dtype(jnp.bfloat16),
    "float16": jnp.dtype(jnp.float16),
}
LEVELS = ("O0", "O2", "O3")
# Flax's normalisation layers (Linen and NNX): float32 under O2. (NNX's
# cast their scale and bias to their ``dtype``: float32 keeps them whole.)
NORMALIZATION_LAYERS = frozenset(
    {"BatchNorm", "LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm"}
)
# "auto": "dynamic" with float16, None otherwise (resolved when built);
# "off": no loss scale, on purpose (None with float16 demands the step's).
LOSS_SCALES = ("auto", "dynamic", None, "off")
# The compute dtypes whose gradients underflow without a loss scale.
UNDERFLOWING_DTYPES = frozenset({jnp.dtype(jnp.float16)})
# A float16 backward needs its gradients scaled up into float16's range;
# 2**15 is the start of jmp's README and of TensorFlow's dynamic loss scale
# (Flax's DynamicScale starts at 2**16; MindSpore at 2**24, which overflows
# float16 on the first steps until it has backed off).
POLICY_LOSS_SCALE = 2.0**15


def _as_dtype(value: Any) -> jnp.dtype | None:
    """`value` as a ``jnp.dtype``, ``None`` where NumPy understands none."""
    try:
        return jnp.dtype(value)
    except (TypeError, ValueError):  # "data type 'x' not understood"
        return None


def _check_dtype(name: str, value: Any, allowed=tuple(COMPUTE_DTYPES)):
    """`value` as a ``jnp.dtype`` among the floating dtypes named."""
    dtype = _as_dtype(value)
    if dtype is None or dtype.name not in allowed:
        raise ValueError(
            f"`{name}` must be one of {allowed} (a name or a jnp dtype), "
            f"{validation.got(value)}."
        )
    return dtype


@dataclasses.dataclass(frozen=True)
class PrecisionPolicy:
    """The dtypes of a train step's forward and backward pass.

    Parameters, optimizer state and model state stay float32; the forward
    and backward pass run in `compute_dtype` (see the module docstring for
    where each cast happens).

    Args:
      compute_dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
      cast_params: cast every parameter to `compute_dtype` before the
        forward, and run normalisation layers in it too (MindSpore's O3;
        Flax still reduces their statistics in float32). ``False``: each
        Flax layer casts its own (its ``dtype``), normalisation layers run
        in float32 (O2).
      float32_modules: class names of layers that run entirely in float32
        (their ``dtype`` set to float32), e.g. ``("Dense",)`` for a last
        layer whose logits need float32's range. With `cast_params`, their
        parameters arrive rounded to the compute dtype.
      loss_scale: ``"auto"`` (default): ``"dynamic"`` with a float16
        `compute_dtype`, ``None`` otherwise. ``"dynamic"``: the step uses a
        `DynamicLossScale` starting at 2**15 unless one is passed to the
        step (needed with float16, whose gradients round to zero below
        6e-8). ``None``: the policy brings none; with float16 the step then
        needs its own ``loss_scale=`` and raises without one. ``"off"``:
        none, on purpose (float16 trains unscaled, its small gradients
        flushed to zero).
      recompute_float32: with a half `compute_dtype`, the backward pass
        recomputes the float32 intermediates of the forward pass
        (normalisation arithmetic, the softmax of the loss and of
        attention) from the half-precision values it saves, instead of
        saving them (``jax.checkpoint`` with `save_half_precision`): the saved
        activations are then in the compute dtype, for the price of that
        recomputation (elementwise work, no convolution or matmul).
      reduce_dtype: the dtype data-parallel gradients are averaged in
        (``"float32"``, or `compute_dtype`: half the bytes on the wire,
        gradients rounded before the mean). Only the ``"mean"`` reduction
        takes a half one: AdaSum's dot products need float32.
      name: a label for reports (the amp level it was built from).

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> policy = boostax.precision_policy("O2", "bfloat16")
      >>> policy.compute_dtype == jnp.bfloat16, policy.loss_scale
      (True, None)
      >>> boostax.precision_policy("O2").loss_scale  # float16
      'dynamic'
      >>> boostax.PrecisionPolicy("float16").loss_scale  # brings its own
      'dynamic'
    """

    compute_dtype: Any = "float32"
    cast_params: bool = False
    float32_modules: tuple[str, ...] = ()
    loss_scale: str | None = "auto"
    recompute_float32: bool = True
    reduce_dtype: Any = "float32"
    name: str = ""

    def __post_init__(self):
        compute = _check_dtype("compute_dtype", self.compute_dtype)
        object.__setattr__(self, "compute_dtype", compute)
        validation.check_bool("cast_params", self.cast_params)
        modules = self.float32_modules
        if isinstance(modules, str) or not all(
            isinstance(m, str) for m in modules
        ):
            raise TypeError(
                "`float32_modules` must be a tuple of layer class names "
                f"(e.g. ('Dense',)), {validation.got(modules)}."
            )
        object.__setattr__(self, "float32_modules", tuple(modules))
        validation.check_one_of("loss_scale", self.loss_scale, LOSS_SCALES)
        if self.loss_scale == "auto":
            object.__setattr__(
                self,
                "loss_scale",
                "dynamic" if compute in UNDERFLOWING_DTYPES else None,
            )
        validation.check_bool("recompute_float32", self.recompute_float32)
        reduce = _check_dtype(
            "reduce_dtype",
            self.reduce_dtype,
            allowed=tuple(sorted({"float32", compute.name})),
        )
        object.__setattr__(self, "reduce_dtype", reduce)
        validation.check_str("name", self.name, allow_empty=True)

    @property
    def is_float32(self) -> bool:
        """Whether the policy changes nothing: float32 compute, no float32
        layers named, no loss scale asked for."""
        return (
            self.compute_dtype == FLOAT32
            and not self.float32_modules
            and self.loss_scale in (None, "off")
        )

    @property
    def needs_loss_scale(self) -> bool:
        """Whether the step must bring a loss scale of its own: a compute
        dtype that underflows (float16) and a policy that brings none
        without having been told ``loss_scale="off"``."""
        underflows = self.compute_dtype in UNDERFLOWING_DTYPES
        return underflows and self.loss_scale is None

    @property
    def recomputes(self) -> bool:
        """Whether the step rematerialises its float32 intermediates."""
        return self.recompute_float32 and self.compute_dtype != FLOAT32

    def module_dtype(self, module: Any) -> jnp.dtype:
        """The ``dtype`` a layer computes in under this policy."""
        name = type(module).__name__
        if name in self.float32_modules:
            return FLOAT32
        if name in NORMALIZATION_LAYERS and not self.cast_params:
            # O2 (MindSpore's keep_batchnorm_fp32): parameters, statistics
            # and arithmetic in float32; the next layer casts the output.
            return FLOAT32
        return self.compute_dtype

    def cast_inputs(self, tree: PyTree) -> PyTree:
        """`tree` with its floating leaves in the compute dtype."""
        return cast_floating(tree, self.compute_dtype)

    def cast_outputs(self, tree: PyTree) -> PyTree:
        """`tree` with its floating leaves in float32 (the loss's dtype)."""
        return cast_floating(tree, FLOAT32)

    def cast_parameters(self, params: PyTree) -> PyTree:
        """`params` as the forward reads them (cast only with `cast_params`)."""
        if not self.cast_params:
            return params
        return cast_floating(params, self.compute_dtype)


def cast_floating(tree: PyTree, dtype) -> PyTree:
    """`tree` with every floating-point leaf cast to `dtype`."""

    def cast(x):
        current = getattr(x, "dtype", None)
        if (
            current is not None
            and jnp.issubdtype(current, jnp.floating)
            and current != dtype
        ):
            return jnp.asarray(x, dtype)
        return x

    return jax.tree.map(cast, tree)


def master_params(params: PyTree) -> PyTree:
    """`params` as float32 master weights.

    A floating-point leaf narrower than float32 (bfloat16, float16) is cast
    to float32, which holds its value exactly; every other leaf is kept.
    Updates, optimizer moments and the weights themselves then accumulate
    in float32: a half-precision master loses small updates to rounding
    (a bfloat16 weight near 1 moves in steps of 2**-7). Computing in half
    precision is the `PrecisionPolicy`'s job, which casts the masters for
    the forward pass.
    """

    def upcast(x):
        dtype = getattr(x, "dtype", None)
        if (
            dtype is not None
            and jnp.issubdtype(dtype, jnp.floating)
            and jnp.finfo(dtype).bits < 32
        ):
            return jnp.asarray(x, jnp.float32)
        return x

    return jax.tree.map(upcast, params)


def check_cast_batch(value: Any, *, allow_function: bool = True) -> Any:
    """Validates a ``cast_batch=`` argument (see `cast_batch_leaves`);
    without `allow_function`, what such a function returned."""
    if allow_function and (value is None or callable(value)):
        return value
    leaves = [] if callable(value) else jax.tree.leaves(value)
    if not leaves or not all(isinstance(x, bool) for x in leaves):
        raise TypeError(
            "`cast_batch` must be None, a pytree of bools that is a prefix "
            "of the batch (e.g. (True, False) for an (inputs, targets) "
            "pair: True for the inputs to cast) or a function of the batch "
            f"returning one, {validation.got(value)}."
        )
    return value


def cast_batch_leaves(batch: PyTree, cast_batch: Any, dtype) -> PyTree:
    """`batch` with the floating leaves `cast_batch` marks cast to `dtype`.

    Args:
      batch: the batch a plain ``loss_fn(params, batch)`` receives.
      cast_batch: a pytree of bools, a prefix of `batch` (``True``: the
        floating leaves below are inputs, cast), or a function of the batch
        returning one.
      dtype: the compute dtype.

    Returns:
      The batch, every leaf not marked (targets, integer data) as given.
    """
    mask = cast_batch(batch) if callable(cast_batch) else cast_batch
    check_cast_batch(mask, allow_function=False)
    try:
        return jax.tree.map(
            lambda cast, sub: cast_floating(sub, dtype) if cast else sub,
            mask,
            batch,
        )
    except ValueError as e:
        raise ValueError(
            "`cast_batch` must be a prefix of the batch's structure: got "
            f"{tree_diff.describe(mask)} for a batch "
            f"{tree_diff.describe(batch)} ({e})."
        ) from None


_REDUCTIONS = ("reduce_", "argmax", "argmin")
_MATMULS = ("dot_general", "conv_general_dilated")


def save_half_precision(prim, *avals, **params) -> bool:
    """A ``jax.checkpoint`` policy: save what is not a float32 activation.

    The backward pass may keep an intermediate when it is not float32 (the
    half-precision outputs of layers, boolean masks), when it is a
    reduction (per-channel statistics: small) or the output of a
    convolution or matmul (a float32 layer's: too costly to recompute).
    Every other float32 value (elementwise arithmetic) is recomputed. JAX
    gives a policy the primitive's operands; the output dtype is the
    operands' (or the target of a ``convert_element_type``).
    """
    if prim.name.startswith(_REDUCTIONS) or prim.name in _MATMULS:
        return True
    if prim.name == "convert_element_type":
        dtype = jnp.dtype(params["new_dtype"])
    else:
        floats = [
            a.dtype
            for a in avals
            if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)
        ]
        dtype = jnp.result_type(*floats) if floats else None
    return dtype != FLOAT32


def precision_policy(
    level: str = "O2", dtype: Any = None, **overrides
) -> PrecisionPolicy:
    """The `PrecisionPolicy` of a MindSpore amp level.

    Args:
      level: ``"O0"`` (float32), ``"O2"`` (half precision, normalisation
        and the loss in float32) or ``"O3"`` (all parameters half).
      dtype: the half dtype of O2/O3, ``"float16"`` (MindSpore's; default)
        or ``"bfloat16"``. A dynamic loss scale is the default with float16
        only: bfloat16 has float32's exponent range.
      **overrides: any other field of `PrecisionPolicy`.

    Returns:
      The policy, named after `level`.

    Raises:
      NotImplementedError: for ``"O1"`` (MindSpore's white list of float16
        operators is not built; ``"O2"`` is the closest).
      ValueError: for another level, or a dtype that does not fit it.
    """
    if isinstance(level, str) and level == "O1":
        raise NotImplementedError(
            "amp level 'O1' (MindSpore's white list of float16 operators) "
            "is not built in boostax; 'O2' (every layer in half precision, "
            "normalisation layers and the loss in float32) is the "
            "closest."
        )
    validation.check_one_of("level", level, LEVELS)
    if level == "O0":
        if dtype is not None and _as_dtype(dtype) != FLOAT32:
            raise ValueError(
                "amp level 'O0' computes in float32: `dtype` must be None or "
                f"'float32', {validation.got(dtype)}; use 'O2' or 'O3' "
                "(with 'bfloat16' or 'float16') for half precision."
            )
        return PrecisionPolicy(name="O0", **overrides)
    half = _check_dtype(
        "dtype", "float16" if dtype is None else dtype, ("bfloat16", "float16")
    )
    fields = dict(
        compute_dtype=half,
        cast_params=level == "O3",
        name=f"{level} ({half.name})",
    )
    return PrecisionPolicy(**{**fields, **overrides})


def get_policy(precision: Any) -> PrecisionPolicy | None:
    """The policy a ``precision=`` argument names (``None``: float32).

    Args:
      precision: ``None``, an amp level name (``"O0"``, ``"O2"``, ``"O3"``:
        float16, as in MindSpore), a dtype name (``"bfloat16"`` /
        ``"float16"``: O2 in that dtype) or a `PrecisionPolicy`.

    Returns:
      The policy, or ``None`` when it computes in float32 (the step is then
      built exactly as without one).
    """
    if precision is None:
        return None
    if isinstance(precision, PrecisionPolicy):
        policy = precision
    elif isinstance(precision, str) and precision in ("bfloat16", "float16"):
        policy = precision_policy("O2", precision)
    elif isinstance(precision, str) and precision in (*LEVELS, "O1"):
        policy = precision_policy(precision)
    else:
        raise ValueError(
            "`precision` must be None, an amp level ('O0', 'O2', 'O3'), "
            "'bfloat16', 'float16' or a boostax.PrecisionPolicy, "
            f"{validation.got(precision)}."
        )
    return None if policy.is_float32 else policy


# ---------------------------------------------------------------------------
# Inside the step: the objectives read the policy of the step being traced.
# ---------------------------------------------------------------------------


def current() -> PrecisionPolicy | None:
    """The policy of the step being traced (`step_context`), ``None`` for
    float32."""
    return step_context.current().policy


def has_compute_dtype(module) -> bool:
    """Whether `module` is a layer with Flax's compute ``dtype`` attribute
    (``None``: inferred from its inputs and parameters, or a float dtype);
    another module computes in whatever its inputs and parameters are."""
    if not hasattr(module, "dtype"):
        return False
    value = module.dtype
    if value is None:
        return True
    try:
        return jnp.issubdtype(jnp.dtype(value), jnp.floating)
    except TypeError:
        return False
