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
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import nnx

from boostax._src import accumulation as accumulation_lib
from boostax._src import adasum as adasum_lib
from boostax._src import auto_boost as auto_boost_lib
from boostax._src import (
    centralization,
    groups,
    model_graph,
    objectives,
    validation,
)
from boostax._src import config as config_lib
from boostax._src import data_parallel as data_parallel_lib
from boostax._src import dim_reduce as dim_reduce_lib
from boostax._src import freezing as freezing_lib
from boostax._src import less_bn as less_bn_lib
from boostax._src import loss_scale as loss_scale_lib
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
          is wrapped in `boostax.gradient_accumulation`. At ``"O0"``:
          unchanged. AdaSum, DimReduce and group loss scaling are options
          of the train step, not of the network or optimizer: they are
          applied by `train_step` (or the cells), and a warning here says
          so.
        """
        _check_network(network)
        train_step_lib.check_optimizer(optimizer)
        auto_boost_lib.check_implemented(self.config)
        auto_boost_lib.check_compatible(self.config)
        step_options = [
            name
            for name in ("adasum", "dim_reduce", "loss_scale_group")
            if self.config.is_enabled(name)
        ]
        if step_options:
            warnings.warn(
                f"{', '.join(step_options)}: applied by the train step, not "
                "to the network and optimizer returned here; build the step "
                "with AutoBoost.train_step(..., mesh=, loss_scale=, "
                "pca_matrix=) to use them.",
                UserWarning,
                stacklevel=2,
            )
        original = network
        if self.config.is_enabled("less_bn"):
            network, optimizer, _, _ = auto_boost_lib.apply_less_bn(
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
        steps = auto_boost_lib.accumulation_steps(self.config)
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
    validation.check_bool("fn_flag", fn_flag)
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
        self.gc_mask = None

    @staticmethod
    def build_params_dict(network: Any, sample_inputs: Any = None) -> dict:
        """Maps each layer module's path to its kind.

        Kinds: ``"conv"``, ``"grouped_conv"``, ``"batch_norm"``,
        ``"dense"``, ``"fn_head"``. NNX modules are read directly; Linen
        modules are traced on `sample_inputs`. In a LessBN-reduced Linen
        model (`LinenLessBN`) the FN head is the dense layer it replaces,
        and the removed BatchNorms are left out.
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


# ---------------------------------------------------------------------------
# Gradient freezing.
# ---------------------------------------------------------------------------


def _as_path(leaf) -> tuple[str, ...]:
    if isinstance(leaf, str):
        return tuple(leaf.split("/"))
    return tuple(str(k) for k in leaf)


