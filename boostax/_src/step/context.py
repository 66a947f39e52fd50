# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""What the step being traced runs its model with.

The step builder sets one `StepContext` around the loss it differentiates
(`tracing`); below it, code that the model's call goes through reads it
(`current`) instead of taking arguments the user's loss never passes on:
the objectives cast to the precision policy (`precision.current`), and the
model's collectives map their axis names to the data-parallel axes
(`step_attributes.map_axis_name`); around the optimizer's update of a
sharded AdaSum step, AdaSum reads which slices it combines
(`adasum.node_slices`). Outside a step the context is the default:
float32, one device, whole leaves.

A context variable, not a global: threads compiling other programs of the
same step in the background each see their own trace's context.

This module imports nothing from boostax, so every reader can use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class StepContext:
    """The context of one traced step.

    Attributes:
      policy: the `PrecisionPolicy` the step computes in, or ``None``
        (float32).
      data_axes: the step's data-parallel mesh axes (empty: one device).
      node_slices: with a sharded AdaSum optimizer state, around the
        optimizer's update, the `adasum.NodeSlices` its AdaSum stage
        combines; ``None``: whole leaves.
    """

    policy: Any = None
    data_axes: tuple[str, ...] = ()
    node_slices: Any = None


# (A frozen dataclass: the shared default cannot be changed in place.)
_CONTEXT: contextvars.ContextVar[StepContext] = contextvars.ContextVar(
    "boostax_step_context",
    default=StepContext(),  # noqa: B039
)


@contextlib.contextmanager
def tracing(
    *, policy: Any = None, data_axes: Sequence[str] = ()
) -> Iterator[StepContext]:
    """Within it, `current` is the context of `policy` and `data_axes`.

    Args:
      policy: the step's `PrecisionPolicy`, or ``None`` (float32).
      data_axes: the step's data-parallel axes (empty: one device).

    Yields:
      The `StepContext` set.
    """
    context = StepContext(policy, tuple(data_axes))
    token = _CONTEXT.set(context)
    try:
        yield context
    finally:
        _CONTEXT.reset(token)


@contextlib.contextmanager
def extended(**changes: Any) -> Iterator[StepContext]:
    """Within it, `current` is the current context with `changes` (fields
    of `StepContext`), e.g. AdaSum's slices around the optimizer's update.

    Yields:
      The `StepContext` set.
    """
    context = dataclasses.replace(current(), **changes)
    token = _CONTEXT.set(context)
    try:
        yield context
    finally:
        _CONTEXT.reset(token)


def current() -> StepContext:
    """The context of the step being traced (the default outside one)."""
    return _CONTEXT.get()
