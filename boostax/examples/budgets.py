# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Final accuracy against training time, over several training budgets.

The protocol of algorithm speed-up suites (Composer's method cards), and how
people train: pick a budget, stretch the learning-rate schedule (here a
linear warm-up over 5% of it, then a cosine to zero:
`boostax.examples.schedules`) over it, and read the final test accuracy.
Each arm (plain Optax, a level, a recipe) trains at several budgets
(fractions of the length at which plain Optax plateaus) and seeds, giving
accuracy against time:

- **time** = the run's steps x their interleaved step cost: each freeze
  depth's step time is measured against plain Optax's in one interleaved
  run (`depth_step_costs`), and a run's time is the sum over its own
  freezing sequence; compile wait is shown apart;
- **speed-up** = the time plain Optax needs for its full-budget accuracy
  (median over seeds), divided by the time the arm needs to reach that
  accuracy on its own accuracy-vs-time curve, interpolated linearly between
  budgets, per seed; "not reached" if the curve never gets there. Plain's
  time is read off its own median curve: its full budget, or less where it
  plateaus earlier (dividing its whole full budget instead, kept as
  ``speedup_vs_full_budget``, would flatter every arm, plain included).
  Medians count a miss as the slowest seed.

Only the optimizer state holds the schedule's horizon
(``optax.inject_hyperparams``), so every budget runs the same compiled
programs.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import boostax
from boostax.examples import speedup

#: Fractions of the plateau length trained (the full budget last).
BUDGETS = (0.25, 0.5, 1.0)
#: An arm may reach plain's full-budget accuracy this much lower (0.2 point).
TOLERANCE = 0.002


def budget(workload: speedup.Workload, fraction: float) -> speedup.Workload:
    """`workload` trained for `fraction` of its epochs, schedule stretched."""
    epochs = max(1, round(fraction * workload.epochs))
    return dataclasses.replace(workload, epochs=epochs, schedule="cosine")


@dataclasses.dataclass(frozen=True)
class Maker:
    """How to build one arm at any budget.

    Attributes:
      name: the arm's row name.
      make: ``make(workload) -> speedup.Arm`` for the budget's workload.
    """

    name: str
    make: Callable[[speedup.Workload], speedup.Arm]


def plain_maker() -> Maker:
    return Maker(speedup.PLAIN, speedup.plain_arm)


def level_maker(name: str, level: str, config: dict | None = None) -> Maker:
    return Maker(
        name,
        lambda workload: speedup.level_arm(workload, level, config, name=name),
    )


def fn_head_maker(name: str, **fn_head) -> Maker:
    """The FN head alone, every BatchNorm kept (`speedup.fn_head_arm`)."""
    return Maker(
        name, lambda workload: speedup.fn_head_arm(workload, name, **fn_head)
    )


@dataclasses.dataclass
class BudgetRun:
    """One arm trained from one seed for one budget.

    Attributes:
      fraction: the budget, a fraction of the full one.
      seed: the seed (initialization and data order).
      steps: steps trained.
      final_accuracy: test accuracy at the end.
      depths: the compiled step of every step: its freeze depth, or
        ``"masked"`` in the freezing warm-up; ``None`` without freezing.
      compile_wait: seconds the run waited for compilation.
      seconds: the run's time from `depth_step_costs` (set afterwards).
    """

    fraction: float
    seed: int
    steps: int
    final_accuracy: float
    depths: list[int] | None
    compile_wait: float
    seconds: float | None = None


def _depths(arm: speedup.Arm, steps: int) -> list[int] | None:
    train_step = arm.train_step
    if train_step is None or train_step.freezing is None:
        return None
    return [train_step.program_at(i) for i in range(steps)]


def train_budget(
    arm: speedup.Arm, workload: speedup.Workload, fraction: float, seed: int
) -> BudgetRun:
    """Trains `arm` for the whole of `workload` (one budget), evaluating once
    at the end."""
    run = speedup.train_to_target(arm, workload, seed, evaluate=False)
    return BudgetRun(
        fraction,
        seed,
        run.steps,
        run.final_accuracy,
        _depths(arm, run.steps),
        run.compile_wait,
    )


def _compiled_depths(arm: speedup.Arm, state, batch) -> dict[Any, Any]:
    """``{depth: step}`` of every compiled step the arm's sequence runs."""
    train_step = arm.train_step
    if train_step is None:
        return {None: arm.step}
    if train_step.freezing is None:
        return {None: train_step.lower(state, batch).compile()}
    # The programs of the planned run (the freezing warm-up's first), and
    # every depth of the sequence (a longer run reaches them all).
    sequence = np.asarray(train_step.freezing.sequence)
    depths = {train_step.freezing.canonical_depth(int(d)) for d in sequence}
    used: list[Any] = list(train_step.program_shares())
    used += sorted(depths - set(used))
    return {d: train_step.lower(state, batch, depth=d).compile() for d in used}


def depth_step_costs(
    arms: Sequence[speedup.Arm],
    workload: speedup.Workload,
    *,
    repetitions: int,
    steps: int,
) -> tuple[float, dict[str, dict[Any, float]]]:
    """Each arm's step time per freeze depth, as a ratio to plain Optax's.

    One interleaved run (`boostax.interleaved_timings`) of every compiled
    step of every arm (each freeze depth's executable on its own, chained
    over `steps` steps on one batch) and plain Optax's (the first arm).

    Returns:
      ``(plain seconds per step, {arm: {depth: ratio}})`` (depth ``None``
      without freezing).
    """
    batch = next(workload.batches(0, 0))
    runners, keys = {}, {}
    for arm in arms:
        state = arm.init(0)
        for depth, step in _compiled_depths(arm, state, batch).items():
            name = f"{arm.name} @ {depth}"
            keys[name] = (arm.name, depth)

            def run(step=step, state=state):
                for _ in range(steps):
                    state, _ = step(state, batch)
                return state

            runners[name] = run
    samples = boostax.interleaved_timings(
        runners, repetitions=repetitions, steps=steps
    )
    plain_name = next(iter(runners))
    plain = samples[plain_name]
    costs: dict[str, dict[Any, float]] = {}
    for name, (arm_name, depth) in keys.items():
        costs.setdefault(arm_name, {})[depth] = boostax.paired_ratio(
            samples[name], plain
        )
    return statistics.median(plain), costs


def run_seconds(run: BudgetRun, costs: dict[Any, float], plain_seconds: float):
    """The run's time: its steps at their depths' step costs."""
    if run.depths is None:
        return run.steps * costs[None] * plain_seconds
    return sum(costs[d] for d in run.depths) * plain_seconds


def time_to_reach(points: Sequence[tuple[float, float]], target: float):
    """When a curve of ``(seconds, accuracy)`` first reaches `target`.

    Linear between budgets; a curve whose smallest budget already reaches
    the target gets that budget's time (an upper bound: no smaller budget was
    trained). ``None``: never reached.
    """
    points = sorted(points)
    previous = None
    for seconds, accuracy in points:
        if accuracy >= target:
            if previous is None:
                return seconds
            t0, a0 = previous
            return t0 + (target - a0) / (accuracy - a0) * (seconds - t0)
        previous = (seconds, accuracy)
    return None


def _median(values):
    """The median over seeds, a miss (``None``) counting as the slowest:
    ``None`` when the median seed misses."""
    ordered = sorted(values, key=lambda v: -math.inf if v is None else v)
    if not ordered:
        return None
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    if any(v is None for v in middle):
        return None
    return statistics.fmean(middle)


def _seconds(run: BudgetRun) -> float:
    """`run.seconds`, which a summary needs (`run_seconds` sets it)."""
    if run.seconds is None:
        raise ValueError(
            f"The run at budget {run.fraction} seed {run.seed} has no "
            "`seconds`: set them from `depth_step_costs` (`run_seconds`)."
        )
    return run.seconds


def _budget_stats(
    arm_runs: Sequence[BudgetRun], budgets: Sequence[float], plain_time: float
) -> dict[str, dict[str, Any]]:
    """Per budget: the seeds' accuracies and the median time (also relative
    to `plain_time`, plain's full budget)."""
    stats = {}
    for fraction in budgets:
        at = [r for r in arm_runs if r.fraction == fraction]
        accuracies = [r.final_accuracy for r in at]
        seconds = statistics.median(_seconds(r) for r in at)
        stats[str(fraction)] = {
            "seeds": [r.seed for r in at],
            "accuracy": accuracies,
            "accuracy_median": statistics.median(accuracies),
            "accuracy_min": min(accuracies),
            "accuracy_max": max(accuracies),
            "seconds_median": seconds,
            "relative_time_median": seconds / plain_time,
            "steps": at[0].steps,
        }
    return stats


def runs_from_json(runs: dict[str, list[dict]]) -> dict[str, list[BudgetRun]]:
    """``{arm: [BudgetRun]}`` from a result's stored ``runs``."""
    return {
        arm: [BudgetRun(**run) for run in arm_runs]
        for arm, arm_runs in runs.items()
    }


def summarize(
    runs: dict[str, list[BudgetRun]], budgets: Sequence[float]
) -> dict[str, Any]:
    """Targets, per-seed speed-ups and the accuracy-vs-time curves.

    `runs` holds each arm's runs with `BudgetRun.seconds` set; the first
    arm is plain Optax.
    """
    plain_name = next(iter(runs))
    full = max(budgets)
    plain_full = [r for r in runs[plain_name] if r.fraction == full]
    target = statistics.median(r.final_accuracy for r in plain_full)
    plain_time = statistics.median(_seconds(r) for r in plain_full)
    # Plain's own time to the target, on its median curve: its full budget,
    # or less where plain plateaus before it (then the full budget would
    # flatter every arm).
    plain_curve = [
        (b["seconds_median"], b["accuracy_median"])
        for b in _budget_stats(runs[plain_name], budgets, plain_time).values()
    ]
    reference = {
        goal: time_to_reach(plain_curve, goal) or plain_time
        for goal in (target, target - TOLERANCE)
    }
    out: dict[str, Any] = {
        "target_accuracy": target,
        "tolerance": TOLERANCE,
        "plain_full_budget_seconds": plain_time,
        "plain_seconds_to_target": reference[target],
        "plain_seconds_to_target_within_tolerance": reference[
            target - TOLERANCE
        ],
        "arms": {},
    }
    for name, arm_runs in runs.items():
        seeds = sorted({r.seed for r in arm_runs})
        curves = {
            seed: [
                (_seconds(r), r.final_accuracy)
                for r in arm_runs
                if r.seed == seed
            ]
            for seed in seeds
        }
        # Only seeds trained at every budget make a curve.
        curves = {s: c for s, c in curves.items() if len(c) == len(budgets)}

        def speedups(goal, plain_seconds, curves=curves):
            values = {}
            for seed, curve in curves.items():
                seconds = time_to_reach(curve, goal)
                values[seed] = (
                    None if seconds is None else plain_seconds / seconds
                )
            return values

        exact = speedups(target, reference[target])
        tolerant = speedups(target - TOLERANCE, reference[target - TOLERANCE])
        # The issue's literal ratio: plain's whole full budget over the arm's
        # time to plain's full-budget accuracy.
        literal = speedups(target, plain_time)
        per_budget = _budget_stats(arm_runs, budgets, plain_time)
        full_runs = [r for r in arm_runs if r.fraction == full]
        out["arms"][name] = {
            "budgets": per_budget,
            "speedup": exact,
            "speedup_median": _median(exact.values()),
            "speedup_vs_full_budget": literal,
            "speedup_vs_full_budget_median": _median(literal.values()),
            "speedup_worst": None
            if any(v is None for v in exact.values())
            else min(exact.values(), default=None),
            "misses": sum(v is None for v in exact.values()),
            "speedup_within_tolerance": tolerant,
            "speedup_within_tolerance_median": _median(tolerant.values()),
            "speedup_within_tolerance_worst": None
            if any(v is None for v in tolerant.values())
            else min(tolerant.values(), default=None),
            "misses_within_tolerance": sum(
                v is None for v in tolerant.values()
            ),
            "full_budget_accuracy_median": statistics.median(
                r.final_accuracy for r in full_runs
            ),
            "full_budget_accuracy_delta": statistics.median(
                r.final_accuracy for r in full_runs
            )
            - target,
            "compile_wait": full_runs[0].compile_wait,
        }
    return out


def format_summary(summary: dict[str, Any]) -> str:
    """One row per arm: accuracy at each budget, speed-ups and misses."""
    arms = summary["arms"]
    budgets = list(next(iter(arms.values()))["budgets"])
    header = (
        f"{'arm':<24} "
        + " ".join(f"{'acc@' + b:>9} {'time':>5}" for b in budgets)
        + f" {'speed-up':>8} {'worst':>6} {'miss':>4}"
        + f" {'-0.2pt':>7} {'worst':>6} {'miss':>4} {'compile':>8}"
        + f" {'vs full':>7}"
    )
    plain_share = (
        summary["plain_seconds_to_target"]
        / summary["plain_full_budget_seconds"]
    )
    lines = [
        f"target: plain's full-budget accuracy {summary['target_accuracy']:.4f}"
        f" (median over seeds), which plain reaches in {plain_share:.2f} of "
        f"its full budget; time relative to plain's full budget; 'vs full': "
        f"speed-up over plain's whole full budget",
        header,
        "-" * len(header),
    ]

    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    for name, arm in arms.items():
        cells = " ".join(
            f"{arm['budgets'][b]['accuracy_median']:>9.4f} "
            f"{arm['budgets'][b]['relative_time_median']:>5.2f}"
            for b in budgets
        )
        lines.append(
            f"{name:<24} {cells} {fmt(arm['speedup_median'], '.2f'):>8} "
            f"{fmt(arm['speedup_worst'], '.2f'):>6} {arm['misses']:>4} "
            f"{fmt(arm['speedup_within_tolerance_median'], '.2f'):>7} "
            f"{fmt(arm['speedup_within_tolerance_worst'], '.2f'):>6} "
            f"{arm['misses_within_tolerance']:>4} "
            f"{arm['compile_wait']:>7.1f}s "
            f"{fmt(arm['speedup_vs_full_budget_median'], '.2f'):>7}"
        )
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: str, title: str) -> None:
    """Accuracy against relative time, one curve per arm (median over
    seeds, min-max bars), plain's full-budget accuracy dashed.

    The axis spans 5 points below that accuracy; a median below it is
    drawn on the axis's floor as a triangle, labelled with its value.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = summary["target_accuracy"] - 0.05
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, arm in summary["arms"].items():
        points = sorted(
            (
                b["relative_time_median"],
                b["accuracy_median"],
                b["accuracy_min"],
                b["accuracy_max"],
            )
            for b in arm["budgets"].values()
        )
        x, y, low, high = (np.array(v) for v in zip(*points, strict=True))
        shown = np.maximum(y, floor)
        line = axis.errorbar(
            x,
            shown,
            yerr=[
                shown - np.clip(low, floor, None),
                np.maximum(high, shown) - shown,
            ],
            marker="o",
            capsize=3,
            label=name,
        )
        for xi, yi in zip(x[y < floor], y[y < floor], strict=True):
            color = line[0].get_color()
            axis.plot(xi, floor, marker="v", markersize=9, color=color)
            axis.annotate(
                f"{yi:.1%}",
                (xi, floor),
                textcoords="offset points",
                xytext=(6, 6),
                fontsize=8,
                color=color,
            )
    axis.axhline(
        summary["target_accuracy"],
        color="gray",
        linestyle="--",
        label="plain, full budget (median)",
    )
    axis.set_ylim(floor - 0.002, 1.0 + 0.002)
    axis.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    axis.set_xlabel("training time / plain Optax's full budget")
    axis.set_ylabel("final test accuracy")
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def measure(
    makers: Sequence[Maker],
    workload: speedup.Workload,
    *,
    budgets: Sequence[float] = BUDGETS,
    seeds: int = 3,
    full_budget_seeds: int = 5,
    repetitions: int = 10,
    steps: int = 5,
    progress: Callable[[str], None] = print,
    reuse: dict[str, Sequence[BudgetRun]] | None = None,
) -> tuple[dict[str, list[BudgetRun]], dict[str, Any]]:
    """Every arm at every budget (`seeds` seeds; `full_budget_seeds` at the
    full one), the step costs per depth, and the summary.

    The first maker must be plain Optax's. `reuse` holds runs of an earlier
    measurement of the same code (``{arm: runs}``, e.g. plain Optax's, whose
    training is deterministic): an arm found there at a budget and seed is
    not trained again; its time is still taken from this measurement's
    step costs.
    """
    reused = {
        (name, r.fraction, r.seed): r
        for name, arm_runs in (reuse or {}).items()
        for r in arm_runs
    }
    runs: dict[str, list[BudgetRun]] = {m.name: [] for m in makers}
    full_arms: list[speedup.Arm] = []  # the full budget's
    for fraction in sorted(budgets):
        budget_workload = budget(workload, fraction)
        arms = [m.make(budget_workload) for m in makers]
        count = full_budget_seeds if fraction == max(budgets) else seeds
        for seed in range(count):
            order = arms if seed % 2 == 0 else arms[::-1]
            for arm in order:
                run = reused.get((arm.name, fraction, seed))
                source = "reused" if run else "trained"
                if run is None:
                    run = train_budget(arm, budget_workload, fraction, seed)
                runs[arm.name].append(dataclasses.replace(run, seconds=None))
                progress(
                    f"budget {fraction:g} ({budget_workload.epochs} epochs) "
                    f"seed {seed} {arm.name:<24} acc {run.final_accuracy:.4f} "
                    f"compile wait {run.compile_wait:.1f} s ({source})"
                )
        if fraction == max(budgets):
            full_arms = arms
    plain_seconds, costs = depth_step_costs(
        full_arms,
        budget(workload, max(budgets)),
        repetitions=repetitions,
        steps=steps,
    )
    for name, arm_runs in runs.items():
        for run in arm_runs:
            run.seconds = run_seconds(run, costs[name], plain_seconds)
    summary = summarize(runs, budgets)
    summary["plain_seconds_per_step"] = plain_seconds
    summary["step_cost_by_depth"] = {
        name: {str(d): ratio for d, ratio in by_depth.items()}
        for name, by_depth in costs.items()
    }
    return runs, summary
