# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""One small network per MindSpore LessBN pattern, as Linen and NNX models.

Each network is written once, as a function of a small layer vocabulary
(`Layers`), and built as a Linen module (`linen`) or an NNX module (`nnx_`)
with the same layer names, so that both frameworks are tested on exactly the
same structure. Operands are written in the order MindSpore's model zoo
writes them (``out + identity`` in ResNets, ``identity + out`` in
MobileNetV2, ``concat((features, new))`` in DenseNet); ``swap=True`` swaps
every add.

`CASES` maps a name to ``(network, expected)``, ``expected`` being
``{BN name: pattern number}`` of what MindSpore's pass removes, derived by
hand from ``less_batch_normalization.cc`` for each structure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import nnx

WIDTH = 4


class Layers:
    """The vocabulary the networks are written in.

    Subclasses give `conv`, `bn` and `dense` (named layers); the rest are
    functions of the input's spatial rank.
    """

    swap = False

    def conv(self, name, x, features=WIDTH, strides=1, groups=1, kernel=3):
        raise NotImplementedError

    def bn(self, name, x):
        raise NotImplementedError

    def dense(self, name, x, features=10):
        raise NotImplementedError

    @staticmethod
    def relu(x):
        return jax.nn.relu(x)

    @staticmethod
    def relu6(x):
        return jax.nn.relu6(x)

    def add(self, a, b):
        return b + a if self.swap else a + b

    @staticmethod
    def max_pool(x):
        window = (2,) * (x.ndim - 2)
        return nn.max_pool(x, window, window)

    @staticmethod
    def avg_pool(x):
        window = (2,) * (x.ndim - 2)
        return nn.avg_pool(x, window, window)

    @staticmethod
    def concat(*xs):
        return jnp.concatenate(xs, axis=-1)

    @staticmethod
    def mean(x):
        return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)))

    # Building blocks.

    def cbr(self, name, x, features=WIDTH, strides=1, act="relu", kernel=3):
        """conv -> BN -> activation."""
        x = self.bn(
            name + "_bn", self.conv(name, x, features, strides, 1, kernel)
        )
        return getattr(self, act)(x)

    def head(self, x):
        return self.dense("fc", self.mean(x))


# ---------------------------------------------------------------------------
# Linen and NNX implementations of the vocabulary.
# ---------------------------------------------------------------------------


class _LinenLayers(Layers):
    def __init__(self, train, swap):
        self.train, self.swap = train, swap

    def conv(self, name, x, features=WIDTH, strides=1, groups=1, kernel=3):
        rank = x.ndim - 2
        return nn.Conv(
            features,
            (kernel,) * rank,
            (strides,) * rank,
            feature_group_count=groups,
            use_bias=False,
            name=name,
        )(x)

    def bn(self, name, x):
        return nn.BatchNorm(use_running_average=not self.train, name=name)(x)

    def dense(self, name, x, features=10):
        return nn.Dense(features, name=name)(x)


class LinenNet(nn.Module):
    """A network of `Layers` as a Linen module."""

    network: Callable[[Layers, Any], Any]
    swap: bool = False

    @nn.compact
    def __call__(self, x, train: bool = True):
        return self.network(_LinenLayers(train, self.swap), x)


class _NNXBuilder(Layers):
    """Creates the layers on a concrete sample input, and applies them."""

    def __init__(self, model, rngs, swap):
        self.model, self.rngs, self.swap = model, rngs, swap

    def _layer(self, name, make, x):
        setattr(self.model, name, make(x.shape[-1]))
        return getattr(self.model, name)(x)

    def conv(self, name, x, features=WIDTH, strides=1, groups=1, kernel=3):
        rank = x.ndim - 2
        return self._layer(
            name,
            lambda n: nnx.Conv(
                n,
                features,
                (kernel,) * rank,
                (strides,) * rank,
                feature_group_count=groups,
                use_bias=False,
                rngs=self.rngs,
            ),
            x,
        )

    def bn(self, name, x):
        return self._layer(name, lambda n: nnx.BatchNorm(n, rngs=self.rngs), x)

    def dense(self, name, x, features=10):
        return self._layer(
            name, lambda n: nnx.Linear(n, features, rngs=self.rngs), x
        )