class FreezeOpt:
    """MindSpore's ``FreezeOpt``: one independent optimizer state per group.

    Each parameter group gets its own optimizer state (MindSpore builds one
    optimizer per group), so a parameter in several nested groups has one
    set of moments per group. boostax's default freezing instead shares one
    state across depths (`boostax.auto_boost`).

    Args:
      opt: an Optax optimizer used for every group; or, with
        `learning_rate`, a factory ``opt(schedule) -> optimizer`` (e.g.
        ``functools.partial(optax.sgd, momentum=0.9)``).
      train_parameter_groups: the groups, each a sequence of parameter
        paths (tuples of names or ``"/"``-joined strings); ``None``: one
        group of all parameters.
      train_strategy: the group trained at each step (a sequence of ints or
        a 1-D integer array); ``None``: the groups in turn.
      learning_rate: a per-step learning-rate list, split so that each
        group sees the rates of the steps it runs (MindSpore's dynamic
        learning-rate split; not split if longer than the strategy).
    """

    def __init__(
        self,
        opt: Any,
        train_parameter_groups: Sequence[Sequence[Any]] | None = None,
        train_strategy: Sequence[int] | np.ndarray | None = None,
        *,
        learning_rate: Sequence[float] | None = None,
    ):
        if learning_rate is None:
            train_step_lib.check_optimizer(opt)
        elif not callable(opt) or isinstance(opt, optax.GradientTransformation):
            raise TypeError(
                "With `learning_rate`, `opt` must be a factory "
                "opt(schedule) -> optax.GradientTransformation, got "
                f"{type(opt).__name__}."
            )
        else:
            validation.check_numbers("learning_rate", learning_rate, minimum=0)
        if train_strategy is not None and train_parameter_groups is None:
            raise ValueError("`train_strategy` needs `train_parameter_groups`.")
        if train_parameter_groups is not None:
            if not isinstance(train_parameter_groups, (tuple, list)):
                raise TypeError(
                    "`train_parameter_groups` must be a tuple or list, got "
                    f"{type(train_parameter_groups).__name__}."
                )
            for group in train_parameter_groups:
                if not isinstance(group, (tuple, list)):
                    raise TypeError(
                        "Each group of `train_parameter_groups` must be a "
                        f"tuple or list, got {type(group).__name__}."
                    )
                for leaf in group:
                    if not isinstance(leaf, (str, tuple, list)):
                        raise TypeError(
                            "The parameter paths of `train_parameter_groups` "
                            "must be '/'-joined strs or tuples of names, "
                            f"{validation.got(leaf)}."
                        )
            groups = tuple(
                tuple(_as_path(leaf) for leaf in g)
                for g in train_parameter_groups
            )
        else:
            groups = None
        count = 1 if groups is None else len(groups)
        self.train_strategy = self._strategy(train_strategy, count)
        if self.train_strategy.min() < 0 or self.train_strategy.max() >= count:
            raise ValueError(
                f"`train_strategy` must hold group indices in [0, {count - 1}]"
                f" ({count} groups), got {self.train_strategy.min()} to "
                f"{self.train_strategy.max()}."
            )
        self.train_parameter_groups = groups
        self.opt = opt
        if learning_rate is None:
            self.optimizers = (opt,) * count
        else:
            self.optimizers = tuple(
                opt(schedule)
                for schedule in freezing_lib.split_learning_rates(
                    learning_rate, self.train_strategy, count
                )
            )

    @staticmethod
    def _strategy(strategy, count) -> np.ndarray:
        if strategy is None:
            return np.arange(count, dtype=np.int32)
        if isinstance(strategy, (np.ndarray, jax.Array)):
            array = np.asarray(strategy)
            if (
                array.ndim != 1
                or not array.size
                or not np.issubdtype(array.dtype, np.integer)
            ):
                raise ValueError(
                    "`train_strategy` must be a non-empty 1-D integer array, "
                    f"got shape {array.shape} and dtype {array.dtype}."
                )
            return array.astype(np.int32)
        if not isinstance(strategy, (tuple, list)):
            raise TypeError(
                "`train_strategy` must be a tuple, list or integer array, "
                f"got {type(strategy).__name__}."
            )
        for s in strategy:
            if not validation.is_int(s):
                raise TypeError(
                    "`train_strategy` must hold ints only (group indices), "
                    f"{validation.got(s)}."
                )
        strategy = np.asarray(strategy, np.int32)
        if not strategy.size:
            raise ValueError("`train_strategy` must not be empty.")
        return strategy

    def freezing(self, params: Any) -> freezing_lib.Freezing:
        """The `Freezing` plan of these groups over `params`."""
        param_groups = self.train_parameter_groups
        if param_groups is None:
            param_groups = (tuple(groups.leaf_paths(params)),)
        else:  # groups cut before LessBN: drop removed leaves, add new ones
            param_groups = freezing_lib.restrict_groups(param_groups, params)
        return freezing_lib.Freezing(
            param_groups, self.train_strategy, group_optimizers=self.optimizers
        )


class GradientFreeze:
    """MindSpore's ``GradientFreeze``: groups, sequence, freezing optimizer.

    Args:
      param_groups: number of parameter groups (>= 1).
      freeze_type: 0 (continuous) or 1 (interval) strategy.
      freeze_p: in [0, 1], about the fraction of steps training everything.
      total_steps: training steps.
    """

    def __init__(
        self,
        param_groups: int = 10,
        freeze_type: int = 1,
        freeze_p: float = 0.7,
        total_steps: int = 65536,
    ):
        validation.check_int("param_groups", param_groups, minimum=1)
        freeze_type_message = (
            "`freeze_type` must be 0 (continuous) or 1 (interval)"
        )
        if not validation.is_int(freeze_type):
            raise TypeError(
                f"{freeze_type_message}, {validation.got(freeze_type)}."
            )
        if freeze_type not in (0, 1):
            raise ValueError(f"{freeze_type_message}, got {freeze_type!r}.")
        validation.check_number("freeze_p", freeze_p, minimum=0, maximum=1)
        validation.check_int("total_steps", total_steps, minimum=1)
        section = config_lib.GradFreezeSection(
            param_groups=param_groups,
            freeze_type=freeze_type,
            freeze_p=freeze_p,
            total_steps=total_steps,
        )
        self._param_groups = section.param_groups
        self._freeze_type = section.freeze_type
        self._freeze_p = section.freeze_p
        self._total_steps = section.total_steps

    @staticmethod
    def generate_freeze_index_sequence(
        parameter_groups_number,
        freeze_strategy,
        freeze_p,
        total_steps,
        *,
        seed: int = 0,
    ) -> np.ndarray:
        """See `boostax.generate_freeze_index_sequence`."""
        return freezing_lib.generate_freeze_index_sequence(
            parameter_groups_number,
            freeze_strategy,
            freeze_p,
            total_steps,
            seed=seed,
        )

    @staticmethod
    def split_parameters_groups(
        net: Any, freeze_para_groups_number: int, *, sample_inputs=None
    ) -> tuple[tuple[tuple[str, ...], ...], ...]:
        """See `boostax.split_parameters_groups`."""
        return freezing_lib.split_parameters_groups(
            net, freeze_para_groups_number, sample_inputs=sample_inputs
        )

    def freeze_generate(
        self, network: Any, optimizer: Any, *, sample_inputs=None, seed=0
    ) -> tuple[Any, FreezeOpt]:
        """The network and its freezing optimizer (a `FreezeOpt`)."""
        validation.check_int("seed", seed, minimum=0)
        groups = self.split_parameters_groups(
            network, self._param_groups, sample_inputs=sample_inputs
        )
        sequence = self.generate_freeze_index_sequence(
            self._param_groups,
            self._freeze_type,
            self._freeze_p,
            self._total_steps,
            seed=seed,
        )
        return network, FreezeOpt(optimizer, groups, sequence)


