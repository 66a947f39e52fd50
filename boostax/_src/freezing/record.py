# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing's record in the state: what its past steps followed.

The freeze sequence (`freezing/sequence.py`) is computed from settings
(``grad_freeze.total_steps``, ``freeze_p``, ``freeze_type``,
``param_groups``, the seed) before training, and the state keeps only the
position in it (`freezing.FreezeState`). A run resumed under other settings
would read another sequence at the same position: with the progressive
schedule (FreezeOut), a group the saved run had frozen for good would train
again. So every train step also writes the *record* of the plan it ran
(`settings_record`: the settings, the groups' and the sequence's hashes,
``int32``), and a step given a state it did not just return compares the
state's record with its own plan (`check_resume`): the same plan, or other
settings whose sequence gives every step already run the depth it ran
(extending ``total_steps`` of the continuous or interval strategy), goes
on; any other change of the past is refused, naming the setting.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, NamedTuple

import jax
import numpy as np

from boostax._src.freezing import sequence as freeze_sequence

# A `freezing.Freezing` (which imports this module): its groups, sequence,
# micro-steps, wrap and settings are read.
Freezing = Any

# The first entry of every record: never 0, so that a record of zeros
# (`init`'s, kept by a restore that fills what a checkpoint lacks from its
# template) is told apart from one a step wrote.
FORMAT = 1
UNKNOWN = -1  # a setting of a sequence given directly, not computed
SIZE = 14
# The most updates whose depths `check_resume` compares one by one (a run
# resumed past the sequence's end reads it again, wrapped).
_MAX_COMPARED = 2**26
_CHUNK = 2**20


class FreezeSettings(NamedTuple):
    """The settings a freeze sequence was computed from
    (`freeze_sequence.generate_freeze_index_sequence`'s arguments)."""

    groups_number: int
    strategy: int
    freeze_p: float
    total_steps: int
    seed: int

    def sequence(self) -> np.ndarray:
        return freeze_sequence.generate_freeze_index_sequence(
            self.groups_number,
            self.strategy,
            self.freeze_p,
            self.total_steps,
            seed=self.seed,
        )


# Each setting's name: the config's key, then the argument's.
_NAMES = {
    "groups_number": "`grad_freeze.param_groups` (`groups_number`)",
    "strategy": "`grad_freeze.freeze_type` (`strategy`)",
    "freeze_p": "`grad_freeze.freeze_p`",
    "total_steps": "`grad_freeze.total_steps`",
    "seed": "the freeze sequence's `seed`",
}


def _hash32(data: bytes) -> int:
    """A 32-bit BLAKE2b hash as an int32 (the same in every process)."""
    digest = hashlib.blake2b(data, digest_size=4).digest()
    return int(np.frombuffer(digest, "<i4")[0])


def _words(value: int) -> tuple[int, int]:
    """An int in [0, 2**64) as two int32 words (low, high)."""
    pair = np.array([value], np.uint64).view("<i4")
    return int(pair[0]), int(pair[1])


def _groups_hash(groups) -> int:
    text = "\n".join("|".join("/".join(p) for p in g) for g in groups)
    return _hash32(text.encode())


def settings_record(freezing: Freezing) -> np.ndarray:
    """The record of `freezing`'s plan, ``int32[SIZE]``: `FORMAT`; the
    strategy, groups number, total steps, seed (two words) and ``freeze_p``
    (float64, two words) of its `FreezeSettings` (`UNKNOWN` for a sequence
    given directly); its micro-steps and ``wrap``; the number of groups and
    a hash of their leaf paths; the sequence's length and a hash of it."""
    s = freezing.settings
    if s is None:
        known = [UNKNOWN] * 7
    elif not 0 <= s.seed < 2**63:  # beyond two words: compared by hash
        known = [s.strategy, s.groups_number, s.total_steps]
        known += [UNKNOWN, UNKNOWN, *np.array([s.freeze_p]).view("<i4")]
    else:
        known = [s.strategy, s.groups_number, s.total_steps]
        known += [*_words(s.seed), *np.array([s.freeze_p]).view("<i4")]
    sequence = np.ascontiguousarray(freezing.sequence, "<i4")
    record = [
        FORMAT,
        *known,
        freezing.micro_steps,
        int(freezing.wrap),
        len(freezing.groups),
        _groups_hash(freezing.groups),
        len(sequence),
        _hash32(sequence.tobytes()),
    ]
    return np.asarray(record, np.int64).astype(np.int32)


