# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The example models: small ResNets with BatchNorm and an MLP, Linen and NNX.

The ResNet has the structure LessBN and gradient freezing act on: basic
blocks ``conv-BN-relu-conv-BN`` with a residual add, and projection
shortcuts ``conv1x1-BN`` where the width or resolution changes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

import boostax

BN_MOMENTUM = 0.9


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs with BatchNorm and a residual add."""

    features: int
    strides: int = 1

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(
            nn.BatchNorm, use_running_average=not train, momentum=BN_MOMENTUM
        )
        strides = (self.strides, self.strides)
        y = nn.Conv(self.features, (3, 3), strides, use_bias=False)(x)
        y = nn.relu(norm()(y))
        y = nn.Conv(self.features, (3, 3), use_bias=False)(y)
        y = norm()(y)
        if x.shape[-1] != self.features or self.strides != 1:
            x = nn.Conv(self.features, (1, 1), strides, use_bias=False)(x)
            x = norm()(x)
        return nn.relu(x + y)


class ResNet(nn.Module):
    """A small ResNet for 8x8 digits (NHWC inputs).

    It carries two loss-scale groups for per-group loss scaling
    (`boostax.enhanced_amp` boundaries, identities otherwise): group 1 is
    the stem and the first stage, group 2 the rest (`loss_scale_groups`).

    Attributes:
      stage_sizes: basic blocks per stage; stages after the first halve the
        resolution.
      widths: channels of each stage (the stem has ``widths[0]``).
      num_classes: outputs of the final Dense layer.
    """

    stage_sizes: Sequence[int] = (2, 2, 2)
    widths: Sequence[int] = (16, 32, 64)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = boostax.enhanced_amp(x, 0, 1)
        x = nn.Conv(self.widths[0], (3, 3), use_bias=False)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM)(x)
        x = nn.relu(x)
        for stage, (blocks, width) in enumerate(
            zip(self.stage_sizes, self.widths, strict=True)
        ):
            if stage == 1:
                x = boostax.enhanced_amp(x, 1, 2)
            for block in range(blocks):
                strides = 2 if stage > 0 and block == 0 else 1
                x = BasicBlock(width, strides)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return boostax.enhanced_amp(nn.Dense(self.num_classes)(x), 2, 3)

    def loss_scale_groups(self, params) -> list[list[str]]:
        """The two loss-scale groups of `params`, as parameter paths."""
        first = {"Conv_0", "BatchNorm_0"} | {
            f"BasicBlock_{i}" for i in range(self.stage_sizes[0])
        }
        groups: list[list[str]] = [[], []]
        for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
            names = [k.key for k in path]
            groups[names[0] not in first].append("/".join(names))
        return groups


class Bottleneck(nn.Module):
    """ResNet bottleneck block: 1x1 reduce, 3x3, 1x1 expand, with BatchNorm.

    ``conv1x1-BN-relu-conv3x3-BN-relu-conv1x1-BN`` plus the shortcut (a
    projection ``conv1x1-BN`` where the shape changes), then relu.
    """

    features: int
    strides: int = 1
    expansion: int = 4

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(
            nn.BatchNorm, use_running_average=not train, momentum=BN_MOMENTUM
        )
        out = self.features * self.expansion
        strides = (self.strides, self.strides)
        y = nn.relu(norm()(nn.Conv(self.features, (1, 1), use_bias=False)(x)))
        y = nn.Conv(self.features, (3, 3), strides, use_bias=False)(y)
        y = nn.relu(norm()(y))
        y = norm()(nn.Conv(out, (1, 1), use_bias=False)(y))
        if x.shape[-1] != out or self.strides != 1:
            x = nn.Conv(out, (1, 1), strides, use_bias=False)(x)
            x = norm()(x)
        return nn.relu(x + y)


class BottleneckResNet(nn.Module):
    """A CIFAR-style ResNet of bottleneck blocks (NHWC inputs, e.g. 32x32x3).

    The realistic-shape workload of the speed benchmark: with the default
    sizes it has 22 BatchNorms (stem, 3 per block, 3 projections), of which
    LessBN removes 15.

    Attributes:
      stage_sizes: bottleneck blocks per stage; stages after the first
        halve the resolution.
      widths: bottleneck widths (each block outputs 4x as many channels);
        the stem has ``widths[0]``.
      num_classes: outputs of the final Dense layer.
    """

    stage_sizes: Sequence[int] = (2, 2, 2)
    widths: Sequence[int] = (16, 32, 64)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(self.widths[0], (3, 3), use_bias=False)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM)(x)
        x = nn.relu(x)
        for stage, (blocks, width) in enumerate(
            zip(self.stage_sizes, self.widths, strict=True)
        ):
            for block in range(blocks):
                strides = 2 if stage > 0 and block == 0 else 1
                x = Bottleneck(width, strides)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes)(x)


class MLP(nn.Module):
    """A ReLU MLP on flattened inputs."""

    features: Sequence[int] = (64, 64)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for width in self.features:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_classes)(x)


# ---------------------------------------------------------------------------
# The same models in Flax NNX.
# ---------------------------------------------------------------------------


class NNXBasicBlock(nnx.Module):
    """`BasicBlock` in NNX."""

    def __init__(self, in_features, features, strides=1, *, rngs: nnx.Rngs):
        strides = (strides, strides)
        conv = functools.partial(nnx.Conv, use_bias=False, rngs=rngs)
        norm = functools.partial(nnx.BatchNorm, momentum=BN_MOMENTUM, rngs=rngs)
        self.conv1 = conv(in_features, features, (3, 3), strides)
        self.bn1 = norm(features)
        self.conv2 = conv(features, features, (3, 3))
        self.bn2 = norm(features)
        if in_features != features or strides != (1, 1):
            self.shortcut_conv: nnx.Conv | None = conv(
                in_features, features, (1, 1), strides
            )
            self.shortcut_bn: nnx.BatchNorm | None = norm(features)
        else:
            self.shortcut_conv = self.shortcut_bn = None

    def __call__(self, x):
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.shortcut_conv is not None:
            x = self.shortcut_bn(self.shortcut_conv(x))
        return nnx.relu(x + y)


class NNXResNet(nnx.Module):
    """`ResNet` in NNX (inputs ``(n, 8, 8, 1)``)."""

    def __init__(
        self,
        stage_sizes: Sequence[int] = (2, 2, 2),
        widths: Sequence[int] = (16, 32, 64),
        num_classes: int = 10,
        in_features: int = 1,
        *,
        rngs: nnx.Rngs,
    ):
        self.stem = nnx.Conv(
            in_features, widths[0], (3, 3), use_bias=False, rngs=rngs
        )
        self.stem_bn = nnx.BatchNorm(widths[0], momentum=BN_MOMENTUM, rngs=rngs)
        blocks, features = [], widths[0]
        for stage, (count, width) in enumerate(
            zip(stage_sizes, widths, strict=True)
        ):
            for block in range(count):
                strides = 2 if stage > 0 and block == 0 else 1
                blocks.append(
                    NNXBasicBlock(features, width, strides, rngs=rngs)
                )
                features = width
        self.blocks = nnx.List(blocks)
        self.head = nnx.Linear(features, num_classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.stem_bn(self.stem(x)))
        for block in self.blocks:
            x = block(x)
        return self.head(jnp.mean(x, axis=(1, 2)))


class NNXMLP(nnx.Module):
    """`MLP` in NNX."""

    def __init__(
        self,
        in_features: int = 64,
        features: Sequence[int] = (64, 64),
        num_classes: int = 10,
        *,
        rngs: nnx.Rngs,
    ):
        sizes = (in_features, *features)
        pairs = zip(sizes[:-1], sizes[1:], strict=True)
        self.hidden = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in pairs])
        self.head = nnx.Linear(sizes[-1], num_classes, rngs=rngs)

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for layer in self.hidden:
            x = nnx.relu(layer(x))
        return self.head(x)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy against integer labels."""
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