class FreezeCells(tuple):
    """The per-depth train steps of `freeze_cell` (a tuple).

    Attributes:
      train_step: the `TrainStep` they belong to (its ``init`` builds the
        state; calling it runs the step the sequence picks).
    """

    train_step: train_step_lib.TrainStep


def freeze_cell(
    reducer_flag: bool,
    network: Any,
    optimizer: FreezeOpt,
    sens: float | None = None,
    grad: Any = None,
    use_grad_accumulation: bool = False,
    mean: bool | None = None,
    degree: int | None = None,
    max_accumulation_step: int = 1,
    *,
    loss: Callable[..., Any],
) -> FreezeCells:
    """MindSpore's ``freeze_cell``: one train step per parameter group.

    Step ``k`` differentiates and updates only group ``k`` (the others are
    constants, so their backward pass is not computed) with group ``k``'s
    own optimizer state.

    Args:
      reducer_flag: distributed training: must be False here (data-parallel
        freezing is `auto_boost(..., mesh=...)`).
      network: a Flax Linen or NNX module, trained on ``(inputs, targets)``.
      optimizer: a `FreezeOpt`.
      sens: loss scale; ``None`` or 1 here (loss scaling with freezing is
        `auto_boost(..., loss_scale=...)`).
      grad: MindSpore's gradient operation; boostax differentiates with
        ``jax.value_and_grad``: must be ``None``.
      use_grad_accumulation, mean, degree, max_accumulation_step: gradient
        accumulation and data parallelism; ``freeze_cell`` does not wire
        them (with freezing they are `auto_boost`'s ``grad_accumulation``
        and ``mesh``).
      loss: ``loss(outputs, targets) -> scalar``.

    Returns:
      A `FreezeCells` tuple: ``cells[k](state, batch) -> (state, metrics)``,
      with ``cells.train_step.init(variables)`` for the state.
    """
    if not isinstance(optimizer, FreezeOpt):
        raise TypeError(
            f"`optimizer` must be a FreezeOpt, got {type(optimizer).__name__}."
        )
    validation.check_bool("reducer_flag", reducer_flag)
    validation.check_optional_number(
        "sens", sens, none_means="no loss scaling", minimum=0, open_minimum=True
    )
    validation.check_bool("use_grad_accumulation", use_grad_accumulation)
    validation.check_optional_bool("mean", mean)
    validation.check_optional_int(
        "degree", degree, minimum=1, none_means="the device count"
    )
    validation.check_int(
        "max_accumulation_step", max_accumulation_step, minimum=1
    )
    if reducer_flag or mean is not None or degree is not None:
        raise NotImplementedError(
            "freeze_cell does not wire data-parallel gradient reduction "
            "(reducer_flag, mean, degree): use boostax.auto_boost(..., "
            "mesh=...) with grad_freeze on."
        )
    if use_grad_accumulation or max_accumulation_step != 1:
        raise NotImplementedError(
            "freeze_cell does not wire gradient accumulation: use "
            "boostax.auto_boost with grad_freeze and grad_accumulation on."
        )
    if sens not in (None, 1, 1.0):
        raise NotImplementedError(
            "freeze_cell does not wire loss scaling (`sens`): use "
            "boostax.auto_boost(..., loss_scale=...) with grad_freeze on."
        )
    if grad is not None:
        raise ValueError(
            "`grad` must be None: boostax differentiates with "
            f"jax.value_and_grad (pass grad=None), {validation.got(grad)}."
        )
    step = _freezing_train_step(network, optimizer, loss)
    cells = FreezeCells(
        step.at_depth(k) for k in range(len(optimizer.optimizers))
    )
    cells.train_step = step
    return cells


