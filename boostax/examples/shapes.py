# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Procedurally generated 10-class colour images: shapes in clutter.

An image workload that installs with nothing (no download) and that a small
ResNet does not saturate: each image is one shape of ten classes, drawn at
a random position, scale, rotation and colour over a random colour
gradient, with clutter (random bars and dots of random colours, which look
like parts of shapes) and Gaussian pixel noise. The class is the shape
alone: colour, position, scale and rotation are drawn independently of it,
and the classes are rotation-invariant (no class is another rotated).

Every example is an independent draw from its own stream
(``numpy.random.default_rng([seed, split, index])``), so the train,
validation and test splits never share an image by construction and a
split's images do not depend on the other splits' sizes.

Each shape is a signed distance ``d(u, v)`` (positive inside) in the
shape's own frame, rotated by ``theta``, centred at ``c`` and scaled by
``r``:

.. math::

    (u, v) = R(-\\theta)\\,(p - c) / r, \\qquad
    \\text{mask}(p) = \\operatorname{clip}(1/2 + d(u, v) / \\delta, 0, 1),

with ``delta`` one pixel in the shape's frame (antialiased edges); the
image is ``background (1 - mask) + colour mask`` plus clutter and noise.

References:
  The shape-in-clutter family of synthetic benchmarks, e.g. the "shapes"
  datasets of Andreas et al., "Neural Module Networks" (CVPR 2016).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from boostax.examples import data

#: The ten classes, in label order.
CLASSES = (
    "disk",
    "square",
    "triangle",
    "ring",
    "plus",
    "frame",
    "striped disk",
    "checkered square",
    "two dots",
    "half disk",
)
NUM_CLASSES = len(CLASSES)
#: Stream ids of the splits (`numpy.random.default_rng([seed, id, i])`).
_SPLIT_IDS = {"train": 0, "test": 1}
#: The least gap between a shape's colour and its background's range.
_CONTRAST = 0.2


