# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainStep`: a train step's builder and executables, run.

`boostax.make_train_step` and `boostax.auto_boost` return a `TrainStep`.
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
from typing import Any, NamedTuple

import jax
import optax

from boostax._src import data_parallel as data_parallel_lib
from boostax._src import executables as executables_lib
from boostax._src import freezing as freezing_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import objectives as objectives_lib
from boostax._src import program_schedule, skip_watch, step_checks, validation
from boostax._src import step_builder as step_builder_lib
from boostax._src.step_builder import StepPlan, check_skip_options
from boostax._src.train_state import AlgorithmStates, TrainState

PyTree = Any

__all__ = (
    "AlgorithmStates",
    "PlainRecipe",
    "TrainState",
    "TrainStep",
    "make_train_step",
)

# Whether a `TrainStep` with gradient freezing compiles its freeze depths in
# background threads by default (``BOOSTAX_BACKGROUND_COMPILE=0`` turns the
# default off, e.g. in a test suite that calls many steps only a few times).
BACKGROUND_COMPILE = os.environ.get("BOOSTAX_BACKGROUND_COMPILE", "1") != "0"


class PlainRecipe(NamedTuple):
    """How to build the plain Optax step a boosted step is compared with.

    Attributes:
      kwargs: `make_train_step`'s arguments: the original model (before
        LessBN), the optimizer the algorithms wrap, the loss.
      mesh: the boosted step's mesh (the plain step averages gradients
        over it), or ``None``.
    """

    kwargs: dict[str, Any]
    mesh: Any = None


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
    positions run their depth's own program (`program_at`). The depths'
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
        warm-up program (``"masked"``) before each depth runs its own;
        default `program_schedule.FREEZE_WARMUP_STEPS` (0: none).
      compile_seconds: ``{depth: seconds}`` spent tracing and compiling
        each executable (the key ``None`` without freezing).
      compile_wait_seconds: how long calls have waited for compilation in
        all: compiling on the spot, or waiting for a background compile.
      less_bn_report: with LessBN, the `LessBNReport` of the model.
      plain_recipe: a `PlainRecipe` for the plain Optax step of the same
        model and optimizer (set by `auto_boost`; used by `cost_report`).
      sample_inputs: the shapes (``jax.ShapeDtypeStruct``) of
        `auto_boost`'s `sample_inputs`, or ``None``: with them,
        `from_flax_train_state` checks the path and shape of every
        variable against the model's.
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
    ):
        validation.check_bool("donate_state", donate_state)
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
            given_fields=("rng",),  # the base key: never changed by a step
        )
        self.config = config
        self.background_compile = (
            BACKGROUND_COMPILE
            if background_compile is None
            else background_compile
        )
        self.less_bn_report = None
        self.plain_recipe: PlainRecipe | None = None
        self.sample_inputs = None
        # Host side: skip flags not read yet, and the current run of skips.
        self._skips = skip_watch.SkipWatch(
            max_consecutive_skips, raise_on_skips
        )
        # The state this step last returned, and its freeze position: such
        # a state needs no check and no device read.
        self._last: tuple[weakref.ref, int | None] | None = None
        # With freezing, its `ProgramSchedule` (built on the first call).
        self._schedule: program_schedule.ProgramSchedule | None = None
        self._predict = jax.jit(objective.predict)

    # -- what the step was built from (read-only views) --------------------

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
    def compile_seconds(self) -> dict[int | None, float]:
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

    def init(self, variables: Any, *, rng: jax.Array | None = None):
        """Builds the initial `TrainState`.

        Args:
          variables: the model's variables: the dict from ``module.init``
            for Linen, the module itself for NNX (default: the objective's
            module), the params pytree for a plain loss function.
          rng: base PRNG key for the model's random streams (dropout);
            default ``jax.random.PRNGKey(0)``.

        Returns:
          A `TrainState` at step 0. Its arrays are never the ones given: with
          `donate_state`, the step frees the buffers of the state it is
          given, so `variables` and `rng` stay valid only because the state
          holds copies of them (made once, here).
        """
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
            if (
                self.background_compile
                and not self.executables.started_background
            ):
                self._compile_ahead(position, state, batch, placed)
            schedule = self._schedule or self._program_schedule()
            key = schedule.program_at(position)
            new_state, metrics = self.executables(key, state, placed)
            position += 1
        self._last = (weakref.ref(new_state), position)
        skips.record(metrics)
        return new_state, metrics

    def _compile_ahead(self, position, state, batch, placed) -> None:
        """Starts compiling the depths' own programs in the background,
        once the schedule says it is time (`ProgramSchedule.keys_to_compile`).
        """
        schedule = self._schedule or self._program_schedule()
        masked = self.executables.compile_seconds.get(freezing_lib.MASKED)
        keys = schedule.keys_to_compile(position, masked)
        if keys is None:
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
        return None if depth is None else self.freezing.canonical_depth(depth)

    def _program_schedule(self) -> program_schedule.ProgramSchedule:
        """The freezing's `ProgramSchedule`, built once (on the first call
        with freezing: the plan needs the parameters)."""
        self._schedule = program_schedule.ProgramSchedule(
            self.freezing, self.freeze_warmup_steps, self._warmup_given
        )
        return self._schedule

    def _checked_step_function(self, key: int | None):
        """The builder's step of `key`, checking the batch when traced.

        Checks that run when the step is traced run once per structure,
        shapes and dtypes of the arguments (JAX traces again for new ones),
        before the model is traced, and cost nothing per call.
        """
        step = self.builder.step_function(key)
        check_batch = self.objective.check_batch

        @functools.wraps(step)
        def checked_step(state, batch):
            check_batch(batch)  # shapes only
            return step(state, batch)

        return checked_step

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
            return self._last[1]
        self.check_state(state)
        step_checks.check_not_deleted(state)
        if self.freezing is None:
            return None
        return int(state.algorithms.freeze.position)

    # -- compiling and inspecting ------------------------------------------

    def program_at(self, position: int) -> int | str | None:
        """The program train step `position` runs: its freeze depth's own
        (`Freezing.canonical_depth`), ``"masked"`` (the warm-up program,
        before `freeze_warmup_steps`), ``None`` without freezing. Call
        after `init`."""
        if self.freezing is None:
            return None
        schedule = self._schedule or self._program_schedule()
        return schedule.program_at(position)

    def program_shares(self) -> dict[int | str | None, float]:
        """``{program: fraction of the steps it runs}`` over the planned run
        (one pass of the freezing sequence; ``{None: 1.0}`` without
        freezing): the warm-up program (``"masked"``) for the first
        `freeze_warmup_steps`, then each depth's own (`program_at`). The
        weights of `cost_report`. Call after `init` (the plan needs the
        parameters)."""
        if self.freezing is None:
            return {None: 1.0}
        return (self._schedule or self._program_schedule()).shares()

    def compile_all(self, state: TrainState, batch) -> dict[int | None, Any]:
        """Compiles the step of every depth ahead of time.

        Every program of the freezing sequence (in the order the run from
        `state`'s position needs them) and, inside the warm-up, the warm-up
        program; with `background_compile`, in parallel threads.

        Returns:
          ``{depth: program}`` of the depths' own programs (the key
          ``None`` without freezing), each an `executables.Program`: called
          like the step, it returns the state and metrics the step does
          (its compiled program, ``.compiled``, leaves out what the host
          puts back: the base key, the depth); later calls use them. The
          warm-up program is ``executables.compiled()[freezing.MASKED]``.
        """
        position = self._checked_position(state)
        batch = self._batch(batch)
        freezing = self.freezing
        if freezing is None:
            keys = [None]
        else:
            keys = executables_lib.keys_by_first_use(freezing, position)
            keys += [
                k for k in executables_lib.key_shares(freezing) if k not in keys
            ]
            if self.program_at(position) == freezing_lib.MASKED:
                keys = [freezing_lib.MASKED, *keys]
            if self.background_compile:
                self.executables.compile_ahead(keys, state, batch)
        for key in keys:
            self.executables.executable(key, state, batch)
        compiled = self.executables.compiled()
        return {k: compiled[k] for k in keys if k != freezing_lib.MASKED}

    @property
    def model(self):
        """The model being trained (after LessBN), ``None`` for a function."""
        return getattr(self.objective, "module", None)

    @property
    def step(self):
        """The jitted ``step(state, batch)``; with freezing, `__call__`."""
        if self.builder.freezing is not None:
            return self
        return self.executables.jitted(None)

    def trace(
        self, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Traced:
        """Traces the step (of freeze `depth`; default the first;
        ``"masked"``: the warm-up program) for `state` and `batch` (arrays,
        or their shapes: ``jax.ShapeDtypeStruct``): ``.jaxpr``,
        ``.lower()``."""
        if not self._is_own(state):
            self.check_state(state)  # reads no position: shapes will do
        if depth is None and self.freezing is not None:
            depth = 0
        if depth == freezing_lib.MASKED:
            if self.freezing is None or not self.freezing.can_mask:
                raise ValueError(
                    f"`depth` {freezing_lib.MASKED!r} (the warm-up program) "
                    "needs gradient freezing with one optimizer state."
                )
            key = depth
        else:
            key = None if depth is None else self._key(depth)
        return self.executables.trace(key, state, self._batch(batch))

    def lower(
        self, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Lowered:
        """Lowers the step (of freeze `depth`) for `state` and `batch`
        (arrays, or their shapes: ``jax.ShapeDtypeStruct``)."""
        return self.trace(state, batch, depth).lower()

    def predict(self, state: TrainState, inputs):
        """The model's outputs on `inputs` in evaluation mode."""
        step_checks.require_state(state)
        return self._predict(state.params, state.model_state, inputs)

    def variables(self, state: TrainState):
        """The trained model's variables (Linen dict, NNX module, params)."""
        step_checks.require_state(state)
        return self.objective.merge(state.params, state.model_state)


def make_train_step(
    optimizer: optax.GradientTransformation,
    *,
    model=None,
    loss=None,
    loss_fn=None,
    has_aux: bool = False,
    predict_fn=None,
    data_parallel: data_parallel_lib.DataParallel | None = None,
    donate_state: bool = False,
    loss_scale: loss_scale_lib.LossScale | None = None,
    precision: Any = None,
    skip_nonfinite: bool = False,
    max_consecutive_skips: int | None = 100,
    raise_on_skips: bool = False,
    batch_keys: tuple[str, str] | None = None,
    rng_collections: Any = None,
    train_kwargs: Any = None,
    eval_kwargs: Any = None,
    cast_batch: Any = None,
) -> TrainStep:
    """Builds a jitted train step from a model or loss and an optimizer.

    Args:
      optimizer: any Optax optimizer. Optimizers that take extra arguments
        (``optax.GradientTransformationExtraArgs``) also receive ``value``,
        ``grad`` and ``value_fn`` (the loss at other params on the same
        batch), so line-search optimizers such as ``optax.lbfgs`` work.
      model: a Flax Linen or NNX module; batches are ``(inputs, targets)``.
      loss: with `model`, ``loss(outputs, targets) -> scalar``.
      loss_fn: instead of `model`/`loss`, ``loss_fn(params, batch)``.
      has_aux: whether the loss returns ``(scalar, metrics_dict)``.
      predict_fn: with `loss_fn`, ``predict_fn(params, inputs)``.
      data_parallel: a `DataParallel` plan to run the step over a device
        mesh (gradients averaged or AdaSum'd); ``None``: one device.
      donate_state: donate the state a call is given to the step: XLA
        writes the new state into its buffers (half the state's memory,
        and less work per call) and the state given is deleted. Default
        ``False``, like ``jax.jit``: every state stays valid, and the device
        holds two states while a step runs (see `TrainStep`). The variables
        given to `init` (and to `from_flax_train_state`) stay valid: the
        state holds copies of them.
      loss_scale: a `StaticLossScale`, `DynamicLossScale` or
        `GroupLossScale`: the loss is scaled, the gradients unscaled, and a
        step whose gradients are not finite is skipped (`metrics` gets
        ``overflow`` and ``loss_scale``).
      precision: mixed precision: a `PrecisionPolicy`, MindSpore's amp level
        names ``"O0"`` (float32), ``"O2"`` (float16, normalisation
        layers and the loss in float32, a dynamic loss scale) or
        ``"O3"`` (all parameters cast), or ``"bfloat16"`` / ``"float16"``
        (O2 in that dtype; no loss scale with bfloat16). Parameters,
        optimizer and model state stay float32; `TrainStep.predict` runs in
        float32. ``None``: float32. A float16 policy without a loss scale
        of its own (``loss_scale=None``) needs `loss_scale`: building the
        step raises otherwise. With `loss_fn`, the params are cast and the
        batch is passed as given (see `cast_batch`).
      skip_nonfinite: skip (leave params, optimizer and model state exactly
        as they were) a step whose gradients are not finite; `metrics` gets
        ``overflow``.
      max_consecutive_skips: after this many skipped steps in a row, warn
        (``RuntimeWarning``); ``None``: never.
      raise_on_skips: raise ``FloatingPointError`` instead of warning.
      batch_keys: with `model`, ``(inputs key, targets key)`` of dict
        batches (e.g. ``("image", "label")``).
      rng_collections: with a Linen `model`, the RNG streams it draws from
        in training; default ``("dropout",)``.
      train_kwargs, eval_kwargs: with `model`, keyword arguments of its call
        in training and in `TrainStep.predict`.
      cast_batch: with `loss_fn` and a half-precision `precision`, the parts
        of the batch that are inputs, cast to the compute dtype: a pytree of
        bools, a prefix of the batch (``(True, False)`` for an ``(inputs,
        targets)`` pair), or a function of the batch returning one. Other
        leaves (targets) are never cast. ``None``: nothing is cast (JAX then
        promotes the float16 params and float32 inputs to float32).

    Returns:
      A `TrainStep`: ``state = ts.init(variables)`` then
      ``state, metrics = ts(state, batch)``.

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> loss_fn = lambda w, batch: jnp.mean((batch[0] @ w - batch[1]) ** 2)
      >>> ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=loss_fn)
      >>> state = ts.init(jnp.zeros(3))
      >>> x = jnp.eye(3); y = jnp.array([1.0, 2.0, 3.0])
      >>> for _ in range(50):
      ...   state, metrics = ts(state, (x, y))
      >>> bool(metrics["loss"] < 1e-2), ts.trace_count
      (True, 1)
    """
    objective = objectives_lib.make_objective(
        model=model,
        loss=loss,
        loss_fn=loss_fn,
        has_aux=has_aux,
        predict_fn=predict_fn,
        batch_keys=batch_keys,
        rng_collections=rng_collections,
        train_kwargs=train_kwargs,
        eval_kwargs=eval_kwargs,
        cast_batch=cast_batch,
    )
    return TrainStep(
        objective,
        optimizer,
        data_parallel=data_parallel,
        donate_state=donate_state,
        loss_scale=loss_scale,
        precision=precision,
        skip_nonfinite=skip_nonfinite,
        max_consecutive_skips=max_consecutive_skips,
        raise_on_skips=raise_on_skips,
    )
