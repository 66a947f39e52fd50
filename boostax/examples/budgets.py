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
  time is read off its own median curve up to its full budget: the full
  budget, or less where it plateaus earlier (dividing its whole full budget
  instead, kept as ``speedup_vs_full_budget``, would flatter every arm,
  plain included). Medians count a miss as the slowest seed.
- **past the full budget**: every arm also trains at 1.5x the full budget
  (`BUDGETS`), so an arm that reaches plain's full-budget accuracy only
  after plain's full time is credited with the time it needs (a speed-up
  below 1) instead of a miss, as Composer compares Pareto curves.

The metric is a `Metric`: test accuracy (`ACCURACY`, higher is better) for
the ResNets, validation loss (`LOSS`, lower is better) for the language
model (``benchmarks/transformer_budgets.py``). The summary's keys keep the
word "accuracy" (``target_accuracy``, ``accuracy_median``, ...) for either;
its ``metric`` says which one they hold.

Only the optimizer state holds the schedule's horizon
(``optax.inject_hyperparams``), so every budget runs the same compiled
programs.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import textwrap
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

import numpy as np

import boostax
from boostax.examples import speedup

#: Fractions of the plateau length trained: the full budget (`FULL`) and
#: past it, where an arm slower than plain Optax still reaches its accuracy.
BUDGETS = (0.25, 0.5, 1.0, 1.5)
#: The full budget: plain Optax's target and time are read there.
FULL = 1.0
#: An arm may reach plain's full-budget accuracy this much lower (0.2 point).
TOLERANCE = 0.002


class Metric(NamedTuple):
    """What the protocol reads at the end of each run.

    Attributes:
      name: e.g. ``"test accuracy"``.
      higher_is_better: accuracy: ``True``; a loss: ``False``.
      tolerance: how much worse than plain's full-budget value an arm may
        end and still count as reaching it (the ``within_tolerance`` keys).
      label: the table's short column name.
    """

    name: str
    higher_is_better: bool
    tolerance: float
    label: str

    def worse(self, value: float, by: float) -> float:
        """`value` made worse by `by`."""
        return value - by if self.higher_is_better else value + by

    def reaches(self, value: float, target: float) -> bool:
        """Whether `value` is at least as good as `target`."""
        return value >= target if self.higher_is_better else value <= target


#: Test accuracy, 0.2 point of tolerance.
ACCURACY = Metric("test accuracy", True, TOLERANCE, "acc")
#: Validation loss (nats), 0.01 nat of tolerance (0.4% of the text
#: workload's loss; ten times the paired standard error of a gap on its
#: 1.1 MB validation split, below the spread over seeds).
LOSS = Metric("validation loss", False, 0.01, "loss")


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


def level_maker(
    name: str,
    level: str,
    config: dict | Callable[[int], dict] | None = None,
) -> Maker:
    """A boost level's arm; `config` may be a function of the run's length
    in updates (a preset such as `boostax.recipe`)."""

    def make(workload):
        given = config(workload.total_steps) if callable(config) else config
        return speedup.level_arm(workload, level, given, name=name)

    return Maker(name, make)


def fn_head_maker(name: str, **fn_head) -> Maker:
    """The FN head alone, every BatchNorm kept (`speedup.fn_head_arm`)."""
    return Maker(
        name, lambda workload: speedup.fn_head_arm(workload, name, **fn_head)
    )


#: The arms compared with plain Optax, as ``(row name, level, config)``:
#: MindSpore's O1 and boostax's O1 recipe, `boostax.o1_recipe` (the demo's
#: and ``benchmarks/speedup.py --budgets``'s).
ROWS = (
    ("O1", "O1", None),
    ("O1 recipe", "O1", boostax.o1_recipe()),
)