def _freezing_train_step(network, optimizer: FreezeOpt, loss):
    objective = objectives.make_objective(model=network, loss=loss)
    return train_step_lib.TrainStep(
        objective, optimizer.optimizers[0], freezing=optimizer.freezing
    )


# ---------------------------------------------------------------------------
# The training cell.
# ---------------------------------------------------------------------------


class GradientAccumulation:
    """MindSpore's ``GradientAccumulation(max_accumulation_step, optimizer)``.

    Like ``optax.MultiSteps``: ``init``/``update`` (an Optax transform via
    `gradient_transformation`), `has_updated`. The inner optimizer runs only
    on every `max_accumulation_step`-th step (`boostax.gradient_accumulation`).
    BatchNorm statistics, updated by the forward pass, move every micro-step.
    """

    def __init__(self, max_accumulation_step: int, optimizer):
        validation.check_int(
            "max_accumulation_step", max_accumulation_step, minimum=1
        )
        train_step_lib.check_optimizer(optimizer)
        self.max_accumulation_step = max_accumulation_step
        self.optimizer = optimizer
        self._tx = accumulation_lib.gradient_accumulation(
            optimizer, max_accumulation_step
        )
        self.init, self.update = self._tx.init, self._tx.update

    def gradient_transformation(self) -> optax.GradientTransformationExtraArgs:
        return self._tx

    @staticmethod
    def has_updated(state) -> jax.Array:
        return accumulation_lib.has_updated(state)


class AdaSum:
    """MindSpore's ``AdaSum``: hierarchical AdaSum of weight deltas.

    ``AdaSum(rank, device_number, group_number, parameter_tuple)``: the
    deltas are averaged over the `device_number` devices of a node and
    AdaSum'd across the `group_number` nodes. Call it inside
    ``jax.shard_map`` over `mesh` (axes ``node``, ``local``):

    .. math::

      w_\\text{new} = w_\\text{old} - \\operatorname{AdaSum}_\\text{nodes}
      \\bigl(\\operatorname{mean}_\\text{node}(w_\\text{old} - w')\\bigr)

    Args:
      rank: the total number of devices (``device_number * group_number``).
      device_number: devices per node.
      group_number: number of nodes.
      parameter_tuple: the weights (a pytree); the deltas must match its
        structure.

    Example:
      >>> import jax, jax.numpy as jnp, boostax
      >>> from jax.sharding import PartitionSpec as P
      >>> n = len(jax.devices())
      >>> w = {"w": jnp.ones(2)}
      >>> adasum = boostax.AdaSum(n, 1, n, w)
      >>> def step(delta, old):
      ...   return adasum(delta, old, old)
      >>> new = jax.jit(jax.shard_map(
      ...     step, mesh=adasum.mesh(), in_specs=(P(), P()), out_specs=P(),
      ... ))({"w": jnp.array([0.5, 0.5])}, w)
      >>> new["w"]  # equal deltas on every node: their mean
      Array([0.5, 0.5], dtype=float32)
    """

    def __init__(
        self,
        rank: int,
        device_number: int,
        group_number: int,
        parameter_tuple: Any,
    ):
        rank, device_number, group_number = (
            validation.check_int(name, value, minimum=1)
            for name, value in (
                ("rank", rank),
                ("device_number", device_number),
                ("group_number", group_number),
            )
        )
        if rank != device_number * group_number:
            raise ValueError(
                "`rank` (the total number of devices) must equal "
                f"device_number * group_number = {device_number} * "
                f"{group_number}, got {rank}."
            )
        self.rank = rank
        self.device_number = device_number
        self.group_number = group_number
        self.parameter_tuple = parameter_tuple
        self._structure = jax.tree.structure(parameter_tuple)

    def mesh(self, devices: Any = None):
        """The ``(node, local)`` mesh of `rank` devices this AdaSum runs on."""
        devices = np.asarray(jax.devices() if devices is None else devices)
        if devices.size != self.rank:
            raise ValueError(
                f"AdaSum was built for `rank` = {self.rank} devices, got "
                f"{devices.size}."
            )
        return data_parallel_lib.node_mesh(self.device_number, devices)

    def __call__(self, delta_weights, parameters, old_parameters):
        """The updated weights ``old - AdaSum(delta)`` (inside shard_map)."""
        del parameters  # replaced by the result, as MindSpore assigns it
        for name, tree in (
            ("delta_weights", delta_weights),
            ("old_parameters", old_parameters),
        ):
            if jax.tree.structure(tree) != self._structure:
                raise ValueError(
                    f"`{name}` must have the structure of `parameter_tuple` "
                    f"{self._structure}, got {jax.tree.structure(tree)}."
                )
        delta = adasum_lib.hierarchical_adasum_reduce(
            delta_weights, local_axis="local", node_axis="node"
        )
        return jax.tree.map(lambda w, d: w - d, old_parameters, delta)


