# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the benchmarks: flags, workload, step loops, accuracy,
JSON results.

Every benchmark compares against the plain Optax step in the same run:
interleaved repetitions (`boostax.measure.interleaved_timings`: the order
alternates), medians, and a ratio (`boostax.measure.paired_ratio`), because
absolute times on shared machines are noise. Costs come from
`boostax.measure.executable_cost` / `boostax.measure.cost_report`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from boostax.examples import compilation_cache, data, models, speedup

RESULTS_DIR = os.path.join(os.path.dirname(__file__), "results")

# The flags several benchmarks share: (type, help). Their defaults differ
# from one benchmark to the next, so each passes its own.
_SHARED_FLAGS = {
    "device": (str, "cpu, gpu, tpu or auto (the default backend)"),
    "seeds": (int, "training runs, one per seed"),
    "repetitions": (int, "interleaved timing repetitions"),
    "steps": (int, "train steps per timed repetition"),
    "epochs": (int, "training epochs"),
    "batch_size": (int, "examples per step"),
    "learning_rate": (float, "of SGD with momentum 0.9"),
}

# Shared defaults of the shared flags, and their values under --quick. The
# benchmarks that time single train steps of the example ResNet on one
# batch (`timing_inputs`):
STEP_FLAGS = {"steps": 20, "batch_size": 64}
STEP_QUICK = {"steps": 2}
# those that train it on the digits (`digits_workload`; the workload's batch
# size and learning rate):
DIGITS_FLAGS = {
    "device": "auto",
    "seeds": 3,
    "batch_size": 64,
    "learning_rate": 0.05,
}
DIGITS_QUICK = {"seeds": 1}
# and those that do both, training for a fixed number of epochs
# (grad_freeze, less_bn).
DIGITS_TRAINING_FLAGS = {**DIGITS_FLAGS, **STEP_FLAGS, "epochs": 15}
DIGITS_TRAINING_QUICK = {**DIGITS_QUICK, **STEP_QUICK, "epochs": 1}


def argument_parser(
    doc: str, out: str | None, **defaults: Any
) -> argparse.ArgumentParser:
    """The flags every benchmark has, and the shared ones it asks for.

    Every benchmark has ``--quick`` (a smoke test: the test suite runs it),
    ``--out`` and the compilation-cache flags; each of `defaults`' keys
    (one of ``device``, ``seeds``, ``repetitions``, ``steps``, ``epochs``,
    ``batch_size``, ``learning_rate``) adds that flag with that default.
    The benchmark adds its own flags to the parser returned.

    Args:
      doc: the script's docstring; its first line describes the script.
      out: the default result file, in `RESULTS_DIR` (``None``: the script
        chooses it after parsing).
    """
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--out", default=None if out is None else os.path.join(RESULTS_DIR, out)
    )
    compilation_cache.add_arguments(parser)
    for name, default in defaults.items():
        kind, help_text = _SHARED_FLAGS[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=default,
            help=help_text
            if default is None
            else f"{help_text} (default: %(default)s)",
        )
    return parser


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, **quick: Any
) -> argparse.Namespace:
    """Parses `argv` and turns on the compilation cache the flags ask for.

    Under ``--quick`` the flags named in `quick` take its values instead
    (a smoke test's small sizes, whatever the command line says).
    """
    args = parser.parse_args(argv)
    compilation_cache.from_arguments(args)
    if args.quick:
        for name, value in quick.items():
            setattr(args, name, value)
    return args


def device(name: str) -> jax.Device:
    """The first device of backend `name` (``"auto"``: the default one)."""
    return jax.devices()[0] if name == "auto" else jax.devices(name)[0]


def digits_workload(
    args: argparse.Namespace, **changes: Any
) -> speedup.Workload:
    """The example ResNet on the 8x8 digits (`speedup.digits_workload`).

    The small ResNet under ``--quick``; the batch size, learning rate and
    epochs are the script's flags where it has them, and `changes` replace
    any other field.
    """
    workload = speedup.digits_workload(quick=args.quick)
    flags = {
        field: getattr(args, field)
        for field in ("batch_size", "learning_rate", "epochs")
        if hasattr(args, field)
    }
    return dataclasses.replace(workload, **flags, **changes)


