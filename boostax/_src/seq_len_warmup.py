# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Sequence-length warm-up: train on truncated sequences first.

A language model is trained on the first ``L`` positions of each sequence,
``L`` growing from `min_seq_length` to the batch's full length over the
first `duration` of training, in steps of `step_size` (Composer's
``SeqLengthWarmup``, which measured about 1.5x less time to the same loss
on GPT-2 125M). With ``W = int(total_steps * duration)`` warm-up updates,
``n = (full - min) // step_size`` length increments and ``e = W // n``
updates per length, update ``u`` trains on

.. math::

  L(u) = \\min(\\text{full}, \\max(\\text{min},\\;
         \\text{step\\_size} \\cdot \\lfloor u / e \\rfloor + \\text{min}))

positions (Composer's formula, its ``max_seq_length`` the batch's length).

In boostax the schedule counts optimizer updates: train step ``i`` is
update ``i // k`` with gradient accumulation over k micro-steps, so every
micro-step of an update sees the same length. The length of a step is a
function of its position alone (the state's counter mirrored on the
host), never of time, so a resumed run continues bit for bit. Each length
is its own compiled program (shapes are static under XLA): the batch is
truncated inside it (`truncate_sequence`), and the programs of the
lengths to come compile in background threads while training runs
(`program_schedule.ProgramSchedule`).

Which leaves are truncated: every array leaf of the batch whose rank is
above `seq_axis` and whose size along `seq_axis` is the batch's full
length (the size along `seq_axis` of the first such leaf, in
``jax.tree`` order); tokens and targets of a ``(tokens, targets)`` batch
alike. Other leaves (per-example labels, features of another size) pass
unchanged. A batch without a leaf of rank above `seq_axis` is refused.