class DimReduce:
    """MindSpore's ``DimReduce``: one DimReduce update per call.

    ``DimReduce(network, optimizer, weight, pca_mat_local, n_components,
    rho, gamma, alpha, sigma, rank, rank_size)``. Each call
    ``dim_reduce(loss, old_grad, weight, weight_clone, *inputs)`` computes
    `boostax.dim_reduce`'s step ``u`` from the gradient `old_grad` (the
    Armijo trials evaluate the loss on `inputs`) and, as MindSpore does,
    hands ``-u`` to `optimizer` as a gradient: with ``optax.sgd(1.0)``
    (MindSpore's ``SGD(lr=1)``), ``w <- w + u``. The new weights are in
    `weight` (JAX arrays are immutable; MindSpore assigns in place).

    Args:
      network: a Flax Linen or NNX module, trained on ``(inputs, targets)``.
      optimizer: the Optax optimizer applying the step (``optax.sgd(1.0)``).
      weight: the params pytree.
      pca_mat_local: the PCA matrix ``(n_components, n_params)``.
      n_components, rho, gamma, alpha, sigma: as the ``dim_reduce`` section.
      rank, rank_size: this process's rank and the world size; the seed
        API's data-parallel DimReduce is `auto_boost(..., mesh=...)`, so
        they must be 0 and 1 here.
      loss: ``loss(outputs, targets) -> scalar``.
      model_state: the network's non-trainable variables (BatchNorm
        statistics), if any.
    """

    def __init__(
        self,
        network: Any,
        optimizer: optax.GradientTransformation,
        weight: Any,
        pca_mat_local: Any,
        n_components: int,
        rho: float,
        gamma: float,
        alpha: float,
        sigma: float,
        rank: int,
        rank_size: int,
        *,
        loss: Callable[..., Any],
        model_state: Any = None,
    ):
        _check_network(network)
        train_step_lib.check_optimizer(optimizer)
        n_components = validation.check_int(
            "n_components", n_components, minimum=1
        )
        rank = validation.check_int("rank", rank, minimum=0)
        rank_size = validation.check_int("rank_size", rank_size, minimum=1)
        if rank >= rank_size:
            raise ValueError(
                f"`rank` must be in [0, rank_size - 1] = [0, {rank_size - 1}],"
                f" got {rank}."
            )
        if rank != 0 or rank_size != 1:
            raise NotImplementedError(
                "DimReduce with rank_size > 1: build the data-parallel step "
                "with boostax.auto_boost(..., mesh=...) (P's rows are split "
                "over the mesh's devices)."
            )
        matrix = np.asarray(pca_mat_local)
        if matrix.dtype == np.bool_ or not np.issubdtype(
            matrix.dtype, np.number
        ):
            raise TypeError(
                "`pca_mat_local` must be a numeric matrix (n_components, "
                f"n_params), got an array of dtype {matrix.dtype}."
            )
        if matrix.ndim != 2 or matrix.shape[0] != n_components:
            raise ValueError(
                f"`pca_mat_local` must have `n_components` = {n_components} "
                f"rows, got shape {matrix.shape}."
            )
        self.objective = objectives.make_objective(model=network, loss=loss)
        self.optimizer = optimizer
        self.tx = dim_reduce_lib.dim_reduce(
            matrix, rho=rho, gamma=gamma, alpha=alpha, sigma=sigma
        )
        self.weight = weight
        if model_state is None and isinstance(network, nn.Module):
            model_state = {}  # a Linen model without batch statistics
        self.model_state = model_state
        self.state = self.tx.init(weight)
        self.opt_state = optimizer.init(weight)
        self._step = jax.jit(self._update)

    def _update(self, state, opt_state, grads, weight, model_state, batch):
        def value_fn(params):
            value, _ = self.objective.loss_fn(
                params, model_state, batch, jax.random.PRNGKey(0)
            )
            return value

        step, state = self.tx.update(
            grads, state, weight, value=value_fn(weight), value_fn=value_fn
        )
        updates, opt_state = self.optimizer.update(
            jax.tree.map(jnp.negative, step), opt_state, weight
        )
        return optax.apply_updates(weight, updates), state, opt_state

    def __call__(self, loss, old_grad, weight, weight_clone, *inputs):
        """One update with gradient `old_grad` at `weight`; returns `loss`."""
        del weight_clone  # the trials never modify `weight` in JAX
        self.weight, self.state, self.opt_state = self._step(
            self.state,
            self.opt_state,
            old_grad,
            weight,
            self.model_state,
            inputs,
        )
        return loss


