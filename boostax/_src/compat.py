# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``mindspore.boost`` object API, as a thin layer over boostax.

Each class keeps the seed's name, parameters and defaults so a MindSpore
script can be ported name for name; each is built from boostax's functional
pieces (`BoostConfig`, `auto_boost`, the Optax transforms).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import optax
from flax import linen as nn
from flax import nnx

from boostax._src import auto_boost as auto_boost_lib
from boostax._src import centralization, groups, model_graph
from boostax._src import config as config_lib
from boostax._src import less_bn as less_bn_lib
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
          gradient centralization (``gc_flag``). At ``"O0"``: unchanged.
        """
        _check_network(network)
        train_step_lib.check_optimizer(optimizer)
        auto_boost_lib.check_implemented(self.config)
        if self.config.is_enabled("less_bn"):
            network, optimizer, _ = auto_boost_lib.apply_less_bn(
                network, optimizer, self.config, sample_inputs
            )
        return network, optimizer

    def network_auto_process_eval(
        self, network: Any, *, sample_inputs: Any = None
    ) -> Any:
        """Applies the inference-side algorithms (LessBN) to a network.

        Evaluation uses the same reduced network as training (MindSpore's
        eval network shares the training cell, FN head included), so a
        network that LessBN already reduced is returned as is.
        """
        _check_network(network)
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


def LessBN(network: Any, fn_flag: bool = False, *, sample_inputs: Any = None):  # noqa: N802
    """MindSpore's ``LessBN(network, fn_flag=False)``: `boostax.less_bn`.

    MindSpore finds the BatchNorm structures when its graph compiles; a JAX
    model has no graph until it is traced, so LessBN needs one batch of
    `sample_inputs` (only shapes and dtypes are used).

    Args:
      network: a Flax Linen or NNX module.
      fn_flag: replace the last dense layer by an FN head.
      sample_inputs: one batch of inputs.

    Returns:
      The reduced network (see `boostax.less_bn`).
    """
    _check_network(network)
    if sample_inputs is None:
        raise TypeError(
            "LessBN traces the network to find its BatchNorm structures: "
            "pass `sample_inputs=` (one batch of inputs)."
        )
    return less_bn_lib.less_bn(network, sample_inputs, fn_flag=fn_flag)


class ParameterProcess:
    """MindSpore's ``ParameterProcess``: parameter groups as label trees."""

    def assign_parameter_group(
        self, parameters: Any, split_point: Sequence[int] | None = None
    ) -> Any:
        """MindSpore's communication-fusion bucket of each parameter.

        Buckets count from 1 and increase at each leaf index in
        `split_point` (default: half the number of leaves). XLA fuses
        collectives itself: the buckets only document MindSpore's split.
        """
        return groups.fusion_buckets(parameters, split_point)

    @staticmethod
    def generate_group_params(parameters: Any, origin_params: Any) -> Any:
        """Re-expresses `parameters` in the groups of `origin_params`.

        Args:
          parameters: the new parameter tree (e.g. after LessBN).
          origin_params: the original optimizer's label tree (as given to
            ``optax.partition``), a function returning one, or ``None`` for
            a single group.

        Returns:
          The label tree of `parameters` (see `groups.relabel`).
        """
        return groups.relabel(parameters, origin_params)


