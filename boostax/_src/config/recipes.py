# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax's named presets: config dicts of measured choices."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from boostax._src import validation
from boostax._src.freezing import sequence as freeze_sequence
from boostax._src.methods import test_time_flips


def o1_recipe(
    total_steps: int | None = None,
) -> dict[str, dict[str, Any]]:
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
    in 0.73x its time. Not sooner to plain's plateau accuracy: `recipe`
    (label smoothing, progressive resizing, test-time flips on plain
    Optax's step) is what measured best. Until this release this preset
    was `recipe`.

    Args:
      total_steps: the run's length in updates (``grad_freeze.total_steps``),
        over which the progressive schedule spreads; default MindSpore's
        65536.

    Returns:
      A new config dict (mode ``"manual"``).

    Example:
      >>> import boostax
      >>> config = boostax.o1_recipe(total_steps=1000)
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


def recipe(
    total_steps: int | None = None,
    flips: str | Sequence[str] | None = ("horizontal",),
    translate: int = 0,
) -> dict[str, dict[str, Any]]:
    """boostax's recipe: the composition that measured best, for images.

    Every arm of the image benchmark (docs/results.md, "Buying the accuracy
    back") had its settings chosen on a validation split carved from the
    training set; of the levels, `o1_recipe` and the methods alone and
    composed, this composition reached plain Optax's full-budget test
    accuracy soonest:

    - on the CIFAR-shaped digits (a bottleneck ResNet at 32x32x3, 5 seeds,
      ``flips=None`` chosen on validation): **1.60x** sooner (worst seed
      1.58x, 90% bootstrap interval [1.46, 2.91]);
    - on generated shapes (a small BatchNorm ResNet, 2,000 test images, 5
      seeds): **1.48x** (worst seed 1.37x, interval [1.35, 1.52]) with
      both flips, ``translate=1`` and progressive resizing's centre crops
      (``config["progressive_resizing"]["mode"] = "crop"``) chosen on
      validation; with the defaults below, 1.24x (interval [0.97, 1.31]).
      MindSpore's O1 reads 0.79x there and `o1_recipe` misses on 4 of 5
      seeds.

    It is:

    - label smoothing, ``alpha`` 0.2 (`label_smoothing_loss`): accuracy
      per step;
    - progressive image resizing from 0.75 of the size (`progressive_resizing`,
      Composer's other defaults): early steps on smaller images, cheaper;
    - test-time flips (`predict_with_flips`): `TrainStep.predict` averages
      over the images and their mirror images; training is untouched;
    - no LessBN and no gradient freezing: neither's accuracy is bought
      back by the methods above.

    The defaults are what the CIFAR-shaped digits chose on validation
    (resized images and no translation: 99.26%, against 97.77% with crops
    and 98.88% with the translation); the shapes chose crops and the
    translation. Choose them on a validation split of your data. The
    flips must keep the label: the horizontal flip keeps it for most
    natural images (airbench's default, and this preset's). Pass
    ``flips=None`` for data a mirror changes (digits, text). The model
    must take NHWC images and pool globally (progressive resizing's
    condition). Images narrower than about 16 pixels need a finer
    ``progressive_resizing.size_increment`` than Composer's 4 (on 8x8
    images 0.75 of the size rounds back up to 8, which the step refuses
    as nothing to resize): ``config["progressive_resizing"][
    "size_increment"] = 2``. For language models, `text_recipe`.

    Pass it as the config of level ``"O1"``; change any key as with any
    config.

    Until this release, ``recipe()`` was LessBN with progressive freezing,
    now `o1_recipe`, and this composition was ``image_recipe``. For one
    release ``recipe()`` without ``total_steps`` still returns
    `o1_recipe`'s config, with a `DeprecationWarning`.

    Args:
      total_steps: the run's length in optimizer updates
        (``progressive_resizing.total_steps``): the images grow to their
        full size over it, full size for its last 20%.
      flips: the test-time flips (``"horizontal"``, ``"vertical"`` or
        both); ``None``: none.
      translate: test-time translations in pixels
        (``test_time_flips.translate``, airbench's 1): the images moved
        both ways are averaged over too, each with its flips. 0: none.

    Returns:
      A new config dict (mode ``"manual"``).

    Example:
      >>> import boostax
      >>> config = boostax.recipe(total_steps=1000)
      >>> sorted(config)
      ['boost', 'label_smoothing', 'progressive_resizing', 'test_time_flips']
      >>> config["test_time_flips"]
      {'enabled': True, 'flips': ['horizontal']}
    """
    if total_steps is None:
        if translate or flips != ("horizontal",):
            # The old preset has no flips: they would be ignored.
            raise TypeError(
                "`boostax.recipe` needs `total_steps` (the run's optimizer "
                "updates, over which the images grow) with `flips` or "
                f"`translate`; got flips={flips!r}, translate={translate!r}."
            )
        warnings.warn(
            "`boostax.recipe()` without `total_steps` is the LessBN and "
            "progressive-freezing preset, now `boostax.o1_recipe()`; "
            "`boostax.recipe(total_steps)` is the composition that measured "
            "best (label smoothing, progressive resizing, test-time flips). "
            "The old spelling will be removed in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return o1_recipe()
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
    translate = test_time_flips.check_translate(translate)
    if flips is not None or translate:
        chosen = test_time_flips.check_flips(
            () if flips is None else flips, "flips", allow_empty=translate > 0
        )
        config["test_time_flips"] = {"enabled": True, "flips": list(chosen)}
        if translate:
            config["test_time_flips"]["translate"] = translate
    return config
