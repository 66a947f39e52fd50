# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""scikit-learn's bundled handwritten digits, split and standardized.

No download: the 1,797 8x8 images ship inside scikit-learn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

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


def load_digits(*, flat: bool = False, test_fraction: float = 0.25) -> Digits:
    """Loads the digits with a fixed, stratified train/test split.

    Args:
      flat: return ``(n, 64)`` vectors (for the MLP) instead of images.
      test_fraction: fraction of the 1,797 samples held out for testing.

    Returns:
      A `Digits` tuple (1,347 train and 450 test samples by default).
    """
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
        return ((x - mean) / std).astype(np.float32).reshape(shape)

    return Digits(standardize(x_train), y_train, standardize(x_test), y_test)


def batches(
    x: np.ndarray, y: np.ndarray, batch_size: int, *, seed: int, epoch: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffled ``(inputs, labels)`` batches of one epoch.

    The order depends only on ``(seed, epoch)``; the last partial batch is
    dropped so every batch has the same shape (one compilation).
    """
    if not 1 <= batch_size <= len(x):
        raise ValueError(
            f"`batch_size` must be in [1, {len(x)}], got {batch_size}."
        )
    order = np.random.default_rng([seed, epoch]).permutation(len(x))
    for start in range(0, len(x) - batch_size + 1, batch_size):
        index = order[start : start + batch_size]
        yield x[index], y[index]


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    return num_examples // batch_size
