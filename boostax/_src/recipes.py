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
    """boostax's O1 recipe for transformers trained with AdamW.

    O1 as MindSpore sets it (and `recipe`) is made for a convolutional
    network with BatchNorm trained with SGD. A decoder-only language model
    has no BatchNorm, and no gradient freezing schedule beat plain Optax on
    one (docs/results.md, "A transformer"). This recipe keeps what can help
    there:

    - sequence-length warm-up (`seq_len_warmup`, Composer's defaults):
      batches truncated to 8 tokens at first, growing in multiples of 8 to
      the full context over the first 30% of the updates, so early updates
      cost a fraction of a full one;
    - LessBN's gradient centralization of the attention, MLP and output
      projection kernels (each over its layer's fan-in,
      `gradient_centralization_axes`), without the FN head (``fn_flag``
      False: a language-model head is not a classifier's logits);
    - no gradient freezing (``grad_freeze`` False).

    Pass it as the config of level ``"O1"``; change any key as with any
    config. Measured by ``benchmarks/transformer_budgets.py``
    (docs/results.md).

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
      ('less_bn',)
      >>> config["seq_len_warmup"]
      {'enabled': True, 'total_steps': 1000}
    """
    return {
        "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False},
        "less_bn": {"fn_flag": False, "gc_flag": True},
        "seq_len_warmup": {
            "enabled": True,
            "total_steps": freeze_sequence.check_total_steps(
                "total_steps", total_steps
            ),
        },
    }