def _shape_distance(label: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Signed distance (positive inside, about 1 across) of class `label`
    in its own frame."""
    radius = np.hypot(u, v)
    box = 1.0 - np.maximum(np.abs(u), np.abs(v)) / 0.8
    if label == 0:  # disk
        return 1.0 - radius
    if label == 1:  # square
        return box
    if label == 2:  # equilateral triangle, inscribed in the unit circle
        angles = np.pi / 2 + 2 * np.pi * np.arange(3) / 3 + np.pi
        sides = [0.5 - (u * np.cos(a) + v * np.sin(a)) for a in angles]
        return np.minimum(np.minimum(sides[0], sides[1]), sides[2]) * 2
    if label == 3:  # ring
        return 0.25 - np.abs(radius - 0.7)
    if label == 4:  # plus
        arm_u = np.minimum(0.3 - np.abs(u), 1.0 - np.abs(v))
        arm_v = np.minimum(0.3 - np.abs(v), 1.0 - np.abs(u))
        return np.maximum(arm_u, arm_v)
    if label == 5:  # frame (hollow square)
        edge = np.maximum(np.abs(u), np.abs(v))
        return np.minimum(0.85 - edge, edge - 0.5)
    if label == 6:  # disk of stripes
        return np.minimum(1.0 - radius, 0.3 * np.sin(3 * np.pi * u))
    if label == 7:  # checkered square
        checks = 0.3 * np.sin(1.5 * np.pi * u) * np.sin(1.5 * np.pi * v)
        return np.minimum(box, checks)
    if label == 8:  # two dots
        left = 0.4 - np.hypot(u + 0.55, v)
        right = 0.4 - np.hypot(u - 0.55, v)
        return np.maximum(left, right)
    if label == 9:  # half disk
        return np.minimum(1.0 - radius, v)
    raise ValueError(f"`label` must be in [0, {NUM_CLASSES}), got {label}.")


def draw(
    rng: np.random.Generator,
    label: int,
    *,
    size: int = 24,
    clutter: int = 6,
    noise: float = 0.15,
) -> np.ndarray:
    """One ``(size, size, 3)`` float32 image of class `label` in ``[0, 1]``
    plus noise.

    Args:
      rng: the image's own random stream.
      label: its class (`CLASSES`).
      size: its side in pixels.
      clutter: how many distractors (bars and dots) at most.
      noise: standard deviation of the Gaussian pixel noise.
    """
    grid = (np.arange(size) + 0.5) / size * 2 - 1  # pixel centres in [-1, 1]
    y, x = np.meshgrid(grid, grid, indexing="ij")
    pixel = 2.0 / size

    def mask(distance, scale):
        return np.clip(0.5 + distance * scale / pixel, 0.0, 1.0)[..., None]

    # Dark shapes on light backgrounds or the reverse: every shape stands
    # out by at least `_CONTRAST` in every channel's mean.
    dark, light = (0.0, 0.5 - _CONTRAST / 2), (0.5 + _CONTRAST / 2, 1.0)
    if rng.random() < 0.5:
        dark, light = light, dark
    low, high = rng.uniform(*light, (2, 3))
    ramp = rng.uniform(-np.pi, np.pi)
    t = 0.5 + 0.5 * (x * np.cos(ramp) + y * np.sin(ramp)) / np.sqrt(2)
    image = low + (high - low) * t[..., None]
    for _ in range(rng.integers(0, clutter + 1)):
        cx, cy = rng.uniform(-1, 1, 2)
        angle = rng.uniform(0, np.pi)
        u = (x - cx) * np.cos(angle) + (y - cy) * np.sin(angle)
        v = -(x - cx) * np.sin(angle) + (y - cy) * np.cos(angle)
        length, width = rng.uniform(0.05, 0.4), rng.uniform(0.03, 0.08)
        if rng.random() < 0.5:  # a bar
            distance = np.minimum(length - np.abs(u), width - np.abs(v))
        else:  # a dot
            distance = width * 1.5 - np.hypot(u, v)
        image = image + (rng.uniform(0, 1, 3) - image) * mask(distance, 1.0)
    scale = rng.uniform(0.4, 0.65)
    cx, cy = rng.uniform(-1 + scale, 1 - scale, 2)
    theta = rng.uniform(0, 2 * np.pi)
    u = ((x - cx) * np.cos(theta) + (y - cy) * np.sin(theta)) / scale
    v = (-(x - cx) * np.sin(theta) + (y - cy) * np.cos(theta)) / scale
    colour = rng.uniform(*dark, 3)
    image = image + (colour - image) * mask(_shape_distance(label, u, v), scale)
    image = image + rng.normal(0, noise, image.shape)
    return image.astype(np.float32)


def generate(
    split: str,
    count: int,
    *,
    seed: int = 0,
    size: int = 24,
    clutter: int = 6,
    noise: float = 0.15,
) -> tuple[np.ndarray, np.ndarray]:
    """`count` images of `split`, balanced: ``(images, labels)``.

    Image ``i`` has label ``i % 10`` (so every class has ``count // 10`` or
    one more) and is drawn from ``default_rng([seed, split id, i])``: the
    same for any `count` above ``i``, never drawn by another split.

    Args:
      split: ``"train"`` or ``"test"``.
      count: how many images.
      seed: the data set's seed.
      size, clutter, noise: as in `draw`.

    Returns:
      ``(count, size, size, 3)`` float32 images (unnormalized) and int32
      labels.
    """
    if split not in _SPLIT_IDS:
        raise ValueError(
            f"`split` must be one of {list(_SPLIT_IDS)}, got {split!r}."
        )
    if count < 1:
        raise ValueError(f"`count` must be a positive int, got {count}.")
    labels = np.arange(count, dtype=np.int32) % NUM_CLASSES
    images = np.stack(
        [
            draw(
                np.random.default_rng([seed, _SPLIT_IDS[split], i]),
                int(label),
                size=size,
                clutter=clutter,
                noise=noise,
            )
            for i, label in enumerate(labels)
        ]
    )
    return images, labels


class ShapesConfig(NamedTuple):
    """What `load_shapes` generates.

    Attributes:
      train: training images (the validation split is carved from them).
      test: test images, drawn independently.
      size: image side in pixels.
      clutter: distractors per image, at most.
      noise: pixel noise standard deviation.
      seed: the data set's seed.
    """

    train: int = 4000
    test: int = 2000
    size: int = 24
    clutter: int = 6
    noise: float = 0.15
    seed: int = 0


def load_shapes(config: ShapesConfig | None = None) -> data.Digits:
    """The shapes data set as `data.Digits` (NHWC float32, standardized per
    channel with the training images' mean and standard deviation).

    Example:
      >>> from boostax.examples import shapes
      >>> small = shapes.load_shapes(shapes.ShapesConfig(train=20, test=10))
      >>> small.x_train.shape, small.x_test.shape
      ((20, 24, 24, 3), (10, 24, 24, 3))
    """
    config = config or ShapesConfig()
    x_train, y_train = generate(
        "train",
        config.train,
        seed=config.seed,
        size=config.size,
        clutter=config.clutter,
        noise=config.noise,
    )
    x_test, y_test = generate(
        "test",
        config.test,
        seed=config.seed,
        size=config.size,
        clutter=config.clutter,
        noise=config.noise,
    )
    mean = x_train.mean(axis=(0, 1, 2))
    std = x_train.std(axis=(0, 1, 2))

    def standardize(x):
        return ((x - mean) / std).astype(np.float32)

    return data.Digits(
        standardize(x_train), y_train, standardize(x_test), y_test
    )
