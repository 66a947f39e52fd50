# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Step-time overhead of loss scaling on the example ResNet.

No loss scaling vs a dynamic loss scale vs per-group loss scales (the
example ResNet's two groups, `ResNet.loss_scale_groups`), all through
``auto_boost``; interleaved repetitions, median per-repetition ratios
(target: <= 1.05), and the FLOPs of each compiled step.

    python benchmarks/loss_scale.py [--quick]
"""

from __future__ import annotations

import statistics

import _common

import boostax
from boostax import mindspore as boost
from boostax.examples import models

TARGET = 1.05


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__, "loss_scale.json", **_common.STEP_FLAGS, repetitions=31
    )
    args = _common.parse(parser, argv, **_common.STEP_QUICK, repetitions=2)
    workload = _common.digits_workload(args)
    model = workload.model
    batch, variables = _common.timing_inputs(workload)
    groups = model.loss_scale_groups(variables["params"])
    variants = {
        "none": ("O0", None, None),
        "dynamic": ("O0", None, boostax.DynamicLossScale()),
        "group": (
            "O0",
            {"boost": {"mode": "manual", "loss_scale_group": True}},
            boost.GroupLossScaleManager(2.0**10, groups),
        ),
    }
    runs, flops = {}, {}
    for name, (level, config, loss_scale) in variants.items():
        ts = boostax.auto_boost(
            level,
            config,
            optimizer=workload.optimizer(),
            model=model,
            loss=models.cross_entropy,
            loss_scale=loss_scale,
        )
        state = ts.init(variables)
        compiled = ts.lower(state, batch).compile()
        flops[name] = boostax.measure.executable_cost(compiled)._asdict()[
            "flops"
        ]
        runs[name] = _common.step_runner(compiled, state, batch, args.steps)
    samples = boostax.measure.interleaved_timings(
        runs, repetitions=args.repetitions, steps=args.steps
    )
    result = {
        "benchmark": "loss_scale",
        "quick": args.quick,
        "model": _common.describe(model),
        "batch_size": args.batch_size,
        "median_step_ms": {
            n: 1e3 * statistics.median(v) for n, v in samples.items()
        },
        "flops": flops,
        "ratio_dynamic": boostax.measure.paired_ratio(
            samples["dynamic"], samples["none"]
        ),
        "ratio_group": boostax.measure.paired_ratio(
            samples["group"], samples["none"]
        ),
        "target": TARGET,
    }
    result["meets_target"] = (
        max(result["ratio_dynamic"], result["ratio_group"]) <= TARGET
    )
    print(
        f"step time vs no loss scaling: dynamic x{result['ratio_dynamic']:.3f}"
        f", group x{result['ratio_group']:.3f} (target <= {TARGET})"
    )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
