# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""How sure a speed-up is: a bootstrap interval over seeds, and its parts.

The budgets protocol (`boostax.examples.budgets`) gives each arm a
speed-up per seed: the time plain Optax needs for its full-budget accuracy
(median over seeds) over the time the arm's seed needs to reach it on its
accuracy-vs-time curve. With a handful of seeds the median alone says
little, so `speedup_interval` resamples the seeds with replacement
(percentile bootstrap, Efron and Tibshirani 1993, ch. 13), plain's and
the arm's together (seed ``s`` of every arm shares its data order): each
resample ``b`` recomputes plain's target ``a_b`` (median full-budget
accuracy of the drawn seeds), plain's time to it ``T_b`` (on the drawn
seeds' median curve) and the median over the drawn seeds of

.. math::

    \\text{speed-up}_{b,s} = T_b / t_s(a_b),

a miss (``t_s`` never reaching ``a_b``) counting as 0. The interval is the
``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the resampled
medians.

`decompose` splits an arm's speed-up into what comes from cheaper steps
and what from steps bought back:

.. math::

    \\text{speed-up} = \\underbrace{n_p / n_a}_{\\text{steps to target}}
        \\times \\underbrace{\\frac{\\text{speed-up}}{n_p / n_a}}
        _{\\text{step cost}^{-1}},

with ``n_p``, ``n_a`` plain's and the arm's steps to the target, read
off the accuracy-vs-steps curves as the time is off the accuracy-vs-time
ones.

References:
  Efron and Tibshirani, "An Introduction to the Bootstrap" (1993), ch. 13
  (percentile intervals).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from boostax.examples import budgets


class Interval(NamedTuple):
    """A bootstrap interval.

    Attributes:
      low, high: its ends.
      level: its coverage, e.g. 0.95.
      resamples: how many resamples it was read from.
    """

    low: float
    high: float
    level: float
    resamples: int


def bootstrap_interval(
    statistic: Callable[[Any], float],
    count: int,
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of `statistic` over `count` units.

    Args:
      statistic: ``statistic(indices) -> float`` of a resample, `indices`
        ``count`` draws with replacement from ``range(count)``.
      count: the units (seeds) resampled.
      resamples: how many resamples (``numpy.random.default_rng(seed)``
        draws them all at once, ``(resamples, count)``).
      level: the interval's coverage, in (0, 1).
      seed: the draws' seed.

    Returns:
      The `Interval`.

    Example:
      >>> import numpy as np
      >>> from boostax.examples import intervals
      >>> values = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
      >>> interval = intervals.bootstrap_interval(
      ...     lambda i: float(np.median(values[i])), len(values))
      >>> 1.0 <= interval.low <= 3.0 <= interval.high <= 5.0
      True
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be a positive int, got {count!r}.")
    if isinstance(resamples, bool) or not isinstance(resamples, int):
        raise TypeError(f"`resamples` must be an int, got {resamples!r}.")
    if resamples < 1:
        raise ValueError(f"`resamples` must be at least 1, got {resamples}.")
    if not 0 < level < 1:
        raise ValueError(f"`level` must be in (0, 1), got {level!r}.")
    draws = np.random.default_rng(seed).integers(0, count, (resamples, count))
    values = np.array([statistic(d) for d in draws], np.float64)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high), level, resamples)


def _curves(runs: Sequence[budgets.BudgetRun], x: str) -> dict[int, list]:
    """Per seed trained at every budget: ``[(x, accuracy)]`` with `x` the
    run's ``"seconds"`` or ``"steps"``."""
    fractions = {r.fraction for r in runs}
    curves: dict[int, list] = {}
    for r in runs:
        curves.setdefault(r.seed, []).append((getattr(r, x), r.final_accuracy))
    return {s: c for s, c in curves.items() if len(c) == len(fractions)}


class SeedCurves(NamedTuple):
    """Plain Optax's and one arm's curves over the seeds both trained at
    every budget (`seed_curves`).

    Attributes:
      seeds: those seeds.
      plain_full: per seed, plain's full-budget ``(x, accuracy)``.
      plain: per seed, plain's ``{fraction: (x, accuracy)}`` up to the
        full budget.
      arm: per seed, the arm's ``[(x, accuracy)]`` at every budget.
    """

    seeds: list[int]
    plain_full: list[tuple[float, float]]
    plain: list[dict[float, tuple[float, float]]]
    arm: list[list[tuple[float, float]]]


def seed_curves(
    plain: Sequence[budgets.BudgetRun],
    arm: Sequence[budgets.BudgetRun],
    x: str = "seconds",
) -> SeedCurves:
    """`SeedCurves` of `plain`'s and `arm`'s runs, against `x`
    (``"seconds"``, set from the step costs, or ``"steps"``)."""
    arm_curves = _curves(arm, x)
    plain_curves = _curves(plain, x)
    seeds = sorted(set(arm_curves) & set(plain_curves))
    if not seeds:
        raise ValueError(
            "No seed trained every budget for both plain Optax and the arm: "
            "nothing to resample."
        )
    by_seed = {
        s: {
            r.fraction: (getattr(r, x), r.final_accuracy)
            for r in plain
            if r.seed == s and r.fraction <= budgets.FULL
        }
        for s in seeds
    }
    return SeedCurves(
        seeds,
        [by_seed[s][budgets.FULL] for s in seeds],
        [by_seed[s] for s in seeds],
        [arm_curves[s] for s in seeds],
    )


