# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Parameter groups as label trees (what ``optax.partition`` takes).

MindSpore expresses per-group optimizer settings as a list of dicts
(``[{"params": [...], "lr": ..., "weight_decay": ...}, ...]``); Optax as a
*label tree* (one label per leaf) and a mapping from labels to transforms.
These helpers carry labels from one parameter tree to another (after LessBN
removes BatchNorms and adds an FN multiplier) and assign MindSpore's
communication-fusion buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from boostax._src import validation
from boostax._src.tree_utils import leaf_paths, path_names


def relabel(
    params: Any, origin_labels: Any | Callable[[Any], Any] | None
) -> Any | Callable[[Any], Any] | None:
    """Re-expresses `params` in the groups of another parameter tree.

    Each leaf of `params` whose name path has a label in `origin_labels`
    keeps it. A new leaf (e.g. the FN head's ``multiplier``) takes the label
    of a sibling in the same module, else the first label of
    `origin_labels` (MindSpore puts unmatched parameters in a copy of one of
    the original groups).

    Args:
      params: the new parameter tree.
      origin_labels: a label tree of the original parameters, a function of
        the params returning one (returned as is: it labels any tree), or
        ``None`` (one group; returned as is).

    Returns:
      A label tree with the structure of `params`, or `origin_labels` itself
      when it is a function or ``None``.
    """
    if origin_labels is None or callable(origin_labels):
        return origin_labels
    known = dict(
        zip(
            leaf_paths(origin_labels),
            jax.tree.leaves(origin_labels),
            strict=True,
        )
    )
    if not known:
        raise ValueError("`origin_labels` has no labels.")
    by_module: dict[tuple[str, ...], Any] = {}
    for path, label in known.items():
        by_module.setdefault(path[:-1], label)
    first = next(iter(known.values()))

    def label_of(path, _):
        names = path_names(path)
        if names in known:
            return known[names]
        return by_module.get(names[:-1], first)

    return jax.tree_util.tree_map_with_path(label_of, params)


def fusion_buckets(
    params: Any,
    split_points: Sequence[int] | None = None,
    *,
    argument: str = "split_points",
) -> Any:
    """MindSpore's communication-fusion bucket of each leaf (1, 2, ...).

    The bucket starts at 1 and increments at each leaf index in
    `split_points` (default: half the number of leaves). XLA fuses
    collectives by itself, so the buckets are informational: they say how
    MindSpore would have split the all-reduce. `argument` names
    `split_points` in messages.
    """
    if split_points is not None:
        if hasattr(split_points, "ndim") and hasattr(split_points, "tolist"):
            split_points = split_points.tolist()  # an array of indices
        split_points = [
            validation.check_int(argument, point, minimum=0)
            for point in validation.check_sequence(
                argument, split_points, "a list or tuple of leaf indices"
            )
        ]
    leaves, treedef = jax.tree.flatten(params)
    if not leaves:
        raise ValueError("`params` has no leaves.")
    points = {len(leaves) // 2} if split_points is None else set(split_points)
    buckets, bucket = [], 1
    for index in range(len(leaves)):
        if index in points:
            bucket += 1
        buckets.append(bucket)
    return jax.tree.unflatten(treedef, buckets)
