# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Does boost pay on images? Each method alone, on plain Optax, and composed.

Two image workloads (`boostax.examples.speedup`): ``digits32`` (the digits
at CIFAR's shape, bottleneck ResNet) and ``shapes`` (generated 20x20x3
shapes in clutter, `boostax.examples.shapes`, 2,000 test images, where
plain Optax is not saturated). On each:

1. **validation split**: images carved from the training set
   (`selection.carve_validation`); every run below trains on the rest.
2. **selection**: every arm's settings (learning rate x the method's own
   knob: label smoothing's alpha, the average's decay, resizing's initial
   scale) chosen by mean validation accuracy of full-budget runs from 2
   seeds (`selection.select`); a learning rate chosen on the grid's edge
   doubles (or halves) past it, up to twice, until the choice is inside
   the range tried (every arm of the first shapes run chose the top). The
   grid, every point's validation accuracies and the choice go into the
   JSON. Composed arms take, at their own arms'
   chosen knobs, the methods that buy accuracy per step whose own arm beat
   plain Optax on validation, and those that make steps cheaper whose own
   arm stayed within two binomial standard errors of plain's
   (`paying_methods`); they choose their learning rate. The test set is
   read only for the chosen settings.
3. **budgets** (`boostax.examples.budgets`): every arm at several budgets
   (schedule stretched to each) and seeds, time in plain step-time units
   from interleaved step costs (each compiled program: freeze depth, image
   size), test accuracy at the end.
4. **report**: per arm and budget the test accuracy (median, min-max);
   the speed-up to plain's full-budget accuracy with a 90% bootstrap
   interval over seeds (`intervals.speedup_interval`, 2,000 resamples,
   misses counted as 0 and shown), split into steps to target (accuracy
   bought back) and step cost (cheaper steps); the binomial standard error
   of the test accuracy at plain's level.

Arms: plain Optax; plain + each method (level O0 with the method's
BoostConfig section); MindSpore's O1; the O1 recipe (`boostax.o1_recipe`:
LessBN + progressive freezing); plain + every method; the O1 recipe + every
method; `boostax.recipe` (its default horizontal flip, both flips or none,
test-time translations of 0 or 1 pixel and progressive resizing's mode,
resize or crop, chosen on validation: flips must keep the label). A
method whose section this boostax lacks is skipped with a printed note.

    python benchmarks/image_methods.py                  # both workloads
    python benchmarks/image_methods.py --quick          # smoke test
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import _common

import boostax
from boostax.examples import budgets, intervals, selection, speedup

#: Seeds of the selection's runs (apart from the measurement's 0, 1, ...).
SELECTION_SEED = 1000


class Method(NamedTuple):
    """A method of issue 44 as a BoostConfig section.

    Attributes:
      section: its config section.
      knob: the setting the selection chooses.
      values: the knob's grid.
      settings: ``settings(value, total_steps) -> the section's dict``.
      cheapens_steps: whether the method buys time by cheaper steps (its
        arm is judged at equal steps, so it joins a composition when it
        costs no validation accuracy beyond noise, `paying_methods`),
        rather than by accuracy per step (it joins when it beats plain).
    """

    section: str
    knob: str
    values: tuple[Any, ...]
    settings: Callable[[Any, int], dict[str, Any]]
    cheapens_steps: bool = False


METHODS = {
    "label_smoothing": Method(
        "label_smoothing",
        "alpha",
        (0.1, 0.2),
        lambda v, steps: {"enabled": True, "alpha": v},
    ),
    "weight_averaging": Method(
        "weight_averaging",
        "decay",
        (0.95, 0.98),
        lambda v, steps: {"enabled": True, "decay": v},
    ),
    "progressive_resizing": Method(
        "progressive_resizing",
        "initial_scale",
        (0.5, 0.75),
        lambda v, steps: {
            "enabled": True,
            "initial_scale": v,
            "total_steps": steps,
        },
        cheapens_steps=True,
    ),
    "test_time_flips": Method(
        "test_time_flips",
        "flips",
        ("horizontal", "horizontal+vertical"),
        lambda v, steps: {"enabled": True, "flips": v.split("+")},
    ),
}
#: Learning rates tried, as multiples of the workload's.
LR_MULTIPLES = (0.5, 1.0, 2.0)


