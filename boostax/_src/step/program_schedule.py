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

The warm-up's positions after the lead are cut into segments
(`warmup_segments`), as many as the lead leaves time to compile (one per
`MIN_LEAD_STEPS` of it): each runs one warm-up program that differentiates
only the leaves some depth of the segment trains (``freezing.warmup_key``:
the frozen prefix common to its depths costs no backward), or, for a
segment of one depth, that depth's own program. A progressive sequence's
short run thus keeps most of freezing's saving inside the warm-up.

With a sequence-length warm-up (`seq_len_warmup.py`), each length is a
program too: a program is then ``(freeze program or None, length)``, the
length also a function of the position.
"""

from __future__ import annotations

import bisect
import time
from typing import Any

import numpy as np

from boostax._src import validation
from boostax._src.freezing import plan as freezing_lib
from boostax._src.step import executables as executables_lib

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
# More runs of one program than this after the lead (MindSpore's strategies,
# whose depth 0 recurs): the warm-up after the lead runs one program.
MAX_WARMUP_RUNS = 64


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


def warmup_programs_budget(lead: int) -> int:
    """How many programs the warm-up's positions after a lead of `lead`
    positions may run: one per `MIN_LEAD_STEPS` of the lead (the time one
    compiles in the background while the lead trains), at least one."""
    return max(1, lead // MIN_LEAD_STEPS)


def warmup_segments(freezing, lead: int, warmup: int) -> list[tuple[int, Any]]:
    r"""``[(first position, program), ...]`` of the warm-up after its lead.

    The positions ``[lead, warmup)`` are cut, at changes of their depths'
    programs, into at most `warmup_programs_budget` segments of
    consecutive positions; each runs one program, chosen from the plan
    alone (so a run's bits do not depend on when a compile finishes):

    - a segment of one depth runs that depth's own program;
    - one of several depths the warm-up program of the smallest group
      holding every leaf they train (``freezing.warmup_key(k)``: the
      leaves outside group ``k``, frozen at each of its depths, are not
      differentiated; `freezing.MASKED` where no group holds them all).

    The cut minimizes the estimated cost of the warm-up, each position
    costing the fraction of the leaves its program differentiates,

    .. math::

      \min_{S_1, \ldots, S_m,\ m \le K} \sum_j |S_j|
      \frac{|\bigcup_{d \in S_j} G_d|}{|G_0|},

    by dynamic programming over the runs of one program (at most
    `MAX_WARMUP_RUNS`; more, as in MindSpore's strategies 0 and 1, whose
    depth 0 recurs, one segment).

    Args:
      freezing: the `Freezing` plan (one optimizer state: `can_mask`).
      lead: positions before the warm-up's segments (`lead_positions`).
      warmup: the warm-up's positions.

    Returns:
      The segments' first positions (ascending, the first `lead`) and
      programs; empty when the lead spans the warm-up.
    """
    if lead >= warmup:
        return []
    planned = len(freezing.sequence) * freezing.micro_steps
    if planned < warmup:
        # The warm-up outlasts the planned run (one pass of the sequence):
        # its positions past the plan run one more program, compiled only
        # by a run that gets there.
        head = (
            warmup_segments(freezing, lead, planned) if lead < planned else []
        )
        tail = _programs_of(freezing, max(lead, planned), warmup)
        tail_key = _cut(freezing, set(tail.tolist()))[0]
        if not head or head[-1][1] != tail_key:
            head.append((max(lead, planned), tail_key))
        return head
    codes = _programs_of(freezing, lead, warmup)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1])
    runs = [int(codes[i]) for i in starts]
    budget = warmup_programs_budget(lead)
    if len(runs) > MAX_WARMUP_RUNS:
        budget = 1
    if len(runs) <= budget:
        return [
            (lead + int(i), depth)
            for i, depth in zip(starts, runs, strict=True)
        ]
    lengths = np.diff(np.concatenate([starts, [len(codes)]]))

    def cut(i: int, j: int) -> tuple[Any, float]:
        """The program of runs ``[i, j)`` and its cost per position."""
        return _cut(freezing, set(runs[i:j]))

    n = len(runs)
    if budget == 1:
        return [(lead, cut(0, n)[0])]
    # best[m][j]: the cheapest cut of runs [0, j) into m segments.
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(budget + 1)]
    back = [[0] * (n + 1) for _ in range(budget + 1)]
    best[0][0] = 0.0
    costs = {
        (i, j): float(lengths[i:j].sum()) * cut(i, j)[1]
        for i in range(n)
        for j in range(i + 1, n + 1)
    }
    for m in range(1, budget + 1):
        for j in range(1, n + 1):
            for i in range(m - 1, j):
                value = best[m - 1][i] + costs[i, j]
                if value < best[m][j]:
                    best[m][j], back[m][j] = value, i
    m = min(range(1, budget + 1), key=lambda k: (best[k][n], k))
    bounds, j = [], n
    while j:
        i = back[m][j]
        bounds.append((i, j))
        j, m = i, m - 1
    return [(lead + int(starts[i]), cut(i, j)[0]) for i, j in bounds[::-1]]


def _programs_of(freezing, start: int, stop: int) -> np.ndarray:
    """The depths' own programs of positions ``[start, stop)``."""
    keys = np.asarray(executables_lib.sequence_keys(freezing))
    index = np.arange(start, stop) // freezing.micro_steps
    if freezing.wrap:
        index = index % len(keys)
    else:
        index = np.minimum(index, len(keys) - 1)
    return keys[index]


def _cut(freezing, depths: set) -> tuple[Any, float]:
    """The program running every depth of `depths` (their own program if
    one, else the warm-up program of the smallest group holding the leaves
    they train) and the fraction of the leaves it differentiates."""
    groups = freezing.groups
    everything = max(len(set(groups[0])), 1)
    if len(depths) == 1:
        (depth,) = depths
        return int(depth), len(set(groups[depth])) / everything
    union = frozenset().union(*(groups[d] for d in depths))
    for d in sorted(depths):
        if frozenset(groups[d]) == union:
            return freezing_lib.warmup_key(int(d)), len(union) / everything
    return freezing_lib.MASKED, 1.0


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
            "no freezing: drop the setting (or switch grad_freeze on)."
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
        # The programs of the warm-up's positions after the lead.
        segments = warmup_segments(freezing, self.lead, self.warmup)
        self._segment_starts = [start for start, _ in segments]
        self._segment_keys = [key for _, key in segments]
        # What `keys_to_compile` reads on every call of the warm-up, worked
        # out once (listing the programs by first use reads the sequence).
        self._ends_in_warmup = (
            len(freezing.sequence) * freezing.micro_steps <= self.warmup
        )
        self._programs_after_warmup = len(
            executables_lib.keys_by_first_use(freezing, self.warmup)
        )

    def program_at(self, position: int):
        """The program of train step `position`: with freezing, before the
        warm-up's end the lead's, then its segment's (`warmup_segments`:
        ``MASKED``, a warm-up program from a group, or a depth's own),
        else its depth's own
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
            segment = bisect.bisect_right(self._segment_starts, position) - 1
            return self._segment_keys[segment]
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

    def programs_to_compile(self, position: int) -> list:
        """Every program of the run, in the order the run from `position`
        first needs them (`programs_from`, with the warm-up's), then the
        programs of the planned run it does not reach (`compile_all`)."""
        keys = self.programs_from(position, warmup=True)
        return keys + [
            k
            for k in self.shares()
            if k not in keys and not is_warmup_program(k)
        ]

    def warmup_programs(self, position: int) -> list:
        """The programs the freezing warm-up runs from train step
        `position` on, in the order it first needs them: the lead's
        (`lead_positions`), then its segments' (`warmup_segments`; one
        past the planned run only once `position` is there); with
        lengths, each paired with its lengths."""
        if position >= self.warmup:
            return []
        if self.lengths is None:
            keys = [self._lead_key] if position < self.lead else []
            first = max(
                bisect.bisect_right(self._segment_starts, position) - 1, 0
            )
            planned = len(self._keys) * self._micro_steps
            for start, key in zip(
                self._segment_starts[first:],
                self._segment_keys[first:],
                strict=True,
            ):
                # Past the planned run: compiled by a run that gets there.
                if key not in keys and (start < planned or start <= position):
                    keys.append(key)
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
        if warmup and self._segment_starts:
            # The lead runs its own depth's program (`keys[0]`), the
            # segments after it theirs (`warmup_segments`).
            segment_codes = np.array([_code(k) for k in self._segment_keys])
            inside = (positions >= self.lead) & (positions < self.warmup)
            segment = np.searchsorted(
                self._segment_starts, positions, side="right"
            )
            segment = np.clip(segment - 1, 0, len(segment_codes) - 1)
            codes = np.where(inside, segment_codes[segment], codes)
        return codes

    def _freeze_shares(self) -> dict:
        """`shares` with freezing alone.

        The planned run is one pass of the sequence (its entries times the
        micro-steps of each): its first `warmup` positions run the lead's
        program (`lead_positions`) and its segments' (`warmup_segments`),
        the rest their depths' own programs. The warm-up programs
        (``MASKED``, then those from a group, by group) are listed first,
        the depths' own after (ascending).
        """
        total = len(self._keys) * self._micro_steps
        codes = self._depth_codes(np.arange(total), warmup=True)
        values, counts = np.unique(codes, return_counts=True)
        shares: dict[Any, float] = {
            _key_of_code(int(v)): float(c) / total
            for v, c in zip(values, counts, strict=True)
        }
        # The warm-up programs first (`MASKED`, then by group), the depths'
        # own after (ascending).
        return dict(
            sorted(
                shares.items(),
                key=lambda item: (
                    (0, freezing_lib.warmup_cut(item[0]))
                    if freezing_lib.warmup_cut(item[0]) is not None
                    else (1, item[0])
                ),
            )
        )

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
            (_key_of_code(int(d)), int(n)): float(c) / total
            for (d, n), c in zip(unique, counts, strict=True)
        }


def is_warmup_program(key: executables_lib.Key) -> bool:
    """Whether `key` is a freezing warm-up program (alone or with a
    sequence length)."""
    freeze_key = key[0] if isinstance(key, tuple) else key
    return freezing_lib.warmup_cut(freeze_key) is not None


def named_program(
    depth, freezing: freezing_lib.Freezing | None, full_length=None
) -> executables_lib.Key:
    """The program `TrainStep.trace` names by `depth`.

    Args:
      depth: a freeze depth (``None``: the first, or no freezing), a
        warm-up program's key (``"masked"``, ``"masked from k"``), or,
        with a sequence-length warm-up, a ``(depth, length)`` pair.
      freezing: the step's `Freezing` plan, or ``None``.
      full_length: with a sequence-length warm-up, the full length (the
        length of a bare `depth`); ``None`` without one.

    Raises:
      ValueError: a warm-up program without freezing that can mask, or of
        a group the plan does not have.
    """
    length = None
    if full_length is not None:
        depth, length = (
            depth if isinstance(depth, tuple) else (depth, full_length)
        )
    if depth is None and freezing is not None:
        depth = 0
    cut = freezing_lib.warmup_cut(depth)
    if cut is not None:
        if freezing is None or not freezing.can_mask:
            raise ValueError(
                f"`depth` {depth!r} (a warm-up program) "
                "needs gradient freezing with one optimizer state."
            )
        if cut >= len(freezing.groups):
            raise ValueError(
                f"`depth` {depth!r}: a warm-up program from a group in "
                f"[0, {len(freezing.groups)}), got group {cut}."
            )
        key = depth
    else:
        key = depth_program(depth, freezing)
    return key if length is None else (key, length)


def depth_program(
    depth: int | None, freezing: freezing_lib.Freezing | None
) -> int | None:
    """The program of freeze `depth` (depths training the same leaves
    share one); ``None`` without freezing."""
    if depth is None or freezing is None:
        return None
    return freezing.canonical_depth(depth)


def _pairs_by_first_use(codes: np.ndarray, lengths: np.ndarray) -> list:
    """The distinct ``(freeze program, length)`` programs of positions with
    freeze program `codes` (`_CODES`) and `lengths`, in first-use order."""
    pairs = np.stack([codes, lengths], axis=1)
    unique, first = np.unique(pairs, axis=0, return_index=True)
    return [
        (_key_of_code(int(d)), int(n)) for d, n in unique[np.argsort(first)]
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
        cut = freezing_lib.warmup_cut(freeze_key)
        if cut == 0:
            return WARMUP_NAME
        if cut is not None:
            return f"{WARMUP_NAME} from depth {cut}"
        return f"depth {freeze_key}"

    def named(key) -> str:
        if not isinstance(key, tuple):
            return name(key)
        freeze_key, length = key
        if freeze_key is None:
            return f"{unit} {length}"
        return f"{name(freeze_key)}, {unit} {length}"

    return {k: named(k) for k in keys}


# Freeze programs as ints in the arrays of `programs_from` and `shares`:
# a depth itself, -1 for None, ``-2 - k`` for the warm-up program from group
# k (`freezing.warmup_key`; -2: `freezing.MASKED`).
_NONE_CODE = -1


def _code(key) -> int:
    if key is None:
        return _NONE_CODE
    cut = freezing_lib.warmup_cut(key)
    return int(key) if cut is None else -2 - cut


def _key_of_code(code: int):
    if code == _NONE_CODE:
        return None
    return code if code >= 0 else freezing_lib.warmup_key(-2 - code)
