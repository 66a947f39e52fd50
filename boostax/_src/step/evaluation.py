# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`Evaluation`: what a train step's state evaluates to.

A `TrainStep` trains; its `predict` and `variables` read a state without
touching it, through an `Evaluation` of the step's objective: the model's
outputs in evaluation mode (the params' moving average when the state
holds one, averaged over test-time flips when the config enables them),
and the trained model's variables in the model's own form.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from boostax._src import validation
from boostax._src.methods import test_time_flips, weight_averaging
from boostax._src.step import checks as step_checks
from boostax._src.step import objectives as objectives_lib
from boostax._src.step.train_state import TrainState

__all__ = ("Evaluation",)


class Evaluation:
    """A step's objective evaluated on its states (`TrainStep.predict`).

    Attributes:
      objective: the `Objective` the step trains.
    """

    def __init__(self, objective: objectives_lib.Objective):
        self.objective = objective
        self._predict = jax.jit(objective.predict)
        # Another Linen module (hashable, compared by its fields) is a
        # static argument: one program per evaluation model.
        self._predict_with = (
            jax.jit(objective.predict, static_argnums=3)
            if isinstance(objective, objectives_lib.LinenObjective)
            else None
        )

    def predict(
        self,
        state: TrainState,
        inputs,
        *,
        model=None,
        averaged: bool = True,
        flips: tuple[str, ...] = (),
        translate: int = 0,
    ):
        """The model's outputs on `inputs` (`TrainStep.predict`), averaged
        over `flips` and `translate` (`boostax.predict_with_flips`) when
        there are any."""
        step_checks.require_state(state)
        validation.check_bool("averaged", averaged)
        try:
            if averaged:
                average = weight_averaging.evaluated_params(
                    state.params, state.opt_state
                )
                if average is not None:
                    state = state.replace(params=average)
            if model is not None:
                one_view = functools.partial(self._other, state, model=model)
            else:
                one_view = functools.partial(
                    self._predict, state.params, state.model_state
                )
            if flips or translate:
                return test_time_flips.predict_with_flips(
                    one_view, inputs, flips, translate
                )
            return one_view(inputs)
        except RuntimeError:
            # JAX's "Array has been deleted" does not say why; the state is
            # checked only then, which costs an evaluation loop nothing.
            error = step_checks.donated_error(state)
            if error is None:
                raise
        raise error

    def _other(self, state: TrainState, inputs, model):
        """`inputs` through another Linen `model` of the step's variables."""
        if self._predict_with is None:
            raise TypeError(
                "`predict(..., model=)` takes another Linen module of the "
                "step's variables; this step trains "
                + (
                    "an NNX module, which predict switches to evaluation "
                    "with its own .eval() (Dropout deterministic, BatchNorm "
                    "on its running averages)"
                    if isinstance(self.objective, objectives_lib.NNXObjective)
                    else "a loss function: give the step "
                    "`options=boostax.StepOptions(predict_fn=...)`"
                )
                + "."
            )
        return self._predict_with(
            state.params, state.model_state, inputs, model
        )

    def variables(self, state: TrainState) -> Any:
        """The trained model's variables (Linen dict, NNX module, params)."""
        step_checks.require_state(state)
        # A donated state's arrays would fail only where they are read.
        step_checks.check_not_deleted(state)
        return self.objective.merge(state.params, state.model_state)