def speedups(curves: SeedCurves, indices: Sequence[Any]) -> list[float]:
    """The drawn seeds' speed-ups (a miss: 0.0) to the target and plain
    time of those seeds (module docstring)."""
    indices = list(indices)
    target = statistics.median(curves.plain_full[i][1] for i in indices)
    plain_time = statistics.median(curves.plain_full[i][0] for i in indices)
    fractions = sorted(curves.plain[indices[0]])
    plain_curve = [
        (
            statistics.median(curves.plain[i][f][0] for i in indices),
            statistics.median(curves.plain[i][f][1] for i in indices),
        )
        for f in fractions
    ]
    reference = budgets.time_to_reach(plain_curve, target) or plain_time
    values = []
    for i in indices:
        seconds = budgets.time_to_reach(curves.arm[i], target)
        values.append(0.0 if seconds is None else reference / seconds)
    return values


def speedup_interval(
    plain: Sequence[budgets.BudgetRun],
    arm: Sequence[budgets.BudgetRun],
    *,
    x: str = "seconds",
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """An arm's median speed-up to plain Optax's full-budget accuracy, with
    a bootstrap `Interval` over the seeds (plain's and the arm's resampled
    together; module docstring).

    Args:
      plain, arm: their runs (`budgets.BudgetRun`, ``seconds`` set).
      x: ``"seconds"`` (time) or ``"steps"`` (steps to target).
      resamples, level, seed: as in `bootstrap_interval`.

    Returns:
      ``{"median", "low", "high", "level", "resamples", "seeds",
      "misses"}``: the median over the seeds (a miss counts as 0), the
      interval, the seeds and how many of them miss.
    """
    curves = seed_curves(plain, arm, x)
    everyone = range(len(curves.seeds))
    values = speedups(curves, everyone)
    interval = bootstrap_interval(
        lambda drawn: float(np.median(speedups(curves, drawn))),
        len(curves.seeds),
        resamples=resamples,
        level=level,
        seed=seed,
    )
    return {
        "median": float(np.median(values)),
        "per_seed": dict(zip(curves.seeds, values, strict=True)),
        "low": interval.low,
        "high": interval.high,
        "level": level,
        "resamples": resamples,
        "seeds": curves.seeds,
        "misses": sum(v == 0.0 for v in values),
    }


def step_cost_ratio(runs: Sequence[budgets.BudgetRun], plain_seconds: float):
    """The full-budget runs' median step cost, relative to plain's step
    (their ``seconds`` over their steps at plain's seconds per step)."""
    full = [r for r in runs if r.fraction == budgets.FULL]
    return statistics.median(
        r.seconds / (r.steps * plain_seconds)
        for r in full
        if r.seconds is not None
    )


def decompose(
    runs: Mapping[str, Sequence[budgets.BudgetRun]],
    plain_seconds: float,
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Per arm (the first is plain Optax): its speed-up in time with a
    bootstrap interval, in steps (the accuracy bought back per step), and
    its full-budget step cost.

    Returns:
      ``{arm: {"speedup": speedup_interval (time), "steps_speedup":
      speedup_interval (steps), "step_cost_ratio": full-budget step cost
      relative to plain's, "cost_factor": speed-up / steps speed-up
      (medians; ``None`` when either is 0)}}``.
    """
    plain = next(iter(runs.values()))
    out = {}
    for name, arm_runs in runs.items():
        timed = speedup_interval(
            plain, arm_runs, resamples=resamples, level=level, seed=seed
        )
        stepped = speedup_interval(
            plain,
            arm_runs,
            x="steps",
            resamples=resamples,
            level=level,
            seed=seed,
        )
        factor = None
        if timed["median"] and stepped["median"]:
            factor = timed["median"] / stepped["median"]
        out[name] = {
            "speedup": timed,
            "steps_speedup": stepped,
            "step_cost_ratio": step_cost_ratio(arm_runs, plain_seconds),
            "cost_factor": factor,
        }
    return out


def binomial_standard_error(accuracy: float, examples: int) -> float:
    """The standard error of an accuracy measured on `examples` test
    examples: ``sqrt(p (1 - p) / n)``."""
    return math.sqrt(accuracy * (1 - accuracy) / examples)


def format_decomposition(parts: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per arm: speed-up in time with its interval and misses, in
    steps, and the step cost."""

    def cell(interval):
        median = interval["median"]
        shown = "miss" if median == 0 else f"{median:.2f}x"
        return (
            f"{shown:>6} [{interval['low']:.2f}, {interval['high']:.2f}] "
            f"{interval['misses']}/{len(interval['seeds'])}"
        )

    level = next(iter(parts.values()))["speedup"]["level"]
    header = (
        f"{'arm':<28} {'speed-up [' + format(level, '.0%') + ' CI] miss':<28}"
        f" {'steps speed-up [CI] miss':<28} {'step cost':>9}"
    )
    lines = [header, "-" * len(header)]
    for name, part in parts.items():
        lines.append(
            f"{name:<28} {cell(part['speedup']):<28} "
            f"{cell(part['steps_speedup']):<28} "
            f"{part['step_cost_ratio']:>9.3f}"
        )
    return "\n".join(lines)
