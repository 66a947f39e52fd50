# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`StepPrograms`: a `TrainStep`'s compiled programs, named and compiled.

With gradient freezing or a sequence-length warm-up, a train step runs one
of several programs (a freeze depth's, a warm-up's, a length's), picked by
position from a `program_schedule.ProgramSchedule`. `TrainStep` runs the
calls; this base class holds what names, inspects and compiles those
programs: the schedule built on the first call, the function each program
traces (the batch checked, cut to its length), `program_at`,
`program_shares`, `compile_all`, `trace` and `lower`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol

import jax

from boostax._src.methods import (
    progressive_resizing as progressive_resizing_lib,
)
from boostax._src.methods import seq_len_warmup as seq_len_warmup_lib
from boostax._src.step import executables as executables_lib
from boostax._src.step import program_schedule
from boostax._src.step.train_state import TrainState

if TYPE_CHECKING:
    from boostax._src.freezing import plan as freezing_lib
    from boostax._src.step import builder as step_builder_lib
    from boostax._src.step import objectives as objectives_lib
    from boostax._src.step.plan import StepPlan

__all__ = ("StepPrograms",)


class _Step(Protocol):
    """What `StepPrograms` reads of the `TrainStep` it is a base of."""

    builder: step_builder_lib.StepBuilder
    executables: executables_lib.Executables
    seq_len_warmup: Any
    freeze_warmup_steps: int
    background_compile: bool
    _warmup_given: bool
    _ahead: bool
    _schedule: program_schedule.ProgramSchedule | None

    @property
    def freezing(self) -> freezing_lib.Freezing | None: ...
    @property
    def objective(self) -> objectives_lib.Objective: ...
    @property
    def compile_seconds(self) -> dict[executables_lib.Key, float]: ...
    def plan(self, params) -> StepPlan: ...
    def check_state(self, state: Any) -> None: ...
    def _program_schedule(
        self, state=None, batch=None
    ) -> program_schedule.ProgramSchedule: ...
    def _checked_position(self, state) -> int | None: ...
    def _batch(self, batch) -> Any: ...
    def _is_own(self, state) -> bool: ...
    def trace(
        self, state: TrainState, batch, depth=None
    ) -> jax.stages.Traced: ...
    def _batch_entries(self) -> tuple[str, ...] | None: ...


class StepPrograms:
    """A `TrainStep`'s programs: which runs where, compiling, tracing."""

    # With freezing or a sequence-length warm-up, the `ProgramSchedule`
    # (built on the first call: `_program_schedule`).
    _schedule: program_schedule.ProgramSchedule | None = None

    def _compile_ahead(self: _Step, schedule, position, state, batch, placed):
        """Starts compiling the programs to come in the background, once
        the schedule says it is time (`ProgramSchedule.keys_to_compile`)."""
        keys = schedule.keys_to_compile(position, self.compile_seconds)
        self._ahead = not schedule.queued_all
        if not keys:
            return
        # The batch is checked first: the compiles trace it in other
        # threads, where a bad batch would fail every depth, not this call.
        self.objective.check_batch(batch)
        self.executables.compile_ahead(keys, state, placed)

    def _program_schedule(
        self: _Step, state=None, batch=None
    ) -> program_schedule.ProgramSchedule:
        """The `ProgramSchedule`, built once (on the first call: the plan
        needs the parameters, the lengths the batch and optimizer)."""
        lengths, warmup = None, self.seq_len_warmup
        if warmup is not None:
            if state is None:
                raise ValueError(
                    "The programs of a sequence-length warm-up or of "
                    "progressive resizing depend on the batch: call after "
                    "the first step or `compile_all`."
                )
            lengths = warmup.bind_batch(
                batch,
                seq_len_warmup_lib.micro_steps(
                    self.plan(state.params).optimizer,
                    state.opt_state,
                    self.freezing,
                ),
                # A dict batch's (inputs, targets) entries: the sequences,
                # unless the warm-up names its own `keys`.
                batch_keys=self._batch_entries(),
            )
            if isinstance(lengths, progressive_resizing_lib.Sizes):
                lengths.check_model(self.objective, state, batch)
        schedule = program_schedule.ProgramSchedule(
            self.freezing, self.freeze_warmup_steps, self._warmup_given, lengths
        )
        self._schedule = schedule
        return schedule

    def _checked_step_function(self: _Step, key: executables_lib.Key):
        """The builder's step of `key`, checking the batch when traced.

        Checks that run when the step is traced run once per structure,
        shapes and dtypes of the arguments (JAX traces again for new ones),
        before the model is traced, and cost nothing per call.
        """
        lengths = length = None
        freeze_key: executables_lib.FreezeKey
        if self.seq_len_warmup is not None:  # a (depth, length) program
            assert isinstance(key, tuple) and self._schedule is not None
            freeze_key, length = key
            lengths = self._schedule.lengths
        else:
            assert not isinstance(key, tuple)
            freeze_key = key
        step = self.builder.step_function(freeze_key)
        check_batch = self.objective.check_batch

        @functools.wraps(step)
        def checked_step(state, batch):
            check_batch(batch)  # shapes only
            return step(state, batch)

        if lengths is None:
            return checked_step
        # The batch cut to the length first; a model that fails on the cut
        # batch alone is said to, naming the warm-up.
        return lengths.cut_step(checked_step, length)

    def program_at(self: _Step, position: int):
        """The program train step `position` runs: its freeze depth's own
        (`Freezing.canonical_depth`), ``"masked"`` (the warm-up program,
        before `freeze_warmup_steps`), ``None`` without freezing; with a
        sequence-length warm-up, the pair ``(that, length)``. Call after
        `init` (with a sequence-length warm-up: after the first call)."""
        if self.freezing is None and self.seq_len_warmup is None:
            return None
        schedule = self._schedule or self._program_schedule()
        return schedule.program_at(position)

    @property
    def program_lengths(self: _Step) -> seq_len_warmup_lib.Lengths | None:
        """The sequence-length warm-up's `seq_len_warmup.Lengths`: the
        length of every step, and the cut of the batch (bound to the
        first batch: after the first call, `trace` or `compile_all`);
        ``None`` without a warm-up or before."""
        if self.seq_len_warmup is None or self._schedule is None:
            return None
        return self._schedule.lengths

    def program_shares(self: _Step) -> dict[Any, float]:
        """``{program: fraction of the steps it runs}`` over the planned run
        (one pass of the freezing sequence; with a sequence-length warm-up,
        its ``total_steps``; ``{None: 1.0}`` with neither): the warm-up
        program (``"masked"``) for the first `freeze_warmup_steps`, then
        each depth's own (`program_at`), each paired with its length under
        a sequence-length warm-up. The weights of `cost_report`. Call after
        `init` (the plan needs the parameters; with a sequence-length
        warm-up, after the first call)."""
        if self.freezing is None and self.seq_len_warmup is None:
            return {None: 1.0}
        return (self._schedule or self._program_schedule()).shares()

    def compile_all(self: _Step, state: TrainState, batch) -> dict[Any, Any]:
        """Compiles every program of the run ahead of time.

        Every program (freeze depth; with a sequence-length warm-up, each
        with its lengths) in the order the run from `state`'s position
        needs them and, inside the freezing warm-up, the warm-up program;
        with `background_compile`, in parallel threads.

        Returns:
          ``{program: executables.Program}`` of the depths' own programs
          (the key ``None`` without freezing; ``(depth, length)`` pairs
          with a sequence-length warm-up): called like the step, each
          returns the state and metrics the step does (its compiled
          program, ``.compiled``, leaves out what the host puts back: the
          base key, the depth); later calls use them. The
          warm-up programs are ``executables.compiled()[freezing.MASKED]``
          (and ``[freezing.warmup_key(k)]``).
        """
        position = self._checked_position(state)
        placed = self._batch(batch)
        if position is None:
            keys = [None]
        else:
            schedule = self._schedule or self._program_schedule(state, batch)
            keys = schedule.programs_to_compile(position)
            if self.background_compile:
                self._ahead = False
                self.executables.compile_ahead(keys, state, placed)
        for key in keys:
            self.executables.executable(key, state, placed)
        compiled = self.executables.compiled()
        return {
            k: compiled[k]
            for k in keys
            if not program_schedule.is_warmup_program(k)
        }

    def trace(
        self: _Step, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Traced:
        """Traces the step (of freeze `depth`; default the first;
        ``"masked"``: the warm-up program, ``"masked from k"``: the one of
        group k (`freezing.warmup_key`); with a sequence-length warm-up,
        a ``(depth, length)`` program, or a depth at the full length) for
        `state` and `batch` (arrays, or their shapes:
        ``jax.ShapeDtypeStruct``): ``.jaxpr``, ``.lower()``."""
        if not self._is_own(state):
            self.check_state(state)  # reads no position: shapes will do
        full_length = None
        if self.seq_len_warmup is not None:
            schedule = self._schedule or self._program_schedule(state, batch)
            full_length = schedule.lengths.full_length
        program = program_schedule.named_program(
            depth, self.freezing, full_length
        )
        return self.executables.trace(program, state, self._batch(batch))

    def lower(
        self: _Step, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Lowered:
        """Lowers the step (of freeze `depth`) for `state` and `batch`
        (arrays, or their shapes: ``jax.ShapeDtypeStruct``)."""
        return self.trace(state, batch, depth).lower()
