# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The training cells: MindSpore's ``BoostTrainOneStepCell`` and its subclass.

Mirrors ``mindspore/boost/boost_cell_wrapper.py``: stateful wrappers of a
`boostax.TrainStep` that hold the train state and run one step per call;
``BoostTrainOneStepWithLossScaleCell`` adds a loss-scale update rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax

from boostax._src import accumulation as accumulation_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import tree_utils, validation
from boostax._src.config import boost_config as config_lib
from boostax._src.config import components
from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from boostax._src.mindspore.accumulation import GradientAccumulation
from boostax._src.mindspore.freeze import FreezeOpt
from boostax._src.mindspore.loss_scale import GroupLossScaleManager
from boostax._src.step import objectives
from boostax._src.step import train_step as train_step_lib


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

    A stateful wrapper of a `boostax.TrainStep`: it holds the
    `boostax.TrainState` and runs one step per call, returning the loss.
    With a `FreezeOpt` optimizer, each call runs the step of the freeze
    sequence (`gradient_freeze_process`).

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
        self.sens: float | None = 1.0 if sens is None else sens
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
        self.data_parallel = components.data_parallel_from_config(config, mesh)

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
        return tree_utils.contains_state(
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
        updates, opt_state = self.train_step.plan(
            state.params
        ).optimizer.update(grads, state.opt_state, state.params)
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
        updates, opt_state = self.train_step.plan(
            state.params
        ).optimizer.update(grads, state.opt_state, state.params)
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
        ``(1,)``), or an update rule: a `boostax.DynamicLossScale`, a
        `boostax.GroupLossScale` or a `GroupLossScaleManager`.
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