class _Record(NamedTuple):
    settings: FreezeSettings | None
    micro_steps: int
    wrap: bool
    groups: tuple[int, int]  # (number, hash)
    sequence: tuple[int, int]  # (length, hash)


def _read(record: np.ndarray) -> _Record:
    r = [int(v) for v in record]
    settings = None
    if r[1] != UNKNOWN:
        seed = UNKNOWN
        if (r[4], r[5]) != (UNKNOWN, UNKNOWN):
            seed = int(np.array(r[4:6], "<i4").view(np.uint64)[0])
        freeze_p = float(np.array(r[6:8], "<i4").view(np.float64)[0])
        settings = FreezeSettings(r[2], r[1], freeze_p, r[3], seed)
    return _Record(settings, r[8], bool(r[9]), (r[10], r[11]), (r[12], r[13]))


def _depth_at(sequence: np.ndarray, index: np.ndarray, wrap: bool):
    """The depths of updates `index` of a plan with `sequence`."""
    if wrap:
        return sequence[index % len(sequence)]
    return sequence[np.minimum(index, len(sequence) - 1)]


def _first_change(old, new, updates: int, wrap: bool) -> int | None:
    """The first of `updates` whose depth differs between the sequences
    `old` and `new`; ``None``: none does; -1: too many to compare. Past
    both sequences' ends (or a whole common period when they wrap), the
    depths repeat."""
    if wrap:
        limit = math.lcm(len(old), len(new))
    else:
        limit = max(len(old), len(new))
    updates = min(updates, limit)
    if updates > _MAX_COMPARED:
        return -1  # too long to compare: nothing can be said the same
    for start in range(0, updates, _CHUNK):
        index = np.arange(start, min(start + _CHUNK, updates))
        differ = np.flatnonzero(
            _depth_at(old, index, wrap) != _depth_at(new, index, wrap)
        )
        if len(differ):
            return start + int(differ[0])
    return None


def _changed(saved: FreezeSettings, given: FreezeSettings) -> str:
    return "; ".join(
        f"{_NAMES[name]} was {getattr(saved, name)!r}, this step's is "
        f"{getattr(given, name)!r}"
        for name in FreezeSettings._fields
        if getattr(saved, name) != getattr(given, name)
    )