class GroupLossScaleManager:
    """MindSpore's ``GroupLossScaleManager``: per-group loss scales.

    Holds the group scales ``S = [1, s_1, ..., s_n, 1]`` on the host; the
    train step (``auto_boost(..., loss_scale=manager)`` or
    `BoostTrainOneStepWithLossScaleCell`) starts from them and updates its
    own copy in the train state. Put ``manager.enhanced_amp(x, l1, l2)``
    (`boostax.enhanced_amp`) at the group boundaries of the model.

    Args:
      init_loss_scale: initial scale of every group, or one per group.
      loss_scale_groups: the groups: sequences of parameter paths, or a label
        tree of group indices (see `GroupLossScale`).
    """

    enhanced_amp = staticmethod(loss_scale_lib.enhanced_amp)

    def __init__(self, init_loss_scale, loss_scale_groups):
        count = loss_scale_lib.check_groups(
            "loss_scale_groups", loss_scale_groups
        )
        loss_scale_lib.check_init_loss_scale(init_loss_scale, count)
        self.init_loss_scale = init_loss_scale
        self.loss_scale_groups = loss_scale_groups
        rule = loss_scale_lib.GroupLossScale(init_loss_scale, loss_scale_groups)
        self.set_loss_scale_status(rule.num_groups, init_loss_scale)

    def get_loss_scale(self):
        """The initial loss scale."""
        return self.init_loss_scale

    def get_update_cell(self) -> GroupLossScaleManager:
        return self

    def set_loss_scale_status(self, loss_scale_number: int, init_loss_scale):
        """Sets ``S = [1, s_1..s_n, 1]`` for `loss_scale_number` groups."""
        loss_scale_number = validation.check_int(
            "loss_scale_number", loss_scale_number, minimum=1
        )
        loss_scale_lib.check_init_loss_scale(init_loss_scale, loss_scale_number)
        scales = np.broadcast_to(
            np.asarray(init_loss_scale, np.float32), (loss_scale_number,)
        )
        self.scales = np.concatenate([[1.0], scales, [1.0]]).astype(np.float32)

    def update_loss_scale_status(self, layer: int, update_ratio: float):
        """``S[layer + 1] *= update_ratio``; returns the new scale."""
        expected = f"`layer` must be in [0, {len(self.scales) - 3}]"
        if not validation.is_int(layer):
            raise TypeError(f"{expected} (an int), {validation.got(layer)}.")
        if not 0 <= layer < len(self.scales) - 2:
            raise ValueError(f"{expected}, got {layer}.")
        update_ratio = validation.check_number(
            "update_ratio", update_ratio, minimum=0, open_minimum=True
        )
        self.scales[layer + 1] *= update_ratio
        return float(self.scales[layer + 1])

    def loss_scale_rule(self) -> loss_scale_lib.GroupLossScale:
        """The functional `GroupLossScale` starting from the current scales."""
        return loss_scale_lib.GroupLossScale(
            [float(s) for s in self.scales[1:-1]], self.loss_scale_groups
        )


def _check_scale(name: str, value: Any) -> float:
    """A loss scale: a finite number > 0, or an array of shape () or (1,)
    holding one (MindSpore passes a Tensor)."""
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        shape = tuple(np.shape(value))
        if shape not in ((), (1,)):
            raise ValueError(
                f"`{name}` must have shape () or (1,), got {shape}."
            )
        array = np.asarray(value)
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.number):
            raise TypeError(
                f"`{name}` must be a number or a numeric array of shape () "
                f"or (1,), got an array of dtype {array.dtype}."
            )
        value = float(np.reshape(array, ()))
    return validation.check_number(name, value, minimum=0, open_minimum=True)


