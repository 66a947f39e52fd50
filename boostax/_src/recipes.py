# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax's named presets: config dicts of measured choices."""

from __future__ import annotations

from typing import Any

from boostax._src import freeze_sequence


def recipe(total_steps: int | None = None) -> dict[str, dict[str, Any]]:
    """boostax's O1 recipe: O1's algorithms configured to cost fewer steps.

    MindSpore's O1 (LessBN with its FN head, and random gradient freezing)
    costs more steps than it saves time on a CIFAR-shaped ResNet (see the
    docs/results.md). The recipe keeps the parts that measured cheapest:

    - LessBN's BatchNorm removal with gradient centralization, and the dense
      head kept (``fn_flag`` False: the FN head costs steps here);
    - progressive freezing (``freeze_type`` 2, FreezeOut): the earliest
      groups anneal to zero and freeze for good from 70% of training on
      (``freeze_p`` 0.7), so the saved compute grows through training.

    Pass it as the config of level ``"O1"``; change any key as with any
    config. Measured on that ResNet (docs/results.md, "Over training
    budgets"): at the budget where plain Optax plateaus, 0.75x its time
    for 1.1 points less accuracy; at twice that budget, plain's accuracy
    in 0.73x its time. Not sooner to plain's plateau accuracy.

    Args:
      total_steps: the run's length in updates (``grad_freeze.total_steps``),
        over which the progressive schedule spreads; default MindSpore's
        65536.

    Returns:
      A new config dict (mode ``"manual"``).

    Example:
      >>> import boostax
      >>> config = boostax.recipe(total_steps=1000)
      >>> boostax.BoostConfig.from_dict(config, level="O1").enabled_algorithms
      ('less_bn', 'grad_freeze')
    """
    config: dict[str, dict[str, Any]] = {
        "boost": {"mode": "manual", "less_bn": True, "grad_freeze": True},
        "less_bn": {"fn_flag": False, "gc_flag": True},
        "grad_freeze": {"freeze_type": 2, "freeze_p": 0.7},
    }
    if total_steps is not None:
        config["grad_freeze"]["total_steps"] = (
            freeze_sequence.check_total_steps("total_steps", total_steps)
        )
    return config


def text_recipe(total_steps: int) -> dict[str, dict[str, Any]]:
    """boostax's preset for language models: sequence-length warm-up.

    O1 as MindSpore sets it (and `recipe`) is made for a convolutional
    network with BatchNorm trained with SGD. On a decoder-only language
    model trained with AdamW (docs/results.md, "A transformer": 4 blocks,
    context 128, over training budgets and seeds) every algorithm of O1
    alone reached plain Optax's loss later or never: gradient freezing
    (MindSpore's and progressive), accumulation, and LessBN, which finds no
    BatchNorm there, places no FN head on per-position logits and so only
    centralizes the gradients, which cost loss there too (0.91x plain's
    speed; added to the warm-up, 1.07x against the warm-up's own 1.13x).
    The recipe keeps what paid:

    - sequence-length warm-up (`seq_len_warmup`, Composer's defaults):
      batches truncated to their first 8 tokens at first, growing by 8 to
      the full context over the first 30% of the updates, so early updates
      cost a fraction of a full one (1.13x plain's speed to its loss
      there). Growing by 32 from 32 compiles a quarter of the length
      programs but ended further behind (docs/results.md);
    - no LessBN and no gradient freezing.

    Pass it as the config of level ``"O1"``; change any key as with any
    config.

    Args:
      total_steps: the run's length in optimizer updates
        (``seq_len_warmup.total_steps``): the lengths grow over its first
        30%.

    Returns:
      A new config dict (mode ``"manual"``).

    Example:
      >>> import boostax
      >>> config = boostax.text_recipe(total_steps=1000)
      >>> boostax.BoostConfig.from_dict(config, level="O1").enabled_algorithms
      ()
      >>> config["seq_len_warmup"]
      {'enabled': True, 'total_steps': 1000}
    """
    return {
        "boost": {"mode": "manual", "less_bn": False, "grad_freeze": False},
        "seq_len_warmup": {
            "enabled": True,
            "total_steps": freeze_sequence.check_total_steps(
                "total_steps", total_steps
            ),
        },
    }