def available(method: Method) -> bool:
    """Whether this boostax has the method's config section."""
    try:
        boostax.boost_config("O0", {method.section: {}})
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class ArmSpec:
    """One arm: its level, base config and methods.

    Attributes:
      name: the row name.
      level: ``"plain"`` (the hand-written Optax step) or a boost level.
      base: the level's config without the methods (``None``: the level's
        own), or a function of the run's updates returning it (a preset
        such as `boostax.recipe`).
      methods: the `METHODS` keys applied.
      own_knobs: whether the selection chooses the methods' knobs here
        (one method alone); else they are the single-method arms' choices.
      composed: whether the selection keeps, of `methods`, those whose own
        arm (plain + the method) beat plain Optax on validation.
      base_knobs: ``(keyword, values)`` pairs of a preset `base` the
        selection chooses (values as JSON-ready strings, mapped by
        `preset_value`): the recipe's flips, which must keep the
        label, so validation decides whether the data keeps it, and its
        test-time translation; a ``"section.key"`` sets that key of the
        preset's config (progressive resizing's mode).
    """

    name: str
    level: str
    base: dict | Callable[..., dict] | None = None
    methods: tuple[str, ...] = ()
    own_knobs: bool = False
    composed: bool = False
    base_knobs: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def grid(
        self, workload: speedup.Workload, lr_multiples, knob_values=None
    ) -> dict:
        grid: dict[str, list] = {
            "learning_rate": [m * workload.learning_rate for m in lr_multiples]
        }
        if self.own_knobs:
            for name in self.methods:
                values = METHODS[name].values[:knob_values]
                grid[METHODS[name].knob] = list(values)
        for keyword, values in self.base_knobs:
            grid[keyword] = list(values[:knob_values])
        return grid

    def maker(self, settings: dict, knobs: dict[str, float]) -> budgets.Maker:
        """The arm at `settings` (its learning rate, its own knob), the
        other methods at `knobs` (``{method: value}``)."""

        def make(workload: speedup.Workload) -> speedup.Arm:
            workload = dataclasses.replace(
                workload, learning_rate=settings["learning_rate"]
            )
            if self.level == "plain":
                return speedup.plain_arm(workload)
            base = self.base
            # (a run before a knob existed: its default)
            given = [k for k, _ in self.base_knobs if k in settings]
            if callable(base):
                base = base(
                    workload.total_steps,
                    **{
                        keyword: preset_value(settings[keyword])
                        for keyword in given
                        if "." not in keyword
                    },
                )
            config = copy.deepcopy(base or {})
            for path in (k for k in given if "." in k):
                section, key = path.split(".")
                config[section][key] = settings[path]
            for name in self.methods:
                method = METHODS[name]
                value = settings.get(method.knob, knobs.get(name))
                config[method.section] = method.settings(
                    value, workload.total_steps
                )
            return speedup.level_arm(
                workload, self.level, config or None, name=self.name
            )

        return budgets.Maker(self.name, make)


def preset_value(value: str) -> Any:
    """A preset knob's grid string as the preset's argument: ``"none"`` is
    None, digits an int, ``"a+b"`` the list ``["a", "b"]``."""
    if value == "none":
        return None
    return int(value) if value.isdigit() else value.split("+")


def arm_specs() -> list[ArmSpec]:
    """Plain, plain + each method, O1, the O1 recipe, plain + every
    method, the O1 recipe + every method, the recipe (in selection
    order)."""
    every = tuple(METHODS)
    return [
        ArmSpec(speedup.PLAIN, "plain"),
        *(
            ArmSpec(f"plain + {name}", "O0", methods=(name,), own_knobs=True)
            for name in METHODS
        ),
        ArmSpec("O1", "O1"),
        ArmSpec("O1 recipe", "O1", boostax.o1_recipe()),
        ArmSpec("plain + methods", "O0", methods=every, composed=True),
        ArmSpec(
            "O1 recipe + methods",
            "O1",
            boostax.o1_recipe(),
            methods=every,
            composed=True,
        ),
        # The preset as a user takes it: its knobs were the composition's
        # on the shapes' validation; whether its default horizontal flip
        # keeps this data's labels is for validation to say (digits: no).
        ArmSpec(
            "recipe",
            "O1",
            boostax.recipe,
            base_knobs=(
                ("flips", ("horizontal", "horizontal+vertical", "none")),
                ("translate", ("0", "1")),
                ("progressive_resizing.mode", ("resize", "crop")),
            ),
        ),
    ]


