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
computes in the policy's dtype (`PrecisionPolicy.module_dtype`), and a Flax
attention layer computing in half precision with Flax's own
``attention_fn`` gets one whose softmax runs in float32
(`linen_float32_softmax`, `nnx_float32_softmax`). All are set while the
step is traced: a Linen method interceptor (`linen_step_attributes`), or
on the merged copy of an NNX module (`set_nnx_step_attributes`); the model
itself is not changed.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

from boostax._src import precision as precision_lib
from boostax._src.step import context as step_context

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


# ---------------------------------------------------------------------------
# Flax attention's softmax in float32.
# ---------------------------------------------------------------------------


def _float32_logits_bias(bias):
    """A ``bias`` of the attention logits that promotes them to float32.

    Flax's attention adds its ``bias`` to the logits (the query-key matmul's
    output, in the compute dtype) before the mask and the softmax, and casts
    the softmax's output to the compute dtype for the weights-value matmul:
    with a float32 bias (a float32 zero when there is none; adding it is
    exact) the mask, the softmax's max, exp and sum run in float32 and both
    matmuls stay in the compute dtype.
    """
    if bias is None:
        return jnp.zeros((), jnp.float32)
    dtype = jnp.promote_types(jnp.result_type(bias), jnp.float32)
    return jnp.asarray(bias, dtype)


def linen_float32_softmax(query, key, value, bias=None, mask=None, **kwargs):
    """Linen's ``nn.dot_product_attention`` with its softmax in float32.

    The ``attention_fn`` under a half precision policy of a Linen attention
    layer (``MultiHeadDotProductAttention``, ``SelfAttention``) whose own is
    Flax's default. The logits are the query-key matmul's, in the compute
    dtype; the mask and the softmax then run in float32 and the attention
    weights are cast back to the compute dtype, so the weights-value matmul
    (and dropout) stays in it, as ``jax.nn.dot_product_attention`` does.
    (Linen's own ``force_fp32_for_softmax=True`` keeps the weights in
    float32, which runs the weights-value matmul in float32 too.)
    Arguments as Flax's.

    Returns:
      The attention's output, ``[batch..., q_length, num_heads, v_depth]``,
      in the compute dtype.
    """
    return nn.dot_product_attention(
        query, key, value, _float32_logits_bias(bias), mask, **kwargs
    )


def nnx_float32_softmax(query, key, value, bias=None, mask=None, **kwargs):
    """NNX's ``nnx.dot_product_attention`` with its softmax in float32.

    As `linen_float32_softmax`, for ``nnx.MultiHeadAttention``. Without
    dropout, sown weights or a bias, Flax hands the attention to
    ``jax.nn.dot_product_attention``, whose logits and softmax are already
    float32: that call is left as it is. Arguments as Flax's.

    Returns:
      The attention's output, ``[batch..., q_length, num_heads, v_depth]``,
      in the compute dtype.
    """
    if (
        bias is None
        and kwargs.get("dropout_rate", 0.0) == 0.0
        and kwargs.get("module") is None
    ):
        return nnx.dot_product_attention(
            query, key, value, None, mask, **kwargs
        )
    return nnx.dot_product_attention(
        query, key, value, _float32_logits_bias(bias), mask, **kwargs
    )


# Linen passes an ``attention_fn`` only the keyword arguments its signature
# names: the wrappers show Flax's.
linen_float32_softmax.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    nn.dot_product_attention
)
nnx_float32_softmax.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    nnx.dot_product_attention
)


def float32_softmax_attention(module, dtype):
    """The ``attention_fn`` `module` runs with when it computes in `dtype`.

    Args:
      module: a Linen or NNX module.
      dtype: its compute dtype in the step.

    Returns:
      `linen_float32_softmax` or `nnx_float32_softmax` for a module whose
      ``attention_fn`` is Flax's default (``nn.dot_product_attention`` /
      ``nnx.dot_product_attention``) and a half-precision `dtype`;
      ``None`` otherwise: a user's own ``attention_fn`` (a fused kernel,
      `models.reference_attention`) computes as it was written.
    """
    if jnp.dtype(dtype) == precision_lib.FLOAT32:
        return None
    attention_fn = getattr(module, "attention_fn", None)
    if attention_fn is nn.dot_product_attention:
        return linen_float32_softmax
    if attention_fn is nnx.dot_product_attention:
        return nnx_float32_softmax
    return None


# ---------------------------------------------------------------------------
# The attributes of a step.
# ---------------------------------------------------------------------------


def _step_attributes(module, policy) -> dict[str, Any]:
    """The attributes `module` runs with in the step, where they differ
    from its own: its ``axis_name`` mapped (`map_axis_name`) and, under a
    precision `policy`, its compute ``dtype`` (`PrecisionPolicy.module_dtype`)
    and, for an attention layer, its ``attention_fn``
    (`float32_softmax_attention`).
    """
    changed = {}
    if _has_axis_name(module):
        mapped = map_axis_name(module.axis_name)
        if mapped != module.axis_name:
            changed["axis_name"] = mapped
    if policy is not None and precision_lib.has_compute_dtype(module):
        dtype = policy.module_dtype(module)
        changed["dtype"] = dtype
        attention_fn = float32_softmax_attention(module, dtype)
        if attention_fn is not None:
            changed["attention_fn"] = attention_fn
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