# ---------------------------------------------------------------------------
# A decoder-only transformer (NNX), for byte-level language modelling.
# ---------------------------------------------------------------------------


def reference_attention(
    query, key, value, bias=None, mask=None, *, dtype=None, precision=None, **_
):
    """``softmax(q k^T / sqrt(d) + bias, masked) v``, the softmax in float32.

    An ``attention_fn`` for ``nnx.MultiHeadAttention`` that every backend
    lowers in every dtype: Flax's default (``jax.nn.dot_product_attention``)
    asks for a float16 x float16 -> float32 matmul, which XLA:CPU refuses.
    Shapes as Flax's: ``[batch, length, heads, depth]``.
    """
    if dtype is not None:
        query, key, value = (jnp.asarray(t, dtype) for t in (query, key, value))
    depth = query.shape[-1]
    query = query / jnp.sqrt(depth).astype(query.dtype)
    logits = jnp.einsum(
        "...qhd,...khd->...hqk", query, key, precision=precision
    )
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits.astype(jnp.float32)).astype(value.dtype)
    return jnp.einsum(
        "...hqk,...khd->...qhd", weights, value, precision=precision
    )


class NNXTransformerBlock(nnx.Module):
    """A pre-LayerNorm transformer block: causal self-attention, then MLP.

    ``x + attention(LayerNorm(x))``, then ``x + MLP(LayerNorm(x))`` with a
    GELU MLP of `mlp_ratio` times the width. Every layer takes `dtype`
    (the compute dtype; ``None``: that of its inputs and params), so a
    precision policy can set it layer by layer.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        mlp_ratio: int = 4,
        *,
        dtype=None,
        attention_fn=nnx.dot_product_attention,
        rngs: nnx.Rngs,
    ):
        self.ln1 = nnx.LayerNorm(d_model, dtype=dtype, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(
            num_heads,
            d_model,
            dtype=dtype,
            decode=False,
            deterministic=True,
            attention_fn=attention_fn,
            rngs=rngs,
        )
        self.ln2 = nnx.LayerNorm(d_model, dtype=dtype, rngs=rngs)
        self.mlp_in = nnx.Linear(
            d_model, mlp_ratio * d_model, dtype=dtype, rngs=rngs
        )
        self.mlp_out = nnx.Linear(
            mlp_ratio * d_model, d_model, dtype=dtype, rngs=rngs
        )

    def __call__(self, x, mask):
        x = x + self.attention(self.ln1(x), mask=mask)
        return x + self.mlp_out(nnx.gelu(self.mlp_in(self.ln2(x))))


class NNXTransformer(nnx.Module):
    """A tiny decoder-only transformer over bytes (pre-LayerNorm, GPT-style).

    Token and learned position embeddings, `num_blocks` `NNXTransformerBlock`
    s under a causal mask, a final LayerNorm and an untied dense head to
    `vocab_size` logits. No BatchNorm anywhere: LessBN has nothing to
    remove. Inputs are ``(batch, length)`` integer tokens with ``length <=
    context``; outputs ``(batch, length, vocab_size)`` logits, position
    ``t`` depending on tokens ``0..t`` only.

    Attributes (constructor arguments):
      vocab_size: 256 for bytes.
      context: the longest input (positions learned).
      d_model, num_heads, num_blocks, mlp_ratio: the sizes.
      dtype: the layers' compute dtype (``None``: their inputs' and
        params').
      attention_fn: the attention of every block (Flax's default;
        `reference_attention` lowers in float16 on a CPU too).

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from boostax.examples import models
      >>> model = models.NNXTransformer(context=16, d_model=32, num_blocks=1,
      ...                               rngs=nnx.Rngs(0))
      >>> model(jnp.zeros((2, 16), jnp.int32)).shape
      (2, 16, 256)
    """

    def __init__(
        self,
        vocab_size: int = 256,
        context: int = 64,
        d_model: int = 64,
        num_heads: int = 4,
        num_blocks: int = 4,
        mlp_ratio: int = 4,
        *,
        dtype=None,
        attention_fn=nnx.dot_product_attention,
        rngs: nnx.Rngs,
    ):
        self.context = context
        self.tokens = nnx.Embed(vocab_size, d_model, dtype=dtype, rngs=rngs)
        self.positions = nnx.Embed(context, d_model, dtype=dtype, rngs=rngs)
        self.blocks = nnx.List(
            [
                NNXTransformerBlock(
                    d_model,
                    num_heads,
                    mlp_ratio,
                    dtype=dtype,
                    attention_fn=attention_fn,
                    rngs=rngs,
                )
                for _ in range(num_blocks)
            ]
        )
        self.ln_final = nnx.LayerNorm(d_model, dtype=dtype, rngs=rngs)
        self.head = nnx.Linear(d_model, vocab_size, dtype=dtype, rngs=rngs)

    def __call__(self, tokens):
        length = tokens.shape[-1]
        if length > self.context:
            raise ValueError(
                f"inputs of length {length} exceed the context "
                f"({self.context})."
            )
        x = self.tokens(tokens) + self.positions(jnp.arange(length))[None]
        mask = nnx.make_causal_mask(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_final(x))