def runnable(specs, names=None) -> tuple[list[ArmSpec], dict[str, str]]:
    """The arms to run (those named, if `names`), and a note per arm
    skipped because a method of it has not landed in this boostax."""
    missing = [n for n, m in METHODS.items() if not available(m)]
    chosen, skipped = [], {}
    for spec in specs:
        if names and spec.name not in names and spec.level != "plain":
            continue
        lacking = [m for m in spec.methods if m in missing]
        if lacking:
            skipped[spec.name] = (
                f"skipped: this boostax has no config section {lacking}"
            )
            print(f"NOTE: arm {spec.name!r} {skipped[spec.name]}", flush=True)
            continue
        chosen.append(spec)
    return chosen, skipped


def paying_methods(
    methods: tuple[str, ...], record: dict[str, Any], validation_count: int
) -> dict[str, dict[str, Any]]:
    """Which of `methods` join a composed arm, and why.

    The selection trains every arm for the same number of steps, so a
    method is judged by what it sells: one that buys accuracy per step
    joins when its own arm (plain + the method, at its chosen settings)
    beat plain Optax's validation accuracy; one that buys time by cheaper
    steps (`Method.cheapens_steps`) joins when its validation accuracy is
    not below plain's by more than two binomial standard errors of the
    validation split (non-inferiority: at equal steps it only has to cost
    nothing beyond the split's noise).

    Returns:
      ``{method: {"validation_accuracy", "plain_validation_accuracy",
      "rule", "joined"}}`` for each of `methods` with a selected arm.
    """
    plain = record[speedup.PLAIN]["chosen_validation_accuracy"]
    margin = 2 * intervals.binomial_standard_error(plain, validation_count)
    out = {}
    for name in methods:
        arm = record.get(f"plain + {name}", {})
        if "chosen_validation_accuracy" not in arm:
            continue
        accuracy = arm["chosen_validation_accuracy"]
        if METHODS[name].cheapens_steps:
            rule = f"cheaper steps: validation >= plain - {margin:.4f}"
            joined = accuracy >= plain - margin
        else:
            rule = "accuracy per step: validation > plain"
            joined = accuracy > plain
        out[name] = {
            "validation_accuracy": accuracy,
            "plain_validation_accuracy": plain,
            "rule": rule,
            "joined": bool(joined),
        }
    return out


def choose(
    specs: list[ArmSpec],
    validation: speedup.Workload,
    args: argparse.Namespace,
) -> tuple[list[budgets.Maker], dict[str, Any]]:
    """Runs the selection of every arm on `validation` (full budget); the
    chosen arms' makers and the record."""
    record: dict[str, Any] = {}
    knobs: dict[str, float] = {}  # the single methods' choices
    makers = []
    seeds = [SELECTION_SEED + i for i in range(args.selection_seeds)]
    for spec in specs:
        composition = None
        if spec.composed:
            composition = paying_methods(
                spec.methods, record, len(validation.digits.x_test)
            )
            spec = dataclasses.replace(
                spec,
                methods=tuple(n for n, c in composition.items() if c["joined"]),
            )
            if not spec.methods:
                record[spec.name] = {"skipped": "no method beat plain Optax"}
                print(f"NOTE: {spec.name}: no method beat plain", flush=True)
                continue
        inherited = {
            name: knobs.get(name, METHODS[name].values[0])
            for name in spec.methods
            if not spec.own_knobs
        }
        print(
            f"selecting {spec.name} on {len(validation.digits.x_test)} "
            f"validation images"
            + (f" (methods' knobs {inherited})" if inherited else ""),
            flush=True,
        )
        start = time.perf_counter()

        def score(settings, seed, spec=spec, inherited=inherited):
            arm = spec.maker(settings, inherited).make(validation)
            run = budgets.train_budget(arm, validation, budgets.FULL, seed)
            return run.final_accuracy

        chosen = selection.select(
            spec.grid(validation, args.lr_multiples, args.knob_values),
            score,
            seeds,
            progress=lambda line: print(line, flush=True),
            widen={"learning_rate": 2.0} if args.max_widenings else None,
            max_widenings=args.max_widenings,
        )
        if spec.own_knobs:
            (name,) = spec.methods
            knobs[name] = chosen.chosen[METHODS[name].knob]
        record[spec.name] = {
            **dataclasses.asdict(chosen),
            "methods": list(spec.methods),
            "methods_knobs": inherited,
            **({"composition": composition} if composition else {}),
            "seconds": time.perf_counter() - start,
        }
        print(
            f"  chose {chosen.chosen} (validation accuracy "
            f"{chosen.chosen_validation_accuracy:.4f})",
            flush=True,
        )
        makers.append(spec.maker(chosen.chosen, inherited))
    return makers, record