def makers(rows: Sequence[tuple[str, str, Any]]) -> list[Maker]:
    """Plain Optax's maker, then one per ``(name, level, config)`` row.

    A row of level ``"fn_head"`` is `fn_head_maker` with `config` as its
    options; any other is `level_maker`.
    """
    return [plain_maker()] + [
        fn_head_maker(name, **(config or {}))
        if level == "fn_head"
        else level_maker(name, level, config)
        for name, level, config in rows
    ]


@dataclasses.dataclass
class BudgetRun:
    """One arm trained from one seed for one budget.

    Attributes:
      fraction: the budget, a fraction of the full one.
      seed: the seed (initialization and data order).
      steps: steps trained.
      final_accuracy: test accuracy at the end.
      depths: the compiled step of every step (`TrainStep.program_at`):
        its freeze depth, or ``"masked"`` in the freezing warm-up; with a
        schedule of the batch's shape (image sizes, sequence lengths), a
        ``(depth, size)`` pair; ``None`` with one program.
      compile_wait: seconds the run waited for compilation.
      seconds: the run's time from `depth_step_costs` (set afterwards).
    """

    fraction: float
    seed: int
    steps: int
    final_accuracy: float
    depths: list[Any] | None
    compile_wait: float
    seconds: float | None = None


def _scheduled(train_step) -> bool:
    """Whether `train_step` runs several programs: freeze depths, or a
    schedule of the batch's shape (sequence lengths, image sizes)."""
    return train_step is not None and (
        train_step.freezing is not None
        or getattr(train_step, "seq_len_warmup", None) is not None
    )


def _depths(arm: speedup.Arm, steps: int) -> list[Any] | None:
    if not _scheduled(arm.train_step):
        return None
    return [arm.train_step.program_at(i) for i in range(steps)]


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


def _compiled_depths(
    arm: speedup.Arm, state, batch, programs: Collection[Any] | None = None
) -> dict[Any, Any]:
    """``{depth: step}`` of the compiled steps to time: `programs` (the
    depths, or ``"masked"``, the runs ran), or every one the arm's sequence
    can run."""
    train_step = arm.train_step
    if train_step is None:
        return {None: arm.step}
    if not _scheduled(train_step):
        return {None: train_step.lower(state, batch).compile()}
    if programs is not None:
        # Only what the runs ran: a run inside the freezing warm-up never
        # compiles the depths' own programs, and timing them would.
        used: list[Any] = sorted(programs, key=str)
    elif train_step.freezing is None:  # image sizes or sequence lengths
        used = list(train_step.program_shares())
    else:
        # The programs of the planned run (the freezing warm-up's first),
        # and every depth of the sequence (a longer run reaches them all).
        sequence = np.asarray(train_step.freezing.sequence)
        depths = {train_step.freezing.canonical_depth(int(d)) for d in sequence}
        used = list(train_step.program_shares())
        used += sorted(depths - set(used))
    return {d: train_step.lower(state, batch, depth=d).compile() for d in used}


def depth_step_costs(
    arms: Sequence[speedup.Arm],
    workload: speedup.Workload,
    *,
    repetitions: int,
    steps: int,
    programs: dict[str, Collection[Any]] | None = None,
) -> tuple[float, dict[str, dict[Any, float]]]:
    """Each arm's step time per freeze depth, as a ratio to plain Optax's.

    One interleaved run (`boostax.measure.interleaved_timings`) of every
    compiled step of every arm (each freeze depth's executable on its own,
    chained over `steps` steps on one batch) and plain Optax's (the first arm).

    Args:
      arms: the arms, plain Optax's first.
      workload: the batch's (seed 0's first).
      repetitions: interleaved repetitions.
      steps: steps per repetition.
      programs: per arm name, the programs to time (those its runs ran,
        `programs_run`); default: every one its freezing sequence can run.

    Returns:
      ``(plain seconds per step, {arm: {depth: ratio}})`` (depth ``None``
      without freezing).
    """
    batch = next(workload.batches(0, 0))
    runners, keys = {}, {}
    for arm in arms:
        state = arm.init(0)
        ran = None if programs is None else programs[arm.name]
        for depth, step in _compiled_depths(arm, state, batch, ran).items():
            name = f"{arm.name} @ {depth}"
            keys[name] = (arm.name, depth)

            def run(step=step, state=state):
                for _ in range(steps):
                    state, _ = step(state, batch)
                return state

            runners[name] = run
    samples = boostax.measure.interleaved_timings(
        runners, repetitions=repetitions, steps=steps
    )
    plain_name = next(iter(runners))
    plain = samples[plain_name]
    costs: dict[str, dict[Any, float]] = {}
    for name, (arm_name, depth) in keys.items():
        costs.setdefault(arm_name, {})[depth] = boostax.measure.paired_ratio(
            samples[name], plain
        )
    return statistics.median(plain), costs


