# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Models for the LessBN tests: bottleneck ResNet, MobileNetV2, DenseNet.

Layer names are deliberately unlike the bundled example's, so the tests show
that LessBN reads structure, not names.
"""

import functools

import jax.numpy as jnp
from flax import linen as nn
from flax import nnx

# --- Linen -----------------------------------------------------------------


class Bottleneck(nn.Module):
    features: int
    strides: int = 1

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(nn.BatchNorm, use_running_average=not train)
        s = (self.strides, self.strides)
        y = nn.relu(
            norm(name="n_a")(
                nn.Conv(self.features, (1, 1), name="c_a", use_bias=False)(x)
            )
        )
        y = nn.relu(
            norm(name="n_b")(
                nn.Conv(self.features, (3, 3), s, name="c_b", use_bias=False)(y)
            )
        )
        y = norm(name="n_c")(
            nn.Conv(4 * self.features, (1, 1), name="c_c", use_bias=False)(y)
        )
        if x.shape[-1] != 4 * self.features or self.strides != 1:
            x = nn.Conv(
                4 * self.features, (1, 1), s, name="proj", use_bias=False
            )(x)
            x = norm(name="proj_norm")(x)
        return nn.relu(x + y)


class BottleneckNet(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(16, (3, 3), use_bias=False, name="stem")(x)
        x = nn.relu(
            nn.BatchNorm(use_running_average=not train, name="stem_norm")(x)
        )
        x = Bottleneck(8, name="first")(x, train)  # projection shortcut
        x = Bottleneck(8, name="second")(x, train)  # identity shortcut
        return nn.Dense(10, name="classifier")(jnp.mean(x, axis=(1, 2)))


class InvertedResidual(nn.Module):
    out_features: int
    expand: int = 4
    strides: int = 1

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(nn.BatchNorm, use_running_average=not train)
        hidden = x.shape[-1] * self.expand
        y = nn.relu6(
            norm(name="expand_norm")(
                nn.Conv(hidden, (1, 1), use_bias=False, name="expand")(x)
            )
        )
        y = nn.relu6(
            norm(name="dw_norm")(
                nn.Conv(
                    hidden,
                    (3, 3),
                    (self.strides,) * 2,
                    feature_group_count=hidden,
                    use_bias=False,
                    name="depthwise",
                )(y)
            )
        )
        y = norm(name="project_norm")(
            nn.Conv(self.out_features, (1, 1), use_bias=False, name="project")(
                y
            )
        )
        if self.strides == 1 and x.shape[-1] == self.out_features:
            return x + y
        return y


class MobileNetV2ish(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(nn.BatchNorm, use_running_average=not train)
        x = nn.relu6(
            norm(name="stem_norm")(
                nn.Conv(16, (3, 3), use_bias=False, name="stem")(x)
            )
        )
        x = InvertedResidual(16, name="ir_residual")(x, train)
        x = InvertedResidual(32, strides=2, name="ir_down")(x, train)
        x = nn.relu6(
            norm(name="head_norm")(
                nn.Conv(64, (1, 1), use_bias=False, name="head_conv")(x)
            )
        )
        return nn.Dense(10, name="fc")(jnp.mean(x, axis=(1, 2)))


class DenseLayer(nn.Module):
    growth: int = 8

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(nn.BatchNorm, use_running_average=not train)
        y = nn.Conv(4 * self.growth, (1, 1), use_bias=False)(nn.relu(norm()(x)))
        y = nn.Conv(self.growth, (3, 3), use_bias=False)(nn.relu(norm()(y)))
        return jnp.concatenate([x, y], axis=-1)


class DenseNetish(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(16, (3, 3), use_bias=False)(x)
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = DenseLayer()(x, train)  # after max pooling
        x = DenseLayer()(x, train)  # after a concatenation
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


class PlainBNMLP(nn.Module):
    """BatchNorms but no structure LessBN knows."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(
            nn.BatchNorm(use_running_average=not train)(nn.Dense(32)(x))
        )
        return nn.Dense(10)(x)


# --- NNX -------------------------------------------------------------------


class NNXBottleneck(nnx.Module):
    def __init__(self, in_features, features, strides=1, *, rngs):
        conv = functools.partial(nnx.Conv, use_bias=False, rngs=rngs)
        bn = functools.partial(nnx.BatchNorm, rngs=rngs)
        s = (strides, strides)
        self.c_a, self.n_a = conv(in_features, features, (1, 1)), bn(features)
        self.c_b, self.n_b = conv(features, features, (3, 3), s), bn(features)
        self.c_c = conv(features, 4 * features, (1, 1))
        self.n_c = bn(4 * features)
        if in_features != 4 * features or strides != 1:
            self.proj = conv(in_features, 4 * features, (1, 1), s)
            self.proj_norm = bn(4 * features)
        else:
            self.proj = self.proj_norm = None

    def __call__(self, x):
        y = nnx.relu(self.n_a(self.c_a(x)))
        y = nnx.relu(self.n_b(self.c_b(y)))
        y = self.n_c(self.c_c(y))
        if self.proj is not None:
            x = self.proj_norm(self.proj(x))
        return nnx.relu(x + y)


class NNXBottleneckNet(nnx.Module):
    def __init__(self, *, rngs):
        self.stem = nnx.Conv(1, 16, (3, 3), use_bias=False, rngs=rngs)
        self.stem_norm = nnx.BatchNorm(16, rngs=rngs)
        self.first = NNXBottleneck(16, 8, rngs=rngs)
        self.second = NNXBottleneck(32, 8, rngs=rngs)
        self.classifier = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.stem_norm(self.stem(x)))
        x = self.second(self.first(x))
        return self.classifier(jnp.mean(x, axis=(1, 2)))


class NNXInvertedResidual(nnx.Module):
    def __init__(self, in_features, out_features, expand=4, strides=1, *, rngs):
        hidden = in_features * expand
        conv = functools.partial(nnx.Conv, use_bias=False, rngs=rngs)
        bn = functools.partial(nnx.BatchNorm, rngs=rngs)
        self.expand, self.expand_norm = (
            conv(in_features, hidden, (1, 1)),
            bn(hidden),
        )
        self.depthwise = conv(
            hidden,
            hidden,
            (3, 3),
            (strides, strides),
            feature_group_count=hidden,
        )
        self.dw_norm = bn(hidden)
        self.project = conv(hidden, out_features, (1, 1))
        self.project_norm = bn(out_features)
        self.residual = strides == 1 and in_features == out_features

    def __call__(self, x):
        y = nnx.relu6(self.expand_norm(self.expand(x)))
        y = nnx.relu6(self.dw_norm(self.depthwise(y)))
        y = self.project_norm(self.project(y))
        return x + y if self.residual else y


class NNXMobileNetV2ish(nnx.Module):
    def __init__(self, *, rngs):
        self.stem = nnx.Conv(1, 16, (3, 3), use_bias=False, rngs=rngs)
        self.stem_norm = nnx.BatchNorm(16, rngs=rngs)
        self.blocks = nnx.List(
            [
                NNXInvertedResidual(16, 16, rngs=rngs),
                NNXInvertedResidual(16, 32, strides=2, rngs=rngs),
            ]
        )
        self.head_conv = nnx.Conv(32, 64, (1, 1), use_bias=False, rngs=rngs)
        self.head_norm = nnx.BatchNorm(64, rngs=rngs)
        self.fc = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu6(self.stem_norm(self.stem(x)))
        for block in self.blocks:
            x = block(x)
        x = nnx.relu6(self.head_norm(self.head_conv(x)))
        return self.fc(jnp.mean(x, axis=(1, 2)))
