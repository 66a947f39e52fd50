# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""``AutoBoost``: MindSpore's ``mindspore.boost.AutoBoost`` (boost levels).

Mirrors ``mindspore/boost/boost.py``; the work is done by
`boostax.auto_boost` and the `boostax.BoostConfig` it reads.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import optax

from boostax._src import accumulation as accumulation_lib
from boostax._src import auto_boost as auto_boost_lib
from boostax._src import validation
from boostax._src.config import boost_config as config_lib
from boostax._src.config import components
from boostax._src.less_bn import api as less_bn_lib
from boostax._src.mindspore.freeze import FreezeOpt, GradientFreeze
from boostax._src.mindspore.less_bn import LessBN
from boostax._src.step import train_step as train_step_lib


class AutoBoost:
    """MindSpore's ``AutoBoost(level, boost_config_dict)``, minus the singleton.

    Unlike MindSpore's, every ``AutoBoost`` has its own configuration (two can
    live side by side), an unknown level raises instead of falling back to
    ``"O0"``, and the config is validated (see `boostax.BoostConfig`).

    Args:
      level: ``"O0"`` (no change), ``"O1"`` (LessBN + gradient freezing) or
        ``"O2"`` (O1 + AdaSum).
      boost_config_dict: a MindSpore-style dict, the path of a JSON file
        holding one, a `boostax.BoostConfig`, or ``""``/``None`` for the
        defaults.

    Example:
      >>> import optax
      >>> from boostax import mindspore as boost
      >>> from boostax.examples import models
      >>> booster = boost.AutoBoost("O0", {"boost": {"mode": "auto"}})
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
        self.config = config_lib.boost_config(
            level, boost_config_dict, argument="boost_config_dict"
        )

    @property
    def level(self) -> str:
        return self.config.level

    def network_auto_process_train(
        self,
        network: Any,
        optimizer: optax.GradientTransformation,
        *,
        sample_inputs: Any = None,
    ) -> tuple[Any, optax.GradientTransformation]:
        """Applies the training-side algorithms to a network and optimizer.

        Args:
          network: a Flax Linen or NNX module.
          optimizer: an Optax optimizer.
          sample_inputs: one batch of inputs (shapes only), needed by LessBN
            to trace the network.

        Returns:
          ``(network, optimizer)`` with the enabled algorithms applied: with
          ``less_bn``, the reduced network and the optimizer preceded by
          gradient centralization (``gc_flag``); with ``grad_freeze``, the
          optimizer becomes a `FreezeOpt` (MindSpore's per-group states; run
          it with `BoostTrainOneStepCell`); with ``grad_accumulation``, it
          is wrapped in `boostax.gradient_accumulation`; with the config's
          ``weight_averaging`` enabled, `boostax.average_params` is chained
          onto it (inside the accumulation). At ``"O0"``:
          unchanged. AdaSum, DimReduce and group loss scaling are options
          of the train step, not of the network or optimizer: they are
          applied by `train_step` (or the cells), and a warning here says
          so.
        """
        validation.check_flax_module("network", network)
        validation.check_optimizer("optimizer", optimizer)
        components.check_implemented(self.config)
        components.check_compatible(self.config)
        step_options = [
            name
            for name in ("adasum", "dim_reduce", "loss_scale_group")
            if self.config.is_enabled(name)
        ]
        if step_options:
            # Silently dropping them would train without them.
            warnings.warn(
                f"{', '.join(step_options)}: applied by the train step, not "
                "to the network and optimizer returned here; build the step "
                "with AutoBoost.train_step(..., mesh=, loss_scale=, "
                "pca_matrix=) to use them.",
                UserWarning,
                stacklevel=2,
            )
        if self.config.label_smoothing.enabled:
            # A loss option: nothing here returns the loss.
            warnings.warn(
                "label_smoothing: applied to the train step's loss, not to "
                "the network and optimizer returned here; build the step "
                "with AutoBoost.train_step(..., model=, loss=), or give "
                "your loss boostax.label_smoothing_loss(loss, alpha).",
                UserWarning,
                stacklevel=2,
            )
        original = network
        if self.config.is_enabled("less_bn"):
            network, optimizer, _, _ = components.apply_less_bn(
                network, optimizer, self.config, sample_inputs
            )
        if self.config.is_enabled("grad_freeze"):
            # Groups are cut on the network as given, before LessBN, as
            # MindSpore cuts them on the network's own parameters.
            section = self.config.grad_freeze
            _, optimizer = GradientFreeze(
                section.param_groups,
                section.freeze_type,
                section.freeze_p,
                section.total_steps,
            ).freeze_generate(original, optimizer, sample_inputs=sample_inputs)
        if self.config.weight_averaging.enabled:
            if isinstance(optimizer, FreezeOpt):
                raise ValueError(
                    "network_auto_process_train: the config's "
                    "`weight_averaging` cannot be chained onto a FreezeOpt "
                    "(one optimizer state per group); use "
                    "AutoBoost.train_step for freezing with weight averaging."
                )
            optimizer = components.with_weight_averaging(optimizer, self.config)
        steps = components.accumulation_steps(self.config)
        if steps > 1:
            if isinstance(optimizer, FreezeOpt):
                raise ValueError(
                    "network_auto_process_train: a FreezeOpt cannot be "
                    "wrapped in gradient accumulation; use "
                    "AutoBoost.train_step for freezing with accumulation."
                )
            optimizer = accumulation_lib.gradient_accumulation(optimizer, steps)
        return network, optimizer

    def network_auto_process_eval(
        self, network: Any, *, sample_inputs: Any = None
    ) -> Any:
        """Applies the inference-side algorithms (LessBN) to a network.

        Evaluation uses the same reduced network as training (MindSpore's
        eval network shares the training cell, FN head included), so a
        network that LessBN already reduced is returned as is.
        """
        validation.check_flax_module("network", network)
        if not self.config.is_enabled("less_bn") or less_bn_lib.is_reduced(
            network
        ):
            return network
        return LessBN(
            network, self.config.less_bn.fn_flag, sample_inputs=sample_inputs
        )

    def train_step(
        self,
        *,
        optimizer: optax.GradientTransformation,
        model: Any = None,
        loss: Callable[..., Any] | None = None,
        loss_fn: Callable[..., Any] | None = None,
        **kwargs,
    ) -> train_step_lib.TrainStep:
        """`boostax.auto_boost` with this object's level and config.

        The level's algorithms are MindSpore's on any network: on one
        without BatchNorm, where `boostax.auto_boost` in mode ``"auto"``
        leaves LessBN and freezing off, they stay on here, as in
        MindSpore.
        """
        config = self.config
        if config.mode == "auto" and config.enabled_algorithms:
            # Mode "manual" with the switches the level resolved to.
            config = config_lib.with_switches(config)
        return auto_boost_lib.auto_boost(
            self.level,
            config,
            optimizer=optimizer,
            model=model,
            loss=loss,
            loss_fn=loss_fn,
            **kwargs,
        )