def programs_run(runs: Sequence[BudgetRun]) -> set[Any]:
    """The compiled steps `runs` ran: their depths (and ``"masked"``, the
    freezing warm-up's), ``{None}`` without freezing."""
    return {d for run in runs for d in (run.depths or (None,))}


def run_seconds(run: BudgetRun, costs: dict[Any, float], plain_seconds: float):
    """The run's time: its steps at their depths' step costs."""
    if run.depths is None:
        return run.steps * costs[None] * plain_seconds
    return sum(costs[d] for d in run.depths) * plain_seconds


def time_to_reach(
    points: Sequence[tuple[float, float]],
    target: float,
    metric: Metric = ACCURACY,
):
    """When a curve of ``(seconds, value)`` first reaches `target`.

    Linear between budgets; a curve whose smallest budget already reaches
    the target gets that budget's time (an upper bound: no smaller budget was
    trained). ``None``: never reached.

    Args:
      points: the curve, in any order.
      target: the value to reach.
      metric: whether higher (accuracy) or lower (a loss) values are better.
    """
    points = sorted(points)
    previous = None
    for seconds, accuracy in points:
        if metric.reaches(accuracy, target):
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


def check_budgets(budgets: Sequence[float]) -> tuple[float, ...]:
    """`budgets` sorted, checked to hold the full budget (`FULL`)."""
    budgets = tuple(sorted(float(b) for b in budgets))
    if FULL not in budgets or any(b <= 0 for b in budgets):
        raise ValueError(
            f"`budgets` must be positive fractions of the full budget that "
            f"include it ({FULL}), got {list(budgets)}."
        )
    return budgets