class BoostTrainOneStepCell:
    """MindSpore's ``BoostTrainOneStepCell(network, optimizer, sens=None)``.

    A stateful wrapper of a boostax `TrainStep`: it holds the `TrainState`
    and runs one step per call, returning the loss. With a `FreezeOpt`
    optimizer, each call runs the step of the freeze sequence
    (`gradient_freeze_process`).

    Args:
      network: a Flax Linen or NNX module, trained on ``(inputs, targets)``.
      optimizer: an Optax optimizer, a `GradientAccumulation` or a
        `FreezeOpt`.
      sens: a fixed loss scale (default 1.0): the loss is multiplied by it
        and the gradients divided by it; with a scale other than 1, a step
        whose gradients overflow is skipped.
      loss: ``loss(outputs, targets) -> scalar``.
      variables: the network's variables (Linen: ``module.init``'s dict;
        NNX: default the module's own).
      rng: base PRNG key.
      mesh: a ``jax.sharding.Mesh`` to train data-parallel on (MindSpore's
        ``reducer_flag``): gradients averaged over its devices, or with
        `adasum`, averaged within nodes of `device_number` devices and the
        updates AdaSum'd across nodes.
      adasum: AdaSum across nodes (MindSpore sets it at level O2).
      device_number: devices per node (MindSpore's default 8).
    """

    def __init__(
        self,
        network: Any,
        optimizer: Any,
        sens: float | None = None,
        *,
        loss: Callable[..., Any],
        variables: Any = None,
        rng: jax.Array | None = None,
        mesh: Any = None,
        adasum: bool = False,
        device_number: int = 8,
    ):
        sens = validation.check_optional_number(
            "sens", sens, none_means="1.0", minimum=0, open_minimum=True
        )
        self.sens = 1.0 if sens is None else sens
        loss_scale = (
            None
            if self.sens == 1.0
            else loss_scale_lib.StaticLossScale(self.sens)
        )
        self._data_parallel(mesh, adasum, device_number)
        self._build(network, optimizer, loss, loss_scale, variables, rng)

    def _data_parallel(self, mesh, adasum, device_number):
        self.adasum = validation.check_bool("adasum", adasum)
        device_number = validation.check_int(
            "device_number", device_number, minimum=1
        )
        self.data_parallel = None
        if mesh is None:
            if adasum:
                raise ValueError(
                    "`adasum` combines the updates of data-parallel devices: "
                    "pass `mesh=` (a jax.sharding.Mesh)."
                )
            return
        config = config_lib.boost_config(
            "O0",
            {
                "boost": {"mode": "manual", "adasum": adasum},
                "common": {"device_number": device_number},
            },
        )
        self.data_parallel = auto_boost_lib.data_parallel_from_config(
            config, mesh
        )

    def _build(self, network, optimizer, loss, loss_scale, variables, rng):
        self._adasum_update = None
        self.freeze = isinstance(optimizer, FreezeOpt)
        self.accumulation = isinstance(optimizer, GradientAccumulation)
        objective = objectives.make_objective(model=network, loss=loss)
        if self.freeze:
            tx, freezing = optimizer.optimizers[0], optimizer.freezing
        else:
            freezing = None
            tx = (
                optimizer.gradient_transformation()
                if self.accumulation
                else optimizer
            )
        if self.check_adasum_enable():
            inner = optimizer.optimizer if self.accumulation else tx
            tx = self.data_parallel.adasum(inner)
            if self.accumulation:  # AdaSum on real updates only
                tx = accumulation_lib.gradient_accumulation(
                    tx, optimizer.max_accumulation_step
                )
        self.train_step = train_step_lib.TrainStep(
            objective,
            tx,
            freezing=freezing,
            loss_scale=loss_scale,
            data_parallel=self.data_parallel,
        )
        self.state = self.train_step.init(variables, rng=rng)

    def __call__(self, *inputs) -> jax.Array:
        """One step on the batch ``inputs = (inputs, targets)``; the loss."""
        if self.freeze:
            return self.gradient_freeze_process(*inputs)
        self.state, metrics = self.train_step(self.state, inputs)
        return metrics["loss"]

    def gradient_freeze_process(self, *inputs) -> jax.Array:
        """One step of the freeze sequence; returns the loss."""
        if not self.freeze:
            raise ValueError(
                "gradient_freeze_process needs a FreezeOpt optimizer."
            )
        self.state, metrics = self.train_step(self.state, inputs)
        return metrics["loss"]

    def check_adasum_enable(self) -> bool:
        """Whether AdaSum runs: switched on, data-parallel, > 1 node.

        MindSpore also needs the node count to be a power of two; boostax
        takes any.
        """
        dp = self.data_parallel
        return dp is not None and dp.reduction == "adasum"

    def check_dim_reduce_enable(self) -> bool:
        """Whether DimReduce runs: the optimizer is `boostax.dim_reduce`
        (possibly inside an accumulation)."""
        return data_parallel_lib.contains_state(
            self.state.opt_state, dim_reduce_lib.DimReduceState
        )

    def adasum_process(self, loss, grads):
        """One AdaSum update from given per-device gradients; returns `loss`.

        Args:
          loss: the step's loss (returned unchanged).
          grads: each device's gradients, stacked along a new leading axis
            in the mesh's device order (e.g. the output of a
            ``jax.shard_map`` with ``out_specs=P(axes)``).
        """
        if not self.check_adasum_enable():
            raise ValueError(
                "adasum_process needs AdaSum on: build the cell with "
                "`adasum=True` and a `mesh=` of more than one node."
            )
        if self._adasum_update is None:
            self._adasum_update = jax.jit(
                lambda state, grads: self.data_parallel.shard_step(
                    self._apply_local_grads, state
                )(state, grads)[0]
            )
        self.state = self._adasum_update(self.state, grads)
        return loss

    def _apply_local_grads(self, state, grads):
        grads = jax.tree.map(lambda g: g[0], grads)
        updates, opt_state = self.train_step.optimizer.update(
            grads, state.opt_state, state.params
        )
        params = optax.apply_updates(state.params, updates)
        return state.replace(params=params, opt_state=opt_state), {}

    def gradient_accumulation_process(self, loss, grads, sens, *inputs):
        """One micro-step of accumulation with given gradients.

        MindSpore's semantics: the gradients (of a loss scaled by `sens`)
        are divided by `sens` and averaged in the accumulator; every
        `max_accumulation_step`-th call the optimizer runs on the mean.
        Returns `loss`.
        """
        del inputs
        if not self.accumulation:
            raise ValueError(
                "gradient_accumulation_process needs a GradientAccumulation "
                "optimizer."
            )
        if not isinstance(sens, jax.core.Tracer):
            sens = _check_scale("sens", sens)
        state = self.state
        grads = jax.tree.map(lambda g: g / sens, grads)
        updates, opt_state = self.train_step.optimizer.update(
            grads, state.opt_state, state.params
        )
        self.state = state.replace(
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
        )
        return loss


