# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""``ParameterProcess`` and ``OptimizerProcess``: MindSpore's group helpers.

Mirrors ``mindspore/boost/base.py``: parameter groups as label trees, and an
optimizer with gradient centralization added
(`boostax.centralize_gradients`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import optax
from flax import linen as nn
from flax import nnx

from boostax._src import groups, model_graph, validation
from boostax._src.less_bn import api as less_bn_lib
from boostax._src.less_bn import centralization, fan_in


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
        return groups.fusion_buckets(
            parameters, split_point, argument="split_point"
        )

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
      >>> import jax.numpy as jnp, optax
      >>> from boostax import mindspore as boost
      >>> params = {"dense": {"kernel": jnp.ones((16, 4)), "bias": jnp.ones(4)}}
      >>> process = boost.OptimizerProcess(optax.sgd(0.1))
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
                validation.check_optimizer("optimizer", tx)
        else:
            validation.check_optimizer("optimizer", opt)
            if param_labels is not None:
                raise ValueError(
                    "`param_labels` goes with a mapping of per-group "
                    "optimizers, got one optimizer."
                )
        if isinstance(weight_decay, Mapping):
            if not isinstance(opt, Mapping):
                raise ValueError(
                    "A mapping of per-group `weight_decay` goes with a "
                    "mapping of per-group optimizers, got one optimizer."
                )
            for rate in weight_decay.values():
                validation.check_number("weight_decay", rate, minimum=0)
        else:
            validation.check_number("weight_decay", weight_decay, minimum=0)
        self.opt = opt
        self.origin_params = param_labels
        self.weight_decay = weight_decay
        self.gc_mask: Any = None  # a mask or a function of the params
        self.gc_axes: Any = None  # fan-in axes per leaf, or a function

    @staticmethod
    def build_params_dict(network: Any, sample_inputs: Any = None) -> dict:
        """Maps each layer module's path to its kind.

        Kinds: ``"conv"``, ``"grouped_conv"``, ``"batch_norm"``,
        ``"dense"``, ``"fn_head"``. NNX modules are read directly; Linen
        modules are traced on `sample_inputs`. In a LessBN-reduced Linen
        model (`boostax.LinenLessBN`) the FN head is the dense layer it
        replaces, and the removed BatchNorms are left out.
        """
        validation.check_flax_module("network", network)
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
            calls = model_graph.module_calls(network, sample_inputs)
            found = {c.path: c.kind for c in calls}
            if isinstance(network, less_bn_lib.LinenLessBN):
                # The trace records the dense module whose call LessBN
                # intercepts: only the wrapper knows it is the FN head.
                for path in network.removed:
                    found.pop(tuple(path), None)
                if network.fn_head is not None:
                    found[tuple(network.fn_head)] = "fn_head"
        return {path: kind for path, kind in found.items() if kind}

    @staticmethod
    def build_gc_params_group(
        params_dict: Mapping, parameters: Any, axes: Any = None
    ) -> Any:
        """Which leaves of `parameters` get gradient centralization.

        MindSpore's rules (`boostax.gradient_centralization_mask`), with the
        grouped convolutions and FN heads of `params_dict` excluded, applied
        to each leaf's fan-in over `axes` (default: the rank rule).
        """
        excluded = [
            path
            for path, kind in params_dict.items()
            if kind in ("grouped_conv", "fn_head")
        ]
        return centralization.gradient_centralization_mask(
            parameters, excluded_modules=excluded, axes=axes
        )

    def add_grad_centralization(
        self, params_or_model: Any, sample_inputs: Any = None
    ) -> None:
        """Computes the gradient-centralization mask.

        Args:
          params_or_model: the parameters (name and shape rules only), an
            NNX module, or a Linen module (traced on `sample_inputs`), whose
            grouped convolutions and FN heads are also excluded.
          sample_inputs: for a Linen module, one batch of inputs; for an
            NNX module, optional: given, each kernel is centralized over the
            fan-in axes of the layer that owns it
            (`boostax.gradient_centralization_axes`: attention projections,
            embeddings and a language model's head read right); without
            it, and for bare parameters, the rank rule (every axis but the
            last; MindSpore's).
        """
        if isinstance(params_or_model, (nn.Module, nnx.Module)):
            params_dict = self.build_params_dict(params_or_model, sample_inputs)
            if sample_inputs is not None:
                self.gc_axes = functools.partial(
                    fan_in.leaf_axes,
                    layers=fan_in.model_layers(params_or_model, sample_inputs),
                )
            self.gc_mask = functools.partial(
                self.build_gc_params_group, params_dict, axes=self.gc_axes
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
            steps.append(
                centralization.centralize_gradients(
                    self.gc_mask, axes=self.gc_axes
                )
            )
        return optax.chain(*steps, core)


def _label_mask(labels, label, params):
    tree = labels(params) if callable(labels) else labels
    return jax.tree.map(lambda x: x == label, tree)
