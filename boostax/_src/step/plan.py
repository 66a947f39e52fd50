# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A train step's plan: what it builds once it has seen the parameters.

The data-parallel optimizer, the freezing plan and, on a mesh, where the
optimizer state and the params are placed (the split plan of a sharded
optimizer state, the ``PartitionSpec`` s of the ``"jit"`` engine) depend on
the parameters: a `StepBuilder` builds them here once, from the first
parameters it sees, and every program of the step reads them.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from boostax._src import accumulation as accumulation_lib
from boostax._src import loss_scale as loss_scale_lib
from boostax._src import tree_utils
from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from boostax._src.distributed import adasum as adasum_lib
from boostax._src.distributed import optimizer_sharding, partitioning
from boostax._src.freezing import plan as freezing_lib
from boostax._src.step import checks as step_checks


class StepPlan(NamedTuple):
    """What a step builds once it has seen the parameters.

    Attributes:
      optimizer: the optimizer the step runs (with the data-parallel stages
        its plan adds, e.g. AdaSum over the nodes).
      freezing: the `Freezing` plan, or ``None``.
      template: ``{"params": treedef, "model_state": treedef}`` of the state
        the plan was built for (``None`` for a plan built from a restored
        state alone: only the optimizer slots are checked then).
      opt_state_specs: with a sharded optimizer state
        (``DataParallel(shard_optimizer_state=True)``), the
        ``PartitionSpec`` of each of its leaves; otherwise ``None``.
      split: with a sharded optimizer state, the split plan: a tree like
        the params of the axis each leaf is split along, or ``None`` (kept
        whole), found from the optimizer (`optimizer_sharding.split_plan`)
        and used by every collective and slice of the step; otherwise
        ``None``.
      param_specs: with params stored sharded
        (`StepBuilder.stores_sharded_params`), the ``PartitionSpec`` of
        each leaf of the params, which are stored split like the state;
        otherwise ``None`` (params replicated).
      param_shapes: with `param_specs`, the whole params' shapes
        (``jax.ShapeDtypeStruct``); otherwise ``None``.
      grad_specs: with the ``"jit"`` engine's sharded optimizer state,
        ``{param path: PartitionSpec}`` of the gradients as the optimizer
        reads them (split like its state), so that XLA reduce-scatters
        them instead of all-reducing and slicing; otherwise ``None``.
    """

    optimizer: optax.GradientTransformation
    freezing: freezing_lib.Freezing | None
    template: dict[str, Any] | None = None
    opt_state_specs: Any = None
    split: Any = None
    param_specs: Any = None
    param_shapes: Any = None
    grad_specs: Any = None


def build(
    params,
    optimizer: optax.GradientTransformation,
    *,
    data_parallel,
    loss_scale,
    freezing,
    annotations: dict | None,
    half_precision: bool,
) -> StepPlan:
    """The `StepPlan` of a step with these settings (`StepBuilder`'s) for
    `params`; `annotations`: the ``{param path: PartitionSpec}`` the
    ``"jit"`` engine places annotated params by, or ``None``;
    `half_precision`: whether the policy computes in a dtype other than
    float32."""
    dp = data_parallel
    if dp is not None:
        optimizer = dp.optimizer(optimizer, params)
    if isinstance(loss_scale, loss_scale_lib.GroupLossScale):
        loss_scale.labels(params)  # validate the groups now
    if freezing is not None and not isinstance(freezing, freezing_lib.Freezing):
        freezing = freezing(params)
    plan = StepPlan(optimizer, freezing)
    sharded = dp is not None and dp.shard_optimizer_state
    annotated = annotations is not None
    if freezing is None and not sharded and not annotated:
        return plan
    # The optimizer state's shapes, read by the checks and the sharding
    # decisions below (the replacements leave its optimizer as it is).
    state = jax.eval_shape(lambda: init_opt_state(plan, params))
    if freezing is not None:
        step_checks.check_freezing_accumulation(freezing, optimizer, state)
    if dp is not None and not dp.explicit and (sharded or annotated):
        plan = _partitioned_specs(
            plan, dp, params, state, annotations, half_precision
        )
    elif dp is not None and sharded:
        split, specs = _sharded_specs(plan, dp, params, state)
        plan = plan._replace(opt_state_specs=specs, split=split)
        if _shards_params(plan, dp, state, half_precision):
            plan = plan._replace(
                param_specs=dp.sharded_param_specs(params, split),
                param_shapes=jax.tree.map(
                    lambda x: jax.ShapeDtypeStruct(
                        jnp.shape(x), jnp.result_type(x)
                    ),
                    params,
                ),
            )
    return plan


