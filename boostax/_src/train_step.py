# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainStep`: a train step's builder and executables, run.

`boostax.make_train_step` (`step_factory.py`) and `boostax.auto_boost`
return a `TrainStep`.
What one step computes is built by a `StepBuilder` (`step_builder.py`);
its compiled programs, one per freeze depth, are an `Executables`
(`executables.py`). A `TrainStep` picks the program of each call from the
freezing sequence, checks the states it did not return, and watches for
runs of skipped steps.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from typing import Any

import jax
import optax

from boostax._src import batches as batches_lib
from boostax._src import data_parallel as data_parallel_lib
from boostax._src import executables as executables_lib
from boostax._src import freezing as freezing_lib
from boostax._src import (
    less_bn_plan,
    model_graph,
    program_schedule,
    skip_watch,
    step_checks,
    test_time_flips,
    validation,
    weight_averaging,
)
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import objectives as objectives_lib
from boostax._src import progressive_resizing as progressive_resizing_lib
from boostax._src import seq_len_warmup as seq_len_warmup_lib
from boostax._src import step_builder as step_builder_lib
from boostax._src.objective_options import PlainRecipe
from boostax._src.step_builder import check_skip_options
from boostax._src.step_plan import StepPlan
from boostax._src.train_state import AlgorithmStates, TrainState

PyTree = Any

__all__ = (
    "AlgorithmStates",
    "TrainState",
    "TrainStep",
)

# Whether a `TrainStep` with gradient freezing compiles its freeze depths in
# background threads by default (``BOOSTAX_BACKGROUND_COMPILE=0`` turns the
# default off, e.g. in a test suite that calls many steps only a few times).
BACKGROUND_COMPILE = os.environ.get("BOOSTAX_BACKGROUND_COMPILE", "1") != "0"


