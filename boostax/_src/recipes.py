# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax's named presets: config dicts of measured choices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boostax._src import freeze_sequence, test_time_flips, validation


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


def image_recipe(
    total_steps: int, flips: str | Sequence[str] | None = ("horizontal",)
) -> dict[str, dict[str, Any]]:
    """boostax's preset for image classifiers: methods that pay on
    plain Optax's step.

    On generated shapes (docs/results.md, "Buying the accuracy back": a
    small BatchNorm ResNet, 2,000 test images, 5 seeds, every setting
    chosen on a validation split) the composition the validation rule
    picked reached plain Optax's full-budget accuracy 1.29x sooner (worst
    seed 1.18x; the project's 1.33x target missed), and this preset, with
    its default horizontal flip only, 1.19x (worst seed 1.06x), where O1
    and `recipe` missed it on 2 and 3 of 5 seeds and the recipe with these
    methods on all 5; a stricter selection (2 seeds, a widened
    learning-rate grid) measured 1.12x and 1.15x. On the CIFAR-shaped
    digits (a bottleneck ResNet at 32x32x3, 5 seeds, its learning rate
    and ``flips=None`` chosen on validation) it reached plain's accuracy
    1.60x sooner (worst seed 1.58x). It is:

    - label smoothing, ``alpha`` 0.2 (`label_smoothing_loss`): accuracy
      per step;
    - progressive image resizing from 0.75 of the size (`progressive_resizing`,
      Composer's other defaults): early steps on smaller images, cheaper;
    - test-time flips (`predict_with_flips`): `TrainStep.predict` averages
      over the images and their mirror images; training is untouched;
    - no LessBN and no gradient freezing: neither's accuracy is bought
      back by the methods above.

    The flips must keep the label: the horizontal flip keeps it for most
    natural images (airbench's default, and this preset's); the shapes
    measured chose both flips on validation. Pass ``flips=None`` for data
    a mirror changes (digits, text). The model must take NHWC images and
    pool globally (progressive resizing's condition). Images narrower than
    about 16 pixels need a finer ``progressive_resizing.size_increment``
    than Composer's 4 (on 8x8 images 0.75 of the size rounds back up to
    8, which the step refuses as nothing to resize): ``config[
    "progressive_resizing"]["size_increment"] = 2``.

    Pass it as the config of level ``"O1"``; change any key as with any
    config.

    Args:
      total_steps: the run's length in optimizer updates
        (``progressive_resizing.total_steps``): the images grow to their
        full size over it, full size for its last 20%.
      flips: the test-time flips (``"horizontal"``, ``"vertical"`` or
        both); ``None``: none.

    Returns:
      A new config dict (mode ``"manual"``).

    Example:
      >>> import boostax
      >>> config = boostax.image_recipe(total_steps=1000)
      >>> boostax.BoostConfig.from_dict(config, level="O1").enabled_algorithms
      ()
      >>> config["test_time_flips"]
      {'enabled': True, 'flips': ['horizontal']}
    """
    config: dict[str, dict[str, Any]] = {
        "boost": {"mode": "manual", "less_bn": False, "grad_freeze": False},
        "label_smoothing": {"enabled": True, "alpha": 0.2},
        "progressive_resizing": {
            "enabled": True,
            "initial_scale": 0.75,
            "total_steps": validation.check_int(
                "total_steps", total_steps, minimum=1
            ),
        },
    }
    if flips is not None:
        chosen = test_time_flips.check_flips(flips, "flips")
        config["test_time_flips"] = {"enabled": True, "flips": list(chosen)}
    return config
