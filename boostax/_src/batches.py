# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Model batches: ``(inputs, targets)`` pairs, or dicts with `batch_keys`.

A model objective (`objectives.py`) takes its inputs and targets from each
batch here, and checks on the host, before the step is traced, that the
batch is one it can take (shapes only: no device transfer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from boostax._src import model_errors, validation


def inputs_and_targets(batch, batch_keys=None) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a model batch.

    Args:
      batch: an ``(inputs, targets)`` pair, or with `batch_keys` a mapping.
      batch_keys: ``(inputs key, targets key)`` of a mapping batch.
    """
    if batch_keys is not None:
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"With `batch_keys={tuple(batch_keys)!r}`, batches must be "
                f"dicts holding those keys, got {type(batch).__name__}."
            )
        missing = [k for k in batch_keys if k not in batch]
        if missing:
            raise KeyError(
                f"The batch has no {missing[0]!r} entry (`batch_keys` is "
                f"{tuple(batch_keys)!r}); its keys are {list(batch)}."
            )
        return batch[batch_keys[0]], batch[batch_keys[1]]
    if isinstance(batch, Mapping):
        raise TypeError(
            "A model objective takes batches as (inputs, targets) pairs, got "
            f"a dict with keys {list(batch)}: pass `batch_keys=(inputs key, "
            "targets key)`, e.g. `batch_keys=('image', 'label')`, to "
            "auto_boost or make_train_step."
        )
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(
            "A model objective takes batches as (inputs, targets) pairs, got "
            f"{type(batch).__name__}"
            + (
                f" of length {len(batch)}"
                if isinstance(batch, (tuple, list))
                else ""
            )
            + " (dict batches need `batch_keys=`)."
        )
    return batch[0], batch[1]


def check_batch_keys(batch_keys) -> tuple[str, str] | None:
    """Validates `batch_keys`: ``None`` or two distinct dict keys."""
    if batch_keys is None:
        return None
    if (
        isinstance(batch_keys, (str, bytes))
        or not isinstance(batch_keys, Sequence)
        or len(batch_keys) != 2
        or batch_keys[0] == batch_keys[1]
    ):
        raise TypeError(
            "`batch_keys` must be None or a pair of distinct keys "
            "(inputs key, targets key), e.g. ('image', 'label'), "
            f"{validation.got(batch_keys)}."
        )
    return tuple(batch_keys)


def _leading_sizes(name: str, tree) -> list[tuple[str, int]]:
    """``(entry, leading size)`` of the arrays of `tree` (scalars skipped)."""
    return [
        (name + jax.tree_util.keystr(path), shape[0])
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
        for shape in [np.shape(leaf)]
        if shape
    ]


def check_batch_sizes(batch) -> None:
    """Raises if a model batch's targets and inputs differ in batch size.

    Runs on the host before the step is traced, where a mismatch would
    otherwise surface as a broadcasting error inside the loss. Only shapes
    are read (no device transfer).

    Args:
      batch: an ``(inputs, targets)`` pair of arrays or pytrees of arrays.

    Raises:
      ValueError: naming every entry and its leading size, when a target's
        leading size differs from the first input's.
    """
    inputs, targets = inputs_and_targets(batch)
    entries = _leading_sizes("inputs", inputs)
    target_entries = _leading_sizes("targets", targets)
    model_errors.check_batch_arrays(inputs, targets)
    if all(n == entries[0][1] for _, n in target_entries):
        return
    listed = ", ".join(f"{e}: {n}" for e, n in entries + target_entries)
    raise ValueError(
        "The batch's targets and inputs differ in their leading (batch) "
        f"size: {listed}. Every array of an (inputs, targets) batch needs "
        f"the inputs' batch size {entries[0][1]} as its first dimension."
    )
