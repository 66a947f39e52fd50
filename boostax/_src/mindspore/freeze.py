# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``GradientFreeze``, ``FreezeOpt``, ``freeze_cell``.

Mirrors ``mindspore/boost/grad_freeze.py``: one optimizer state per
parameter group, and one train step per group (`FreezeCells`), built on
`boostax.Freezing` and `boostax.TrainStep`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import optax

from boostax._src import groups, validation
from boostax._src.config import sections as config_sections
from boostax._src.freezing import groups as freeze_groups_lib
from boostax._src.freezing import plan as freezing_lib
from boostax._src.freezing import sequence as freeze_sequence_lib
from boostax._src.step import objectives
from boostax._src.step import train_step as train_step_lib


def _as_path(leaf) -> tuple[str, ...]:
    """A parameter path as a tuple of names (from ``"a/b"`` or a sequence)."""
    if isinstance(leaf, str):
        return tuple(leaf.split("/"))
    return tuple(str(k) for k in leaf)


def _check_opt(opt, learning_rate) -> None:
    """`opt` is an optimizer, or with `learning_rate` a factory of them."""
    if learning_rate is None:
        validation.check_optimizer("optimizer", opt)
    elif not callable(opt) or isinstance(opt, optax.GradientTransformation):
        raise TypeError(
            "With `learning_rate`, `opt` must be a factory "
            "opt(schedule) -> optax.GradientTransformation, got "
            f"{type(opt).__name__}."
        )
    else:
        validation.check_numbers("learning_rate", learning_rate, minimum=0)


def _parameter_groups(train_parameter_groups):
    """The groups as tuples of path tuples; ``None`` stays ``None``."""
    if train_parameter_groups is None:
        return None
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
    return tuple(
        tuple(_as_path(leaf) for leaf in group)
        for group in train_parameter_groups
    )


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
        _check_opt(opt, learning_rate)
        if train_strategy is not None and train_parameter_groups is None:
            raise ValueError("`train_strategy` needs `train_parameter_groups`.")
        groups = _parameter_groups(train_parameter_groups)
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
        """The `boostax.Freezing` plan of these groups over `params`."""
        param_groups = self.train_parameter_groups
        if param_groups is None:
            param_groups = (tuple(groups.leaf_paths(params)),)
        else:  # groups cut before LessBN: drop removed leaves, add new ones
            param_groups = freeze_groups_lib.restrict_groups(
                param_groups, params
            )
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
        section = config_sections.GradFreezeSection(
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
        return freeze_sequence_lib.generate_freeze_index_sequence(
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
        return freeze_groups_lib.split_parameters_groups(
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
      train_step: the `boostax.TrainStep` they belong to (its ``init``
        builds the state; calling it runs the step the sequence picks).
    """

    train_step: train_step_lib.TrainStep

    def __new__(cls, cells, train_step: train_step_lib.TrainStep):
        self = super().__new__(cls, cells)
        self.train_step = train_step
        return self


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
        them (with freezing they are `boostax.auto_boost`'s
        ``grad_accumulation`` and ``mesh``).
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
    _refuse_unwired(
        reducer_flag,
        sens,
        use_grad_accumulation,
        mean,
        degree,
        max_accumulation_step,
    )
    if grad is not None:
        raise ValueError(
            "`grad` must be None: boostax differentiates with "
            f"jax.value_and_grad (pass grad=None), {validation.got(grad)}."
        )
    step = _freezing_train_step(network, optimizer, loss)
    return FreezeCells(
        (step.at_depth(k) for k in range(len(optimizer.optimizers))), step
    )


def _refuse_unwired(
    reducer_flag,
    sens,
    use_grad_accumulation,
    mean,
    degree,
    max_accumulation_step,
) -> None:
    """Refuses the options MindSpore's cells wire and `freeze_cell` does not.

    Each has a home in `boostax.auto_boost` (where it combines with
    freezing): accepting and ignoring one would train something else.
    """
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


def _freezing_train_step(network, optimizer: FreezeOpt, loss):
    """The `boostax.TrainStep` of a `FreezeOpt`: one state per group.

    The step's optimizer is group 0's; the plan's ``group_optimizers`` (one
    per group, `FreezeOpt.optimizers`) give every depth its own.
    """
    objective = objectives.make_objective(model=network, loss=loss)
    return train_step_lib.TrainStep(
        objective, optimizer.optimizers[0], freezing=optimizer.freezing
    )
