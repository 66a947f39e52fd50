# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Level O1 on a model without BatchNorm: an MLP on the 8x8 digits.

LessBN and gradient freezing are made for convolutional networks with
BatchNorm; in mode "auto", `auto_boost` at O1 leaves both off on a model
without any and trains as O0 (docs/methods/auto_boost.md). This measures
what that avoids on a second such model, beside the transformer of
``transformer_budgets.py``: the example MLP (two hidden layers of 64, no
BatchNorm) on scikit-learn's 8x8 digits, batch 64, SGD (momentum 0.9) with
a cosine decay from 0.05 stretched over each budget, 5 seeds per budget;
final test accuracy (450 images) of:

- O0 (plain Optax's step);
- O1 in mode "auto" (expected: O0 bit for bit, and a warning saying why);
- MindSpore's O1 (mode "manual": LessBN with its FN head on the class
  logits and gradient centralization, and MindSpore's random freezing);
- its LessBN alone and its freezing alone (2 groups: the MLP has 2
  parameter chunks to freeze).

The MLP's step is dispatch-bound on a CPU (a few microseconds of compute):
what freezing saves per step is not measurable here, so the comparison is
at equal steps. Nothing is timed.

    python benchmarks/levels_without_batch_norm.py [--quick]
"""

from __future__ import annotations

import statistics
import warnings
from typing import Any

import _common
import jax
import numpy as np
import optax

import boostax
from boostax.examples import data, models

FREEZE_GROUPS = 2
MANUAL = {"mode": "manual", "less_bn": True, "grad_freeze": True}
# name: (level, config without the freezing sequence's length)
ARMS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "O0": ("O0", None),
    "O1": ("O1", None),
    "MindSpore's O1": ("O1", {"boost": MANUAL}),
    "LessBN (O1's)": ("O1", {"boost": {**MANUAL, "grad_freeze": False}}),
    "freeze MindSpore": ("O1", {"boost": {**MANUAL, "less_bn": False}}),
}


def config_for(config: dict | None, steps: int) -> dict | None:
    """`config` with the freezing sequence spanning `steps`, if it freezes."""
    if config is None or not config["boost"]["grad_freeze"]:
        return config
    return {
        **config,
        "grad_freeze": {"total_steps": steps, "param_groups": FREEZE_GROUPS},
    }


def train(level, config, digits, *, epochs: int, batch_size: int, seed: int):
    """``(train_step, final state, test accuracy, warnings)`` of one run."""
    steps = epochs * data.steps_per_epoch(len(digits.x_train), batch_size)
    model = models.MLP()
    optimizer = optax.sgd(
        optax.cosine_decay_schedule(0.05, steps), momentum=0.9
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_step = boostax.auto_boost(
            level,
            config_for(config, steps),
            optimizer=optimizer,
            model=model,
            loss=models.cross_entropy,
            sample_inputs=digits.x_train[:1],
            seed=seed,
        )
    variables = model.init(jax.random.PRNGKey(seed), digits.x_train[:1])
    state = train_step.init(variables)
    for epoch in range(epochs):
        for batch in data.batches(
            digits.x_train, digits.y_train, batch_size, seed=seed, epoch=epoch
        ):
            state, _ = train_step(state, batch)
    logits = train_step.predict(state, digits.x_test)
    accuracy = float(np.mean(np.argmax(logits, -1) == digits.y_test))
    return train_step, state, accuracy, [str(w.message) for w in caught]


def main(argv=None) -> dict:
    parser = _common.argument_parser(
        __doc__, "levels_without_batch_norm.json", seeds=5, batch_size=64
    )
    parser.add_argument(
        "--budgets",
        type=int,
        nargs="+",
        default=[4, 12],
        help="training budgets in epochs (default: %(default)s)",
    )
    args = _common.parse(parser, argv, seeds=1, budgets=[1])
    loaded = data.load_digits()
    digits = loaded._replace(
        x_train=loaded.x_train.reshape(len(loaded.x_train), -1),
        x_test=loaded.x_test.reshape(len(loaded.x_test), -1),
    )
    rows: dict[str, dict[str, Any]] = {name: {} for name in ARMS}
    o1_is_o0, o1_warning, o1_switches = [], None, None
    o0_params = {}  # by seed, of the current budget
    for epochs in args.budgets:
        for name, (level, config) in ARMS.items():
            accuracies = []
            for seed in range(args.seeds):
                train_step, state, accuracy, said = train(
                    level,
                    config,
                    digits,
                    epochs=epochs,
                    batch_size=args.batch_size,
                    seed=seed,
                )
                accuracies.append(accuracy)
                if name == "O0":
                    o0_params[seed] = state.params
                if name == "O1":
                    o1_is_o0.append(
                        _common.bitwise_equal(state.params, o0_params[seed])
                    )
                    o1_warning = next(
                        (w for w in said if w.startswith("Level 'O1'")), None
                    )
                    o1_switches = list(train_step.config.enabled_algorithms)
            rows[name][str(epochs)] = {
                "test_accuracy": accuracies,
                "median": statistics.median(accuracies),
                "min": min(accuracies),
                "max": max(accuracies),
            }
            print(
                f"{epochs:3d} epochs  {name:<18} median "
                f"{statistics.median(accuracies):.4f} "
                f"({min(accuracies):.4f}-{max(accuracies):.4f})",
                flush=True,
            )
    result = {
        "benchmark": "levels_without_batch_norm",
        "quick": args.quick,
        "workload": (
            f"{_common.describe(models.MLP())} on the 8x8 digits (flattened), "
            f"batch {args.batch_size}, SGD (momentum 0.9) with a cosine "
            "decay from 0.05 over each budget"
        ),
        "budgets_epochs": args.budgets,
        "seeds": args.seeds,
        "freeze_groups": FREEZE_GROUPS,
        "arms": rows,
        "o1_is_o0_bit_for_bit": all(o1_is_o0),
        "o1_enabled_algorithms": o1_switches,
        "o1_warning": o1_warning,
    }
    print(
        f"O1 (mode 'auto') = O0 bit for bit: {result['o1_is_o0_bit_for_bit']}"
    )
    _common.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