class _NNXLayers(Layers):
    def __init__(self, model, swap):
        self.model, self.swap = model, swap

    def conv(self, name, x, *args, **kwargs):
        return getattr(self.model, name)(x)

    bn = dense = conv


class NNXNet(nnx.Module):
    """A network of `Layers` as an NNX module, built on `sample`."""

    def __init__(self, network, sample, *, swap=False, rngs):
        self._network, self._swap = network, swap
        self._network(_NNXBuilder(self, rngs, swap), jnp.asarray(sample))

    def __call__(self, x):
        return self._network(_NNXLayers(self, self._swap), x)


def linen(network, swap=False) -> LinenNet:
    return LinenNet(network, swap)


def nnx_(network, sample, swap=False) -> NNXNet:
    return NNXNet(network, sample, swap=swap, rngs=nnx.Rngs(0))


def sample(rank=2, size=8, batch=2) -> np.ndarray:
    return np.zeros((batch,) + (size,) * rank + (1,), np.float32)


# ---------------------------------------------------------------------------
# The networks.
# ---------------------------------------------------------------------------


def bottleneck(o, name, x, features=WIDTH, strides=1):
    """ResNet bottleneck, ``relu(out + identity)``."""
    y = o.cbr(name + "_c1", x, features, kernel=1)
    y = o.cbr(name + "_c2", y, features, strides)
    y = o.bn(name + "_c3_bn", o.conv(name + "_c3", y, 4 * features, kernel=1))
    if x.shape[-1] != 4 * features or strides != 1:
        x = o.conv(name + "_proj", x, 4 * features, strides, kernel=1)
        x = o.bn(name + "_proj_bn", x)
    return o.relu(o.add(y, x))


def basic(o, name, x, features=WIDTH, strides=1):
    """ResNet basic block, ``relu(out + identity)``."""
    y = o.cbr(name + "_c1", x, features, strides)
    y = o.bn(name + "_c2_bn", o.conv(name + "_c2", y, features))
    if x.shape[-1] != features or strides != 1:
        x = o.bn(
            name + "_proj_bn", o.conv(name + "_proj", x, features, strides)
        )
    return o.relu(o.add(y, x))


def inverted(o, name, x, features=WIDTH, strides=1, expand=2):
    """MobileNetV2 inverted residual, ``identity + out`` (MindSpore order)."""
    hidden = x.shape[-1] * expand
    y = x
    if expand != 1:
        y = o.cbr(name + "_exp", y, hidden, act="relu6", kernel=1)
    y = o.relu6(
        o.bn(name + "_dw_bn", o.conv(name + "_dw", y, hidden, strides, hidden))
    )
    y = o.bn(name + "_proj_bn", o.conv(name + "_proj", y, features, kernel=1))
    if strides == 1 and x.shape[-1] == features:
        return o.add(x, y)
    return y


def dense_layer(o, name, x, bottleneck=True, growth=WIDTH):
    """A DenseNet layer's new features: [BN-ReLU-conv1x1] BN-ReLU-conv3x3."""
    y = x
    if bottleneck:
        y = o.conv(
            name + "_c1", o.relu(o.bn(name + "_n1", y)), 2 * growth, kernel=1
        )
    return o.conv(name + "_c2", o.relu(o.bn(name + "_n2", y)), growth)


def stem(o, x, act="relu"):
    return o.cbr("stem", x, WIDTH, act=act)


def p1(o, x):  # bottleneck with projection on a ReLU
    return o.head(bottleneck(o, "b", stem(o, x), WIDTH))


def p2(o, x):  # bottleneck with identity on a ReLU
    return o.head(bottleneck(o, "b", o.cbr("stem", x, 4 * WIDTH), WIDTH))


def p3(o, x):  # bottleneck with projection on a max pool
    return o.head(bottleneck(o, "b", o.max_pool(stem(o, x)), WIDTH))


def p4(o, x):  # basic block with projection on a residual block's ReLU
    x = basic(o, "b1", stem(o, x))
    return o.head(basic(o, "b2", x, 2 * WIDTH, strides=2))


def p5(o, x):  # basic block with identity on a max pool
    return o.head(basic(o, "b", o.max_pool(stem(o, x))))


def p6(o, x):  # basic block with identity on a ReLU
    return o.head(basic(o, "b", stem(o, x)))


