# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``mindspore.boost.GradientAccumulation``.

Mirrors ``mindspore/boost/grad_accumulation.py``; the work is done by
`boostax.gradient_accumulation`.
"""

from __future__ import annotations

import jax
import optax

from boostax._src import accumulation as accumulation_lib
from boostax._src import validation


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
        validation.check_optimizer("optimizer", optimizer)
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
