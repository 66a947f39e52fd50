# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The parts a `boostax.TrainStep` is built from, for code that takes one
apart or builds its own.

A step is what it computes, built by a `StepBuilder` (pure functions, with
the `StepPlan` it derives from the first params), and its compiled
programs, one per freeze depth or batch shape, held by an `Executables`;
`PlainRecipe` describes the plain Optax step a boosted one is compared
with. `boostax.auto_boost` and `boostax.make_train_step` assemble them; a
training script reads them as ``step.builder``, ``step.executables`` and
``step.plan(params)``.

Example:
  >>> import optax, boostax
  >>> step = boostax.make_train_step(
  ...     optimizer=optax.sgd(0.1), loss_fn=lambda p, b: (p["w"] ** 2).sum()
  ... )
  >>> isinstance(step.builder, boostax.step.StepBuilder)
  True
"""

from boostax._src.step.builder import StepBuilder as StepBuilder
from boostax._src.step.executables import Executables as Executables
from boostax._src.step.objective_options import PlainRecipe as PlainRecipe
from boostax._src.step.plan import StepPlan as StepPlan

__all__ = ("Executables", "PlainRecipe", "StepBuilder", "StepPlan")