References:
  Li, Zhang and He, "The Stability-Efficiency Dilemma: Investigating
  Sequence Length Warmup for Training GPT Models", NeurIPS 2022
  (arXiv:2108.06084). MosaicML Composer, ``SeqLengthWarmup``
  (``composer/algorithms/seq_length_warmup/seq_length_warmup.py``:
  ``duration`` 0.3, ``min_seq_length`` 8, ``max_seq_length`` 1024,
  ``step_size`` 8, ``truncate=True``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from boostax._src import accumulation as accumulation_lib
from boostax._src import tree_utils, validation

PyTree = Any


@dataclasses.dataclass(frozen=True)
class SeqLenWarmup:
    """A sequence-length warm-up schedule (`seq_len_warmup` builds one).

    Attributes:
      total_steps: the run's length in optimizer updates (train steps / k
        with gradient accumulation over k micro-steps).
      duration: the fraction of `total_steps` over which the length grows.
      min_seq_length: the first length.
      max_seq_length: the full length: ``None`` reads it from the first
        batch (the size along `seq_axis`); given, the batch's must equal
        it.
      step_size: the length grows by this much at a time.
      seq_axis: the sequence axis of the batch's leaves (axis 0 is the
        batch).
    """

    total_steps: int
    duration: float = 0.3
    min_seq_length: int = 8
    max_seq_length: int | None = None
    step_size: int = 8
    seq_axis: int = 1

    def __post_init__(self):
        validation.check_int("total_steps", self.total_steps, minimum=1)
        duration = validation.check_number(
            "duration", self.duration, minimum=0, maximum=1, open_minimum=True
        )
        validation.check_int("min_seq_length", self.min_seq_length, minimum=1)
        validation.check_optional_int(
            "max_seq_length",
            self.max_seq_length,
            minimum=1,
            none_means="the batch's length",
        )
        if (
            self.max_seq_length is not None
            and self.max_seq_length <= self.min_seq_length
        ):
            raise ValueError(
                f"`max_seq_length` ({self.max_seq_length}) must be above "
                f"`min_seq_length` ({self.min_seq_length}): nothing to warm up."
            )
        validation.check_int("step_size", self.step_size, minimum=1)
        validation.check_int("seq_axis", self.seq_axis, minimum=1)
        object.__setattr__(self, "duration", float(duration))

    def lengths(self, full_length: int) -> np.ndarray:
        """The length of every update until the full one is reached.

        Args:
          full_length: the batch's sequence length.

        Returns:
          ``int`` array: entry ``u`` is update ``u``'s length; every later
          update trains on `full_length`.

        Raises:
          ValueError: `full_length` differs from a given `max_seq_length`,
            is not above `min_seq_length` by at least `step_size`, or the
            warm-up has fewer updates than length increments (Composer
            divides by zero there).
        """
        full = validation.check_int("full_length", full_length, minimum=1)
        if self.max_seq_length is not None and full != self.max_seq_length:
            raise ValueError(
                f"The batch's sequence length (size {full} along `seq_axis` "
                f"{self.seq_axis}) differs from `max_seq_length` "
                f"{self.max_seq_length}: pass batches of that length, or "
                "leave `max_seq_length` out (None: the batch's)."
            )
        increments = (full - self.min_seq_length) // self.step_size
        if increments < 1:
            raise ValueError(
                f"`min_seq_length` {self.min_seq_length} is not below the "
                f"batch's sequence length {full} by at least `step_size` "
                f"{self.step_size}: nothing to warm up. Lower "
                "`min_seq_length` or `step_size`, or switch the warm-up off."
            )
        warmup = int(self.total_steps * self.duration)
        every = warmup // increments
        if every < 1:
            raise ValueError(
                f"The warm-up spans int(total_steps * duration) = {warmup} "
                f"update(s), fewer than its {increments} length increments "
                f"(from {self.min_seq_length} to {full} by {self.step_size}): "
                "raise `total_steps`, `duration` or `step_size`."
            )
        # Composer's length, until it reaches the full one (one increment
        # past `increments` when the step does not divide the range).
        updates = np.arange(every * (increments + 2))
        table = np.clip(
            self.step_size * (updates // every) + self.min_seq_length,
            self.min_seq_length,
            full,
        )
        return table[: int(np.argmax(table == full))]

    def bind(self, full_length: int, micro_steps: int = 1) -> Lengths:
        """The `Lengths` of a run on batches of `full_length` whose updates
        take `micro_steps` train steps each."""
        return Lengths(
            self, self.lengths(full_length), full_length, micro_steps
        )


def seq_len_warmup(
    total_steps: int,
    *,
    duration: float = 0.3,
    min_seq_length: int = 8,
    max_seq_length: int | None = None,
    step_size: int = 8,
    seq_axis: int = 1,
) -> SeqLenWarmup:
    """Sequence-length warm-up, for `boostax.make_train_step` or `TrainStep`.

    Update ``u`` trains on the first ``L(u)`` positions of every sequence
    of its batch: ``L`` grows from `min_seq_length` by `step_size` every
    ``e = int(total_steps * duration) // ((full - min_seq_length) //
    step_size)`` updates, up to the batch's full length (Composer's
    ``SeqLengthWarmup``; see the module's docstring for the formula, the
    leaves truncated and the references). Each length is its own compiled
    program; the programs of later lengths compile in the background.

    Args:
      total_steps: the run's length in optimizer updates.
      duration: the fraction of `total_steps` the lengths grow over
        (Composer's default 0.3), in (0, 1].
      min_seq_length: the first length (Composer's 8).
      max_seq_length: the full length, ``None``: the first batch's.
        Composer's default is 1024; here the batch's own length, which a
        given value must equal.
      step_size: the growth of the length at a time (Composer's 8: a
        multiple of 8 suits tensor cores).
      seq_axis: the sequence axis of the batch's leaves (default 1:
        ``(batch, length, ...)``).

    Returns:
      A `SeqLenWarmup`.

    Example:
      >>> import boostax
      >>> warmup = boostax.seq_len_warmup(100, min_seq_length=8)
      >>> [int(n) for n in warmup.lengths(32)[::10]]
      [8, 16, 24]
    """
    return SeqLenWarmup(
        total_steps,
        duration,
        min_seq_length,
        max_seq_length,
        step_size,
        seq_axis,
    )


class Lengths:
    """A `SeqLenWarmup` bound to a run: the length of every train step.

    Attributes:
      warmup: the `SeqLenWarmup`.
      table: the length of each update before the full one.
      full_length: the batch's sequence length.
      micro_steps: train steps per update.
      end: the first train step at the full length.
    """

    __slots__ = (
        "warmup",
        "table",
        "full_length",
        "micro_steps",
        "end",
        "_at",
    )

    def __init__(self, warmup, table, full_length, micro_steps):
        self.warmup = warmup
        self.table = np.asarray(table, np.int64)
        self.full_length = int(full_length)
        self.micro_steps = validation.check_int(
            "micro_steps", micro_steps, minimum=1
        )
        self.end = len(self.table) * self.micro_steps
        self._at = [int(n) for n in self.table]  # read on every call

    def at(self, position: int) -> int:
        """The length of train step `position`."""
        update = position // self.micro_steps
        table = self._at
        return table[update] if update < len(table) else self.full_length

    def at_positions(self, positions: np.ndarray) -> np.ndarray:
        """`at` of an array of train steps."""
        updates = np.asarray(positions) // self.micro_steps
        inside = updates < len(self.table)
        return np.where(
            inside,
            self.table[np.minimum(updates, max(len(self.table) - 1, 0))],
            self.full_length,
        )

    def truncate(self, length: int):
        """``batch -> batch`` truncated to `length` (traced once)."""
        axis, full = self.warmup.seq_axis, self.full_length
        return lambda batch: truncate_sequence(
            batch, length, seq_axis=axis, full_length=full
        )


def _sequence_leaves(batch, seq_axis: int):
    leaves = jax.tree.leaves(batch)
    return [x for x in leaves if np.ndim(x) > seq_axis]


def sequence_length(batch: PyTree, seq_axis: int = 1) -> int:
    """The batch's sequence length: the size along `seq_axis` of its first
    leaf (in ``jax.tree`` order) of rank above `seq_axis`.

    Raises:
      ValueError: no leaf has an axis `seq_axis` (a batch without
        sequences: the warm-up would truncate nothing).
    """
    validation.check_int("seq_axis", seq_axis, minimum=1)
    found = _sequence_leaves(batch, seq_axis)
    if not found:
        shapes = [np.shape(x) for x in jax.tree.leaves(batch)]
        raise ValueError(
            "Sequence-length warm-up needs batch leaves with a sequence axis "
            f"`seq_axis`={seq_axis} (rank above {seq_axis}); the batch's "
            f"leaves have shapes {shapes}. Pass the axis that holds the "
            "positions, or switch the warm-up off."
        )
    return int(np.shape(found[0])[seq_axis])


def truncate_sequence(
    batch: PyTree,
    length: int,
    *,
    seq_axis: int = 1,
    full_length: int | None = None,
) -> PyTree:
    """`batch` with its sequences cut to their first `length` positions.

    Every leaf of rank above `seq_axis` whose size along `seq_axis` is
    `full_length` is sliced to ``[..., :length, ...]`` on that axis; other
    leaves pass unchanged. Works on NumPy and JAX arrays, under ``jax.jit``
    (`length` is static).

    Args:
      batch: a pytree of arrays, e.g. ``(tokens, targets)``.
      length: the positions kept, in [1, `full_length`].
      seq_axis: the sequence axis (default 1: ``(batch, length, ...)``).
      full_length: the length of the leaves to truncate; default
        `sequence_length` of the batch.

    Returns:
      The truncated batch, the same tree structure.

    Raises:
      ValueError: no leaf has the sequence axis, or no leaf has
        `full_length` positions, or `length` is outside [1, `full_length`].

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> tokens = jnp.arange(12).reshape(2, 6)
      >>> cut, = boostax.truncate_sequence((tokens,), 4)
      >>> cut.tolist()
      [[0, 1, 2, 3], [6, 7, 8, 9]]
    """
    if full_length is None:
        full_length = sequence_length(batch, seq_axis)
    else:
        validation.check_int("seq_axis", seq_axis, minimum=1)
        validation.check_int("full_length", full_length, minimum=1)
    validation.check_int_in("length", length, 1, full_length)
    sizes = [np.shape(x)[seq_axis] for x in _sequence_leaves(batch, seq_axis)]
    if full_length not in sizes:
        raise ValueError(
            f"No leaf of the batch has {full_length} positions along "
            f"`seq_axis` {seq_axis} (sizes there: {sizes}): a sequence-length "
            "warm-up bound to the first batch's length takes batches of that "
            "length only."
        )

    def cut(x):
        if np.ndim(x) > seq_axis and np.shape(x)[seq_axis] == full_length:
            return jax.lax.slice_in_dim(x, 0, length, axis=seq_axis)
        return x

    return jax.tree.map(cut, batch)


def from_config(section) -> SeqLenWarmup | None:
    """The `SeqLenWarmup` of a config's ``seq_len_warmup`` section
    (`config.SeqLenWarmupSection`), ``None`` when not ``enabled``."""
    if not section.enabled:
        return None
    return SeqLenWarmup(
        section.total_steps,
        section.duration,
        section.min_seq_length,
        section.max_seq_length,
        section.step_size,
        section.seq_axis,
    )


def micro_steps(optimizer, opt_state, freezing=None) -> int:
    """Train steps per optimizer update: k of gradient accumulation.

    Raises:
      ValueError: the accumulation is not the optimizer's outermost stage
        or takes a schedule of k (its updates cannot be counted from the
        step's position).
    """
    if freezing is not None:
        return freezing.micro_steps  # checked against the optimizer
    if not tree_utils.contains_state(
        opt_state, accumulation_lib.GradientAccumulationState
    ):
        return 1
    k = accumulation_lib.accumulation_steps(optimizer)
    if (
        not isinstance(opt_state, accumulation_lib.GradientAccumulationState)
        or k is None
    ):
        raise ValueError(
            "Sequence-length warm-up counts optimizer updates as train "
            "steps // k, so gradient accumulation must be the optimizer's "
            "outermost stage with a fixed k (boostax.gradient_accumulation("
            "inner, k), or the config's grad_accumulation); got one nested "
            "inside the optimizer or with a schedule of k."
        )
    return k
