# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""scikit-learn's bundled handwritten digits, split and standardized.

No download: the 1,797 8x8 images ship inside scikit-learn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import jax
import numpy as np

NUM_CLASSES = 10


class Digits(NamedTuple):
    """A fixed train/test split of the digits.

    Attributes:
      x_train, x_test: float32 images, ``(n, 8, 8, 1)`` (NHWC), or ``(n, 64)``
        when loaded with ``flat=True``; standardized with the train set's
        mean and standard deviation (one scalar each, so images stay images).
      y_train, y_test: int32 labels in ``[0, 10)``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits(
    *,
    flat: bool = False,
    test_fraction: float = 0.25,
    image_size: int = 8,
    channels: int = 1,
) -> Digits:
    """Loads the digits with a fixed, stratified train/test split.

    Args:
      flat: return ``(n, 64)`` vectors (for the MLP) instead of images.
      test_fraction: fraction of the 1,797 samples held out for testing.
      image_size: side of the returned images: the 8x8 originals are
        resized (bilinear), e.g. to 32 for CIFAR-shaped inputs.
      channels: copies of the grey channel (3: RGB-shaped inputs).

    Returns:
      A `Digits` tuple (1,347 train and 450 test samples by default).
    """
    if flat and (image_size != 8 or channels != 1):
        raise ValueError(
            "`flat` returns the 64 original pixels: it takes neither "
            f"`image_size` ({image_size}) nor `channels` ({channels})."
        )
    from sklearn import datasets, model_selection

    images, labels = datasets.load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = model_selection.train_test_split(
        images.astype(np.float32),
        labels.astype(np.int32),
        test_size=test_fraction,
        random_state=0,
        stratify=labels,
    )
    mean, std = x_train.mean(), x_train.std()
    shape = (-1, 64) if flat else (-1, 8, 8, 1)

    def standardize(x):
        x = ((x - mean) / std).astype(np.float32).reshape(shape)
        if image_size != 8:
            x = np.asarray(
                jax.image.resize(
                    x, (len(x), image_size, image_size, 1), "bilinear"
                )
            )
        return np.repeat(x, channels, axis=-1) if channels > 1 else x

    return Digits(standardize(x_train), y_train, standardize(x_test), y_test)


def random_crop(
    images: np.ndarray, rng: np.random.Generator, padding: int
) -> np.ndarray:
    """Each NHWC image shifted by up to `padding` pixels (zero padding).

    The usual CIFAR augmentation: pad by `padding` on every side, then crop
    a window of the original size at a random offset. Zero is the data's
    mean (the images are standardized).
    """
    n, h, w, _ = images.shape
    padded = np.pad(
        images, ((0, 0), (padding, padding), (padding, padding), (0, 0))
    )
    dy, dx = rng.integers(0, 2 * padding + 1, size=(2, n))
    return np.stack(
        [
            padded[i, y : y + h, x : x + w]
            for i, (y, x) in enumerate(zip(dy, dx, strict=True))
        ]
    )


def batches(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    crop_padding: int = 0,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffled ``(inputs, labels)`` batches of one epoch.

    The order (and the augmentation) depends only on ``(seed, epoch)``; the
    last partial batch is dropped so every batch has the same shape (one
    compilation).

    Args:
      x, y: the inputs and labels.
      batch_size: examples per batch.
      seed, epoch: what the order depends on.
      crop_padding: if positive, images are augmented by `random_crop`.
    """
    if not 1 <= batch_size <= len(x):
        raise ValueError(
            f"`batch_size` must be in [1, {len(x)}], got {batch_size}."
        )
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(x))
    for start in range(0, len(x) - batch_size + 1, batch_size):
        index = order[start : start + batch_size]
        inputs = x[index]
        if crop_padding:
            inputs = random_crop(inputs, rng, crop_padding)
        yield inputs, y[index]


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    return num_examples // batch_size
