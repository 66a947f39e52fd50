# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The pure part of a train step: its plan, its initial state, its function.

One step is::

    rng            = fold_in(state.rng, state.step)
    loss, grads    = value_and_grad(loss_fn)(params, model_state, batch, rng)
    updates, opt   = optimizer.update(grads, opt_state, params, ...)
    params         = params + updates

with the boost algorithms that live outside the optimizer wrapped around it:
the loss scale (scale the loss, unscale the gradients, skip a step whose
gradients are not finite), gradient freezing (differentiate and update only
the trainable suffix of freeze depth k) and data parallelism (gradients
reduced over the mesh). A `StepBuilder` holds those settings and returns,
for a freeze depth, the function ``step(state, batch) -> (state, metrics)``;
it jits nothing and keeps no training state (`boostax.TrainStep` compiles
and runs its functions).

What depends on the parameters (the data-parallel optimizer, the freezing
plan, the loss scale's groups) is a `StepPlan` (`step/plan.py`), built once
for the parameters of the first state and checked against every later one.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from boostax._src import accumulation as accumulation_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import precision as precision_lib
from boostax._src import tree_utils, validation
from boostax._src.distributed import boxed_variables, partitioning
from boostax._src.distributed import data_parallel as data_parallel_lib
from boostax._src.freezing import plan as freezing_lib
from boostax._src.freezing.masked_update import (
    keep_frozen,
    mask_tree,
    merge_trees,
)
from boostax._src.step import checks as step_checks
from boostax._src.step import context as step_context
from boostax._src.step import metrics as step_metrics
from boostax._src.step import objectives as objectives_lib
from boostax._src.step import param_reads, train_state, weighted_loss
from boostax._src.step import plan as step_plan
from boostax._src.step.plan import StepPlan
from boostax._src.step.train_state import AlgorithmStates, TrainState

PyTree = Any
StepFunction = Callable[[TrainState, Any], tuple[TrainState, dict]]


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


class StepBuilder:
    """Builds the functions of a train step (pure: nothing is jitted here).

    Args:
      objective: the `Objective` being trained.
      optimizer: the Optax optimizer.
      loss_scale: a loss scale (static, dynamic or per group), or ``None``.
      freezing: a `Freezing` plan, a function ``params -> Freezing``, or
        ``None``.
      data_parallel: a `DataParallel` plan, or ``None`` (one device).
      skip_nonfinite: without a loss scale, skip a step whose gradients are
        not finite.
      precision: a `PrecisionPolicy` or its name (`get_policy`): the dtype
        the forward and backward pass run in; ``None``: float32. A policy
        whose ``loss_scale`` is ``"dynamic"`` brings a `DynamicLossScale`
        (starting at 2**15) when `loss_scale` is ``None``; a float16 policy
        that brings none (``loss_scale=None``) needs `loss_scale`.

    Raises:
      ValueError: a float16 `precision` without a loss scale from the
        policy or `loss_scale` (the policy's ``loss_scale="off"`` opts out).

    Attributes:
      trace_count: how many step functions have been traced (each jit of
        each freeze depth traces once for fixed shapes).
    """

    def __init__(
        self,
        objective: objectives_lib.Objective,
        optimizer: optax.GradientTransformation,
        *,
        loss_scale: loss_scale_lib.LossScale | None = None,
        freezing: Callable[[PyTree], freezing_lib.Freezing]
        | freezing_lib.Freezing
        | None = None,
        data_parallel: data_parallel_lib.DataParallel | None = None,
        skip_nonfinite: bool = False,
        precision: Any = None,
    ):
        validation.check_optimizer("optimizer", optimizer)
        loss_scale_lib.check_loss_scale(loss_scale)
        validation.check_bool("skip_nonfinite", skip_nonfinite)
        if data_parallel is not None and not isinstance(
            data_parallel, data_parallel_lib.DataParallel
        ):
            raise TypeError(
                "`data_parallel` must be a boostax.DataParallel, got "
                f"{type(data_parallel).__name__}."
            )
        precision = precision_lib.get_policy(precision)
        step_checks.check_precision(precision, data_parallel)
        if (
            loss_scale is None
            and precision is not None
            and precision.loss_scale == "dynamic"
        ):
            loss_scale = loss_scale_lib.DynamicLossScale(
                precision_lib.POLICY_LOSS_SCALE
            )
        step_checks.check_underflow(precision, loss_scale)
        step_checks.check_cast_batch_used(objective, precision)
        self.precision = precision
        self.objective = objective
        self.optimizer = optimizer
        self.loss_scale = loss_scale
        self.freezing = freezing
        self.data_parallel = data_parallel
        # {param path: mesh PartitionSpec} of annotated params
        # (`read_annotations`), or None.
        self._annotations: dict | None = None
        self.skip_nonfinite = skip_nonfinite
        self.trace_count = 0
        self._count_lock = threading.Lock()  # background threads trace too
        self._plan: StepPlan | None = None
        # Shapes and dtypes of the first state `init` built (or, before any
        # `init`, the first one accepted): every later state must match.
        self._reference: dict[str, Any] | None = None

    # -- the plan ---------------------------------------------------------

    @property
    def current_plan(self) -> StepPlan | None:
        """The plan built so far, ``None`` before any state was seen."""
        return self._plan

    def plan(self, params, model_state=None, *, record=False) -> StepPlan:
        """The step's `StepPlan` for `params`, built on first use.

        A step trains one model: the plan is built once, from the first
        parameters it sees, and reused (`check_state` refuses a state of
        another model). With `record`, the tree structures of `params` and
        `model_state` become the plan's template.
        """
        if self._plan is None:
            self._plan = step_plan.build(
                params,
                self.optimizer,
                data_parallel=self.data_parallel,
                loss_scale=self.loss_scale,
                freezing=self.freezing,
                annotations=self._annotations,
                half_precision=self._half_precision,
            )
        if record and self._plan.template is None:
            self._plan = self._plan._replace(
                template={
                    "params": jax.tree.structure(params),
                    "model_state": jax.tree.structure(model_state),
                }
            )
        return self._plan

    def read_annotations(self, variables):
        """`variables` unboxed, where the ``"jit"`` engine places params as
        they say, their placement kept for the plan
        (`partitioning.read_placements`); as given otherwise."""
        variables, specs = partitioning.read_placements(
            self.data_parallel, self.objective, variables
        )
        if specs:
            self._annotations = specs
        return variables

    @property
    def stores_sharded_params(self) -> bool:
        """Whether the float32 params are stored sharded over the data axes.

        So they are with ``DataParallel(shard_optimizer_state=True)`` where
        its `DataParallel.shard_params` says so, or where it is ``None``
        under a policy whose compute dtype is not float32 and without
        gradient freezing or accumulation (`DataParallel.shards_params`):
        each device stores the float32 slice it updates (split like the
        optimizer state), the step starts by all-gathering every slice cast
        to the dtype the forward reads it in (`param_reads.forward_dtypes`:
        the compute dtype for the leaves its layers cast, float32 for the
        others), and ends without a gather. Per device and step that sends
        n_c(D-1)/D bytes (the gathered leaves in their dtypes) plus the
        reduce-scatter's n(D-1)/D (in `reduce_dtype`), against 2n(D-1)/D
        float32, and holds 1/D of the float32 params plus a transient
        gathered copy.

        Raises:
          ValueError: before the step has seen the params (`init`, or a
            state), where the decision depends on the optimizer's state.
        """
        if self._plan is not None:
            return self._plan.param_specs is not None
        dp = self.data_parallel
        if dp is None or not dp.shard_optimizer_state:
            return False
        if dp.shard_params is not None:
            return dp.shard_params
        raise ValueError(
            "With DataParallel(shard_params=None), whether the params are "
            "stored sharded is decided when the step is built from the "
            "params (it depends on gradient accumulation in the optimizer's "
            "state): call `init` (or the step) first, or pass "
            "shard_params=True or False."
        )

    @property
    def _half_precision(self) -> bool:
        """Whether the policy computes in a dtype other than float32."""
        policy = self.precision
        return policy is not None and policy.compute_dtype != (
            precision_lib.FLOAT32
        )

    # -- the initial state ------------------------------------------------

    def init_opt_state(self, plan: StepPlan, params):
        return step_plan.init_opt_state(plan, params)

    def init_algorithms(self, plan: StepPlan) -> AlgorithmStates:
        algorithms = AlgorithmStates()
        if self.loss_scale is not None:
            algorithms = algorithms._replace(loss_scale=self.loss_scale.init())
        if plan.freezing is not None:
            algorithms = algorithms._replace(freeze=plan.freezing.init_state())
        return algorithms

    def init_state(self, variables: Any, rng: jax.Array | None) -> TrainState:
        """The `TrainState` at step 0 (on the mesh, with data parallelism)."""
        with boxed_variables.placed_by_the_step(self._annotations is not None):
            params, model_state = self.objective.split(variables)
        params = precision_lib.master_params(params)
        plan = self.plan(params, model_state, record=True)
        state = TrainState(
            step=jnp.zeros([], jnp.int32),
            params=params,
            opt_state=self.init_opt_state(plan, params),
            model_state=model_state,
            rng=step_checks.check_rng(rng),
            algorithms=self.init_algorithms(plan),
        )
        if self.data_parallel is not None:
            # (Per-device optimizer states gain their device axis here.)
            state = self.data_parallel.place_state(
                state, plan.opt_state_specs, plan.param_specs
            )
        # Of the placed state: a per-device optimizer state's leaves have
        # their device axis, as a checkpoint of this state will.
        state = train_state.with_fingerprint(state)
        if self._reference is None:
            self._reference = step_checks.abstract_slots(state)
        return state

    def check_state(self, state: Any) -> None:
        """Raises if `state` is not a state of this step (see `TrainStep`)."""
        step_checks.require_state(state)
        step_checks.check_counters(state)
        if self.data_parallel is not None:
            step_checks.check_devices(state, self.data_parallel.mesh)
        plan = self.plan(state.params)
        expected = {
            "opt_state": jax.eval_shape(
                lambda: self.init_opt_state(plan, state.params)
            ),
            "algorithms.loss_scale": jax.eval_shape(
                lambda: self.init_algorithms(plan).loss_scale
            ),
            "algorithms.freeze": jax.eval_shape(
                lambda: self.init_algorithms(plan).freeze
            ),
        }
        step_checks.check_slots(state, expected, plan.template)
        if self._reference is not None:
            step_checks.check_leaf_types(state, self._reference)
        # Last: a state of this step's structure whose leaves were restored
        # from a checkpoint of another one (a partial restore).
        train_state.check_fingerprint(state)
        if self._reference is None:
            self._reference = step_checks.abstract_slots(state)
        if plan.freezing is not None:
            # Its steps so far ran the depths this plan gives them.
            plan.freezing.check_resume(state.algorithms.freeze)

    # -- the step ---------------------------------------------------------

    def step_function(self, depth: int | str | None) -> StepFunction:
        """``step(state, batch) -> (state, metrics)`` at freeze `depth`.

        Not jitted; with data parallelism, it runs under ``jax.shard_map``
        over the plan's mesh (the batch is this process's share, already
        placed: `DataParallel.shard_batch`). The plan is the state's
        (`plan`), read when the function is traced.
        """

        def step(state, batch):
            plan = self.plan(state.params)
            return self._step(plan, state, batch, depth, self.data_parallel)

        if self.data_parallel is None:
            return step
        data_parallel = self.data_parallel
        if not data_parallel.explicit:

            def partitioned(state, batch):
                # The one-device step over the global batch; XLA splits it
                # over the mesh as the inputs are placed, and the outputs
                # keep the inputs' shardings.
                plan = self.plan(state.params)
                new_state, metrics = self._step(plan, state, batch, depth, None)
                return partitioning.constrain_state(
                    data_parallel,
                    new_state,
                    plan.opt_state_specs,
                    plan.param_specs,
                ), metrics

            return partitioned

        def sharded(state, batch):
            plan = self.plan(state.params)
            return data_parallel.shard_step(
                step, state, plan.opt_state_specs, plan.param_specs
            )(state, batch)

        return sharded

    def _split(self, plan: StepPlan, params, depth):
        """``(mask, trainable, frozen)`` of freeze `depth` (None: no mask)."""
        freezing = plan.freezing
        if depth is None or depth == freezing_lib.MASKED:
            return None, params, None
        assert freezing is not None  # a depth: the step freezes
        # A warm-up program from group k differentiates group k's leaves
        # (its depths mask the rest inside the program): no static mask.
        cut = freezing_lib.warmup_cut(depth)
        static = depth if cut is None else cut
        if freezing.trains_everything(static, params):
            return None, params, None
        mask = freezing.mask(params, static)
        trainable = mask_tree(params, mask)
        # Frozen leaves are constants: nothing differentiates them.
        frozen = jax.lax.stop_gradient(
            mask_tree(params, jax.tree.map(lambda m: not m, mask))
        )
        return (mask if cut is None else None), trainable, frozen

    def _loss_function(self, state: TrainState, batch, rng, frozen, dp):
        """``loss_fn(trainable) -> (scaled loss, (loss, model_state,
        metrics))``: what the step differentiates (`dp`: its data-parallel
        plan, ``None`` on one device)."""
        scaler, scale_state = self.loss_scale, state.algorithms.loss_scale

        def loss_fn(params):
            if frozen is not None:
                params = merge_trees(params, frozen)
            with (
                scaler.context(scale_state)
                if scaler
                else contextlib.nullcontext(),
                step_context.tracing(
                    policy=self.precision, data_axes=dp.axes if dp else ()
                ),
            ):
                value, (model_state, metrics) = self.objective.loss_fn(
                    params, state.model_state, batch, rng
                )
            # A WeightedLoss: over the whole batch's weight, not this
            # device's (the devices' mean below is then the batch's loss).
            value = weighted_loss.mean(value, dp.axes if dp else ())
            scaled = (
                value if scaler is None else scaler.scale(value, scale_state)
            )
            return scaled, (value, model_state, metrics)

        if self.precision is not None and self.precision.recomputes:
            return jax.checkpoint(
                loss_fn, policy=precision_lib.save_half_precision
            )
        return loss_fn

    def differentiated(self, state: TrainState, batch, depth=None):
        """``(loss_fn, trainable)``: the function the step at freeze `depth`
        differentiates, and its argument (the trainable parameters).

        ``loss_fn(trainable)`` returns ``(scaled loss, aux)``, with the
        precision policy and loss scale of the step applied; on one device
        (a data-parallel model's collectives over its own axes become local
        ones). For inspection: `boostax.measure.saved_activations` reads the
        activations its backward pass keeps.
        """
        plan = self.plan(state.params)
        rng = jax.random.fold_in(state.rng, state.step)
        _, trainable, frozen = self._split(plan, state.params, depth)
        loss_fn = self._loss_function(state, batch, rng, frozen, dp=None)
        return loss_fn, trainable

    def _reduce_gradients(self, grads, split=None):
        """The data-parallel reduction, in the policy's `reduce_dtype`
        (`split`: the plan's, with a sharded optimizer state)."""
        dtype = None if self.precision is None else self.precision.reduce_dtype
        dp = self.data_parallel
        if dtype is None or dtype == precision_lib.FLOAT32:
            return dp.reduce_gradients(grads, split)
        sent = precision_lib.cast_floating(grads, dtype)
        reduced = dp.reduce_gradients(sent, split)
        return jax.tree.map(lambda r, g: r.astype(g.dtype), reduced, grads)

    def _gathered_params(
        self, plan: StepPlan, state: TrainState, batch, rng, dp
    ):
        """The whole params the forward reads, all-gathered from this
        device's float32 slices (`state.params`), each leaf in the dtype the
        forward reads it in (`param_reads.forward_dtypes`, traced on the
        loss without freezing: a frozen leaf is read as a trained one;
        float32, each leaf's own, without a half-precision policy)."""
        if not self._half_precision:
            dtypes = jax.tree.map(lambda w: w.dtype, plan.param_shapes)
        else:
            assert self.precision is not None  # `_half_precision`
            loss_fn = self._loss_function(state, batch, rng, None, dp)
            dtypes = param_reads.forward_dtypes(
                loss_fn, plan.param_shapes, self.precision.compute_dtype
            )
        return dp.gather_params(
            state.params, plan.param_shapes, dtypes, plan.split
        )

    @staticmethod
    def _gather(dp, opt_state, slices, whole, mask, split):
        """The whole new params from each device's `slices` (split as the
        plan `split` says).

        With gradient accumulation, only a micro-step that updated gathers
        them: the others left every slice as it was (`whole`), so the
        all-gather runs once per update.
        """
        acc = tree_utils.find_state(
            opt_state, accumulation_lib.GradientAccumulationState
        )
        if acc is None:
            return dp.gather(slices, whole, mask, split)
        return jax.lax.cond(
            accumulation_lib.has_updated(acc),
            lambda: dp.gather(slices, whole, mask, split),
            lambda: whole,
        )

    def _step(self, plan: StepPlan, state: TrainState, batch, depth, dp):
        """One train step at freeze `depth`; `dp`: the data-parallel plan
        whose collectives it writes out (per device, under ``shard_map``),
        ``None`` on one device or over the global batch (``"jit"``)."""
        with self._count_lock:
            self.trace_count += 1
        rng = jax.random.fold_in(state.rng, state.step)
        if dp is not None:  # each device its own dropout masks
            rng = jax.random.fold_in(rng, dp.device_index())
        slices = None
        if dp is not None and plan.param_specs is not None:
            # Params stored sharded: `slices` are this device's float32
            # ones, the only ones updated; the forward reads the whole
            # params, gathered in the dtypes it casts them to.
            slices = state.params
            state = state.replace(
                params=self._gathered_params(plan, state, batch, rng, dp)
            )
        mask, trainable, frozen = self._split(plan, state.params, depth)
        scaler, scale_state = self.loss_scale, state.algorithms.loss_scale
        loss_fn = self._loss_function(state, batch, rng, frozen, dp)
        (_, (loss, model_state, metrics)), grads = jax.value_and_grad(
            loss_fn, has_aux=True
        )(trainable)
        trained = None
        if freezing_lib.warmup_cut(depth) is not None:
            # The warm-up program: every gradient is computed; the frozen
            # ones are zeroed here and the frozen leaves' params and slots
            # restored after the update (`freezing.MASKED`). One from group
            # k (`freezing.warmup_key`) computes group k's alone: the
            # others, frozen at each of its depths, get zeros.
            assert plan.freezing is not None  # a depth: the step freezes
            if frozen is not None:
                grads = merge_trees(
                    grads, jax.tree.map(jnp.zeros_like, state.params)
                )
                trainable = state.params
            depth = plan.freezing.traced_depth(state.algorithms.freeze.position)
            trained = plan.freezing.traced_mask(state.params, depth)
            grads = jax.tree.map(
                lambda t, g: jnp.where(t, g, jnp.zeros_like(g)), trained, grads
            )
        step_metrics.check_names(metrics)
        if plan.grad_specs is not None:
            assert self.data_parallel is not None  # the "jit" engine's
            grads = partitioning.constrain_by_path(
                grads, plan.grad_specs, self.data_parallel.auto_mesh
            )
        # With accumulation under a sharded state, each device accumulates
        # its own gradients: the optimizer reduces them once per update.
        deferred = dp is not None and dp.defers_reduction(state.opt_state)
        if dp is not None:
            if not deferred:
                grads = self._reduce_gradients(grads, plan.split)
            loss, metrics = dp.mean((loss, metrics))
            constant = getattr(self.objective, "constant_state", None)
            model_state = dp.mean(
                model_state,
                keep=None if constant is None else constant(model_state),
            )
        sharded = dp if dp is not None and dp.shard_optimizer_state else None
        if sharded:
            # A sharded optimizer state: `grads` are this device's slices
            # (its whole, unreduced gradients if `deferred`), and from here
            # on `state.params` and `trainable` are its slices (the new
            # slices are all-gathered after the update).
            whole_params, whole_trainable = state.params, trainable
            if slices is None:
                state = state.replace(
                    params=sharded.local_slices(state.params, plan.split)
                )
                trainable = sharded.local_slices(trainable, plan.split)
            else:
                # The stored float32 slices, not slices of the gathered
                # params (rounded to the compute dtype), masked as the
                # whole params were (`depth` is traced in the warm-up
                # program: `_split` cannot read it again).
                state = state.replace(params=slices)
                trainable = slices if mask is None else mask_tree(slices, mask)
        algorithms = state.algorithms
        finite = None
        if scaler is not None:
            grads = scaler.unscale(grads, scale_state, state.params)
            new_scale, finite = scaler.adjust(scale_state, grads, state.params)
            if dp is not None:
                # Gradients may still differ per device (AdaSum of updates,
                # slices): an overflow anywhere backs off and skips
                # everywhere.
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
            if sharded:
                p = sharded.gather(p, whole_trainable, plan=plan.split)
            value = loss_fn(p)[1][0]
            return value if dp is None else dp.mean(value)

        extra = dict(value=loss, grad=grads, value_fn=value_fn)
        if deferred:
            extra["reduce_gradients"] = functools.partial(
                self._reduce_gradients, split=plan.split
            )
        if depth is not None:
            assert plan.freezing is not None  # a depth: the step freezes
            # Every counter a schedule reads advances on the same events: a
            # dropped update moves the freeze sequence but leaves the
            # optimizer state as it was, so a schedule tied to the freeze
            # points (FreezeOut's annealing) reads the sequence's own index.
            extra["freeze_update"] = (
                state.algorithms.freeze.position // plan.freezing.micro_steps
            )

        def apply(extra):
            if mask is None:
                updates, opt_state = _update(
                    plan.optimizer, grads, state.opt_state, trainable, extra
                )
                params = optax.apply_updates(state.params, updates)
                if trained is not None:
                    params, opt_state = keep_frozen(
                        plan.optimizer,
                        trained,
                        (params, opt_state),
                        (state.params, state.opt_state),
                    )
                return params, opt_state, model_state
            updates, opt_state = plan.freezing.update(
                plan.optimizer,
                depth,
                grads,
                state.opt_state,
                trainable,
                mask,
                **extra,
            )
            params = merge_trees(
                optax.apply_updates(trainable, updates), state.params
            )
            return params, opt_state, model_state

        if sharded:
            apply = _on_node_slices(sharded, whole_params, plan.split, apply)

        def keep():
            return state.params, state.opt_state, state.model_state

        if finite is None:
            params, opt_state, model_state = apply(extra)
        elif isinstance(
            step_plan.own_opt_state(plan, state.opt_state, depth),
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
        if sharded and slices is None:
            # The new slices all-gathered; frozen leaves (a static mask)
            # are the old params, sent nowhere. (Params stored sharded stay
            # slices: the next step gathers them.)
            params = self._gather(
                sharded,
                step_plan.own_opt_state(plan, opt_state, depth),
                params,
                whole_params,
                mask,
                plan.split,
            )
        metrics = {
            **metrics,
            **step_metrics.optimizer_metrics(
                step_plan.own_opt_state(plan, opt_state, depth), finite
            ),
        }
        if depth is not None:
            assert plan.freezing is not None  # a depth: the step freezes
            algorithms = algorithms._replace(
                freeze=plan.freezing.next_state(algorithms.freeze)
            )
            metrics = {
                **metrics,
                # A constant of each depth's own program (NumPy: the host
                # adds it, `Executables`); traced in the warm-up program.
                "frozen_groups": np.asarray(depth, np.int32)
                if isinstance(depth, int)
                else jnp.asarray(depth, jnp.int32),
            }
        new_state = state.replace(
            step=optax.safe_increment(state.step),
            params=params,
            opt_state=opt_state,
            model_state=model_state,
            algorithms=algorithms,
        )
        return new_state, {"loss": loss, **metrics}


def _on_node_slices(dp, whole, split, apply):
    """`apply` (the optimizer update) run in `step_plan.node_slices`'
    context."""

    def run(extra):
        with step_plan.node_slices(dp, whole, split):
            return apply(extra)

    return run


def _update(optimizer, grads, opt_state, params, extra):
    if isinstance(optimizer, optax.GradientTransformationExtraArgs):
        return optimizer.update(grads, opt_state, params, **extra)
    return optimizer.update(grads, opt_state, params)
