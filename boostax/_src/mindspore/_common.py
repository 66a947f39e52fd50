# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by the MindSpore object API."""

from flax import linen as nn
from flax import nnx


def check_network(network) -> None:
    """Raises unless `network` is a Flax Linen or NNX module."""
    if not isinstance(network, (nn.Module, nnx.Module)):
        raise TypeError(
            "`network` must be a Flax Linen or NNX module, got "
            f"{type(network).__name__}."
        )
