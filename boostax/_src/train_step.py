# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`TrainState` and the builder of the jitted train step.

One step is::

    rng            = fold_in(state.rng, state.step)
    loss, grads    = value_and_grad(loss_fn)(params, model_state, batch, rng)
    updates, opt   = optimizer.update(grads, opt_state, params, ...)
    params         = params + updates

traced and compiled once. Everything that changes during training lives in
the `TrainState` pytree, so a state saved at step n and restored continues
exactly as the uninterrupted run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from boostax._src import accumulation as accumulation_lib
from boostax._src import adasum as adasum_lib
from boostax._src import data_parallel as data_parallel_lib
from boostax._src import dim_reduce as dim_reduce_lib
from boostax._src import freezing as freezing_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import objectives as objectives_lib
from boostax._src import step_checks, user_warnings, validation

PyTree = Any

# Whether a `TrainStep` with gradient freezing compiles its freeze depths in
# background threads by default (``BOOSTAX_BACKGROUND_COMPILE=0`` turns the
# default off, e.g. in a test suite that calls many steps only a few times).
BACKGROUND_COMPILE = os.environ.get("BOOSTAX_BACKGROUND_COMPILE", "1") != "0"

# The most steps whose skip flags the host holds before reading them: a
# run of skipped steps is noticed at most this many steps late.
SKIP_CHECK_WINDOW = 100

# Objectives whose batches are ``(inputs, targets)`` pairs (their batch
# sizes are checked before tracing).
_MODEL_OBJECTIVES = (objectives_lib.LinenObjective, objectives_lib.NNXObjective)


class AlgorithmStates(NamedTuple):
    """One slot for each algorithm whose state lives outside the optimizer.

    A slot is ``None`` while its algorithm is off. Algorithms that are Optax
    transforms (accumulation, AdaSum, DimReduce, gradient centralization)
    keep their state in ``TrainState.opt_state`` instead.

    Attributes:
      loss_scale: loss-scaling state (static, dynamic or per group).
      freeze: position in the gradient-freezing sequence.
    """

    loss_scale: PyTree = None
    freeze: PyTree = None


class TrainState(flax.struct.PyTreeNode):
    """Everything a train step reads and writes, as one pytree.

    Only arrays: it goes through ``jax.jit``, ``jax.tree.map`` and
    checkpointing (Orbax) unchanged. Use ``state.replace(...)`` to change a
    field.

    Attributes:
      step: number of train steps taken (calls of the step), ``int32``
        scalar; with gradient accumulation over k micro-steps these are
        micro-steps, and ``step // k`` is the update (the optimizer's own
        count, and its schedules, count updates).
      params: the trainable parameters.
      opt_state: the optimizer's state.
      model_state: non-trainable model variables (BatchNorm statistics,
        NNX RNG counters); ``None`` for a plain loss function.
      rng: the base PRNG key; step ``i`` uses ``fold_in(rng, i)``.
      algorithms: the `AlgorithmStates` of the boost algorithms.
    """

    step: jax.Array
    params: PyTree
    opt_state: optax.OptState
    model_state: PyTree
    rng: jax.Array
    algorithms: AlgorithmStates = AlgorithmStates()


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