class BoostTrainOneStepWithLossScaleCell(BoostTrainOneStepCell):
    """MindSpore's ``BoostTrainOneStepWithLossScaleCell``.

    Each call runs one step and returns ``(loss, overflow, loss_scale)``;
    an overflowing step is skipped (params and optimizer state unchanged)
    and the scale updated by the rule.

    Args:
      network, optimizer: as `BoostTrainOneStepCell`.
      scale_sense: a fixed scale (a number or an array of shape ``()`` or
        ``(1,)``), or an update rule: a `DynamicLossScale`, a
        `GroupLossScale` or a `GroupLossScaleManager`.
      loss, variables, rng, mesh, adasum, device_number: as
        `BoostTrainOneStepCell`.
    """

    def __init__(
        self,
        network: Any,
        optimizer: Any,
        scale_sense: Any,
        *,
        loss: Callable[..., Any],
        variables: Any = None,
        rng: jax.Array | None = None,
        mesh: Any = None,
        adasum: bool = False,
        device_number: int = 8,
    ):
        self.sens = None
        self._data_parallel(mesh, adasum, device_number)
        self._build(
            network,
            optimizer,
            loss,
            self._rule(scale_sense),
            variables,
            rng,
        )

    @staticmethod
    def _rule(scale_sense):
        if isinstance(scale_sense, GroupLossScaleManager):
            return scale_sense.loss_scale_rule()
        if isinstance(
            scale_sense,
            (loss_scale_lib.StaticLossScale, loss_scale_lib.GroupLossScale),
        ):
            return scale_sense
        if isinstance(scale_sense, (int, float)) and not isinstance(
            scale_sense, bool
        ):
            return loss_scale_lib.StaticLossScale(
                validation.check_number(
                    "scale_sense", scale_sense, minimum=0, open_minimum=True
                )
            )
        if isinstance(scale_sense, (np.ndarray, np.generic, jax.Array)):
            return loss_scale_lib.StaticLossScale(
                _check_scale("scale_sense", scale_sense)
            )
        raise TypeError(
            "`scale_sense` must be a fixed scale (a number or an array of "
            "shape () or (1,)) or an update rule (DynamicLossScale, "
            "GroupLossScale, GroupLossScaleManager), got "
            f"{type(scale_sense).__name__}."
        )

    def __call__(self, *inputs):
        """One step: returns ``(loss, overflow, loss_scale)``."""
        self.state, metrics = self.train_step(self.state, inputs)
        return metrics["loss"], metrics["overflow"], metrics["loss_scale"]
