# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainStep`: a train step's builder and executables, run.

`boostax.make_train_step` (`step/factory.py`) and `boostax.auto_boost`
return a `TrainStep`.
What one step computes is built by a `StepBuilder` (`step/builder.py`);
its compiled programs, one per freeze depth, are an `Executables`
(`executables.py`). A `TrainStep` picks the program of each call from the
freezing sequence, checks the states it did not return, and watches for
runs of skipped steps. What names, inspects and compiles its programs is
its base `StepPrograms` (`step/programs.py`); what its states evaluate to,
an `Evaluation` (`step/evaluation.py`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import jax
import optax

from boostax._src import loss_scale as loss_scale_lib
from boostax._src import model_graph, validation
from boostax._src.distributed import data_parallel as data_parallel_lib
from boostax._src.freezing import plan as freezing_lib
from boostax._src.less_bn import plan as less_bn_plan
from boostax._src.methods import (
    progressive_resizing as progressive_resizing_lib,
)
from boostax._src.methods import seq_len_warmup as seq_len_warmup_lib
from boostax._src.step import batches as batches_lib
from boostax._src.step import builder as step_builder_lib
from boostax._src.step import checks as step_checks
from boostax._src.step import evaluation as step_evaluation
from boostax._src.step import executables as executables_lib
from boostax._src.step import objectives as objectives_lib
from boostax._src.step import options as step_options_lib
from boostax._src.step import program_schedule, skip_watch
from boostax._src.step import programs as step_programs
from boostax._src.step.objective_options import PlainRecipe
from boostax._src.step.plan import StepPlan
from boostax._src.step.train_state import AlgorithmStates, TrainState

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


class TrainStep(step_programs.StepPrograms):
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
    each differentiates and updates only that depth's trainable suffix
    (``metrics["frozen_groups"]``: the depth). The host picks the program
    of each call from the precomputed sequence by the state's position
    (``state.algorithms.freeze``, mirrored on the host, so dispatching never
    waits for the device; a state the step did not just return, e.g. one
    restored from a checkpoint, is read once). The first
    `freeze_warmup_steps` positions run warm-up programs (``"masked"``:
    every gradient computed, the depth's frozen ones zeroed, its frozen
    params and optimizer slots kept bit for bit; after a leading run of one
    depth, that depth's own program and ``"masked from k"`` segments),
    while the depths' own programs compile in background threads in the
    order the sequence needs them; a step whose program is not ready waits
    for exactly that one. The program of a step depends on its position
    alone (`program_at`; the schedule: `program_schedule`), so a run gives
    the bits of `compile_all` on a fast machine or a slow one, and a
    resumed run continues bit for bit. A call with other shapes (a smaller
    last batch) goes through ``jax.jit``, which compiles for them. A
    process that ends while depths compile cancels the queued compiles and
    waits for the running ones, then exits normally.

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
        precision: Any = None,
        seq_len_warmup: seq_len_warmup_lib.SeqLenWarmup
        | progressive_resizing_lib.ProgressiveResizing
        | None = None,
        options: step_options_lib.StepOptions | Mapping[str, Any] | None = None,
        less_bn_report: less_bn_plan.LessBNReport | None = None,
        plain_recipe: PlainRecipe | None = None,
        sample_inputs: Any = None,
        **old_options: Any,
    ):
        """Builds the step (what it runs: the class docstring).

        Args:
          objective: the `Objective` to train (`make_objective`, which
            takes how the model is called).
          optimizer, loss_scale, data_parallel, precision, seq_len_warmup:
            as `make_train_step`'s.
          config: the `BoostConfig` it was built from, or ``None``.
          freezing: a `Freezing` plan, a function of the params returning
            one, or ``None``.
          options: a `StepOptions` (or a dict of its fields): how the step
            runs (``donate_state``, the skipped-step settings,
            ``background_compile``, ``freeze_warmup_steps``). Its other
            fields are the objective's or `auto_boost`'s: refused here.
          less_bn_report: with LessBN, the model's `LessBNReport`.
          plain_recipe: a `PlainRecipe` for the plain Optax step of the
            same model and optimizer: `cost_report`'s default baseline.
          sample_inputs: one batch of model inputs (arrays or shapes; the
            shapes are kept): `from_flax_train_state` then checks every
            variable's path and shape against the model's.
          **old_options: `StepOptions`' running fields as keyword
            arguments, as before it existed: read for one release, with a
            ``DeprecationWarning``.
        """
        options = step_options_lib.with_deprecated(
            options, old_options, "TrainStep"
        )
        options.check_for_train_step()
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
        if options.background_compile and (
            freezing is None and seq_len_warmup is None
        ):
            # Accepted, it would change nothing: refused, not ignored.
            raise ValueError(
                "`options.background_compile=True` compiles ahead the "
                "programs of gradient freezing's depths or of a warm-up's "
                "lengths or sizes; this step has one program (no "
                "grad_freeze, seq_len_warmup or progressive_resizing): "
                "drop the setting."
            )
        self.donate_state = options.donate_state
        self._warmup_given = options.freeze_warmup_steps is not None
        self.freeze_warmup_steps = program_schedule.warmup_steps(
            options.freeze_warmup_steps, freezing
        )
        self.builder = step_builder_lib.StepBuilder(
            objective,
            optimizer,
            loss_scale=loss_scale,
            freezing=freezing,
            data_parallel=data_parallel,
            skip_nonfinite=options.skip_nonfinite,
            precision=precision,
        )
        self.executables = executables_lib.Executables(
            self._checked_step_function,
            donate_state=options.donate_state,
            # Never changed by a step: the base key, the state's structure.
            given_fields=("rng", "fingerprint"),
        )
        self.config = config
        self.background_compile = (
            BACKGROUND_COMPILE
            if options.background_compile is None
            else options.background_compile
        )
        # Whether calls still hand programs to the background compiles.
        self._ahead = self.background_compile
        # Host side: skip flags not read yet, and the current run of skips.
        self._skips = skip_watch.SkipWatch(
            options.max_consecutive_skips, options.raise_on_skips
        )
        # The state this step last returned, and its freeze position: such
        # a state needs no check and no device read.
        self._last: tuple[weakref.ref, int | None] | None = None
        self._evaluation = step_evaluation.Evaluation(objective)

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
        key = program_schedule.depth_program(depth, self.freezing)
        return self.executables(key, state, batch)

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
        the images, their flips and translations
        (`boostax.predict_with_flips`), unless `flipped` is False.

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
          flipped: average over the config's test-time flips (and
            translations) when it enables them (default); False: `inputs`
            as given.

        Raises:
          TypeError: `model` with a step that is not a Linen model's (an
            NNX module switches itself to evaluation: ``predict`` calls
            its ``.eval()``).
        """
        validation.check_bool("flipped", flipped)
        views = getattr(self.config, "test_time_flips", None)
        if not (flipped and views and views.enabled):
            views = None
        return self._evaluation.predict(
            state,
            inputs,
            model=model,
            averaged=averaged,
            flips=views.flips if views else (),
            translate=views.translate if views else 0,
        )

    def _batch_entries(self) -> tuple[str, ...] | None:
        """The entries of a dict batch the model reads (`batch_keys`')."""
        keys = getattr(self.objective, "batch_keys", None)
        return None if keys is None else batches_lib.batch_entries(keys)

    def variables(self, state: TrainState):
        """The trained model's variables (Linen dict, NNX module, params)."""
        return self._evaluation.variables(state)