def check_optimizer(optimizer) -> None:
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            "`optimizer` must be an optax.GradientTransformation (e.g. "
            f"optax.sgd(0.1)), got {type(optimizer).__name__}."
        )


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
    `SKIP_CHECK_WINDOW` steps, never the step just dispatched, so the check
    does not stall the device; it notices a run that late.

    With gradient freezing, there is one compiled step per freeze depth:
    each differentiates and updates only that depth's trainable suffix. The
    host picks the step from the precomputed sequence; the position in the
    sequence is kept in ``state.algorithms.freeze`` and mirrored on the host,
    so dispatching never waits for the device (a state the step did not
    just return, e.g. one restored from a checkpoint, is read once).
    `metrics` then also holds ``"frozen_groups"``, the depth.

    Every step is compiled ahead of time for the shapes of the first call.
    With freezing, the first call also starts compiling the other depths in
    background threads (a pool sized to the host's cores), in the order the
    sequence first needs them, while training runs; a step whose depth is
    not ready waits for exactly that executable. The results are those of
    `compile_all`. A call with other shapes (say, a smaller last batch)
    goes through ``jax.jit``, which compiles for them.

    With a `DataParallel` plan, the step runs under ``jax.shard_map`` over
    its mesh: `init` places the state on the mesh, each call splits the
    batch (this process's share of it) over the devices, and the metrics
    are averaged over them.

    Attributes:
      objective: the `Objective` being trained.
      optimizer: the Optax optimizer.
      config: the `BoostConfig` it was built from (``None`` when built by
        `make_train_step`).
      freezing: the `Freezing` plan, or ``None``.
      data_parallel: the `DataParallel` plan, or ``None``.
      trace_count: how many times a step has been traced (once per freeze
        depth used, for fixed shapes).
      background_compile: whether the first call with freezing starts
        compiling every depth of the sequence in background threads.
      compile_seconds: ``{depth: seconds}`` spent tracing and compiling
        each executable (the key ``None`` without freezing).
      compile_wait_seconds: how long calls have waited for compilation in
        all: compiling on the spot, or waiting for a background compile.
      less_bn_report: with LessBN, the `LessBNReport` of the model.
      plain_recipe: a `PlainRecipe` for the plain Optax step of the same
        model and optimizer (set by `auto_boost`; used by `cost_report`).
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
        skip_nonfinite: bool = False,
        max_consecutive_skips: int | None = 100,
        raise_on_skips: bool = False,
    ):
        check_optimizer(optimizer)
        loss_scale_lib.check_loss_scale(loss_scale)
        validation.check_bool("donate_state", donate_state)
        validation.check_optional_bool("background_compile", background_compile)
        check_skip_options(
            skip_nonfinite, max_consecutive_skips, raise_on_skips
        )
        self.skip_nonfinite = skip_nonfinite
        self.max_consecutive_skips = max_consecutive_skips
        self.raise_on_skips = raise_on_skips
        # Host side: skip flags not read yet, and the current run of skips.
        self._skip_flags: list[jax.Array] = []
        self._skip_run = 0
        if data_parallel is not None and not isinstance(
            data_parallel, data_parallel_lib.DataParallel
        ):
            raise TypeError(
                "`data_parallel` must be a boostax.DataParallel, got "
                f"{type(data_parallel).__name__}."
            )
        self.data_parallel = data_parallel
        self.objective = objective
        self.optimizer = optimizer
        self.config = config
        self.loss_scale = loss_scale
        self.trace_count = 0
        self._freezing_for = freezing
        self.freezing = (
            freezing if isinstance(freezing, freezing_lib.Freezing) else None
        )
        self._donate = (0,) if donate_state else ()
        self._steps: dict[int | None, Any] = {}
        self._compiled: dict[int | None, Any] = {}
        self._pending: dict[int | None, Future] = {}
        self._compiler: ThreadPoolExecutor | None = None
        # Tracing runs one at a time (it holds the GIL anyway); XLA's
        # compilation, which releases it, runs in parallel.
        self._trace_lock = threading.Lock()
        self._count_lock = threading.Lock()
        # The state this step last returned (or `init` built), and its
        # freeze position: such a state needs no check and no device read.
        self._last: tuple[weakref.ref, int | None] | None = None
        self._prepared = False
        # Tree structures of the fields of the state `init` built.
        self._template: dict[str, Any] | None = None
        self._predict = jax.jit(objective.predict)
        self.background_compile = (
            BACKGROUND_COMPILE
            if background_compile is None
            else background_compile
        )
        self.compile_seconds: dict[int | None, float] = {}
        self.compile_wait_seconds = 0.0
        self.less_bn_report = None
        self.plain_recipe: PlainRecipe | None = None

    def init(self, variables: Any, *, rng: jax.Array | None = None):
        """Builds the initial `TrainState`.

        Args:
          variables: the model's variables: the dict from ``module.init``
            for Linen, the module itself for NNX (default: the objective's
            module), the params pytree for a plain loss function.
          rng: base PRNG key for the model's random streams (dropout);
            default ``jax.random.PRNGKey(0)``.

        Returns:
          A `TrainState` at step 0.
        """
        params, model_state = self.objective.split(variables)
        self._prepare(params)
        state = TrainState(
            step=jnp.zeros([], jnp.int32),
            params=params,
            opt_state=self._init_opt_state(params),
            model_state=model_state,
            rng=step_checks.check_rng(rng),
            algorithms=self._init_algorithms(),
        )
        self._template = {
            name: jax.tree.structure(getattr(state, name))
            for name in ("params", "model_state")
        }
        if self.data_parallel is not None:
            state = self.data_parallel.place_state(state)
        self._last = (weakref.ref(state), 0 if self.freezing else None)
        return state

    def _prepare(self, params) -> None:
        """Builds, once, what depends on the parameters: the data-parallel
        optimizer (AdaSum added where the plan needs it), the freezing plan
        and the loss-scale groups."""
        if self._prepared:
            return
        if self.data_parallel is not None:
            self.optimizer = self.data_parallel.optimizer(
                self.optimizer, params
            )
        if isinstance(self.loss_scale, loss_scale_lib.GroupLossScale):
            self.loss_scale.labels(params)  # validate the groups now
        if self._freezing_for is not None and self.freezing is None:
            self.freezing = self._freezing_for(params)
        if self.freezing is not None:
            step_checks.check_freezing_accumulation(
                self.freezing,
                self.optimizer,
                jax.eval_shape(self._init_opt_state, params),
            )
        self._prepared = True

    def _init_opt_state(self, params):
        if self.freezing is not None:
            return self.freezing.init_opt_state(self.optimizer, params)
        return self.optimizer.init(params)

    def _init_algorithms(self) -> AlgorithmStates:
        algorithms = AlgorithmStates()
        if self.loss_scale is not None:
            algorithms = algorithms._replace(loss_scale=self.loss_scale.init())
        if self.freezing is not None:
            algorithms = algorithms._replace(
                freeze=freezing_lib.FreezeState(jnp.zeros([], jnp.int32))
            )
        return algorithms

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
        if not isinstance(state, TrainState):
            raise TypeError(step_checks.not_a_state_message(state))
        self._prepare(state.params)
        expected = {
            "opt_state": jax.eval_shape(self._init_opt_state, state.params),
            "algorithms.loss_scale": jax.eval_shape(
                lambda: self._init_algorithms().loss_scale
            ),
            "algorithms.freeze": jax.eval_shape(
                lambda: self._init_algorithms().freeze
            ),
        }
        step_checks.check_slots(state, expected, self._template)

    def _split(self, params, depth):
        """``(mask, trainable, frozen)`` of freeze `depth` (None: no mask)."""
        if depth is None or self.freezing.trains_everything(depth, params):
            return None, params, None
        mask = self.freezing.mask(params, depth)
        trainable = freezing_lib.mask_tree(params, mask)
        # Frozen leaves are constants: nothing differentiates them.
        frozen = jax.lax.stop_gradient(
            freezing_lib.mask_tree(params, jax.tree.map(lambda m: not m, mask))
        )
        return mask, trainable, frozen

    def _train_step(self, state: TrainState, batch, *, depth=None):
        with self._count_lock:  # background threads trace too
            self.trace_count += 1
        dp = self.data_parallel
        rng = jax.random.fold_in(state.rng, state.step)
        if dp is not None:  # each device its own dropout masks
            rng = jax.random.fold_in(rng, dp.device_index())
        mask, trainable, frozen = self._split(state.params, depth)
        scaler, scale_state = self.loss_scale, state.algorithms.loss_scale

        def loss_fn(params):
            if frozen is not None:
                params = freezing_lib.merge_trees(params, frozen)
            with (
                scaler.context(scale_state) if scaler else _no_context(),
                objectives_lib.data_axes(dp.axes if dp else ()),
            ):
                value, (model_state, metrics) = self.objective.loss_fn(
                    params, state.model_state, batch, rng
                )
            scaled = (
                value if scaler is None else scaler.scale(value, scale_state)
            )
            return scaled, (value, model_state, metrics)

        (_, (loss, model_state, metrics)), grads = jax.value_and_grad(
            loss_fn, has_aux=True
        )(trainable)
        _check_metric_names(metrics)
        if dp is not None:
            grads = dp.reduce_gradients(grads)
            loss, model_state, metrics = dp.mean((loss, model_state, metrics))
        algorithms = state.algorithms
        finite = None
        if scaler is not None:
            grads = scaler.unscale(grads, scale_state, state.params)
            new_scale, finite = scaler.adjust(scale_state, grads, state.params)
            if dp is not None:
                # Gradients may still differ per device (AdaSum of updates):
                # an overflow anywhere backs off and skips everywhere.
                new_scale, finite = dp.minimum((new_scale, finite))
            algorithms = algorithms._replace(loss_scale=new_scale)
            metrics = {
                **metrics,
                "overflow": ~finite,
                "loss_scale": scale_state.loss_scale,
            }
        elif self.skip_nonfinite:
            # Loss scaling's skip with a scale of one: the same cond below
            # keeps params, optimizer and model state bit for bit.
            finite = loss_scale_lib.all_finite(grads)
            if dp is not None:
                finite = dp.minimum(finite)
            metrics = {**metrics, "overflow": ~finite}

        # Line searches (optax.lbfgs, DimReduce) re-evaluate the loss at
        # trial params on the same batch; unused, this closure costs nothing.
        def value_fn(p):
            value = loss_fn(p)[1][0]
            return value if dp is None else dp.mean(value)

        extra = dict(value=loss, grad=grads, value_fn=value_fn)

        def apply(extra):
            if mask is None:
                updates, opt_state = _update(
                    self.optimizer, grads, state.opt_state, trainable, extra
                )
                return (
                    optax.apply_updates(state.params, updates),
                    opt_state,
                    model_state,
                )
            updates, opt_state = self.freezing.update(
                self.optimizer,
                depth,
                grads,
                state.opt_state,
                trainable,
                mask,
                **extra,
            )
            params = freezing_lib.merge_trees(
                optax.apply_updates(trainable, updates), state.params
            )
            return params, opt_state, model_state

        def keep():
            return state.params, state.opt_state, state.model_state

        if finite is None:
            params, opt_state, model_state = apply(extra)
        elif isinstance(
            self._own_state(state.opt_state, depth),
            accumulation_lib.GradientAccumulationState,
        ):
            # The accumulation counts a skipped micro-step (its cycle then
            # makes no update), so train step i stays micro-step i mod k of
            # update i // k: the freeze sequence's depth of every micro-step
            # of an update is the same. Only params and model state are kept.
            params, opt_state, model_state = apply(
                {**extra, "skipped": ~finite}
            )
            (params, _, model_state) = jax.lax.cond(
                finite, lambda: (params, opt_state, model_state), keep
            )
        else:
            # An overflowing step leaves params, optimizer state and model
            # state exactly as they were; only the optimizer sits in the cond.
            params, opt_state, model_state = jax.lax.cond(
                finite, lambda: apply(extra), keep
            )
        metrics = {
            **metrics,
            **optimizer_metrics(self._own_state(opt_state, depth), finite),
        }
        if depth is not None:
            algorithms = algorithms._replace(
                freeze=freezing_lib.FreezeState(algorithms.freeze.position + 1)
            )
            metrics = {**metrics, "frozen_groups": jnp.int32(depth)}
        new_state = state.replace(
            step=optax.safe_increment(state.step),
            params=params,
            opt_state=opt_state,
            model_state=model_state,
            algorithms=algorithms,
        )
        return new_state, {"loss": loss, **metrics}

    def _own_state(self, opt_state, depth):
        """The optimizer state of the optimizer that ran at `depth`."""
        if depth is not None and self.freezing.group_optimizers is not None:
            return opt_state[depth]  # FreezeOpt: one state per group
        return opt_state

    def _depth_key(self, depth: int | None) -> int | None:
        return None if depth is None else self.freezing.canonical_depth(depth)

    def _jitted(self, depth: int | None):
        key = self._depth_key(depth)
        if key not in self._steps:
            step = functools.partial(self._train_step, depth=key)
            if self.data_parallel is not None:
                step = self._sharded(step)
            self._steps[key] = jax.jit(step, donate_argnums=self._donate)
        return self._steps[key]

    def _sharded(self, step):
        def run(state, batch):
            return self.data_parallel.shard_step(step, state)(state, batch)

        return run

    def _batch(self, batch):
        if self.data_parallel is None:
            return batch
        return self.data_parallel.shard_batch(batch)

    def _position(self, state: TrainState) -> int:
        if self._last is not None and self._last[0]() is state:
            return self._last[1]
        return int(state.algorithms.freeze.position)

    def _is_own(self, state) -> bool:
        """Whether `state` is the one this step last returned (or built)."""
        return self._last is not None and self._last[0]() is state

    def __call__(self, state: TrainState, batch) -> tuple[TrainState, dict]:
        """Runs one step: returns the new state and the step's metrics."""
        if not self._is_own(state):
            self.check_state(state)
        if isinstance(self.objective, _MODEL_OBJECTIVES):
            self.objective.check_batch(batch)  # shapes only: cheap
        self._check_skips()
        batch = self._batch(batch)
        if self.freezing is None:
            new_state, metrics = self._call(None, state, batch)
            self._last = (weakref.ref(new_state), None)
            self._record_skip(metrics)
            return new_state, metrics
        position = self._position(state)
        if self.background_compile and self._compiler is None:
            self._compile_ahead(
                self._depths_by_first_use(position), state, batch
            )
        new_state, metrics = self._call(
            self.freezing.depth(position), state, batch
        )
        self._last = (weakref.ref(new_state), position + 1)
        self._record_skip(metrics)
        return new_state, metrics

    def _record_skip(self, metrics) -> None:
        """Keeps the step's skip flag for `_check_skips` (not read now)."""
        if self.max_consecutive_skips is not None and "overflow" in metrics:
            self._skip_flags.append(metrics["overflow"])

    def _check_skips(self) -> None:
        """Warns (or raises) after `max_consecutive_skips` skipped steps.

        Runs before the next step is dispatched, so an error leaves the
        caller's state valid (even with `donate_state`).
        """
        limit = self.max_consecutive_skips
        if limit is None or len(self._skip_flags) <= min(
            limit, SKIP_CHECK_WINDOW
        ):
            return
        # Every flag but the newest: the device has finished (or is
        # finishing) those steps, so reading them does not stall it.
        flags = jax.device_get(self._skip_flags[:-1])
        del self._skip_flags[:-1]
        for skipped in flags:
            self._skip_run = self._skip_run + 1 if bool(skipped) else 0
            if self._skip_run != limit:
                continue
            message = (
                f"{limit} train steps in a row were skipped: their gradients "
                "were not finite (NaN or inf), so the params and optimizer "
                "state have not changed since. Look for NaN or inf in the "
                "data and the loss; a dynamic loss scale at its minimum that "
                "still overflows means the unscaled loss does. (Set "
                "`max_consecutive_skips` to change this limit, "
                "`raise_on_skips=True` to stop training instead.)"
            )
            if self.raise_on_skips:
                raise FloatingPointError(message)
            user_warnings.warn(message, RuntimeWarning)

    def _call(self, depth, state, batch):
        key = self._depth_key(depth)
        executable = self._executable(key, state, batch)
        if executable is not None:
            try:
                return executable(state, batch)
            except TypeError:  # not the compiled shapes: jit handles them
                pass
        return self._jitted(key)(state, batch)

    def _executable(self, key, state, batch):
        """The compiled step of depth `key`, compiling or waiting for it."""
        if key in self._compiled:
            return self._compiled[key]
        start = time.perf_counter()
        if key in self._pending:
            compiled = self._pending.pop(key).result()
        else:
            compiled = self._compile(key, _abstract((state, batch)))
        self.compile_wait_seconds += time.perf_counter() - start
        self._compiled[key] = compiled
        return compiled

    def _compile(self, key, args) -> jax.stages.Compiled:
        """Traces and compiles the step of depth `key` for abstract `args`."""
        jitted = self._jitted(key)
        with self._trace_lock:
            start = time.perf_counter()
            lowered = jitted.lower(*args)
            seconds = time.perf_counter() - start
        start = time.perf_counter()
        compiled = lowered.compile()
        self.compile_seconds[key] = seconds + time.perf_counter() - start
        return compiled

    def _depths_by_first_use(self, position: int) -> list[int]:
        """The compiled depths in the order the sequence, from `position`,
        first needs them (wrapping around, unless it does not wrap)."""
        canonical = np.array(
            [self._depth_key(k) for k in range(len(self.freezing.groups))]
        )
        sequence = self.freezing.sequence
        index = position // self.freezing.micro_steps
        if self.freezing.wrap:
            ahead = np.roll(sequence, -(index % len(sequence)))
        else:
            ahead = sequence[min(index, len(sequence) - 1) :]
        keys = canonical[ahead]
        unique, first = np.unique(keys, return_index=True)
        return [int(k) for k in unique[np.argsort(first)]]

    def _compile_ahead(self, keys, state, batch) -> None:
        """Starts compiling the steps of `keys` in background threads."""
        if self._compiler is None:
            self._compiler = ThreadPoolExecutor(
                max_workers=os.cpu_count() or 1,
                thread_name_prefix="boostax-compile",
            )
            _COMPILERS.add(self._compiler)
            # Queued compiles are dropped with the step that wanted them.
            weakref.finalize(
                self, self._compiler.shutdown, wait=False, cancel_futures=True
            )
        args = _abstract((state, batch))
        for key in keys:
            if key not in self._compiled and key not in self._pending:
                self._jitted(key)  # created here: workers only read _steps
                self._pending[key] = self._compiler.submit(
                    _compile_if_alive, weakref.ref(self), key, args
                )

    @property
    def pending_compiles(self) -> int:
        """How many executables are still compiling in the background."""
        return sum(not f.done() for f in self._pending.values())

    def compile_all(self, state: TrainState, batch) -> dict[int | None, Any]:
        """Compiles the step of every depth ahead of time.

        With `background_compile`, the depths compile in parallel threads;
        this waits for all of them.

        Returns:
          ``{depth: compiled executable}`` (the key ``None`` without
          freezing); later calls use them.
        """
        if not self._is_own(state):
            self.check_state(state)
        batch = self._batch(batch)
        if self.freezing is None:
            keys = [None]
        else:
            keys = self._depths_by_first_use(self._position(state))
            if self.background_compile:
                self._compile_ahead(keys, state, batch)
        for key in keys:
            self._executable(key, state, batch)
        return dict(self._compiled)

    def at_depth(self, depth: int | None):
        """``step(state, batch)`` that always trains at freeze `depth`.

        Bypasses the freezing sequence (MindSpore's ``freeze_cell`` cells
        are one such step per depth); the state's position still advances.
        """
        if depth is not None and self._freezing_for is None:
            raise ValueError(
                "`depth` must be None without freezing, "
                f"{validation.got(depth)}."
            )

        def step(state, batch):
            return self._call(depth, state, self._batch(batch))

        return step

    @property
    def model(self):
        """The model being trained (after LessBN), ``None`` for a function."""
        return getattr(self.objective, "module", None)

    @property
    def step(self):
        """The jitted ``step(state, batch)``; with freezing, `__call__`."""
        return self._jitted(None) if self._freezing_for is None else self

    def lower(
        self, state: TrainState, batch, depth: int | None = None
    ) -> jax.stages.Lowered:
        """Lowers the step (of freeze `depth`) for `state` and `batch`."""
        if not self._is_own(state):
            self.check_state(state)
        if depth is None and self._freezing_for is not None:
            depth = 0
        return self._jitted(depth).lower(state, self._batch(batch))

    def predict(self, state: TrainState, inputs):
        """The model's outputs on `inputs` in evaluation mode."""
        return self._predict(state.params, state.model_state, inputs)

    def variables(self, state: TrainState):
        """The trained model's variables (Linen dict, NNX module, params)."""
        return self.objective.merge(state.params, state.model_state)


# The metrics a step reports itself; a loss's own metrics may not reuse them.
STEP_METRICS = (
    "loss",
    "overflow",
    "loss_scale",
    "frozen_groups",
    "updated",
    "adasum_cosine",
    "dim_reduce_step_size",
    "dim_reduce_trials",
)


def _check_metric_names(metrics) -> None:
    clash = sorted(set(metrics) & set(STEP_METRICS))
    if clash:
        raise ValueError(
            f"The loss's metrics (`has_aux=True`) use the name(s) {clash}, "
            "which the step reports itself (one would silently replace the "
            "other): rename them, e.g. 'train_loss'. Reserved: "
            f"{list(STEP_METRICS)}."
        )


def check_skip_options(
    skip_nonfinite, max_consecutive_skips, raise_on_skips
) -> None:
    """Validates the skipped-step options of a `TrainStep`."""
    validation.check_bool("skip_nonfinite", skip_nonfinite)
    validation.check_bool("raise_on_skips", raise_on_skips)
    validation.check_optional_int(
        "max_consecutive_skips",
        max_consecutive_skips,
        minimum=1,
        none_means="never warn",
    )


def optimizer_metrics(opt_state, finite=None) -> dict[str, jax.Array]:
    """The statistics boostax's optimizer stages keep in their states.

    Args:
      opt_state: the optimizer state after the step.
      finite: with loss scaling, whether the step was applied (a skipped
        step leaves the state, and so these statistics, as they were).

    Returns:
      ``updated`` (gradient accumulation: whether this micro-step ran the
      optimizer), ``adasum_cosine`` (`boostax.adasum`: the mean cosine
      between the updates the last AdaSum combined), ``dim_reduce_step_size``
      and ``dim_reduce_trials`` (DimReduce: the last update's Armijo step,
      0 when no trial was accepted, and its line-search trials), for the
      stages present.
    """
    metrics = {}
    acc = data_parallel_lib.find_state(
        opt_state, accumulation_lib.GradientAccumulationState
    )
    if acc is not None:
        updated = accumulation_lib.has_updated(acc)
        metrics["updated"] = updated if finite is None else updated & finite
    adasum = data_parallel_lib.find_state(opt_state, adasum_lib.AdaSumState)
    if adasum is not None:
        metrics["adasum_cosine"] = jnp.reshape(adasum.cosine, ())
    dim_reduce = data_parallel_lib.find_state(
        opt_state, dim_reduce_lib.DimReduceState
    )
    if dim_reduce is not None:
        metrics["dim_reduce_step_size"] = dim_reduce.step_size
        metrics["dim_reduce_trials"] = dim_reduce.trials
    return metrics


@contextlib.contextmanager
def _no_context():
    yield


def _abstract(tree):
    """Shapes, dtypes and shardings of `tree`'s arrays (what compiling needs).

    Compiling from these instead of the arrays lets a background thread
    compile after the arrays were donated to a step.
    """

    def leaf(x):
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(
                x.shape,
                x.dtype,
                sharding=x.sharding,
                weak_type=x.aval.weak_type,
            )
        if isinstance(x, np.ndarray | np.generic):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    return jax.tree.map(leaf, tree)


def _compile_if_alive(step_ref: weakref.ref, key, args):
    # A queued compile holds its step weakly, so a step that is no longer
    # used is collected, and its queued compiles cancelled (`finalize`).
    step = step_ref()
    if step is None:
        raise RuntimeError("The train step was garbage collected.")
    return step._compile(key, args)


# Every background compiler; the queued compiles are cancelled when the
# interpreter exits (those running finish), instead of being waited for.
_COMPILERS: weakref.WeakSet = weakref.WeakSet()


def _cancel_queued_compiles():
    for compiler in list(_COMPILERS):
        compiler.shutdown(wait=False, cancel_futures=True)


# Threading's exit hooks (private; concurrent.futures registers its own the
# same way) run in reverse order of registration: this one, registered after
# concurrent.futures' (imported above), runs before that joins its workers.
threading._register_atexit(_cancel_queued_compiles)


def _update(optimizer, grads, opt_state, params, extra):
    if isinstance(optimizer, optax.GradientTransformationExtraArgs):
        return optimizer.update(grads, opt_state, params, **extra)
    return optimizer.update(grads, opt_state, params)


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
    skip_nonfinite: bool = False,
    max_consecutive_skips: int | None = 100,
    raise_on_skips: bool = False,
    batch_keys: tuple[str, str] | None = None,
    rng_collections: Any = None,
    train_kwargs: Any = None,
    eval_kwargs: Any = None,
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
      donate_state: donate the input state's buffers to the step (saves
        memory; the old state cannot be used afterwards).
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
    )
    return TrainStep(
        objective,
        optimizer,
        data_parallel=data_parallel,
        donate_state=donate_state,
        skip_nonfinite=skip_nonfinite,
        max_consecutive_skips=max_consecutive_skips,
        raise_on_skips=raise_on_skips,
    )
