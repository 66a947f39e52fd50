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

import argparse
import os
import statistics

import _common
import jax
import jax.numpy as jnp
import optax

import boostax
from boostax import mindspore as boost
from boostax.examples import compilation_cache, data, models

TARGET = 1.05


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repetitions", type=int, default=31)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--out", default=os.path.join(_common.RESULTS_DIR, "loss_scale.json")
    )
    compilation_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compilation_cache.from_arguments(args)
    if args.quick:
        args.repetitions, args.steps = 2, 2
    model = (
        models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        if args.quick
        else models.ResNet()
    )
    digits = data.load_digits()
    batch = (
        jnp.asarray(digits.x_train[: args.batch_size]),
        jnp.asarray(digits.y_train[: args.batch_size]),
    )
    variables = _common.init_variables(
        model, jax.random.PRNGKey(0), batch[0], train=False
    )
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
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
            loss_scale=loss_scale,
        )
        state = ts.init(variables)
        compiled = ts.lower(state, batch).compile()
        flops[name] = boostax.executable_cost(compiled)._asdict()["flops"]
        runs[name] = _common.step_runner(compiled, state, batch, args.steps)
    samples = boostax.interleaved_timings(
        runs, repetitions=args.repetitions, steps=args.steps
    )
    result = {
        "benchmark": "loss_scale",
        "quick": args.quick,
        "model": f"ResNet{tuple(model.stage_sizes)} widths "
        f"{tuple(model.widths)}",
        "batch_size": args.batch_size,
        "median_step_ms": {
            n: 1e3 * statistics.median(v) for n, v in samples.items()
        },
        "flops": flops,
        "ratio_dynamic": boostax.paired_ratio(
            samples["dynamic"], samples["none"]
        ),
        "ratio_group": boostax.paired_ratio(samples["group"], samples["none"]),
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
