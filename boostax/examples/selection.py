# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Hyper-parameters chosen on a validation split, never on the test set.

The benchmark's rule: every arm (plain Optax, plain + a method, a level,
the recipe, ...) gets its settings from a small grid, each point trained at
the full budget from a few seeds on the training images that remain after
a validation split is carved off, and scored by its mean accuracy on that
validation split:

.. math::

    \\hat\\theta = \\arg\\max_{\\theta \\in G}
        \\frac{1}{|S|} \\sum_{s \\in S} a_{\\mathrm{val}}(\\theta, s)

(ties: the first point of the grid). The test set is read only afterwards,
for the chosen settings. `carve_validation` makes the split, `grid_points`
the grid, `select` runs the procedure and records it (grid, every point's
validation accuracies, the choice) for the benchmark's JSON.

References:
  Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning"
  (2nd ed., 2009), section 7.2: a validation set to choose the model, a
  test set to assess the chosen one only.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from boostax.examples import data


class Splits(NamedTuple):
    """A workload's data with a validation split carved from its training
    set (`carve_validation`).

    Attributes:
      train: the training images that remain, with the test set
        (`data.Digits`: what the measurement trains and tests on).
      validation: the same training images with the validation split in
        place of the test set (what the selection trains and scores on).
      validation_index: the validation images' indices into the original
        training set.
    """

    train: data.Digits
    validation: data.Digits
    validation_index: np.ndarray


