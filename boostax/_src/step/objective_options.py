# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""What a train step trains, as its builders are given it.

`make_train_step` and `auto_boost` take the model or loss as keyword
arguments and the way the model is called in their `StepOptions`; each
gathers them once into an `ObjectiveOptions`, which is what is passed on:
to `make_objective` (the `Objective` the step differentiates) and, in
`auto_boost`, to the `PlainRecipe` of the plain Optax step a boosted step
is compared with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import optax

from boostax._src.step import objectives as objectives_lib
from boostax._src.step import options as step_options_lib


@dataclasses.dataclass(frozen=True)
class ObjectiveOptions:
    """The model or loss of a step and how the model is called.

    `make_objective`'s keyword arguments: the model, loss or loss function
    of `make_train_step` and `auto_boost`, and the fields of their
    `StepOptions` that say how the model is called; they are checked when
    the objective is built (`objective`).

    Attributes:
      model: a Flax Linen or NNX module (with `loss`), or ``None``.
      loss: with `model`, ``loss(outputs, targets)``.
      loss_fn: instead of `model` and `loss`, ``loss_fn(params, batch)``.
      calling: the `StepOptions` whose `StepOptions.calling` fields say how
        the model is called (its other fields play no part here).
    """

    model: Any = None
    loss: Callable[..., Any] | None = None
    loss_fn: Callable[..., Any] | None = None
    calling: step_options_lib.StepOptions = step_options_lib.StepOptions()

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments (of `make_objective`)."""
        return {
            "model": self.model,
            "loss": self.loss,
            "loss_fn": self.loss_fn,
            **self.calling.calling(),
        }

    def train_step_kwargs(self) -> dict[str, Any]:
        """The options as `make_train_step`'s keyword arguments."""
        return {
            "model": self.model,
            "loss": self.loss,
            "loss_fn": self.loss_fn,
            "options": step_options_lib.StepOptions(**self.calling.calling()),
        }

    def replace(self, **changes: Any) -> ObjectiveOptions:
        """These options with `changes` (say, LessBN's reduced `model`)."""
        return dataclasses.replace(self, **changes)

    def objective(
        self, convert_variables: Callable[[Any], Any] | None = None
    ) -> objectives_lib.Objective:
        """The `Objective` of these options (`make_objective`, which checks
        them), with `convert_variables` applied to the variables given to
        ``split`` (LessBN's conversion of the original model's)."""
        return objectives_lib.make_objective(
            **self.kwargs(), convert_variables=convert_variables
        )


class PlainRecipe(NamedTuple):
    """How to build the plain Optax step a boosted step is compared with.

    Attributes:
      kwargs: `make_train_step`'s arguments: the original model (before
        LessBN), the optimizer the algorithms wrap, the loss.
      mesh: the boosted step's mesh (the plain step averages gradients
        over it), or ``None``.
    """

    kwargs: dict[str, Any]
    mesh: Any = None

    @classmethod
    def of(
        cls,
        options: ObjectiveOptions,
        optimizer: optax.GradientTransformation,
        mesh: Any = None,
    ) -> PlainRecipe:
        """The recipe training `options` with `optimizer` (on `mesh`), in
        float32: without `cast_batch` (which a float32 step refuses)."""
        plain = options.replace(
            calling=options.calling.replace(cast_batch=None)
        )
        return cls(dict(optimizer=optimizer, **plain.train_step_kwargs()), mesh)
