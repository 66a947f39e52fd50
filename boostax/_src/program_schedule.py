# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Which compiled program each train step runs, and when the others compile.

With gradient freezing, each freeze depth has its own program (it
differentiates only the trainable suffix). Compiling them all before the
first step would make a run wait for every compile; instead the first
`warmup` positions run one warm-up program for every depth
(`freezing.MASKED`: all gradients computed, the depth's frozen ones zeroed),
and the depths' own programs compile in the background meanwhile. The
program of a step depends on its position alone (`program_at`), never on
when a compile finished, so a run gives the same bits on a fast and a slow
machine, and a resumed run continues bit for bit; only the waiting differs.
"""

from __future__ import annotations

import collections
import time

from boostax._src import executables as executables_lib
from boostax._src import freezing as freezing_lib
from boostax._src import validation

# With gradient freezing, the train steps (positions) that run the warm-up
# program before each depth runs its own, by default: enough steps for the
# depths of the bundled models to compile on two CPU cores while training
# runs (a shorter planned run never compiles them at all).
FREEZE_WARMUP_STEPS = 1024


def warmup_steps(value, freezing) -> int:
    """`freeze_warmup_steps` checked (`FREEZE_WARMUP_STEPS` where ``None``).

    Raises:
      ValueError: not an int >= 0, or given to a step without freezing
        (which would ignore it).
    """
    if value is None:
        return FREEZE_WARMUP_STEPS
    validation.check_int("freeze_warmup_steps", value, minimum=0)
    if freezing is None:
        raise ValueError(
            "`freeze_warmup_steps` is gradient freezing's, and this step has "
            "no freezing: drop the argument (or switch grad_freeze on)."
        )
    return value


class ProgramSchedule:
    """The program of every train step of a `Freezing` plan.

    Args:
      freezing: the `Freezing` plan.
      warmup: positions that run the warm-up program (none where the plan
        cannot mask: one optimizer per group).
      explicit: whether the user gave `warmup` (then a warm-up the plan
        cannot run is refused, not ignored).

    Raises:
      ValueError: an explicit warm-up for a plan that cannot mask.
    """

    def __init__(
        self,
        freezing: freezing_lib.Freezing,
        warmup: int,
        explicit: bool = False,
    ):
        if explicit and warmup and not freezing.can_mask:
            raise ValueError(
                "`freeze_warmup_steps` needs one optimizer state for every "
                "depth (its warm-up program masks that state), and this "
                "freezing keeps one per group (FreezeOpt): pass "
                "freeze_warmup_steps=0 or leave it out."
            )
        self.freezing = freezing
        self.warmup = warmup if freezing.can_mask else 0
        # What `program_at` reads, listed once: it runs on every call.
        self._keys = executables_lib.sequence_keys(freezing).tolist()
        self._micro_steps = freezing.micro_steps
        self._wrap = freezing.wrap
        # (position, time) of the first call timed after the warm-up
        # program compiled: the step time `keys_to_compile` plans with.
        self._clock: tuple[int, float] | None = None
        # What `keys_to_compile` reads on every call of the warm-up, worked
        # out once (listing the programs by first use reads the sequence).
        self._ends_in_warmup = (
            len(freezing.sequence) * freezing.micro_steps <= self.warmup
        )
        self._programs_after_warmup = len(
            executables_lib.keys_by_first_use(freezing, self.warmup)
        )

    def program_at(self, position: int):
        """The program of train step `position`: ``MASKED`` before the
        warm-up's end, else its depth's own (`Freezing.canonical_depth` of
        `Freezing.depth`). A function of the position alone, so a run's
        bits do not depend on when a program finished compiling."""
        if position < self.warmup:
            return freezing_lib.MASKED
        keys, index = self._keys, position // self._micro_steps
        return keys[
            index % len(keys) if self._wrap else min(index, len(keys) - 1)
        ]

    def shares(self) -> dict:
        """``{program: fraction of the planned run's train steps it runs}``.

        The planned run is one pass of the sequence (its entries times the
        micro-steps of each): its first `warmup` positions run the warm-up
        program (``MASKED``, listed first), the rest their depths' own
        programs (ascending). A run that ends inside the warm-up runs only
        ``MASKED``.
        """
        micro, keys = self._micro_steps, self._keys
        total = len(keys) * micro
        warm = min(self.warmup, total)
        first = -(-warm // micro)  # the first entry past the warm-up
        counts = collections.Counter(keys[first:])
        if first * micro > warm:  # an entry the warm-up's end splits
            counts[keys[first - 1]] += (first * micro - warm) / micro
        shares = {freezing_lib.MASKED: warm / total} if warm else {}
        shares.update(
            {k: counts[k] * micro / total for k in sorted(counts) if counts[k]}
        )
        return shares

    def keys_to_compile(
        self, position: int, masked_seconds: float | None
    ) -> list | None:
        """The depths' programs to compile in the background now, in the
        order the run first needs them, or ``None`` (not yet).

        During the warm-up: never when the planned run (the sequence,
        ``grad_freeze.total_steps``) ends within it (a run that goes on
        compiles each program when it first needs it); not before the
        warm-up program has compiled (`masked_seconds`, its compile time:
        alone, the first step waits for one program only); and only once
        the warm-up's remaining steps, at the measured step time, take no
        more than twice what compiling the depths one after the other would
        (before, the compiles would only slow the steps).
        """
        warmup = self.warmup
        if position < warmup:
            if self._ends_in_warmup:
                return None  # the planned run never leaves the warm-up
            if masked_seconds is None:
                return None  # this call compiles the warm-up program first
            now = time.perf_counter()
            if self._clock is None or self._clock[0] >= position:
                self._clock = (position, now)
                return None
            start, then = self._clock
            step_seconds = (now - then) / (position - start)
            compiling = (
                2
                * masked_seconds
                * self._programs_after_warmup
                / executables_lib.workers()
            )
            if (warmup - position) * step_seconds > compiling:
                return None
        return executables_lib.keys_by_first_use(
            self.freezing, max(position, warmup)
        )