def p7(o, x):  # residual inverted block after one without shortcut
    x = inverted(o, "a", stem(o, x, "relu6"), WIDTH, strides=2)
    return o.head(inverted(o, "b", x, WIDTH))


def p8(o, x):  # a block reading a residual add
    x = inverted(o, "a", stem(o, x, "relu6"), WIDTH)
    return o.head(inverted(o, "b", x, 2 * WIDTH, strides=2))


def p9(o, x):  # residual inverted block after a residual inverted block
    x = inverted(o, "a", stem(o, x, "relu6"), WIDTH, strides=2)
    x = inverted(o, "b", x, WIDTH)
    return o.head(inverted(o, "c", x, WIDTH))


def p10(o, x):  # MobileNetV2 head
    x = o.cbr("last", stem(o, x, "relu6"), 2 * WIDTH, act="relu6", kernel=1)
    return o.head(x)


def p11(o, x):  # block after a block without shortcut and without expansion
    x = inverted(o, "a", stem(o, x, "relu6"), 2 * WIDTH, expand=1)
    return o.head(inverted(o, "b", x, 2 * WIDTH, strides=2))


def _dense_block(o, x, layers, new_first=False, bottleneck=True):
    for name in layers:
        new = dense_layer(o, name, x, bottleneck)
        x = o.concat(new, x) if new_first else o.concat(x, new)
    return x


def p12(o, x):  # bottleneck dense layers, (features, new)
    return o.head(_dense_block(o, o.max_pool(o.conv("stem", x)), ["l1", "l2"]))


def p13(o, x):  # basic dense layers
    x = o.max_pool(o.conv("stem", x))
    return o.head(_dense_block(o, x, ["l1", "l2"], bottleneck=False))


def p13_transition(o, x):  # BN-ReLU-conv-MaxPool transition
    x = _dense_block(o, o.max_pool(o.conv("stem", x)), ["l1", "l2"])
    x = o.conv("trans", o.relu(o.bn("trans_bn", x)), WIDTH, kernel=1)
    return o.head(o.max_pool(x))


def p14(o, x):  # bottleneck dense layers, (new, features)
    x = o.max_pool(o.conv("stem", x))
    return o.head(_dense_block(o, x, ["l1", "l2"], new_first=True))


def _pool_and_concat(o, x):
    pool = o.max_pool(o.conv("stem", x))
    return pool, o.concat(pool, o.conv("side", pool))


def p15(o, x):  # (layer(max pool), concatenation)
    pool, features = _pool_and_concat(o, x)
    return o.head(o.concat(dense_layer(o, "l", pool), features))


def p16(o, x):  # (concatenation, layer(max pool))
    pool, features = _pool_and_concat(o, x)
    return o.head(o.concat(features, dense_layer(o, "l", pool)))


def p6_cast_output(o, x):  # the output is a cast and reshape of the logits
    return p6(o, x).astype(jnp.bfloat16).reshape(x.shape[0], 5, 2)


def avg_pool_transition(o, x):  # DenseNet-BC transition with average pooling
    x = o.max_pool(o.conv("stem", x))
    x = o.concat(x, dense_layer(o, "l", x))
    x = o.conv("trans", o.relu(o.bn("trans_bn", x)), WIDTH, kernel=1)
    return o.head(o.avg_pool(x))


def plain_cnn(o, x):  # VGG-style conv-BN-ReLU-pool
    x = o.max_pool(o.cbr("c1", x))
    return o.head(o.max_pool(o.cbr("c2", x, 2 * WIDTH)))


def mobilenet_v2(o, x):
    """Stride-2 blocks between residual blocks, t = 1 first block."""
    x = stem(o, x, "relu6")
    x = inverted(o, "s1", x, 2 * WIDTH, expand=1)  # no expansion, no shortcut
    x = inverted(o, "s2a", x, 2 * WIDTH, strides=2)  # pattern 11
    x = inverted(o, "s2b", x, 2 * WIDTH)  # pattern 7
    x = inverted(o, "s2c", x, 2 * WIDTH)  # pattern 9
    x = inverted(o, "s3a", x, 4 * WIDTH, strides=2)  # pattern 8
    x = inverted(o, "s3b", x, 4 * WIDTH)  # pattern 7
    x = o.cbr("last", x, 8 * WIDTH, act="relu6", kernel=1)  # pattern 10
    return o.head(x)


