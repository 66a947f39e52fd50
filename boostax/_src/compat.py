# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``mindspore.boost`` object API, as a thin layer over boostax.

Each class keeps the seed's name, parameters and defaults so a MindSpore
script can be ported name for name; each is built from boostax's functional
pieces (`BoostConfig`, `auto_boost`, the Optax transforms).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import optax
from flax import linen as nn
from flax import nnx

from boostax._src import auto_boost as auto_boost_lib
from boostax._src import config as config_lib
from boostax._src import train_step as train_step_lib


def _check_network(network) -> None:
    if not isinstance(network, (nn.Module, nnx.Module)):
        raise TypeError(
            "`network` must be a Flax Linen or NNX module, got "
            f"{type(network).__name__}."
        )


class AutoBoost:
    """MindSpore's ``AutoBoost(level, boost_config_dict)``, minus the singleton.

    Unlike MindSpore's, every ``AutoBoost`` has its own configuration (two can
    live side by side), an unknown level raises instead of falling back to
    ``"O0"``, and the config is validated (see `BoostConfig`).

    Args:
      level: ``"O0"`` (no change), ``"O1"`` (LessBN + gradient freezing) or
        ``"O2"`` (O1 + AdaSum).
      boost_config_dict: a MindSpore-style dict, the path of a JSON file
        holding one, a `BoostConfig`, or ``""``/``None`` for the defaults.

    Example:
      >>> import optax, boostax
      >>> from boostax.examples import models
      >>> booster = boostax.AutoBoost("O0", {"boost": {"mode": "auto"}})
      >>> network, optimizer = booster.network_auto_process_train(
      ...     models.MLP(), optax.sgd(0.1))
    """

    def __init__(
        self,
        level: str = "O0",
        boost_config_dict: config_lib.BoostConfig
        | Mapping
        | str
        | os.PathLike
        | None = "",
    ):
        self.config = config_lib.boost_config(level, boost_config_dict)

    @property
    def level(self) -> str:
        return self.config.level

    def network_auto_process_train(
        self, network: Any, optimizer: optax.GradientTransformation
    ) -> tuple[Any, optax.GradientTransformation]:
        """Applies the training-side algorithms to a network and optimizer.

        Args:
          network: a Flax Linen or NNX module.
          optimizer: an Optax optimizer.

        Returns:
          ``(network, optimizer)`` with the enabled algorithms applied (at
          ``"O0"``: unchanged).
        """
        _check_network(network)
        train_step_lib.check_optimizer(optimizer)
        auto_boost_lib.check_implemented(self.config)
        return network, optimizer

    def network_auto_process_eval(self, network: Any) -> Any:
        """Applies the inference-side algorithms (LessBN) to a network."""
        _check_network(network)
        auto_boost_lib.check_implemented(self.config, ("less_bn",))
        return network

    def train_step(
        self,
        *,
        optimizer: optax.GradientTransformation,
        model: Any = None,
        loss: Callable[..., Any] | None = None,
        loss_fn: Callable[..., Any] | None = None,
        **kwargs,
    ) -> train_step_lib.TrainStep:
        """`boostax.auto_boost` with this object's level and config."""
        return auto_boost_lib.auto_boost(
            self.level,
            self.config,
            optimizer=optimizer,
            model=model,
            loss=loss,
            loss_fn=loss_fn,
            **kwargs,
        )