def _past_change(saved: _Record, freezing: Freezing, position: int):
    """Why the steps before `position` would not have run as they did under
    `freezing`'s plan: a sentence, or ``None`` (they would have)."""
    given = freezing.settings
    if saved.micro_steps != freezing.micro_steps:
        return (
            "its steps counted "
            f"{saved.micro_steps} micro-step(s) per update "
            "(`grad_accumulation.grad_accumulation_step`), this step's "
            f"count {freezing.micro_steps}: the position {position} reads "
            "another update of the sequence"
        )
    if saved.groups != (len(freezing.groups), _groups_hash(freezing.groups)):
        if saved.settings and given and saved.settings[0] != given[0]:
            detail = _changed(saved.settings, given)
        else:
            detail = "the groups' leaves differ (another model, or `groups`)"
        return f"its parameter groups differ from this step's: {detail}"
    if saved.settings is None or given is None:
        return (
            "its freeze sequence differs from this step's, and one of them "
            "was given directly (`Freezing(groups, sequence)`, not computed "
            "from settings), so the depths of the steps already run cannot "
            "be shown the same"
        )
    if saved.wrap != freezing.wrap or saved.settings.strategy != given.strategy:
        return f"its strategy differs: {_changed(saved.settings, given)}"
    if given.strategy == freeze_sequence.PROGRESSIVE_STRATEGY:
        before = freeze_sequence.progressive_freeze_steps(
            saved.settings.groups_number,
            saved.settings.freeze_p,
            saved.settings.total_steps,
        )
        after = freeze_sequence.progressive_freeze_steps(
            given.groups_number, given.freeze_p, given.total_steps
        )
        if not np.array_equal(before, after):
            return (
                f"{_changed(saved.settings, given)}. In the progressive "
                "schedule they set the update at which each depth starts "
                f"(saved: {before.tolist()}, this step's: "
                f"{after.tolist()}), after which its groups stay frozen "
                "for good: a group the saved run froze could train again. "
                "And where FreezeOut anneals the rates (`auto_boost` chains "
                "it with this schedule), every update already made was "
                "scaled by the saved run's, which the restored optimizer "
                "state keeps (`freeze_at`)"
            )
    try:
        old = saved.settings.sequence()
    except (TypeError, ValueError):
        old = None
    if old is None or len(old) != saved.sequence[0]:
        return (
            "its record names settings this version computes another "
            "sequence from (another version of boostax saved it)"
        )
    updates = -(-position // freezing.micro_steps)
    first = _first_change(old, freezing.sequence, updates, freezing.wrap)
    if first is None:
        return None
    if first < 0:
        return (
            f"{_changed(saved.settings, given)}, and its {updates} updates "
            f"are too many to compare their depths (over {_MAX_COMPARED})"
        )
    index = np.array([first])
    was = int(_depth_at(old, index, freezing.wrap)[0])
    now = int(_depth_at(freezing.sequence, index, freezing.wrap)[0])
    return (
        f"{_changed(saved.settings, given)}. Update {first}, already run, "
        f"trained {_depth(was)} in the saved run and would have trained "
        f"{_depth(now)} under this step's settings"
    )


def _depth(depth: int) -> str:
    if depth == 0:
        return "depth 0 (every group)"
    return f"depth {depth} (the first {depth} group(s)' own layers frozen)"


def check_resume(freezing: Freezing, freeze_state: Any) -> None:
    """Raises unless the steps `freeze_state` has run follow `freezing`.

    A state at position 0 has run nothing and goes on under any plan. A
    later one must hold the record a step wrote (`settings_record`), and
    its plan's sequence must give every update before the position the
    depth this plan's gives it (the same plan; or, say, a longer
    ``total_steps`` of the continuous or interval strategy read before the
    shorter sequence's end). A position or record that is not a concrete
    array (a trace) is not compared.

    Raises:
      ValueError: the state records no plan (saved before boostax wrote
        one, or restored into a template whose zeros the restore kept), or
        another plan whose past differs; the message names the settings,
        their saved and given values, and the ways out.
    """
    leaves = (freeze_state.position, freeze_state.settings)
    for leaf in leaves:
        if isinstance(leaf, jax.ShapeDtypeStruct | jax.core.Tracer) or (
            isinstance(leaf, jax.Array) and leaf.is_deleted()
        ):
            return  # shapes only, traced, or donated (checked elsewhere)
    position = int(np.asarray(freeze_state.position))
    record = np.asarray(freeze_state.settings)
    if position == 0:
        return
    stamp = (
        "`state = ts.plan(state.params).freezing.stamp(state)` adopts this "
        "step's plan as if the state had run it"
    )
    if not record.any():
        raise ValueError(
            f"`state.algorithms.freeze` is at position {position} but "
            "records no freezing settings (`settings` is all zeros): it was "
            "saved by a boostax that wrote no record, or restored into the "
            "template `init` returns by a restore that keeps the template's "
            "values of the leaves a checkpoint lacks (Flax's "
            "`restore_checkpoint`). The depths its steps ran cannot be "
            "checked against this step's sequence. If it was trained with "
            f"this step's exact `grad_freeze` settings, {stamp}; else "
            "rebuild the step with the settings it was trained with. See "
            "docs/methods/grad_freeze.md#resuming."
        )
    given = freezing.settings_record
    if record.shape == given.shape and np.array_equal(record, given):
        return
    if record.shape != given.shape or int(record[0]) != FORMAT:
        why = "its record is of another format (another version of boostax)"
    else:
        why = _past_change(_read(record), freezing, position)
        if why is None:
            return  # every step run so far keeps its depth
    settings = ""
    if record.shape == given.shape and int(record[0]) == FORMAT:
        saved = _read(record).settings
        if saved is not None:
            settings = f" ({_describe(saved)})"
    raise ValueError(
        f"The state was trained {position} step(s) under other gradient "
        f"freezing settings{settings}, and they change the steps already "
        f"run: {why}. Resume with the settings it was saved with. To "
        "change the schedule from here on anyway, knowing that the steps "
        f"run so far did not follow it, {stamp}. See "
        "docs/methods/grad_freeze.md#resuming."
    )


def _describe(settings: FreezeSettings) -> str:
    return (
        f"param_groups={settings.groups_number}, "
        f"freeze_type={settings.strategy}, freeze_p={settings.freeze_p!r}, "
        f"total_steps={settings.total_steps}, seed={settings.seed}"
    )