def densenet(o, x):
    """A block of basic layers, a max-pool transition, a bottleneck block."""
    x = o.max_pool(o.conv("stem", x))
    x = _dense_block(o, x, ["a1", "a2"], bottleneck=False)  # pattern 13
    x = o.conv("t", o.relu(o.bn("t_bn", x)), WIDTH, kernel=1)  # pattern 13
    x = _dense_block(o, o.max_pool(x), ["b1", "b2", "b3"])  # pattern 12
    return o.head(o.relu(o.bn("final_bn", x)))


@dataclasses.dataclass(frozen=True)
class Case:
    """A network and what MindSpore's pass removes from it."""

    network: Callable[[Layers, Any], Any]
    removed: dict[str, int]
    swap: bool = False


CASES = {
    "p1": Case(p1, {"b_c1_bn": 1, "b_c2_bn": 1, "b_proj_bn": 1}),
    "p2": Case(p2, {"b_c1_bn": 2, "b_c2_bn": 2}),
    "p3": Case(p3, {"b_c1_bn": 3, "b_c2_bn": 3, "b_proj_bn": 3}),
    "p4": Case(p4, {"b1_c1_bn": 6, "b2_c1_bn": 4, "b2_proj_bn": 4}),
    "p5": Case(p5, {"b_c1_bn": 5}),
    "p6": Case(p6, {"b_c1_bn": 6}),
    "p7": Case(p7, {"b_exp_bn": 7}),
    "p8": Case(p8, {"b_exp_bn": 8}),
    "p9": Case(p9, {"b_exp_bn": 7, "c_exp_bn": 9}),
    "p10": Case(p10, {"last_bn": 10}),
    "p11": Case(p11, {"b_exp_bn": 11}),
    "p12": Case(p12, {"l2_n1": 12}),
    "p13": Case(p13, {"l2_n2": 13}),
    "p13_transition": Case(p13_transition, {"l2_n1": 12, "trans_bn": 13}),
    # Pattern 14 is unreachable in MindSpore: pattern 13 matches first,
    # walking conv2-ReLU-BN(n2) on the new features and ending on the
    # concatenation, so n2 goes instead of n1.
    "p14": Case(p14, {"l2_n2": 13}),
    # Pattern 15 is shadowed by pattern 13 the same way (same BN).
    "p15": Case(p15, {"l_n2": 13}),
    "p16": Case(p16, {"l_n2": 16}),
    "p6_cast_output": Case(p6_cast_output, {"b_c1_bn": 6}),
    # Swapped operands: matched on the fallback order.
    "p1_swapped": Case(
        p1, {"b_c1_bn": 1, "b_c2_bn": 1, "b_proj_bn": 1}, swap=True
    ),
    "p9_swapped": Case(p9, {"b_exp_bn": 7, "c_exp_bn": 9}, swap=True),
    # Not matched by any pattern.
    "avg_pool_transition": Case(avg_pool_transition, {}),
    "plain_cnn": Case(plain_cnn, {}),
}

# Models mixing patterns: the removals are the union of the patterns'.
MIXED = {
    "mobilenet_v2": Case(
        mobilenet_v2,
        {
            "s2a_exp_bn": 11,
            "s2b_exp_bn": 7,
            "s2c_exp_bn": 9,
            "s3a_exp_bn": 8,
            "s3b_exp_bn": 7,
            "last_bn": 10,
        },
    ),
    "densenet": Case(
        densenet,
        {"a2_n2": 13, "t_bn": 13, "b2_n1": 12, "b3_n1": 12},
    ),
}


def build(case: Case, framework: str, x, *, abstract: bool = False) -> Any:
    """The network of `case` as a Linen or NNX model.

    An NNX model is built by running the network on `x`; `abstract` builds
    it under `nnx.eval_shape` (shapes only, no op compiled: enough for
    LessBN's decisions, which read shapes).
    """
    if framework == "linen":
        return linen(case.network, case.swap)
    if abstract:
        return nnx.eval_shape(lambda: nnx_(case.network, x, case.swap))
    return nnx_(case.network, x, case.swap)
