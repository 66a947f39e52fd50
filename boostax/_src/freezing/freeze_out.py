# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""FreezeOut's learning-rate annealing, for the progressive freeze schedule.

In the progressive schedule (``grad_freeze.freeze_type`` 2), the earliest
parameter groups freeze first and for good (`progressive_freeze_steps`).
FreezeOut (Brock et al., 2017) anneals each layer's learning rate to zero by
the time it freezes, so freezing it changes nothing abruptly: here each
group's updates are scaled by a cosine that reaches zero at its freeze
update; the last group, which never freezes, is left to the optimizer's own
schedule.

Every counter that a schedule reads advances on the same events. The freeze
sequence counts train steps (``state.algorithms.freeze.position``), dropped
updates included: a step whose gradients are not finite leaves params and
optimizer state exactly as they were, so a count kept in this transform's
state would fall behind the sequence by one per dropped update, and a group
would freeze while its rate is still high. boostax's train step therefore
passes the sequence's own update index as the extra argument
``freeze_update`` (train step position // micro-steps per update), and the
annealing reads it: each group's last update before its freeze point ``T``
runs at the rate of update ``T - 1`` whatever was dropped before it. Used
alone (no ``freeze_update``), the transform counts the updates it makes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from boostax._src import validation
from boostax._src.freezing import groups as freeze_groups
from boostax._src.tree_utils import path_names


class FreezeOutState(NamedTuple):
    """State of `scale_by_freeze_out`.

    Attributes:
      count: the schedule index of the next update, ``int32``: one past the
        last update's ``freeze_update`` when the train step passes it, else
        the updates made so far.
      freeze_at: for each parameter, the update at which its group freezes
        (``inf``: it never does), ``float32`` scalars.
    """

    # Named as Optax's states' `count`, shadowing `tuple.count`.
    count: jax.Array  # type: ignore[assignment]
    freeze_at: Any


def freeze_out_factor(count, freeze_at):
    """``(1 + cos(pi min(count / freeze_at, 1))) / 2``; 1 where it is inf."""
    progress = jnp.where(
        freeze_at > 0, jnp.minimum(count / jnp.maximum(freeze_at, 1), 1.0), 1.0
    )
    return jnp.where(
        jnp.isinf(freeze_at), 1.0, 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    )


def scale_by_freeze_out(
    groups: Sequence[Sequence[tuple[str, ...]]] | None,
    freeze_steps: Sequence[int] | np.ndarray,
    *,
    groups_number: int | None = None,
) -> optax.GradientTransformation:
    """Scales each group's updates to zero by the update at which it freezes.

    .. math::

      u_\\ell \\leftarrow u_\\ell \\cdot \\tfrac12\\left(1 + \\cos\\left(\\pi
      \\min(t / T_{g(\\ell)}, 1)\\right)\\right)

    where ``t`` is the update's index in the freeze schedule and ``T_g`` the
    update from which the group of leaf ``l`` (the first group it is not
    in, among the nested freezing groups) is frozen; leaves of the last
    group are not scaled. Chain it after the optimizer: for SGD and
    momentum methods, scaling the update scales the learning rate.

    ``t`` is the extra argument ``freeze_update`` when given: boostax's
    train step passes the freeze sequence's own index (train steps //
    micro-steps), which also advances on dropped updates (non-finite
    gradients), so the annealing and the freezing never drift apart.
    Without it, ``t`` counts the updates this transform has made (right
    when every update is applied, as in a plain Optax loop).

    Args:
      groups: the freezing groups cut on the model (group ``d``: the leaves
        depth ``d`` trains, each group a suffix of the one before), applied
        to the parameters as `Freezing`'s are; ``None``: cut in a natural
        sort of the parameter paths.
      freeze_steps: the update at which each depth ``d = 1 .. n - 1``
        starts (`progressive_freeze_steps`).
      groups_number: ``n`` when `groups` is ``None`` (default:
        ``len(freeze_steps) + 1``).

    Returns:
      An ``optax.GradientTransformationExtraArgs``.

    Example:
      >>> import jax.numpy as jnp, optax, boostax
      >>> params = {"a": jnp.ones(2), "b": jnp.ones(2)}
      >>> groups = [[("a",), ("b",)], [("b",)]]  # depth 1 freezes "a"
      >>> tx = boostax.scale_by_freeze_out(groups, [4])
      >>> state = tx.init(params)
      >>> for _ in range(2):
      ...   updates, state = tx.update(params, state)
      >>> [round(float(updates[k][0]), 3) for k in "ab"]
      [0.854, 1.0]

    References:
      Brock, Lim, Ritchie, Weston, `FreezeOut: Accelerate Training by
      Progressively Freezing Layers <https://arxiv.org/abs/1706.04983>`_,
      2017.
    """
    steps = validation.check_numbers(
        "freeze_steps", freeze_steps, minimum=0, allow_empty=True
    )
    if groups_number is None:
        groups_number = len(steps) + 1
    n = validation.check_int("groups_number", groups_number, minimum=1)
    if len(steps) != n - 1:
        raise ValueError(
            f"`freeze_steps` must hold one update per depth 1 .. n - 1 "
            f"({n - 1} for {n} groups), got {len(steps)}."
        )
    if groups is not None and len(groups) != n:
        raise ValueError(
            f"`groups` holds {len(groups)} groups but `freeze_steps` is for "
            f"{n}."
        )

    def freeze_at(params):
        if not jax.tree.leaves(params):  # a placeholder of Optax's
            return jax.tree.map(lambda p: p, params)
        cut = freeze_groups.groups_of(params, groups, n)
        deepest: dict[tuple[str, ...], int] = {}
        for depth, group in enumerate(cut):
            for leaf in group:
                deepest[leaf] = depth
        at = [*[float(s) for s in steps], math.inf]

        def leaf_at(path, _):
            return jnp.float32(at[deepest.get(path_names(path), n - 1)])

        return jax.tree_util.tree_map_with_path(leaf_at, params)

    def init_fn(params):
        return FreezeOutState(jnp.zeros([], jnp.int32), freeze_at(params))

    def update_fn(
        updates, state, params=None, *, freeze_update=None, **extra_args
    ):
        del params, extra_args
        if freeze_update is None:
            index = state.count
        else:
            index = jnp.asarray(freeze_update, jnp.int32)
        count = index.astype(jnp.float32)
        updates = jax.tree.map(
            lambda u, at: (u * freeze_out_factor(count, at)).astype(u.dtype),
            updates,
            state.freeze_at,
        )
        return updates, FreezeOutState(
            optax.safe_increment(index), state.freeze_at
        )

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
