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

With a sequence-length warm-up (`seq_len_warmup.py`), each length is a
program too: a program is then ``(freeze program or None, length)``, the
length also a function of the position.
"""

from __future__ import annotations

import collections
import time

import numpy as np

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
    """The program of every train step: its freeze depth and its length.

    Args:
      freezing: the `Freezing` plan, or ``None``.
      warmup: with freezing, positions that run the warm-up program (none
        where the plan cannot mask: one optimizer per group).
      explicit: whether the user gave `warmup` (then a warm-up the plan
        cannot run is refused, not ignored).
      lengths: the `seq_len_warmup.Lengths` of a sequence-length warm-up,
        or ``None``. With it, a program is ``(freeze program, length)``
        (the freeze program ``None`` without freezing).

    Raises:
      ValueError: an explicit warm-up for a plan that cannot mask.
    """

    def __init__(
        self,
        freezing: freezing_lib.Freezing | None,
        warmup: int,
        explicit: bool = False,
        lengths=None,
    ):
        if freezing is None and lengths is None:
            raise ValueError("A ProgramSchedule needs freezing or lengths.")
        if (
            freezing is not None
            and explicit
            and warmup
            and not freezing.can_mask
        ):
            raise ValueError(
                "`freeze_warmup_steps` needs one optimizer state for every "
                "depth (its warm-up program masks that state), and this "
                "freezing keeps one per group (FreezeOpt): pass "
                "freeze_warmup_steps=0 or leave it out."
            )
        self.freezing = freezing
        self.lengths = lengths
        self.warmup = (
            warmup if freezing is not None and freezing.can_mask else 0
        )
        # Whether `keys_to_compile` has handed out every program, and (with
        # lengths and freezing) those of the freezing warm-up.
        self.queued_all = False
        self._queued_warmup = False
        # (position, time) of the first call timed after the warm-up
        # program compiled: the step time `keys_to_compile` plans with.
        self._clock: tuple[int, float] | None = None
        if lengths is None:
            # The per-call path, direct: a bound method as the attribute.
            self.program_at = self._freeze_at  # type: ignore[method-assign]
        if freezing is None:
            # The programs of the warm-up's updates, listed once.
            self._by_update = [(None, int(n)) for n in lengths.table]
            self._full = (None, lengths.full_length)
            self.program_at = self._length_at  # type: ignore[method-assign]
            return
        # What `program_at` reads, listed once: it runs on every call.
        self._keys = executables_lib.sequence_keys(freezing).tolist()
        self._micro_steps = freezing.micro_steps
        self._wrap = freezing.wrap
        # What `keys_to_compile` reads on every call of the warm-up, worked
        # out once (listing the programs by first use reads the sequence).
        self._ends_in_warmup = (
            len(freezing.sequence) * freezing.micro_steps <= self.warmup
        )
        self._programs_after_warmup = len(
            executables_lib.keys_by_first_use(freezing, self.warmup)
        )

    def program_at(self, position: int):
        """The program of train step `position`: with freezing, ``MASKED``
        before the warm-up's end, else its depth's own
        (`Freezing.canonical_depth` of `Freezing.depth`); with lengths, the
        pair ``(that or None, length)``. A function of the position alone,
        so a run's bits do not depend on when a program finished
        compiling."""
        depth = None if self.freezing is None else self._freeze_at(position)
        return (depth, self.lengths.at(position))

    def _length_at(self, position: int):
        update = position // self.lengths.micro_steps
        by_update = self._by_update
        return by_update[update] if update < len(by_update) else self._full

    def _freeze_at(self, position: int):
        if position < self.warmup:
            return freezing_lib.MASKED
        keys, index = self._keys, position // self._micro_steps
        return keys[
            index % len(keys) if self._wrap else min(index, len(keys) - 1)
        ]

    def keys_to_compile(self, position: int, compiled: dict) -> list | None:
        """The programs to compile in the background now, in the order the
        run first needs them, or ``None`` (not yet).

        `compiled`: ``{program: compile seconds}`` of those compiled so
        far. Without freezing (lengths alone), every program once the
        program of `position` has compiled (alone, the first step waits
        for one program only). With freezing, during its warm-up, not
        before the warm-up program has compiled; then, with lengths, the
        warm-up programs of the lengths to come (they are needed within
        the warm-up), and the depths' own programs when `_depths_due`
        says; after the warm-up, all at once. `queued_all` turns True
        once every program was handed out.
        """
        current = self.program_at(position)
        if self.freezing is None:
            if current not in compiled:
                return None  # this call compiles its program first
            self.queued_all = True
            return self.programs_from(position)
        if position < self.warmup:
            if current not in compiled:
                return None  # this call compiles the warm-up program first
            if self.lengths is not None and not self._queued_warmup:
                self._queued_warmup = True
                return [
                    k
                    for k in self.programs_from(position, warmup=True)
                    if k[0] == freezing_lib.MASKED
                ]
            if not self._depths_due(position, compiled[current]):
                return None
        self.queued_all = True
        return self.programs_from(max(position, self.warmup))

    def _depths_due(self, position: int, masked_seconds: float) -> bool:
        """Whether to compile the depths' own programs now.

        During the warm-up: never when the planned run (the sequence,
        ``grad_freeze.total_steps``) ends within it (a run that goes on
        compiles each program when it first needs it); and only once the
        warm-up's remaining steps, at the measured step time, take no more
        than twice what compiling the depths one after the other would
        (`masked_seconds`: the warm-up program's compile time; before, the
        compiles would only slow the steps).
        """
        warmup = self.warmup
        if self._ends_in_warmup:
            return False  # the planned run never leaves the warm-up
        now = time.perf_counter()
        if self._clock is None or self._clock[0] >= position:
            self._clock = (position, now)
            return False
        start, then = self._clock
        step_seconds = (now - then) / (position - start)
        compiling = (
            2
            * masked_seconds
            * self._programs_after_warmup
            / executables_lib.workers()
        )
        return (warmup - position) * step_seconds <= compiling

    def programs_from(self, position: int, *, warmup: bool = False) -> list:
        """The programs in the order the run from train step `position`
        first needs them: the depths' own (after the freezing warm-up),
        with lengths paired with each; `warmup`: the warm-up's too."""
        freezing, lengths = self.freezing, self.lengths
        keys: list[executables_lib.Key]
        tail: list[executables_lib.FreezeKey]
        if lengths is None:
            assert freezing is not None  # a schedule has one or the other
            keys = list(executables_lib.keys_by_first_use(freezing, position))
            if warmup and position < self.warmup:
                keys = [freezing_lib.MASKED, *keys]
            return keys
        # The warm-up positions one by one, then the full length's programs.
        stop = max(position, lengths.end, self.warmup if warmup else 0)
        positions = np.arange(position, stop)
        if freezing is None:
            depths = np.full(len(positions), -1)
            tail = [None]
        else:
            depths = self._depth_codes(positions, warmup)
            tail = executables_lib.keys_by_first_use(
                freezing, max(stop, self.warmup)
            )
        pairs = np.stack([depths, lengths.at_positions(positions)], axis=1)
        unique, first = np.unique(pairs, axis=0, return_index=True)
        keys = [
            (_DEPTH_OF_CODE.get(int(d), int(d)), int(n))
            for d, n in unique[np.argsort(first)]
        ]
        for depth in tail:
            if (depth, lengths.full_length) not in keys:
                keys.append((depth, lengths.full_length))
        return keys

    def _depth_codes(self, positions: np.ndarray, warmup: bool) -> np.ndarray:
        """The freeze program of each position as an int (`_CODES`)."""
        keys = np.asarray(self._keys)
        index = positions // self._micro_steps
        if self._wrap:
            index = index % len(keys)
        else:
            index = np.minimum(index, len(keys) - 1)
        codes = keys[index]
        if warmup:
            codes = np.where(positions < self.warmup, _MASKED_CODE, codes)
        return codes

    def _freeze_shares(self) -> dict:
        """`shares` with freezing alone.

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
        counts: dict = dict(collections.Counter(keys[first:]))
        if first * micro > warm:  # an entry the warm-up's end splits
            split = keys[first - 1]
            counts[split] = (
                counts.get(split, 0) + (first * micro - warm) / micro
            )
        shares = {freezing_lib.MASKED: warm / total} if warm else {}
        shares.update(
            {k: counts[k] * micro / total for k in sorted(counts) if counts[k]}
        )
        return shares

    def shares(self) -> dict:
        """``{program: fraction of the planned run's train steps it runs}``
        (the weights of `cost_report`): with freezing, one pass of its
        sequence, the freezing warm-up included (``MASKED``); with lengths,
        the ``total_steps`` updates of the sequence-length warm-up, each
        length paired with its freeze program."""
        lengths = self.lengths
        if lengths is None:
            return self._freeze_shares()
        total = lengths.warmup.total_steps * lengths.micro_steps
        positions = np.arange(total)
        if self.freezing is None:
            depths = np.full(total, -1)
        else:
            depths = self._depth_codes(positions, warmup=True)
        pairs = np.stack([depths, lengths.at_positions(positions)], axis=1)
        unique, counts = np.unique(pairs, axis=0, return_counts=True)
        return {
            (_DEPTH_OF_CODE.get(int(d), int(d)), int(n)): float(c) / total
            for (d, n), c in zip(unique, counts, strict=True)
        }


# The name reports give the freezing warm-up's program (`freezing.MASKED`).
WARMUP_NAME = "warm-up"


def program_names(keys) -> dict:
    """``{program: its name in reports}``: ``"step"`` (no freezing, no
    lengths), ``"depth 3"``, ``"warm-up"``, ``"length 8"``,
    ``"depth 3, length 8"``."""
    if list(keys) == [None]:
        return {None: "step"}

    def name(freeze_key) -> str:
        if freeze_key == freezing_lib.MASKED:
            return WARMUP_NAME
        return f"depth {freeze_key}"

    def named(key) -> str:
        if not isinstance(key, tuple):
            return name(key)
        freeze_key, length = key
        if freeze_key is None:
            return f"length {length}"
        return f"{name(freeze_key)}, length {length}"

    return {k: named(k) for k in keys}


# Freeze programs as ints in the arrays of `programs_from` and `shares`.
_MASKED_CODE = -2
_DEPTH_OF_CODE = {-1: None, _MASKED_CODE: freezing_lib.MASKED}