#: Row names of runs before `boostax.recipe` became the image preset (then
#: `image_recipe`) and LessBN + freezing became `boostax.o1_recipe`.
OLD_NAMES = {
    "recipe": "O1 recipe",
    "recipe + methods": "O1 recipe + methods",
    "image recipe": "recipe",
}


def renamed(earlier: dict[str, Any]) -> dict[str, Any]:
    """An earlier run's workload record with today's row names: a run
    before the rename has an ``"image recipe"`` row, or a ``"recipe"``
    row whose settings have no flips (LessBN + freezing's)."""
    selection = earlier["selection"]
    old = "image recipe" in selection or "flips" not in selection.get(
        "recipe", {}
    ).get("chosen", {"flips": None})
    if not old:
        return earlier
    return {
        key: {OLD_NAMES.get(k, k): v for k, v in value.items()}
        if key in ("selection", "runs")
        else value
        for key, value in earlier.items()
    }


def recorded(
    specs: list[ArmSpec], workload: str, path: str
) -> tuple[list[budgets.Maker], dict[str, Any], dict[str, list]]:
    """The makers, selection record and runs of an earlier run's JSON, to
    time its programs again without training (``--retime-from``): its
    settings as chosen there, its runs reused (`budgets.measure`)."""
    with open(path) as f:
        earlier = renamed(json.load(f)["workloads"][workload])
    record = earlier["selection"]
    makers = []
    for spec in specs:
        if spec.name not in record or "chosen" not in record[spec.name]:
            continue
        arm = record[spec.name]
        if spec.composed:
            spec = dataclasses.replace(spec, methods=tuple(arm["methods"]))
        makers.append(spec.maker(arm["chosen"], arm["methods_knobs"]))

    def run(fields):
        depths = fields["depths"]
        if depths is not None:  # JSON made the (depth, size) pairs lists
            depths = [tuple(d) if isinstance(d, list) else d for d in depths]
        return budgets.BudgetRun(**{**fields, "depths": depths})

    reuse = {
        arm: [run(r) for r in arm_runs]
        for arm, arm_runs in earlier["runs"].items()
    }
    return makers, {**record, "retimed_from": path}, reuse


