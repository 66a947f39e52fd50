# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""LessBN vs the full model: compiled cost, step time and accuracy.

On the example ResNet (digits), compares the full model trained by the
hand-written Optax step with LessBN trained by ``auto_boost`` (level O1,
manual mode, only ``less_bn``: BatchNorm removal + FN head + gradient
centralization, MindSpore's defaults) and with BatchNorm removal alone:

- FLOPs and bytes accessed of one compiled train step (``cost_analysis``,
  hardware-independent), as ratios LessBN / full;
- median step time, interleaved repetitions, as a ratio (BatchNorm is
  memory-bound: expect little on a CPU; the <= 0.90 target is for a GPU);
- test accuracy after a fixed number of epochs, over 3 seeds (target: within
  0.5 point of the full model).

    python benchmarks/less_bn.py                 # default backend
    python benchmarks/less_bn.py --device gpu    # force a backend
    python benchmarks/less_bn.py --quick         # smoke test
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

import _common
import jax
import optax

import boostax
from boostax.examples import baseline, models, speedup

STEP_TIME_TARGET = 0.90  # on a GPU
ACCURACY_TOLERANCE = 0.005

VARIANTS = {
    "less_bn": {"fn_flag": True, "gc_flag": True},
    "bn_removal_only": {"fn_flag": False, "gc_flag": False},
}


def _config(less_bn_section):
    return {
        "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False},
        "less_bn": less_bn_section,
    }


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of training: its compiled step, init and predict."""

    name: str
    step: Callable[[Any, Any], Any]
    init: Callable[[Any], Any]
    predict: Callable[[Any, Any], Any]

    def arm(self, workload) -> speedup.Arm:
        """This variant as a `speedup.Arm` of the workload (its seeds)."""
        return speedup.Arm(
            self.name,
            lambda seed: self.init(workload.variables(seed)),
            self.step,
            self.predict,
        )


def build_variants(model, optimizer, batch, variables) -> list[Variant]:
    """Every variant, its step compiled once for `batch`'s shapes."""
    plain_step = baseline.make_plain_step(
        model, optimizer, models.cross_entropy, train=True
    )
    variants = [
        Variant(
            "full",
            plain_step,
            lambda v: baseline.init_plain_state(v, optimizer),
            baseline.make_plain_predict(model, train=False),
        )
    ]
    for name, section in VARIANTS.items():
        ts = boostax.auto_boost(
            "O1",
            _config(section),
            optimizer=optimizer,
            model=model,
            loss=models.cross_entropy,
            sample_inputs=batch[0],
        )
        variants.append(Variant(name, ts.step, ts.init, ts.predict))
    return [
        dataclasses.replace(
            v, step=v.step.lower(v.init(variables), batch).compile()
        )
        for v in variants
    ]


@dataclasses.dataclass(frozen=True)
class VariantCost:
    """One variant's compiled step: its median time and cost, and, beside
    the full model's, their ratios to the full model's."""

    median_step_ms: float
    cost: boostax.measure.ExecutableCost
    flops_ratio: float | None = None
    bytes_accessed_ratio: float | None = None
    step_time_ratio: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON's entry: the cost's fields inline, no ratios for the
        full model."""
        ratios = {
            "flops_ratio": self.flops_ratio,
            "bytes_accessed_ratio": self.bytes_accessed_ratio,
            "step_time_ratio": self.step_time_ratio,
        }
        return {
            "median_step_ms": self.median_step_ms,
            **self.cost._asdict(),
            **{k: v for k, v in ratios.items() if v is not None},
        }


def measure_cost_and_time(
    variants, variables, batch, args
) -> dict[str, VariantCost]:
    samples = boostax.measure.interleaved_timings(
        {
            v.name: _common.step_runner(
                v.step, v.init(variables), batch, args.steps
            )
            for v in variants
        },
        repetitions=args.repetitions,
        steps=args.steps,
    )
    costs = {v.name: boostax.measure.executable_cost(v.step) for v in variants}
    full = costs["full"]
    result = {"full": VariantCost(_median_ms(samples["full"]), full)}
    for name, cost in costs.items():
        if name != "full":
            result[name] = VariantCost(
                _median_ms(samples[name]),
                cost,
                flops_ratio=cost.flops / full.flops,
                bytes_accessed_ratio=cost.bytes_accessed / full.bytes_accessed,
                step_time_ratio=boostax.measure.paired_ratio(
                    samples[name], samples["full"]
                ),
            )
    return result


def _median_ms(seconds) -> float:
    return 1e3 * statistics.median(seconds)


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__,
        "less_bn.json",
        **_common.DIGITS_TRAINING_FLAGS,
        repetitions=31,
    )
    parser.add_argument(
        "--schedule",
        choices=("constant", "cosine"),
        default="constant",
        help="learning rate: constant, or cosine decay to 0 over the run",
    )
    args = _common.parse(
        parser, argv, **_common.DIGITS_TRAINING_QUICK, repetitions=3
    )
    device = _common.device(args.device)
    with jax.default_device(device):
        workload = _common.digits_workload(args)
        model, digits = workload.model, workload.digits
        learning_rate = (
            optax.cosine_decay_schedule(
                args.learning_rate, workload.total_steps
            )
            if args.schedule == "cosine"
            else args.learning_rate
        )
        optimizer = optax.sgd(learning_rate, momentum=0.9)
        report = boostax.less_bn_report(model, digits.x_train[:1], fn_flag=True)
        print(report)
        batch, variables = _common.timing_inputs(workload)
        variants = build_variants(model, optimizer, batch, variables)
        cost = measure_cost_and_time(variants, variables, batch, args)
        accuracy = _common.accuracy_over_seeds(
            [variant.arm(workload) for variant in variants],
            workload,
            seeds=args.seeds,
            baseline="full",
        )
    headline = cost["less_bn"]
    result = {
        "benchmark": "less_bn",
        "quick": args.quick,
        "device": str(device),
        "model": _common.describe(model),
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "seeds": args.seeds,
        "optimizer": f"sgd(lr={args.learning_rate} {args.schedule}, "
        "momentum=0.9)",
        "batch_norms_removed": [r.path for r in report.removed],
        "batch_norms_kept": list(report.kept),
        "cost_and_time": {name: c.as_dict() for name, c in cost.items()},
        "accuracy": accuracy,
        "step_time_target": STEP_TIME_TARGET,
        "meets_step_time_target": headline.step_time_ratio <= STEP_TIME_TARGET,
        "meets_accuracy_target": accuracy["less_bn"].mean_difference_points
        >= -100 * ACCURACY_TOLERANCE,
    }
    for name in VARIANTS:
        c, a = cost[name], accuracy[name]
        print(
            f"{name}: FLOPs x{c.flops_ratio:.3f}, bytes accessed "
            f"x{c.bytes_accessed_ratio:.3f}, step time "
            f"x{c.step_time_ratio:.3f}; test accuracy "
            f"{a.mean:.4f} vs {accuracy['full'].mean:.4f} "
            f"({a.mean_difference_points:+.2f} points)"
        )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
