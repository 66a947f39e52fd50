# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The full-normalization (FN) classifier head of LessBN, Linen and NNX.

The FN head replaces a network's last dense layer: it L2-normalizes each
sample over its features and each output unit's weights over their fan-in,
so the logits are cosine similarities scaled by a trained multiplier ``s``
(stored as ``s`` or, optionally, ``log(s)``). No bias.

References:
  MindSpore ``mindspore.boost.LessBN`` (its ``fn_flag`` head).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

from boostax._src import validation

FN_EPSILON = 1e-4


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
    Squared norms are clamped at 1e-4. Computed in at least float32 (in a
    half-precision step too: half precision's 1e-4 clamp and sums of
    squares lose the cosines' precision).
    """
    dtype = jnp.promote_types(jnp.result_type(x, kernel), jnp.float32)
    x, kernel = x.astype(dtype), kernel.astype(dtype)
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