class TrainStep:
    """A jitted train step with the `init` that builds its state.

    Built by `make_train_step` or `boostax.auto_boost`. Call it as
    ``state, metrics = train_step(state, batch)``; `metrics` holds at least
    ``"loss"`` (the loss before the update), plus the loss function's own
    metrics, and, for the algorithms switched on:

    - ``"overflow"``, ``"loss_scale"``: loss scaling (the step was skipped;
      the scale the step used);
    - ``"frozen_groups"``: gradient freezing (the freeze depth);
    - ``"updated"``: gradient accumulation (this micro-step ran the
      optimizer);
    - ``"adasum_cosine"``: AdaSum of updates (mean cosine between the
      vectors the last AdaSum combined: ~1 they agreed and were averaged,
      ~0 orthogonal and summed; NaN before the first update);
    - ``"dim_reduce_step_size"``, ``"dim_reduce_trials"``: DimReduce (the
      last update's Armijo step, 0 if no trial was accepted, and its
      line-search trials).

    The statistics of optimizer stages describe the last update that ran
    (with accumulation, the last k-th micro-step).

    Skipped steps. With loss scaling, or `skip_nonfinite` without it, a step
    whose gradients are not finite is skipped: params, optimizer state and
    model state stay bit for bit as they were (``metrics["overflow"]``).
    With gradient accumulation (`boostax.gradient_accumulation` as the
    optimizer), a skipped micro-step still counts as one of its update's k
    and that update is dropped: train step ``i`` is always micro-step
    ``i mod k`` of update ``i // k``, every update averages k finite
    micro-gradients, and with freezing all of them train the same depth;
    only the accumulation's counters move on a skipped micro-step.
    After `max_consecutive_skips` skipped steps in a row (a NaN in the
    data, a dynamic loss scale stuck at its minimum) the call warns with a
    ``RuntimeWarning``, or raises ``FloatingPointError`` with
    `raise_on_skips`. The host reads the flags in windows of up to
    `skip_watch.SKIP_CHECK_WINDOW` steps, never the step just dispatched,
    so the check does not stall the device; it notices a run that late.

    With gradient freezing, there is one compiled step per freeze depth:
    each differentiates and updates only that depth's trainable suffix. The
    host picks the step from the precomputed sequence; the position in the
    sequence is kept in ``state.algorithms.freeze`` and mirrored on the host,
    so dispatching never waits for the device (a state the step did not
    just return, e.g. one restored from a checkpoint, is read once).
    `metrics` then also holds ``"frozen_groups"``, the depth.

    Every step is compiled ahead of time for the shapes of the first call.
    With freezing, the first `freeze_warmup_steps` positions run one
    warm-up program for every depth (``"masked"``: all gradients computed,
    the depth's frozen ones zeroed, its frozen params and optimizer slots
    kept bit for bit), so training starts after one compile; later
    positions run their depth's own program (`program_at`). A sequence
    that opens with a long run of one depth (progressive freezing trains
    everything first) runs that depth's own program there instead, which
    compiles as fast as plain Optax's, and the rest of the warm-up runs
    programs compiled in the background meanwhile, as many as the lead
    leaves time for: each depth's own, or warm-up programs that
    differentiate only a suffix group (``"masked from k"``,
    `program_schedule.warmup_segments`). The depths'
    programs compile in background threads (one core is left to training)
    in the order the sequence first needs them, started so that they are
    ready near the warm-up's end, and not during the warm-up when the
    sequence ends within it; a step whose program is not ready waits for
    exactly that executable. The program of a step depends on its position
    alone, so the results are those of `compile_all`, on a fast machine or
    a slow one, and a resumed run continues bit for bit. A call with other
    shapes (say, a smaller last batch) goes through ``jax.jit``, which
    compiles for them. A process that ends while depths compile cancels
    the queued compiles and waits for the running ones (at most one per
    thread), then exits normally.

    With a sequence-length warm-up (`seq_len_warmup`), each length is a
    program too: a program is ``(freeze program or None, length)``, the
    batch truncated to the length inside it (`boostax.truncate_sequence`),
    the length a function of the position (``state.step``, or the freeze
    position), counted in updates (all k micro-steps of an accumulated
    update see one length), so a resumed run continues bit for bit. The
    later lengths' programs compile in background threads once the first
    one has (with freezing, its warm-up's first, its depths' as above).

    Per call, the step adds one or two microseconds of Python to JAX's own
    dispatch of the compiled program (`benchmarks/step_overhead.py`): the
    batch is checked (`Objective.check_batch`, before the model is traced)
    when a program is traced, i.e. once per structure, shapes and dtypes as
    JAX keys its cache, and a state the step did not return is checked once
    (`check_state`); the step just returned needs neither.

    Donation. By default (``donate_state=False``, like ``jax.jit`` and the
    steps of the Flax and Optax tutorials) a call leaves the state it is
    given valid, so while it runs the device holds the old and the new
    state: twice the memory of the parameters, optimizer state and model
    state (with Adam, 6x the parameters' bytes instead of 3x). With
    ``donate_state=True`` (``donate_argnums=0``, as Flax's example training
    loops write it) XLA writes the new state into the buffers of the one
    given, which is deleted: passing it again raises ``ValueError``. Pass
    `donate_state` on a large model, or where each step is short (it also
    saves allocating and copying the state; see ``docs/measuring.md``).

    With a `DataParallel` plan, the step runs under ``jax.shard_map`` over
    its mesh: `init` places the state on the mesh, each call splits the
    batch (this process's share of it) over the devices, and the metrics
    are averaged over them.

    A step is two parts with public seams: its `builder` (a `StepBuilder`:
    the settings, the plan, the initial state and the pure step function of
    each freeze depth) and its `executables` (an `Executables`: the jitted
    and compiled program of each depth, the background compiles). This
    class runs them: it picks the depth from the sequence, checks states it
    did not return, and watches for skipped steps.

    Attributes:
      builder: the `StepBuilder`.
      executables: the `Executables`.
      objective: the `Objective` being trained.
      optimizer: the Optax optimizer given (the step runs
        ``plan(params).optimizer``, which adds the data-parallel stages).
      config: the `BoostConfig` it was built from (``None`` when built by
        `make_train_step`).
      freezing: the `Freezing` plan, or ``None`` (given as a function of
        the parameters, it is built from the first state the step sees).
      data_parallel: the `DataParallel` plan, or ``None``.
      trace_count: how many times a step has been traced (once per freeze
        depth used, for fixed shapes).
      background_compile: whether the depths' programs compile in
        background threads (else each when first needed).
      freeze_warmup_steps: with freezing, the positions that run the
        warm-up programs (``"masked"``; after a lead, ``"masked from k"``
        or depths' own, `program_schedule.warmup_segments`) before each
        depth runs its own;
        default `program_schedule.FREEZE_WARMUP_STEPS` (0: none).
      compile_seconds: ``{depth: seconds}`` spent tracing and compiling
        each executable (the key ``None`` without freezing).
      compile_wait_seconds: how long calls have waited for compilation in
        all: compiling on the spot, or waiting for a background compile.
      seq_len_warmup: the `SeqLenWarmup` or `ProgressiveResizing` (a
        schedule of the batch's shape), or ``None``.
      less_bn_report, plain_recipe: the arguments given, or ``None``.
      sample_inputs: their shapes (``jax.ShapeDtypeStruct``), or ``None``.
      donate_state: whether a call donates (deletes) the state it is
        given to reuse its memory (`init` then copies the variables it is
        given, which stay valid).
      skip_nonfinite: without loss scaling, whether a step with non-finite
        gradients is skipped (loss scaling always skips them).
      max_consecutive_skips: skipped steps in a row that trigger the
        warning (or error); ``None``: never.
      raise_on_skips: raise ``FloatingPointError`` instead of warning.
    """

    def __init__(
        self,
        objective: objectives_lib.Objective,
        optimizer: optax.GradientTransformation,
        *,
        config: Any = None,
        freezing: Callable[[PyTree], freezing_lib.Freezing]
        | freezing_lib.Freezing
        | None = None,
        loss_scale: loss_scale_lib.LossScale | None = None,
        data_parallel: data_parallel_lib.DataParallel | None = None,
        donate_state: bool = False,
        background_compile: bool | None = None,
        freeze_warmup_steps: int | None = None,
        skip_nonfinite: bool = False,
        max_consecutive_skips: int | None = 100,
        raise_on_skips: bool = False,
        precision: Any = None,
        seq_len_warmup: seq_len_warmup_lib.SeqLenWarmup
        | progressive_resizing_lib.ProgressiveResizing
        | None = None,
        less_bn_report: less_bn_plan.LessBNReport | None = None,
        plain_recipe: PlainRecipe | None = None,
        sample_inputs: Any = None,
    ):
        """Builds the step (what it runs: the class docstring).

        Args:
          objective: the `Objective` to train (`make_objective`).
          optimizer, loss_scale, data_parallel, donate_state, precision,
            skip_nonfinite, max_consecutive_skips, raise_on_skips,
            seq_len_warmup: as `make_train_step`'s.
          config: the `BoostConfig` it was built from, or ``None``.
          freezing: a `Freezing` plan, a function of the params returning
            one, or ``None``.
          background_compile, freeze_warmup_steps: as `auto_boost`'s.
          less_bn_report: with LessBN, the model's `LessBNReport`.
          plain_recipe: a `PlainRecipe` for the plain Optax step of the
            same model and optimizer: `cost_report`'s default baseline.
          sample_inputs: one batch of model inputs (arrays or shapes; the
            shapes are kept): `from_flax_train_state` then checks every
            variable's path and shape against the model's.
        """
        validation.check_bool("donate_state", donate_state)
        for name, value, kind in (
            ("less_bn_report", less_bn_report, less_bn_plan.LessBNReport),
            ("plain_recipe", plain_recipe, PlainRecipe),
        ):
            if value is not None:
                what = f"None or a boostax.{kind.__name__}"
                validation.check_instance(name, value, kind, what)
        self._less_bn_report = less_bn_report
        self._plain_recipe = plain_recipe
        self._sample_inputs = model_graph.input_shapes(sample_inputs)
        if seq_len_warmup is not None:  # a schedule of the batch's shape
            validation.check_instance(
                "seq_len_warmup",
                seq_len_warmup,
                (
                    seq_len_warmup_lib.SeqLenWarmup,
                    progressive_resizing_lib.ProgressiveResizing,
                ),
                "None, a boostax.seq_len_warmup(...) or a "
                "boostax.progressive_resizing(...)",
            )
        self.seq_len_warmup = seq_len_warmup
        self.donate_state = donate_state
        validation.check_optional_bool("background_compile", background_compile)
        self._warmup_given = freeze_warmup_steps is not None
        self.freeze_warmup_steps = program_schedule.warmup_steps(
            freeze_warmup_steps, freezing
        )
        check_skip_options(
            skip_nonfinite, max_consecutive_skips, raise_on_skips
        )
        self.builder = step_builder_lib.StepBuilder(
            objective,
            optimizer,
            loss_scale=loss_scale,
            freezing=freezing,
            data_parallel=data_parallel,
            skip_nonfinite=skip_nonfinite,
            precision=precision,
        )
        self.executables = executables_lib.Executables(
            self._checked_step_function,
            donate_state=donate_state,
            # Never changed by a step: the base key, the state's structure.
            given_fields=("rng", "fingerprint"),
        )
        self.config = config
        self.background_compile = (
            BACKGROUND_COMPILE
            if background_compile is None
            else background_compile
        )
        # Whether calls still hand programs to the background compiles.
        self._ahead = self.background_compile
        # Host side: skip flags not read yet, and the current run of skips.
        self._skips = skip_watch.SkipWatch(
            max_consecutive_skips, raise_on_skips
        )
        # The state this step last returned, and its freeze position: such
        # a state needs no check and no device read.
        self._last: tuple[weakref.ref, int | None] | None = None
        # With freezing or a sequence-length warm-up, its `ProgramSchedule`
        # (built on the first call).
        self._schedule: program_schedule.ProgramSchedule | None = None
        self._predict = jax.jit(objective.predict)
        # Another Linen module (hashable, compared by its fields) is a
        # static argument: one program per evaluation model.
        self._predict_with = (
            jax.jit(objective.predict, static_argnums=3)
            if isinstance(objective, objectives_lib.LinenObjective)
            else None
        )

    # -- what the step was built from (read-only views) --------------------

    @property
    def less_bn_report(self) -> less_bn_plan.LessBNReport | None:
        return self._less_bn_report

    @property
    def plain_recipe(self) -> PlainRecipe | None:
        return self._plain_recipe

    @property
    def sample_inputs(self) -> Any:
        return self._sample_inputs

    @property
    def objective(self) -> objectives_lib.Objective:
        return self.builder.objective

    @property
    def optimizer(self) -> optax.GradientTransformation:
        return self.builder.optimizer

    @property
    def loss_scale(self) -> loss_scale_lib.LossScale | None:
        return self.builder.loss_scale

    @property
    def data_parallel(self) -> data_parallel_lib.DataParallel | None:
        return self.builder.data_parallel

    @property
    def precision(self):
        """The `PrecisionPolicy` of the forward and backward pass, or
        ``None`` (float32)."""
        return self.builder.precision

    @property
    def max_consecutive_skips(self) -> int | None:
        return self._skips.limit

    @property
    def raise_on_skips(self) -> bool:
        return self._skips.raise_on_skips

    @raise_on_skips.setter
    def raise_on_skips(self, value: bool) -> None:
        validation.check_bool("raise_on_skips", value)
        self._skips.raise_on_skips = value

    @property
    def skip_nonfinite(self) -> bool:
        return self.builder.skip_nonfinite

    @property
    def freezing(self) -> freezing_lib.Freezing | None:
        plan = self.builder.current_plan
        if plan is not None:
            return plan.freezing
        given = self.builder.freezing
        return given if isinstance(given, freezing_lib.Freezing) else None

    @property
    def trace_count(self) -> int:
        return self.builder.trace_count

    @property
    def compile_seconds(self) -> dict[executables_lib.Key, float]:
        return self.executables.compile_seconds

    @property
    def compile_wait_seconds(self) -> float:
        return self.executables.compile_wait_seconds

    @property
    def pending_compiles(self) -> int:
        """How many executables are still compiling in the background."""
        return self.executables.pending_compiles

    def plan(self, params) -> StepPlan:
        """The `StepPlan` (optimizer with its data-parallel stages, freezing
        plan) the step runs for `params`."""
        return self.builder.plan(params)

    # -- state ------------------------------------------------------------

    def init(
        self,
        variables: Any,
        *,
        rng: jax.Array | None = None,
        trained: bool | None = None,
    ):
        """Builds the initial `TrainState`.

        The params become float32 master weights whatever dtype they come
        in (bfloat16 or float16 values are exact in float32): the optimizer
        state and updates are float32, and computing in half precision is
        the `precision` policy's job.

        Args:
          variables: the model's variables: the dict from ``module.init``
            for Linen, the module itself for NNX (default: the objective's
            module), the params pytree for a plain loss function.
          rng: base PRNG key for the model's random streams (dropout);
            default ``jax.random.PRNGKey(0)``.
          trained: where LessBN changes the model, whether `variables` were
            trained: ``True`` keeps their function (each removed BatchNorm
            folded into the layer before it; an FN head in place of a
            trained classifier refused), ``False`` applies LessBN's
            initialisation (removed BatchNorms dropped, zero-initialised
            residual scales, a fresh FN head). ``None`` reads it from the
            variables that the model initialises at a constant (BatchNorm
            statistics, biases, scales), each against the model's own
            initialiser, and raises where none can tell. Elsewhere nothing
            depends on it.

        Returns:
          A `TrainState` at step 0. Its arrays are never the ones given: with
          `donate_state`, the step frees the buffers of the state it is
          given, so `variables` and `rng` stay valid only because the state
          holds copies of them (made once, here).

        Raises:
          ValueError: LessBN cannot keep the weights' function (see
            `trained`), or ``trained=False`` for weights a variable shows
            were trained.
        """
        validation.check_optional_bool("trained", trained)
        # Annotated params placed by their annotations ("jit" engine).
        variables = self.builder.read_annotations(variables)
        convert = getattr(self.objective, "convert_variables", None)
        if convert is not None and variables is not None:
            # LessBN's conversion, told what the caller knows; the split
            # inside `init_state` then finds the variables converted.
            variables = convert(variables, trained=trained)
        state = self.builder.init_state(variables, rng)
        return self.own_copy(state) if self.donate_state else state

    def own_copy(self, tree):
        """`tree` with every array copied (a state the step may donate must
        not share buffers with arrays the caller keeps: on the CPU, even an
        array placed on a mesh from NumPy may share the original's)."""
        return jax.tree.map(
            lambda x: x.copy() if isinstance(x, jax.Array) else x, tree
        )

    def check_state(self, state: Any) -> None:
        """Raises if `state` is not a state of this step.

        A state built by another level, optimizer, loss-scale setting or
        model (or the variables dict before `init`) would otherwise fail
        deep inside the step. Called by the step on every state it did not
        just return (the first call, a restored checkpoint), so it costs
        nothing in a training loop.

        Raises:
          TypeError: `state` is not a `TrainState`.
          ValueError: a slot of `state` differs from what this step's `init`
            builds; the message names the slot, what was expected there
            and what was given.
        """
        self.builder.check_state(state)

    # -- running ----------------------------------------------------------

    def __call__(self, state: TrainState, batch) -> tuple[TrainState, dict]:
        """Runs one step: returns the new state and the step's metrics."""
        # The per-call path: what is checked once (a state this step did
        # not return; a batch of a structure, shapes or dtypes not seen
        # before, at trace time) is not checked again here.
        last = self._last
        # (A dead weak reference gives None, which must not pass for it.)
        if last is not None and last[0]() is state and state is not None:
            position = last[1]
        else:
            position = self._checked_position(state)
        skips = self._skips
        if skips.flags:
            skips.check()
        placed = batch
        if self.builder.data_parallel is not None:
            placed = self._batch(batch)
        if position is None:  # no freezing
            new_state, metrics = self.executables(None, state, placed)
        else:
            schedule = self._schedule or self._program_schedule(state, batch)
            if self._ahead:
                self._compile_ahead(schedule, position, state, batch, placed)
            key = schedule.program_at(position)
            new_state, metrics = self.executables(key, state, placed)
            position += 1
        self._last = (weakref.ref(new_state), position)
        skips.record(metrics)
        return new_state, metrics

    def _compile_ahead(self, schedule, position, state, batch, placed):
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

    def at_depth(self, depth: int | None):
        """``step(state, batch)`` that always trains at freeze `depth`.

        Bypasses the freezing sequence (MindSpore's ``freeze_cell`` cells
        are one such step per depth); the state's position still advances.
        """
        if self.seq_len_warmup is not None:
            raise ValueError(
                "`at_depth` bypasses the schedule, and this step's sequence "
                "length follows it (seq_len_warmup): call the step itself."
            )
        if depth is not None and self.builder.freezing is None:
            raise ValueError(
                "`depth` must be None without freezing, "
                f"{validation.got(depth)}."
            )

        def step(state, batch):
            step_checks.require_state(state)
            return self._run(depth, state, self._batch(batch))

        return step

    def _run(self, depth, state, batch):
        return self.executables(self._key(depth), state, batch)

    def _key(self, depth: int | None) -> int | None:
        """The program of freeze `depth` (depths training the same leaves
        share one)."""
        if depth is None or self.freezing is None:
            return None
        return self.freezing.canonical_depth(depth)

    def _program_schedule(self, state=None, batch=None):
        """The `ProgramSchedule`, built once (on the first call: the plan
        needs the parameters, the lengths the batch and optimizer)."""
        lengths, warmup = None, self.seq_len_warmup
        if warmup is not None:
            if state is None:
                raise ValueError(
                    "The programs of a sequence-length warm-up depend on the "
                    "batch: call after the first step or `compile_all`."
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
        self._schedule = program_schedule.ProgramSchedule(
            self.freezing, self.freeze_warmup_steps, self._warmup_given, lengths
        )
        return self._schedule

    def _checked_step_function(self, key: executables_lib.Key):
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

    def _batch(self, batch):
        if self.data_parallel is None:
            return batch
        try:
            return self.data_parallel.shard_batch(batch)
        except (TypeError, ValueError):
            # A batch the loss cannot take gets the clearer message.
            self.objective.check_batch(batch)
            raise

    def _is_own(self, state) -> bool:
        """Whether `state` is the one this step last returned (a dead weak
        reference gives None, which must not pass for it)."""
        return (
            self._last is not None
            and state is not None
            and self._last[0]() is state
        )

    def _checked_position(self, state) -> int | None:
        """`state`'s freeze position; a state this step did not just return
        is checked first (and its position read from the device)."""
        if self._is_own(state):
            assert self._last is not None  # what `_is_own` compared
            return self._last[1]
        self.check_state(state)
        step_checks.check_not_deleted(state)
        if self.freezing is None:
            return None if self.seq_len_warmup is None else int(state.step)
        return int(state.algorithms.freeze.position)

    # -- compiling and inspecting ------------------------------------------

    def program_at(self, position: int):
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
    def program_lengths(self) -> seq_len_warmup_lib.Lengths | None:
        """The sequence-length warm-up's `seq_len_warmup.Lengths`: the
        length of every step, and the cut of the batch (bound to the
        first batch: after the first call, `trace` or `compile_all`);
        ``None`` without a warm-up or before."""
        if self.seq_len_warmup is None or self._schedule is None:
            return None
        return self._schedule.lengths

    def program_shares(self) -> dict[Any, float]:
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

    def compile_all(self, state: TrainState, batch) -> dict[Any, Any]:
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
            keys = schedule.programs_from(position, warmup=True)
            keys += [
                k
                for k in schedule.shares()
                if k not in keys and not _is_warmup_program(k)
            ]
            if self.background_compile:
                self._ahead = False
                self.executables.compile_ahead(keys, state, placed)
        for key in keys:
            self.executables.executable(key, state, placed)
        compiled = self.executables.compiled()
        return {k: compiled[k] for k in keys if not _is_warmup_program(k)}

    @property
    def model(self):
        """The model being trained (after LessBN), ``None`` for a function."""
        return getattr(self.objective, "module", None)

    @property
    def step(self):
        """The jitted ``step(state, batch)``; with freezing or a
        sequence-length warm-up, `__call__`."""
        if self.builder.freezing is not None or self.seq_len_warmup is not None:
            return self
        return self.executables.jitted(None)

    def trace(
        self, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Traced:
        """Traces the step (of freeze `depth`; default the first;
        ``"masked"``: the warm-up program, ``"masked from k"``: the one of
        group k (`freezing.warmup_key`); with a sequence-length warm-up,
        a ``(depth, length)`` program, or a depth at the full length) for
        `state` and `batch` (arrays, or their shapes:
        ``jax.ShapeDtypeStruct``): ``.jaxpr``, ``.lower()``."""
        if not self._is_own(state):
            self.check_state(state)  # reads no position: shapes will do
        length = None
        if self.seq_len_warmup is not None:
            schedule = self._schedule or self._program_schedule(state, batch)
            depth, length = (
                depth
                if isinstance(depth, tuple)
                else (depth, schedule.lengths.full_length)
            )
        if depth is None and self.freezing is not None:
            depth = 0
        cut = freezing_lib.warmup_cut(depth)
        if cut is not None:
            if self.freezing is None or not self.freezing.can_mask:
                raise ValueError(
                    f"`depth` {depth!r} (a warm-up program) "
                    "needs gradient freezing with one optimizer state."
                )
            if cut >= len(self.freezing.groups):
                raise ValueError(
                    f"`depth` {depth!r}: a warm-up program from a group in "
                    f"[0, {len(self.freezing.groups)}), got group {cut}."
                )
            key = depth
        else:
            key = None if depth is None else self._key(depth)
        program: executables_lib.Key = key if length is None else (key, length)
        return self.executables.trace(program, state, self._batch(batch))

    def lower(
        self, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Lowered:
        """Lowers the step (of freeze `depth`) for `state` and `batch`
        (arrays, or their shapes: ``jax.ShapeDtypeStruct``)."""
        return self.trace(state, batch, depth).lower()

    def predict(
        self,
        state: TrainState,
        inputs,
        *,
        model=None,
        averaged: bool = True,
        flipped: bool = True,
    ):
        """The model's outputs on `inputs` in evaluation mode.

        With weight averaging (`boostax.average_params` in the optimizer,
        the config's ``weight_averaging``), the averaged params are
        evaluated (with the model state training kept: BatchNorm's running
        statistics are not averaged), unless `averaged` is False. With the
        config's ``test_time_flips`` enabled, the outputs are averaged over
        the images and their flips (`boostax.predict_with_flips`), unless
        `flipped` is False.

        Args:
          state: a state of this step.
          inputs: a batch of the model's inputs.
          model: a Linen model: another module of the same variables to
            evaluate, for a model whose evaluation mode is a field rather
            than a call argument (Flax's lm1b evaluates
            ``TransformerLM(config.replace(deterministic=True))``; for call
            arguments such as ``train=False`` the step's ``eval_kwargs``
            are used). With LessBN it is reduced as the step's model is.
            ``None``: the step's model.
          averaged: evaluate the params' moving average when the state
            holds one (default); False: the trained params themselves.
          flipped: average over the config's test-time flips when it
            enables them (default); False: `inputs` as given.

        Raises:
          TypeError: `model` with a step that is not a Linen model's (an
            NNX module switches itself to evaluation: ``predict`` calls
            its ``.eval()``).
        """
        step_checks.require_state(state)
        validation.check_bool("averaged", averaged)
        validation.check_bool("flipped", flipped)
        try:
            if averaged:
                average = weight_averaging.evaluated_params(
                    state.params, state.opt_state
                )
                if average is not None:
                    state = state.replace(params=average)
            if model is not None:
                one_view = functools.partial(
                    self._predict_other, state, model=model
                )
            else:
                one_view = functools.partial(
                    self._predict, state.params, state.model_state
                )
            flips = getattr(self.config, "test_time_flips", None)
            if flipped and flips is not None and flips.enabled:
                return test_time_flips.predict_with_flips(
                    one_view, inputs, flips.flips
                )
            return one_view(inputs)
        except RuntimeError:
            # JAX's "Array has been deleted" does not say why; the state is
            # checked only then, which costs an evaluation loop nothing.
            error = step_checks.donated_error(state)
            if error is None:
                raise
        raise error

    def _batch_entries(self) -> tuple[str, ...] | None:
        """The entries of a dict batch the model reads (`batch_keys`')."""
        keys = getattr(self.objective, "batch_keys", None)
        return None if keys is None else batches_lib.batch_entries(keys)

    def _predict_other(self, state: TrainState, inputs, model):
        if not isinstance(self.objective, objectives_lib.LinenObjective):
            raise TypeError(
                "`predict(..., model=)` takes another Linen module of the "
                "step's variables; this step trains "
                + (
                    "an NNX module, which predict switches to evaluation "
                    "with its own .eval() (Dropout deterministic, BatchNorm "
                    "on its running averages)"
                    if isinstance(self.objective, objectives_lib.NNXObjective)
                    else "a loss function: give auto_boost `predict_fn=`"
                )
                + "."
            )
        assert self._predict_with is not None  # a Linen objective's
        return self._predict_with(
            state.params, state.model_state, inputs, model
        )

    def variables(self, state: TrainState):
        """The trained model's variables (Linen dict, NNX module, params)."""
        step_checks.require_state(state)
        # A donated state's arrays would fail only where they are read.
        step_checks.check_not_deleted(state)
        return self.objective.merge(state.params, state.model_state)


def _is_warmup_program(key: executables_lib.Key) -> bool:
    """Whether `key` is the freezing warm-up's program (alone or with a
    sequence length)."""
    freeze_key = key[0] if isinstance(key, tuple) else key
    return freezing_lib.warmup_cut(freeze_key) is not None
