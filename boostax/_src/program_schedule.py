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

A sequence that opens with a long run of one depth (progressive freezing,
FreezeOut, trains everything for its first 70%) runs that depth's own
program over the run's leading positions instead (`lead_positions`): the
same update without the warm-up program's mask, and a program that
compiles as fast as plain Optax's, while the warm-up program compiles in
the background for the positions after the lead.

With a sequence-length warm-up (`seq_len_warmup.py`), each length is a
program too: a program is then ``(freeze program or None, length)``, the
length also a function of the position.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from boostax._src import executables as executables_lib
from boostax._src import freezing as freezing_lib
from boostax._src import validation

# With gradient freezing, the train steps (positions) that run the warm-up
# program before each depth runs its own, by default: enough steps for the
# depths of the bundled models to compile on two CPU cores while training
# runs (a shorter planned run never compiles them at all).
FREEZE_WARMUP_STEPS = 1024
# A leading run of one depth runs that depth's own program (not the warm-up
# program) when it spans the whole warm-up or at least this many train
# steps: about the time the warm-up program takes to compile in the
# background on two CPU cores while the bundled ResNet trains (~1.7 s at
# ~15-25 ms a step), so that it is ready when the lead ends.
MIN_LEAD_STEPS = 64


def lead_positions(freezing, warmup: int) -> int:
    """The leading positions that run their depth's own program.

    The positions of the sequence's opening run of one program (its
    canonical depth), up to the warm-up's end, when that run spans the
    whole warm-up or at least `MIN_LEAD_STEPS`; else 0 (every warm-up
    position runs the warm-up program). A function of the plan alone, so
    every machine runs the same program at each position.
    """
    if not warmup:
        return 0
    keys = executables_lib.sequence_keys(freezing)
    others = np.flatnonzero(keys != keys[0])
    if not len(others):
        return warmup  # one program throughout: the warm-up never needs one
    lead = min(int(others[0]) * freezing.micro_steps, warmup)
    return lead if lead == warmup or lead >= MIN_LEAD_STEPS else 0


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
        # Positions before `lead` run the opening depth's own program.
        self.lead = lead_positions(freezing, self.warmup) if self.warmup else 0
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
        self._lead_key = self._keys[0]
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
            if position < self.lead:
                return self._lead_key
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
                return None  # this call compiles its program first
            if not self._queued_warmup:
                # The warm-up's other programs (after a lead, the warm-up
                # program; with lengths, each length's), needed before the
                # depths' own.
                self._queued_warmup = True
                pending = [
                    k
                    for k in self.warmup_programs(position)
                    if k not in compiled
                ]
                if pending:
                    return pending
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
                opening = self.warmup_programs(position)
                keys = opening + [k for k in keys if k not in opening]
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
        keys = _pairs_by_first_use(depths, lengths.at_positions(positions))
        for depth in tail:
            if (depth, lengths.full_length) not in keys:
                keys.append((depth, lengths.full_length))
        return keys

    def warmup_programs(self, position: int) -> list:
        """The programs the freezing warm-up runs from train step
        `position` on, in the order it first needs them: the lead's
        (`lead_positions`), then the warm-up program; with lengths, each
        paired with its lengths."""
        if position >= self.warmup:
            return []
        if self.lengths is None:
            keys = [self._lead_key] if position < self.lead else []
            if self.lead < self.warmup:
                keys.append(freezing_lib.MASKED)
            return keys
        positions = np.arange(position, self.warmup)
        return _pairs_by_first_use(
            self._depth_codes(positions, warmup=True),
            self.lengths.at_positions(positions),
        )

    def _depth_codes(self, positions: np.ndarray, warmup: bool) -> np.ndarray:
        """The freeze program of each position as an int (`_CODES`)."""
        keys = np.asarray(self._keys)
        index = positions // self._micro_steps
        if self._wrap:
            index = index % len(keys)
        else:
            index = np.minimum(index, len(keys) - 1)
        codes = keys[index]
        if warmup:  # the lead runs its own depth's program (`keys[0]`)
            masked = (positions >= self.lead) & (positions < self.warmup)
            codes = np.where(masked, _MASKED_CODE, codes)
        return codes

    def _freeze_shares(self) -> dict:
        """`shares` with freezing alone.

        The planned run is one pass of the sequence (its entries times the
        micro-steps of each): its first `warmup` positions run the warm-up
        program (``MASKED``, listed first) but for the lead's
        (`lead_positions`), the rest their depths' own programs
        (ascending). A run that ends inside the warm-up runs only
        ``MASKED`` and the lead's program.
        """
        total = len(self._keys) * self._micro_steps
        codes = self._depth_codes(np.arange(total), warmup=True)
        values, counts = np.unique(codes, return_counts=True)
        shares: dict[Any, float] = {
            _DEPTH_OF_CODE.get(int(v), int(v)): float(c) / total
            for v, c in zip(values, counts, strict=True)
        }
        masked = shares.pop(freezing_lib.MASKED, None)
        ordered = {freezing_lib.MASKED: masked} if masked else {}
        ordered.update(sorted(shares.items()))
        return ordered

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


def _pairs_by_first_use(codes: np.ndarray, lengths: np.ndarray) -> list:
    """The distinct ``(freeze program, length)`` programs of positions with
    freeze program `codes` (`_CODES`) and `lengths`, in first-use order."""
    pairs = np.stack([codes, lengths], axis=1)
    unique, first = np.unique(pairs, axis=0, return_index=True)
    return [
        (_DEPTH_OF_CODE.get(int(d), int(d)), int(n))
        for d, n in unique[np.argsort(first)]
    ]


# The name reports give the freezing warm-up's program (`freezing.MASKED`).
WARMUP_NAME = "warm-up"


def program_names(keys, unit: str = "length") -> dict:
    """``{program: its name in reports}``: ``"step"`` (no freezing, no
    lengths), ``"depth 3"``, ``"warm-up"``, ``"length 8"``,
    ``"depth 3, length 8"`` (`unit`: what the int of a pair is, e.g.
    ``"width"`` under progressive resizing)."""
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
            return f"{unit} {length}"
        return f"{name(freeze_key)}, {unit} {length}"

    return {k: named(k) for k in keys}


# Freeze programs as ints in the arrays of `programs_from` and `shares`.
_MASKED_CODE = -2
_DEPTH_OF_CODE = {-1: None, _MASKED_CODE: freezing_lib.MASKED}