def summarize(
    runs: dict[str, list[BudgetRun]],
    budgets: Sequence[float],
    metric: Metric = ACCURACY,
) -> dict[str, Any]:
    """Targets, per-seed speed-ups and the accuracy-vs-time curves.

    `runs` holds each arm's runs with `BudgetRun.seconds` set; the first
    arm is plain Optax. The target is plain's median at the full budget
    (`FULL`); plain's time to it is read off its curve up to that budget,
    every arm's off its whole curve (budgets past the full one included).
    `metric` says which way is better (the runs' ``final_accuracy`` holds
    its value).
    """
    budgets = check_budgets(budgets)
    plain_name = next(iter(runs))
    full = FULL
    plain_full = [r for r in runs[plain_name] if r.fraction == full]
    target = statistics.median(r.final_accuracy for r in plain_full)
    plain_time = statistics.median(_seconds(r) for r in plain_full)
    tolerant_target = metric.worse(target, metric.tolerance)
    # Plain's own time to the target, on its median curve up to its full
    # budget: the full budget, or less where plain plateaus before it (then
    # the full budget would flatter every arm).
    plain_curve = [
        (b["seconds_median"], b["accuracy_median"])
        for fraction, b in _budget_stats(
            runs[plain_name], budgets, plain_time
        ).items()
        if float(fraction) <= full
    ]
    reference = {
        goal: time_to_reach(plain_curve, goal, metric) or plain_time
        for goal in (target, tolerant_target)
    }
    out: dict[str, Any] = {
        "metric": {
            "name": metric.name,
            "higher_is_better": metric.higher_is_better,
        },
        "full_budget": full,
        "target_accuracy": target,
        "tolerance": metric.tolerance,
        "plain_full_budget_seconds": plain_time,
        "plain_seconds_to_target": reference[target],
        "plain_seconds_to_target_within_tolerance": reference[tolerant_target],
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
                seconds = time_to_reach(curve, goal, metric)
                values[seed] = (
                    None if seconds is None else plain_seconds / seconds
                )
            return values

        exact = speedups(target, reference[target])
        tolerant = speedups(tolerant_target, reference[tolerant_target])
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


def _metric(summary: dict[str, Any]) -> Metric:
    """The summary's `Metric` (accuracy for summaries that predate it)."""
    stored = summary.get("metric")
    if stored is None or stored["name"] == ACCURACY.name:
        return ACCURACY
    return LOSS


def format_summary(summary: dict[str, Any]) -> str:
    """One row per arm: accuracy (or loss) at each budget, speed-ups and
    misses."""
    arms = summary["arms"]
    budgets = list(next(iter(arms.values()))["budgets"])
    metric = _metric(summary)
    tolerance = (
        f"-{summary['tolerance'] * 100:g}pt"
        if metric.higher_is_better
        else f"+{summary['tolerance']:g}"
    )
    header = (
        f"{'arm':<24} "
        + " ".join(f"{metric.label + '@' + b:>9} {'time':>5}" for b in budgets)
        + f" {'speed-up':>8} {'worst':>6} {'miss':>4}"
        + f" {tolerance:>7} {'worst':>6} {'miss':>4} {'compile':>8}"
        + f" {'vs full':>7}"
    )
    plain_share = (
        summary["plain_seconds_to_target"]
        / summary["plain_full_budget_seconds"]
    )
    lines = [
        f"target: plain's full-budget {metric.name} "
        f"{summary['target_accuracy']:.4f}"
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


class Spread(NamedTuple):
    """An arm's speed-up to plain's full-budget value over the seeds.

    Attributes:
      median: the summary's median (``None`` when the median seed misses).
      min: the smallest speed-up of the seeds that reach the target.
      max: the largest (both ``None`` when none does).
      misses: how many seeds never reach it.
      seeds: how many seeds trained every budget.
    """

    median: float | None
    min: float | None
    max: float | None
    misses: int
    seeds: int


def speedup_spread(arm: dict[str, Any]) -> Spread:
    """The `Spread` of one arm of a `summarize` summary."""
    reached = [v for v in arm["speedup"].values() if v is not None]
    return Spread(
        arm["speedup_median"],
        min(reached, default=None),
        max(reached, default=None),
        arm["misses"],
        len(arm["speedup"]),
    )


#: What the columns of `format_time_to_target` mean.
TIME_TO_TARGET_LEGEND = (
    "{label}: final {metric} at each budget, median over seeds; time: the "
    "run's training time relative to plain Optax's full budget (its steps "
    "x each compiled step's cost, timed interleaved against plain's step); "
    "speed-up: the time plain needs for its full-budget {metric} over the "
    "time the arm needs to reach it on its own {metric}-vs-time curve "
    "(linear between budgets), median and min-max over the seeds that "
    "reach it; misses: seeds that never reach it; compile: {compile}."
)


def format_time_to_target(
    summary: dict[str, Any],
    *,
    labels: Sequence[str] | None = None,
    compile_waits: dict[str, float] | None = None,
    compile_legend: str = "seconds the full budget's first run waited for "
    "compilation",
) -> str:
    """One row per arm: its value and time at each budget, then its time
    to plain's full-budget value (speed-up, spread, misses) and compile
    wait; the legend below (`TIME_TO_TARGET_LEGEND`).

    Args:
      summary: `summarize`'s (or `measure`'s) summary.
      labels: a heading per budget (default: its fraction, e.g. ``0.5x``).
      compile_waits: seconds per arm for the compile column (default: the
        summary's ``compile_wait``, its full budget's first run).
      compile_legend: what the compile column holds, for the legend.
    """
    arms = summary["arms"]
    fractions = list(next(iter(arms.values()))["budgets"])
    labels = list(labels or [f"{float(f):g}x" for f in fractions])
    if len(labels) != len(fractions):
        raise ValueError(
            f"`labels` must give one heading per budget ({fractions}), got "
            f"{labels}."
        )
    metric = _metric(summary)
    target = summary["target_accuracy"]

    def value(v):
        return f"{v:.2%}" if metric.higher_is_better else f"{v:.4f}"

    waits = compile_waits or {n: a["compile_wait"] for n, a in arms.items()}
    width = max(len(name) for name in arms)
    to = f"to plain's {value(target)}"
    head = [f"{'':<{width}}", f"{'arm':<{width}}"]
    for label in labels:
        head[0] += f"  {label:<15}"
        head[1] += f"  {metric.label:<7} {'time':<6}"
    head[0] += f"  {to:<19} {'':<7} {'compile':>7}"
    head[1] += f"  {'speed-up (min-max)':<19} {'misses':<7} {'wait':>7}"
    lines = head
    for name, arm in arms.items():
        line = f"{name:<{width}}"
        for fraction in fractions:
            at = arm["budgets"][fraction]
            line += (
                f"  {value(at['accuracy_median']):<7} "
                f"{at['relative_time_median']:<6.2f}"
            )
        spread = speedup_spread(arm)
        if spread.median is None:
            speedup = "not reached"
        else:
            speedup = (
                f"{spread.median:.2f}x ({spread.min:.2f}-{spread.max:.2f})"
            )
        misses = f"{spread.misses} of {spread.seeds}"
        line += f"  {speedup:<19} {misses:<7} {waits[name]:>5.1f} s"
        lines.append(line.rstrip())
    legend = TIME_TO_TARGET_LEGEND.format(
        label=metric.label, metric=metric.name, compile=compile_legend
    )
    return "\n".join(lines + ["", textwrap.fill(legend, width=100)])


def plot(
    summary: dict[str, Any], path: str, title: str, *, span: float = 0.05
) -> None:
    """Accuracy (or loss) against relative time, one curve per arm (median
    over seeds, min-max bars), plain's full-budget value dashed.

    The axis spans `span` (5 points of accuracy) on the worse side of that
    value; a median beyond it is drawn on the axis's edge as a triangle,
    labelled with its value. A loss's axis is flipped, so that better is up
    for either metric.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = _metric(summary)
    sign = 1.0 if metric.higher_is_better else -1.0
    target = summary["target_accuracy"]
    # Drawn as sign * value: larger is better, the floor below the target.
    floor = sign * target - span
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, arm in summary["arms"].items():
        points = sorted(
            (
                b["relative_time_median"],
                sign * b["accuracy_median"],
                sign * b["accuracy_min"],
                sign * b["accuracy_max"],
            )
            for b in arm["budgets"].values()
        )
        x, y, low, high = (np.array(v) for v in zip(*points, strict=True))
        low, high = np.minimum(low, high), np.maximum(low, high)
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
                f"{yi:.1%}" if metric.higher_is_better else f"{-yi:.3f}",
                (xi, floor),
                textcoords="offset points",
                xytext=(6, 6),
                fontsize=8,
                color=color,
            )
    axis.axhline(
        sign * target,
        color="gray",
        linestyle="--",
        label="plain, full budget (median)",
    )
    axis.set_xlabel("training time / plain Optax's full budget")
    if metric.higher_is_better:
        axis.set_ylim(floor - 0.002, 1.0 + 0.002)
        axis.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        axis.set_ylabel("final test accuracy")
    else:
        axis.set_ylim(bottom=floor - span / 50)
        axis.yaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(lambda v, _: f"{-v:.2f}")
        )
        axis.set_ylabel(f"final {metric.name} (nats; better is up)")
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


class Protocol(NamedTuple):
    """How `measure` trains and times a workload's arms.

    Attributes:
      scale: ``scale(workload, fraction) -> workload`` of that budget.
      train: ``train(arm, workload, fraction, seed) -> BudgetRun``.
      step_costs: ``step_costs(arms, workload, repetitions=, steps=,
        programs=) -> (plain seconds per step, {arm: {depth: ratio}})`` of
        the arms of the largest budget (plain Optax's first), covering at
        least ``programs``: per arm, the programs its runs ran
        (`programs_run`).
      metric: what `train` reads at the end of a run.
    """

    scale: Callable[[Any, float], Any]
    train: Callable[[Any, Any, float, int], BudgetRun]
    step_costs: Callable[..., tuple[float, dict[str, dict[Any, float]]]]
    metric: Metric = ACCURACY


def resnet_protocol() -> Protocol:
    """The ResNets' (`speedup.Workload`): epochs, test accuracy, step costs
    per freeze depth."""
    return Protocol(budget, train_budget, depth_step_costs)


def measure(
    makers: Sequence[Maker],
    workload: Any,
    *,
    budgets: Sequence[float] = BUDGETS,
    seeds: int = 3,
    full_budget_seeds: int = 5,
    repetitions: int = 10,
    steps: int = 5,
    progress: Callable[[str], None] = print,
    reuse: dict[str, Sequence[BudgetRun]] | None = None,
    protocol: Protocol | None = None,
) -> tuple[dict[str, list[BudgetRun]], dict[str, Any]]:
    """Every arm at every budget (`seeds` seeds; `full_budget_seeds` at the
    full one, `FULL`), the step costs per depth, and the summary.

    The first maker must be plain Optax's. `reuse` holds runs of an earlier
    measurement of the same code (``{arm: runs}``, e.g. plain Optax's, whose
    training is deterministic): an arm found there at a budget and seed is
    not trained again; its time is still taken from this measurement's
    step costs. `protocol`: how to train and time (default
    `resnet_protocol`, for a `speedup.Workload`).
    """
    budgets = check_budgets(budgets)
    protocol = protocol or resnet_protocol()
    reused = {
        (name, r.fraction, r.seed): r
        for name, arm_runs in (reuse or {}).items()
        for r in arm_runs
    }
    runs: dict[str, list[BudgetRun]] = {m.name: [] for m in makers}
    full_arms: list[speedup.Arm] = []  # the largest budget's
    for fraction in budgets:
        budget_workload = protocol.scale(workload, fraction)
        arms = [m.make(budget_workload) for m in makers]
        count = full_budget_seeds if fraction == FULL else seeds
        for seed in range(count):
            order = arms if seed % 2 == 0 else arms[::-1]
            for arm in order:
                run = reused.get((arm.name, fraction, seed))
                source = "reused" if run else "trained"
                if run is None:
                    run = protocol.train(arm, budget_workload, fraction, seed)
                runs[arm.name].append(dataclasses.replace(run, seconds=None))
                progress(
                    f"budget {fraction:g} ({run.steps} steps) seed {seed} "
                    f"{arm.name:<24} {protocol.metric.label} "
                    f"{run.final_accuracy:.4f} compile wait "
                    f"{run.compile_wait:.1f} s ({source})"
                )
        full_arms = arms  # the largest budget's: every depth it runs
    plain_seconds, costs = protocol.step_costs(
        full_arms,
        protocol.scale(workload, budgets[-1]),
        repetitions=repetitions,
        steps=steps,
        programs={name: programs_run(r) for name, r in runs.items()},
    )
    for name, arm_runs in runs.items():
        for run in arm_runs:
            run.seconds = run_seconds(run, costs[name], plain_seconds)
    summary = summarize(runs, budgets, protocol.metric)
    summary["plain_seconds_per_step"] = plain_seconds
    summary["step_cost_by_depth"] = {
        name: {str(d): ratio for d, ratio in by_depth.items()}
        for name, by_depth in costs.items()
    }
    return runs, summary
