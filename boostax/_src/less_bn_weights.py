# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weights brought into a LessBN model: kept, never re-initialised.

The rule: weights a user brings (`TrainStep.init`'s variables, a Flax
``TrainState``, an Orbax checkpoint) are never silently re-initialised or
transformed. Their function is kept exactly, or the conversion is refused
with the reason. LessBN's initialisation choices (``zero_init_residual``,
a fresh FN head) apply only to a model that is still at its
initialisation.

What that means for each thing LessBN changes:

- a removed BatchNorm that holds Flax's initial values (scale 1, bias 0,
  running mean 0, running variance 1) computes ``x / sqrt(1 + eps)`` at
  inference: it is dropped, as MindSpore drops it. A trained one is
  folded into the layer before it (`BatchNormFold`), which keeps the
  model's function at inference. What that layer cannot take (the shift,
  when it has no bias) stays at the BatchNorm's place as constants, which
  every model state has: the identity for fresh weights, so a state's
  structure never depends on the values brought in;
- a BatchNorm that ``zero_init_residual`` starts at scale zero gets that
  scale only while it is at its initial values; a trained one keeps its
  values;
- the FN head replaces a dense layer by another function: a trained head
  (the model trained, or the layer's bias not zero) is refused, with what
  to do instead.

These helpers are framework-free (arrays in, arrays out); the Linen and NNX
conversions call them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src.less_bn_plan import BatchNormFold, path_str

# Flax's initial values of a BatchNorm's variables (nn.BatchNorm and
# nnx.BatchNorm alike).
INITIAL_BATCH_NORM = {"scale": 1.0, "bias": 0.0, "mean": 0.0, "var": 1.0}


def _equals(value, constant: float) -> bool:
    if isinstance(value, jax.core.Tracer):
        # Shapes only (an abstract evaluation): no trained values to lose,
        # and the structure is that of a fresh model.
        return True
    return bool(np.all(np.asarray(value) == constant))


def is_initial(values: dict[str, Any]) -> bool:
    """Whether a BatchNorm's variables (``scale``, ``bias``, ``mean``,
    ``var``; any may be missing) all hold Flax's initial values."""
    return all(
        _equals(values[name], constant)
        for name, constant in INITIAL_BATCH_NORM.items()
        if name in values
    )


def folded_affine(
    fold: BatchNormFold, values: dict[str, Any], dtype
) -> tuple[jax.Array, jax.Array]:
    """``(a, b)``: the BatchNorm's inference map ``x * a + b``.

    ``a = scale / sqrt(var + epsilon)``, ``b = bias - mean * a``, computed
    in float32 (at least) and returned in `dtype`.

    Raises:
      ValueError: if the BatchNorm lacks its running statistics, or does
        not normalise over the last axis.
    """
    where = path_str(fold.path)
    missing = [name for name in ("mean", "var") if name not in values]
    if missing:
        raise ValueError(
            f"The trained BatchNorm {where} that LessBN removes has no "
            f"running {' or '.join(missing)} in the variables given, so its "
            "function cannot be folded into the layer before it: pass the "
            "model's whole variables (with 'batch_stats')."
        )
    if not fold.channels_last:
        raise ValueError(
            f"The trained BatchNorm {where} that LessBN removes normalises "
            "over an axis other than the last, so it cannot be folded into "
            "the layer before it (whose output channels are its kernel's "
            "last axis): switch less_bn off to keep the trained model."
        )
    compute = jnp.promote_types(jnp.result_type(values["var"]), jnp.float32)
    mean = jnp.asarray(values["mean"], compute)
    var = jnp.asarray(values["var"], compute)
    scale = jnp.asarray(values.get("scale", 1.0), compute)
    bias = jnp.asarray(values.get("bias", 0.0), compute)
    a = scale * jax.lax.rsqrt(var + jnp.asarray(fold.epsilon, compute))
    b = bias - mean * a
    shape = jnp.shape(var)
    return (
        jnp.broadcast_to(a, shape).astype(dtype),
        jnp.broadcast_to(b, shape).astype(dtype),
    )


def fold_into_layer(
    layer: dict[str, Any], a: jax.Array, b: jax.Array
) -> jax.Array | None:
    """Folds ``x * a + b`` into a conv / dense layer's variables (in place).

    The kernel's output channels (last axis) are multiplied by `a`; with a
    bias, the bias becomes ``bias * a + b``.

    Returns:
      ``None`` when the layer took the whole map, else `b` (the layer has no
      bias: the shift stays where the BatchNorm was).
    """
    kernel = layer["kernel"]
    per_output = a.astype(jnp.float32).reshape((1,) * (kernel.ndim - 1) + (-1,))
    layer["kernel"] = (kernel * per_output).astype(kernel.dtype)
    if "bias" in layer:
        bias = layer["bias"]
        layer["bias"] = (
            bias * a.astype(jnp.float32) + b.astype(jnp.float32)
        ).astype(bias.dtype)
        return None
    return b


def refuse_trained_fn_head(head: str, reason: str) -> ValueError:
    """The error for an FN head that would replace a trained dense layer."""
    return ValueError(
        "LessBN's FN head (less_bn fn_flag, on a classifier by O1's "
        "default) would "
        f"replace the dense layer {head} of weights that were trained "
        f"({reason}): its function cannot be kept, and a trained head is "
        "never replaced silently. Keep the trained head by building the step "
        "with the FN head off (auto_boost config {'less_bn': {'fn_flag': "
        "False}}; the removed BatchNorms are then folded into the layers "
        "before them), or start from fresh variables of the model."
    )
