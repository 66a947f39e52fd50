# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by the MindSpore object API."""

import optax
from flax import linen as nn
from flax import nnx


def check_network(network) -> None:
    """Raises unless `network` is a Flax Linen or NNX module."""
    if not isinstance(network, (nn.Module, nnx.Module)):
        raise TypeError(
            "`network` must be a Flax Linen or NNX module, got "
            f"{type(network).__name__}."
        )


def check_optimizer(optimizer) -> None:
    """Raises unless `optimizer` is an Optax optimizer.

    The message is the train step's own (`boostax.make_train_step`), so a
    shim refuses what the step it builds would refuse, in the same words;
    it is repeated here to keep the shims off the step's internals.
    """
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            "`optimizer` must be an optax.GradientTransformation (e.g. "
            f"optax.sgd(0.1)), got {type(optimizer).__name__}."
        )