def carve_validation(digits: data.Digits, count: int, seed: int = 0) -> Splits:
    """`count` of `digits`' training images set apart for validation,
    stratified by class (scikit-learn's ``train_test_split``).

    Args:
      digits: the data (its test set is left as it is).
      count: validation images, fewer than the training images.
      seed: the carve's seed.

    Returns:
      The `Splits`: no validation image is trained on, and the test set is
      untouched.

    Example:
      >>> import numpy as np
      >>> from boostax.examples import data, selection
      >>> x = np.arange(20, dtype=np.float32).reshape(20, 1)
      >>> digits = data.Digits(x, np.arange(20) % 2, x[:2], np.zeros(2))
      >>> splits = selection.carve_validation(digits, 4)
      >>> len(splits.train.x_train), len(splits.validation.x_test)
      (16, 4)
    """
    from sklearn import model_selection

    x, y = digits.x_train, digits.y_train
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"`count` must be an int, got {count!r}.")
    if not 1 <= count < len(x):
        raise ValueError(
            f"`count` (validation images) must be in [1, {len(x) - 1}] "
            f"(fewer than the {len(x)} training images), got {count}."
        )
    _, chosen = model_selection.train_test_split(
        np.arange(len(x)), test_size=count, random_state=seed, stratify=y
    )
    chosen = np.sort(chosen)
    keep = np.setdiff1d(np.arange(len(x)), chosen)
    return Splits(
        data.Digits(x[keep], y[keep], digits.x_test, digits.y_test),
        data.Digits(x[keep], y[keep], x[chosen], y[chosen]),
        chosen,
    )


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of `grid`'s values, the first key slowest.

    Example:
      >>> from boostax.examples import selection
      >>> selection.grid_points({"lr": [0.1, 0.2], "alpha": [0.0]})
      [{'lr': 0.1, 'alpha': 0.0}, {'lr': 0.2, 'alpha': 0.0}]
    """
    for key, values in grid.items():
        if isinstance(values, str) or not len(values):
            raise ValueError(
                f"The grid's {key!r} must be a non-empty list of values, got "
                f"{values!r}."
            )
    keys = list(grid)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(grid[k] for k in keys))
    ]


@dataclasses.dataclass
class Selection:
    """What `select` ran and chose, for the JSON.

    Attributes:
      grid: ``{setting: values}``.
      seeds: the seeds each point trained from.
      points: per point, ``{"settings", "validation_accuracy": [per
        seed], "validation_accuracy_mean"}``.
      chosen: the chosen point's settings.
      chosen_validation_accuracy: its mean validation accuracy.
    """

    grid: dict[str, list[Any]]
    seeds: list[int]
    points: list[dict[str, Any]]
    chosen: dict[str, Any]
    chosen_validation_accuracy: float


def select(
    grid: Mapping[str, Sequence[Any]],
    validation_accuracy: Callable[[dict[str, Any], int], float],
    seeds: Sequence[int],
    progress: Callable[[str], None] | None = None,
    widen: Mapping[str, float] | None = None,
    max_widenings: int = 2,
) -> Selection:
    """The grid point of best mean validation accuracy over `seeds`.

    A best point on the edge of a numeric setting's range says the range
    was too narrow, not that the edge is best: with `widen`, such a
    setting's grid grows past that edge by its factor (``edge * factor``
    above, ``edge / factor`` below, every other setting's values kept) and
    the new points train, up to `max_widenings` times per edge, until the
    best point is inside the range.

    Args:
      grid: ``{setting: values}`` (`grid_points`).
      validation_accuracy: ``(settings, seed) -> accuracy`` on the
        validation split of a full-budget run with those settings.
      seeds: the seeds each point trains from.
      progress: called with a line per point.
      widen: ``{setting: factor > 1}``, the numeric settings whose range
        grows past an edge the best point sits on.
      max_widenings: the most times each edge of each setting grows.

    Returns:
      The `Selection` (the first point wins a tie); its grid holds the
      values tried, widened ones included.

    Example:
      >>> from boostax.examples import selection
      >>> chosen = selection.select(
      ...     {"lr": [0.1, 0.2]}, lambda s, seed: -abs(s["lr"] - 0.4), [0],
      ...     widen={"lr": 2.0})
      >>> chosen.grid, chosen.chosen
      ({'lr': [0.1, 0.2, 0.4, 0.8]}, {'lr': 0.4})
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("`seeds` must hold at least one seed, got [].")
    widen = dict(widen or {})
    for key, factor in widen.items():
        if key not in grid:
            raise ValueError(
                f"`widen` names {key!r}, which is not a setting of the grid "
                f"{sorted(grid)}."
            )
        if not factor > 1:
            raise ValueError(
                f"`widen[{key!r}]` must be a factor > 1, got {factor!r}."
            )
    tried: dict[str, list[Any]] = {k: list(v) for k, v in grid.items()}
    points: list[dict[str, Any]] = []

    def train(settings_list):
        for settings in settings_list:
            accuracies = [
                float(validation_accuracy(settings, seed)) for seed in seeds
            ]
            mean = statistics.fmean(accuracies)
            points.append(
                {
                    "settings": settings,
                    "validation_accuracy": accuracies,
                    "validation_accuracy_mean": mean,
                }
            )
            if progress is not None:
                progress(f"  {settings}: validation accuracy {mean:.4f}")

    def best() -> int:
        return max(
            range(len(points)),
            key=lambda i: (points[i]["validation_accuracy_mean"], -i),
        )

    train(grid_points(tried))
    widenings = {(key, edge): 0 for key in widen for edge in (max, min)}
    while True:
        chosen = points[best()]["settings"]
        edge_key = next(
            (
                (key, edge)
                for (key, edge), count in widenings.items()
                if count < max_widenings
                and len(tried[key]) > 1
                and chosen[key] == edge(tried[key])
            ),
            None,
        )
        if edge_key is None:
            break
        key, edge = edge_key
        widenings[edge_key] += 1
        factor = widen[key] if edge is max else 1 / widen[key]
        value = chosen[key] * factor
        tried[key] = sorted([*tried[key], value])
        train(grid_points({**tried, key: [value]}))
    return Selection(
        tried,
        seeds,
        points,
        dict(points[best()]["settings"]),
        points[best()]["validation_accuracy_mean"],
    )