def init_opt_state(plan: StepPlan, params):
    """The optimizer state the plan's optimizer starts `params` with."""
    if plan.freezing is not None:
        return plan.freezing.init_opt_state(plan.optimizer, params)
    return plan.optimizer.init(params)


def own_opt_state(plan: StepPlan, opt_state, depth):
    """The optimizer state of the optimizer that ran at `depth`."""
    if depth is None or plan.freezing is None:
        return opt_state
    if plan.freezing.group_optimizers is not None:
        return opt_state[depth]  # FreezeOpt: one state per group
    return opt_state


def node_slices(dp, whole, split, *, reduce=True):
    """With a sharded AdaSum plan, the context in which its optimizer's
    AdaSum stage takes this device's slices of the node's mean, split as
    the plan `split` says (`adasum.node_slices`); otherwise none."""
    if dp.reduction != "adasum" or not dp.shard_optimizer_state:
        return contextlib.nullcontext()
    return adasum_lib.node_slices(
        whole, dp.num_shards, reduce=reduce, plan=split
    )


def _partitioned_specs(
    plan: StepPlan, dp, params, state, annotations, half_precision
) -> StepPlan:
    """The ``"jit"`` engine's placement (`partitioning.state_specs`):
    params as annotated, optimizer state like them, FSDP and ZeRO-1
    over the batch axes. XLA partitions any optimizer."""
    param_specs, opt_specs, grad_specs = partitioning.state_specs(
        dp,
        params,
        state,
        annotations,
        _shards_params(plan, dp, state, half_precision),
    )
    return plan._replace(
        opt_state_specs=opt_specs,
        param_specs=param_specs,
        grad_specs=grad_specs,
    )


def _shards_params(plan: StepPlan, dp, state, half_precision) -> bool:
    """The decision of `StepBuilder.stores_sharded_params`, from the plan's
    optimizer state's shapes `state` (`DataParallel.shards_params`)."""
    return dp.shards_params(
        half_precision=half_precision,
        freezes=plan.freezing is not None,
        accumulates=tree_utils.contains_state(
            state, accumulation_lib.GradientAccumulationState
        )
        or tree_utils.contains_state(state, optax.MultiStepsState),
    )


def _sharded_specs(plan: StepPlan, dp, params, state):
    """``(split plan, specs)`` of a sharded optimizer state (`state`: its
    shapes): the axis each leaf is split along, found from the optimizer
    so that it is correct on the slices (`optimizer_sharding.split_plan`),
    and the state's ``PartitionSpec`` s."""
    if tree_utils.contains_state(state, dim_reduce_lib.DimReduceState):
        raise ValueError(
            "shard_optimizer_state cannot run DimReduce: its step "
            "projects the whole parameter vector (and splits its PCA "
            "matrix over the devices already). Use "
            "shard_optimizer_state=False with it."
        )
    scalars = {}
    if plan.freezing is not None:
        scalars["freeze_update"] = jax.ShapeDtypeStruct((), jnp.int32)
    if tree_utils.contains_state(
        state, accumulation_lib.GradientAccumulationState
    ):
        scalars["skipped"] = jax.ShapeDtypeStruct((), jnp.bool_)
    groups = plan.freezing and plan.freezing.group_optimizers
    with node_slices(dp, params, None, reduce=False):  # AdaSum's inner
        split = optimizer_sharding.split_plan(
            groups or (plan.optimizer,), params, dp.num_shards, scalars
        )
    return split, dp.sharded_opt_state_specs(
        lambda p: init_opt_state(plan, p), params, split
    )