def measure_workload(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Selection, then the budgets protocol on one workload."""
    workload = speedup.IMAGE_WORKLOADS[name](quick=args.quick)
    workload = dataclasses.replace(
        workload, epochs=workload.plateau_epochs, schedule="cosine"
    )
    count = max(
        1, round(args.validation_fraction * len(workload.digits.x_train))
    )
    splits = selection.carve_validation(workload.digits, count)
    train = dataclasses.replace(workload, digits=splits.train)
    validation = dataclasses.replace(workload, digits=splits.validation)
    print(
        f"\n== {name}: {workload.description}; {len(splits.train.x_train)} "
        f"training, {count} validation (carved), "
        f"{len(splits.train.x_test)} test images; full budget "
        f"{workload.epochs} epochs ({train.total_steps} steps)",
        flush=True,
    )
    specs, skipped = runnable(arm_specs(), args.arms)
    reuse = None
    if args.retime_from:
        makers, chosen, reuse = recorded(specs, name, args.retime_from)
    else:
        makers, chosen = choose(specs, validation, args)
    runs, summary = budgets.measure(
        makers,
        train,
        budgets=args.budget_fractions,
        seeds=args.seeds,
        full_budget_seeds=args.seeds,
        repetitions=args.repetitions,
        steps=args.steps,
        progress=lambda line: print(line, flush=True),
        reuse=reuse,
    )
    parts = intervals.decompose(
        runs,
        summary["plain_seconds_per_step"],
        resamples=args.resamples,
        level=args.level,
    )
    target = summary["target_accuracy"]
    tests = len(splits.train.x_test)
    noise = {
        "test_examples": tests,
        "plain_accuracy": target,
        "binomial_standard_error": intervals.binomial_standard_error(
            target, tests
        ),
    }
    print(budgets.format_time_to_target(summary))
    print()
    print(intervals.format_decomposition(parts))
    print(
        f"test accuracy at plain's level {target:.4f}: binomial standard "
        f"error {noise['binomial_standard_error']:.4f} on {tests} images"
    )
    plot = os.path.splitext(args.out)[0] + f"_{name}.png"
    budgets.plot(
        summary,
        plot,
        f"{name}: test accuracy vs time, settings chosen on validation\n"
        f"(medians and min-max over {args.seeds} seeds)",
        span=args.plot_span,
    )
    print(f"wrote {plot}")
    return {
        "description": workload.description,
        "full_budget_epochs": workload.epochs,
        "fractions": list(args.budget_fractions),
        "splits": {
            "train": len(splits.train.x_train),
            "validation": count,
            "test": tests,
            "validation_index": splits.validation_index.tolist(),
        },
        "selection": chosen,
        "skipped": skipped,
        "summary": summary,
        "decomposition": parts,
        "test_noise": noise,
        "plot": os.path.relpath(plot, os.path.dirname(__file__)),
        "runs": {
            arm: [dataclasses.asdict(r) for r in arm_runs]
            for arm, arm_runs in runs.items()
        },
    }


def _parser() -> argparse.ArgumentParser:
    # 40 interleaved repetitions of every program's step cost: at 10 (the
    # recorded shapes runs), programs identical to plain's read 0.965-1.06x,
    # noise that moved a speed-up by about 0.05x; the timing takes seconds.
    parser = _common.argument_parser(
        __doc__, "image_methods.json", seeds=5, repetitions=40, steps=5
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=sorted(speedup.IMAGE_WORKLOADS),
        default=["shapes", "digits32"],
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        default=None,
        help="train only these arms (row names) beside plain Optax",
    )
    parser.add_argument(
        "--budget-fractions",
        type=float,
        nargs="+",
        default=[0.5, 1.0, 1.5],
    )
    parser.add_argument(
        "--lr-multiples",
        type=float,
        nargs="+",
        default=list(LR_MULTIPLES),
        help="learning rates tried, as multiples of the workload's",
    )
    parser.add_argument(
        "--max-widenings",
        type=int,
        default=2,
        help="times the learning-rate grid may double past an edge the "
        "best point sits on (0: never; default: %(default)s)",
    )
    parser.add_argument(
        "--selection-seeds",
        type=int,
        default=2,
        help="seeds per grid point of the selection (default: %(default)s)",
    )
    parser.add_argument(
        "--knob-values",
        type=int,
        default=None,
        help="try only the first N values of each method's knob",
    )
    parser.add_argument("--validation-fraction", type=float, default=0.2)
    parser.add_argument(
        "--retime-from",
        default=None,
        help="an earlier run's JSON: its chosen settings and runs, only "
        "the step costs timed again (a run timed on a loaded machine)",
    )
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument(
        "--level",
        type=float,
        default=0.9,
        help="the bootstrap interval's coverage (default: %(default)s)",
    )
    parser.add_argument("--plot-span", type=float, default=0.25)
    return parser


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = _common.parse(
        _parser(),
        argv,
        seeds=2,
        repetitions=2,
        steps=2,
        budget_fractions=[1.0],
        lr_multiples=[1.0],
        knob_values=1,
        resamples=200,
    )
    budgets.check_budgets(args.budget_fractions)
    if args.quick and args.workloads == _parser().get_default("workloads"):
        args.workloads = ["shapes"]
    start = time.perf_counter()
    workloads = {name: measure_workload(name, args) for name in args.workloads}
    _common.write_result(
        args.out,
        {
            "benchmark": "image_methods",
            "quick": args.quick,
            "wall_seconds": time.perf_counter() - start,
            "load_average_end": list(os.getloadavg()),
            "workloads": workloads,
        },
    )
    return workloads


if __name__ == "__main__":
    main()