def first_batch(digits: data.Digits, batch_size: int):
    """The first `batch_size` training examples: the batch every timed step
    trains on (costs and step times do not depend on its values)."""
    return (
        jnp.asarray(digits.x_train[:batch_size]),
        jnp.asarray(digits.y_train[:batch_size]),
    )


def timing_inputs(workload: speedup.Workload):
    """``(batch, variables)`` to time the workload's train steps on: its
    `first_batch` and seed 0's initial variables."""
    return (
        first_batch(workload.digits, workload.batch_size),
        workload.variables(0),
    )


def describe(model) -> str:
    """The example model's architecture in one line, for the results."""
    if isinstance(model, models.MLP):
        return f"MLP{tuple(model.features)}"
    return (
        f"{type(model).__name__}{tuple(model.stage_sizes)} widths "
        f"{tuple(model.widths)}"
    )


def environment() -> dict[str, Any]:
    """Versions and hardware, recorded with every result."""
    import flax
    import jaxlib
    import optax

    import boostax

    return {
        "boostax": boostax.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "optax": optax.__version__,
        "flax": flax.__version__,
        "python": platform.python_version(),
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "cpu_count": os.cpu_count(),
    }


def init_variables(model, rng, inputs, **kwargs):
    """``model.init(rng, inputs, **kwargs)``, compiled once per model.

    Run eagerly, a ResNet's init compiles each of its many small operations
    (seconds); jitted it is one compile.
    """
    return _jitted_init(model, tuple(sorted(kwargs.items())))(rng, inputs)


@functools.cache
def _jitted_init(model, kwargs):
    return jax.jit(functools.partial(model.init, **dict(kwargs)))


def step_runner(step, state, batch, steps: int) -> Callable[[], Any]:
    """A function running `steps` train steps from where it last stopped.

    ``step(state, batch) -> (state, aux)``; the state carries over between
    calls, as in training. For `boostax.measure.interleaved_timings`.
    """

    def run_steps():
        nonlocal state
        for _ in range(steps):
            state, _ = step(state, batch)
        return state

    return run_steps


def bitwise_equal(a, b) -> bool:
    """Whether two param trees hold the same bits (False: other trees)."""
    a, b = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(a) != len(b):
        return False
    return all(
        x.shape == y.shape and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(a, b, strict=True)
    )


def jsonable(value: Any) -> Any:
    """`value` with its records (dataclasses, named tuples) as JSON objects,
    key for key in their fields' order: the benchmarks keep typed records
    and convert them only to write them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {
            field.name: getattr(value, field.name)
            for field in dataclasses.fields(value)
        }
    elif isinstance(value, tuple) and hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [jsonable(item) for item in value]
    return value


def write_result(path: str, payload: Mapping[str, Any]) -> None:
    """Writes `payload` (plus the command and environment) as JSON, its
    records as objects (`jsonable`)."""
    payload = {
        "command": " ".join(["python", *sys.argv]),
        "environment": environment(),
        # Compile times read from a warm persistent cache are disk reads.
        "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
        **jsonable(payload),
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")
    print(f"wrote {path}")


class SeedAccuracy(NamedTuple):
    """One arm's final test accuracy over the seeds (`accuracy_over_seeds`).

    Attributes:
      test_accuracy: per seed.
      mean_difference_points: 100 x the mean's difference from the
        baseline arm's.
    """

    test_accuracy: list[float]
    median: float
    mean: float
    mean_difference_points: float


def accuracy_over_seeds(
    arms: Sequence[speedup.Arm],
    workload: speedup.Workload,
    *,
    seeds: int,
    baseline: str,
) -> dict[str, SeedAccuracy]:
    """Final test accuracy of each arm after the workload's epochs, one
    training run per seed (no evaluation before the end).

    Args:
      arms: ``arm.init(seed)`` is the arm's state at that seed's
        initialization (the data order follows the seed too).
      baseline: the arm the others are compared with.
    """
    accuracies: dict[str, list[float]] = {}
    for seed in range(seeds):
        for arm in arms:
            run = speedup.train_to_target(arm, workload, seed, evaluate=False)
            accuracies.setdefault(arm.name, []).append(run.final_accuracy)
    base = statistics.fmean(accuracies[baseline])
    return {
        name: SeedAccuracy(
            test_accuracy=values,
            median=statistics.median(values),
            mean=statistics.fmean(values),
            mean_difference_points=100 * (statistics.fmean(values) - base),
        )
        for name, values in accuracies.items()
    }