class OptimizerProcess:
    """MindSpore's ``OptimizerProcess(opt)``: adds gradient centralization.

    `opt` is one Optax optimizer, or per-group optimizers: a mapping from
    labels to optimizers plus `param_labels`, exactly what ``optax.partition``
    takes. The new optimizer keeps each group's optimizer (learning rate,
    weight decay, ...) and applies, in MindSpore's order, the groups'
    coupled `weight_decay`, then gradient centralization, then the
    optimizers.

    Args:
      opt: an ``optax.GradientTransformation`` or a mapping label ->
        transformation.
      param_labels: with a mapping, the label tree (or function of the
        params returning it) of ``optax.partition``.
      weight_decay: coupled weight decay added to the gradients before
        centralization: a number, or a mapping label -> number.

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> params = {"dense": {"kernel": jnp.ones((16, 4)), "bias": jnp.ones(4)}}
      >>> process = boostax.OptimizerProcess(optax.sgd(0.1))
      >>> process.add_grad_centralization(params)
      >>> optimizer = process.generate_new_optimizer()
      >>> process.gc_mask
      {'dense': {'bias': False, 'kernel': True}}
    """

    def __init__(
        self,
        opt: optax.GradientTransformation
        | Mapping[Any, optax.GradientTransformation],
        param_labels: Any = None,
        *,
        weight_decay: float | Mapping[Any, float] = 0.0,
    ):
        if isinstance(opt, Mapping):
            if param_labels is None:
                raise ValueError(
                    "Per-group optimizers need `param_labels` (as "
                    "optax.partition)."
                )
            for tx in opt.values():
                train_step_lib.check_optimizer(tx)
        else:
            train_step_lib.check_optimizer(opt)
            if param_labels is not None:
                raise ValueError(
                    "`param_labels` goes with a mapping of per-group "
                    "optimizers, got one optimizer."
                )
        self.opt = opt
        self.origin_params = param_labels
        self.weight_decay = weight_decay
        self.gc_mask = None

    @staticmethod
    def build_params_dict(network: Any, sample_inputs: Any = None) -> dict:
        """Maps each layer module's path to its kind.

        Kinds: ``"conv"``, ``"grouped_conv"``, ``"batch_norm"``,
        ``"dense"``, ``"fn_head"``. NNX modules are read directly; Linen
        modules are traced on `sample_inputs`.
        """
        _check_network(network)
        if isinstance(network, nnx.Module):
            found = {
                tuple(p): model_graph.layer_kind(m)
                for p, m in nnx.iter_modules(network)
            }
        else:
            if sample_inputs is None:
                raise TypeError(
                    "A Linen network is traced to find its layers: pass "
                    "`sample_inputs=`."
                )
            inputs = less_bn_lib._as_tuple(sample_inputs)
            graph = model_graph.linen_graph(
                network, inputs, less_bn_lib._linen_mode_kwargs(network, False)
            )
            found = {c.path: c.kind for c in graph.calls}
        return {path: kind for path, kind in found.items() if kind}

    @staticmethod
    def build_gc_params_group(params_dict: Mapping, parameters: Any) -> Any:
        """Which leaves of `parameters` get gradient centralization.

        MindSpore's rules (`boostax.gradient_centralization_mask`), with the
        grouped convolutions and FN heads of `params_dict` excluded.
        """
        excluded = [
            path
            for path, kind in params_dict.items()
            if kind in ("grouped_conv", "fn_head")
        ]
        return centralization.gradient_centralization_mask(
            parameters, excluded_modules=excluded
        )

    def add_grad_centralization(
        self, params_or_model: Any, sample_inputs: Any = None
    ) -> None:
        """Computes the gradient-centralization mask.

        Args:
          params_or_model: the parameters (name and shape rules only), an
            NNX module, or a Linen module (traced on `sample_inputs`), whose
            grouped convolutions and FN heads are also excluded.
          sample_inputs: for a Linen module, one batch of inputs.
        """
        if isinstance(params_or_model, (nn.Module, nnx.Module)):
            params_dict = self.build_params_dict(params_or_model, sample_inputs)
            self.gc_mask = functools.partial(
                self.build_gc_params_group, params_dict
            )
            return
        if not jax.tree.leaves(params_or_model):
            raise ValueError("Optimizer got an empty parameter list.")
        self.gc_mask = self.build_gc_params_group({}, params_or_model)

    def _decay(self) -> optax.GradientTransformation:
        if not isinstance(self.weight_decay, Mapping):
            return (
                optax.add_decayed_weights(self.weight_decay)
                if self.weight_decay
                else optax.identity()
            )
        labels = self.origin_params
        return optax.chain(
            *(
                optax.add_decayed_weights(
                    rate,
                    mask=functools.partial(_label_mask, labels, label),
                )
                for label, rate in self.weight_decay.items()
                if rate
            )
        )

    def generate_new_optimizer(self) -> optax.GradientTransformation:
        """The optimizer with decay, then centralization, then `opt`."""
        core = (
            optax.partition(self.opt, self.origin_params)
            if isinstance(self.opt, Mapping)
            else self.opt
        )
        steps = [self._decay()]
        if self.gc_mask is not None:
            steps.append(centralization.centralize_gradients(self.gc_mask))
        return optax.chain(*steps, core)


def _label_mask(labels, label, params):
    tree = labels(params) if callable(labels) else labels
    return jax.tree.map(lambda x: x == label, tree)
