# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing's sequence: which parameter group trains at each step.

MindSpore's gradient freezing computes, before training, the group that
trains at every step (0: every parameter; ``k``: only the ``k``-th suffix
group, the earlier layers frozen): the *freeze index sequence*. Its
strategies (continuous, interval) and boostax's progressive one (FreezeOut's
schedule) are here; the groups are in `freezing/groups.py`, the per-depth
update in `masked_update.py` and the plan of the run in `freezing/plan.py`.

References:
  MindSpore ``mindspore.boost.GradientFreeze``
  (``boost/grad_freeze.py``); Brock et al., "FreezeOut: Accelerate Training
  by Progressively Freezing Layers", 2017.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from boostax._src import validation

CONTINUOUS_STRATEGY = 0
INTERVAL_STRATEGY = 1
# boostax's: FreezeOut's schedule (Brock et al., 2017), see
# `progressive_freeze_steps`.
PROGRESSIVE_STRATEGY = 2
STRATEGIES = (CONTINUOUS_STRATEGY, INTERVAL_STRATEGY, PROGRESSIVE_STRATEGY)
STRATEGY_NAMES = {
    CONTINUOUS_STRATEGY: "continuous",
    INTERVAL_STRATEGY: "interval",
    PROGRESSIVE_STRATEGY: "progressive",
}


# The longest run a freeze sequence is computed for. The sequence holds one
# int32 per step and is computed before training: 64 MiB and about 3 s (the
# interval strategy's loop) at this bound; `recipe(10**12)` would allocate
# terabytes.
MAX_TOTAL_STEPS = 2**24
TOTAL_STEPS_BOUND = (
    "the freeze sequence holds one int32 per step, computed before training"
)


def check_total_steps(name: str, value: Any) -> int:
    """`value` as an int in [1, `MAX_TOTAL_STEPS`]; else raises, naming
    `name` and the bound."""
    total = validation.check_int(name, value, minimum=1)
    if total > MAX_TOTAL_STEPS:
        raise ValueError(
            f"`{name}` must be an int in [1, {MAX_TOTAL_STEPS}] "
            f"({TOTAL_STEPS_BOUND}), got {total}."
        )
    return total


# ---------------------------------------------------------------------------
# The freeze index sequence.
# ---------------------------------------------------------------------------


def generate_freeze_index_sequence(
    parameter_groups_number: int,
    freeze_strategy: int,
    freeze_p: float,
    total_steps: int,
    *,
    seed: int = 0,
) -> np.ndarray:
    """The group that trains at each step (0 = every parameter).

    MindSpore's sequence, of length ``int(total_steps * 1.01)``:

    - ``n <= 1`` groups: all zeros.
    - strategy 0 (continuous, ``00001234...``): the cycle
      ``[0] * z + [1, ..., n-1]`` repeated, whole cycles only, with
      ``z = int(freeze_p * (n - 1) // (1 - freeze_p) + 0.5)`` (the floor
      division comes first, as in MindSpore). ``freeze_p = 1`` (where
      MindSpore divides by zero) gives all zeros.
    - strategy 1 (interval, ``0102030...``): start with ``[0]``; while the
      fraction of frozen steps so far is below ``1 - freeze_p`` append a
      frozen depth ``k`` drawn with ``P(k) = (n - k) / (n (n - 1) / 2)``
      (shallow freezes are likeliest), else append 0.
    - strategy 2 (progressive, boostax's: FreezeOut, ``000...111...222``):
      depth ``d`` from update `progressive_freeze_steps` ``[d - 1]`` on,
      earliest groups first and for good; the depth never goes back.

    So `freeze_p` is about the fraction of steps that train everything.

    Args:
      parameter_groups_number: ``n``, the number of parameter groups.
      freeze_strategy: 0 (continuous), 1 (interval) or 2 (progressive).
      freeze_p: in [0, 1].
      total_steps: training steps (the sequence is 1% longer).
      seed: seed of the local NumPy generator drawing strategy 1's depths;
        the sequence depends on nothing else, so every process of a
        multi-process run computes the same one.

    Returns:
      An int32 NumPy array.
    """
    n = validation.check_int(
        "parameter_groups_number", parameter_groups_number, minimum=0
    )
    freeze_strategy = validation.check_int_code(
        "freeze_strategy",
        freeze_strategy,
        STRATEGY_NAMES,
        context="Unsupported freezing training strategy: ",  # MindSpore's
    )
    freeze_p = validation.check_number(
        "freeze_p", freeze_p, minimum=0, maximum=1
    )
    total = check_total_steps("total_steps", total_steps)
    seed = validation.check_int("seed", seed, minimum=0)
    length = int(total * 1.01)
    if n <= 1 or freeze_p == 1:
        return np.zeros(length, np.int32)
    if freeze_strategy == PROGRESSIVE_STRATEGY:
        starts = progressive_freeze_steps(n, freeze_p, total)
        return np.searchsorted(starts, np.arange(length), side="right").astype(
            np.int32
        )
    if freeze_strategy == CONTINUOUS_STRATEGY:
        zeros = int(freeze_p * (n - 1) // (1 - freeze_p) + 0.5)
        cycle = np.array([0] * zeros + list(range(1, n)), np.int32)
        return np.tile(cycle, -(-length // len(cycle)))
    # Interval: which steps are frozen depends only on the counts, so the
    # depths can be drawn in one go.
    frozen_steps = np.zeros(length, bool)
    zeros, frozen = 1, 0
    for i in range(1, length):
        if frozen / (zeros + frozen) < 1 - freeze_p:
            frozen_steps[i] = True
            frozen += 1
        else:
            zeros += 1
    depths = np.arange(n - 1, 0, -1)
    probabilities = np.arange(1, n) / (n * (n - 1) / 2)
    sequence = np.zeros(length, np.int32)
    sequence[frozen_steps] = np.random.default_rng(seed).choice(
        depths, size=frozen, p=probabilities
    )
    return sequence


def progressive_freeze_steps(
    groups_number: int, freeze_p: float, total_steps: int
) -> np.ndarray:
    """When each depth starts in the progressive schedule (FreezeOut).

    Depth ``d`` (the first ``d`` groups' own layers frozen) starts at update

    .. math::

      T_d = \\left(p + (1 - p) \\frac{d - 1}{n - 1}\\right) T,
      \\qquad d = 1, \\ldots, n - 1,

    with ``p`` = `freeze_p` (the fraction of training in which everything
    trains, as in MindSpore's strategies) and ``T`` = `total_steps`: the
    earliest layers freeze at ``p T``, the others evenly after them; the
    last group trains to the end. FreezeOut's linear schedule (its
    ``t_0`` is ``p``).

    Args:
      groups_number: ``n``.
      freeze_p: in [0, 1].
      total_steps: ``T``, in updates.

    Returns:
      ``n - 1`` non-decreasing int64 update indices.

    References:
      Brock, Lim, Ritchie, Weston, `FreezeOut: Accelerate Training by
      Progressively Freezing Layers <https://arxiv.org/abs/1706.04983>`_,
      2017.
    """
    n = validation.check_int("groups_number", groups_number, minimum=1)
    p = validation.check_number("freeze_p", freeze_p, minimum=0, maximum=1)
    total = validation.check_int("total_steps", total_steps, minimum=1)
    d = np.arange(1, n)
    fractions = p + (1 - p) * (d - 1) / max(n - 1, 1)
    return np.round(fractions * total).astype(np.int64)
