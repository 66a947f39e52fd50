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

from boostax._src import validation
from boostax._src.step import model_errors


def inputs_and_targets(batch, batch_keys=None) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a model batch.

    Args:
      batch: an ``(inputs, targets)`` pair, or with `batch_keys` a mapping.
      batch_keys: ``(inputs key, targets key)`` of a mapping batch; the
        inputs key may be a tuple of keys (the model's positional inputs:
        the inputs are then the tuple of those entries, `model_args`).
    """
    if batch_keys is not None:
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"With `batch_keys={tuple(batch_keys)!r}`, batches must be "
                f"dicts holding those keys, got {type(batch).__name__}."
            )
        missing = [k for k in batch_entries(batch_keys) if k not in batch]
        if missing:
            raise KeyError(
                f"The batch has no {missing[0]!r} entry (`batch_keys` is "
                f"{tuple(batch_keys)!r}); its keys are {list(batch)}."
            )
        spec, target = batch_keys
        if isinstance(spec, tuple):
            return tuple(batch[k] for k in spec), batch[target]
        return batch[spec], batch[target]
    if isinstance(batch, Mapping):
        raise TypeError(
            "A model objective takes batches as (inputs, targets) pairs, got "
            f"a dict with keys {list(batch)}: build the step with "
            "`options=boostax.StepOptions(batch_keys=(inputs key, targets "
            "key))`, e.g. `batch_keys=('image', 'label')`."
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


def model_args(inputs, batch_keys=None) -> tuple[Any, ...]:
    """The positional arguments of the model's call for `inputs`.

    Several positional inputs (`batch_keys` naming a tuple of inputs keys,
    e.g. a packed language-model batch's ``('inputs', 'inputs_position',
    'inputs_segmentation')``) are passed one by one; otherwise `inputs`
    is the one argument, whatever pytree it is.
    """
    if batch_keys is not None and isinstance(batch_keys[0], tuple):
        return tuple(inputs)
    return (inputs,)


def batch_entries(batch_keys) -> tuple[str, ...]:
    """The entries of a dict batch that `batch_keys` reads, each once."""
    spec, target = batch_keys
    keys = spec if isinstance(spec, tuple) else (spec,)
    return tuple(dict.fromkeys((*keys, target)))


def check_batch_keys(batch_keys):
    """Validates `batch_keys`: ``None``, or ``(inputs, targets key)`` where
    inputs is a dict key or a tuple of distinct keys (the model's
    positional inputs). The targets key may be an inputs key: a language
    model whose targets are its inputs (it shifts them itself, as Flax's
    lm1b does) reads ``('inputs', 'inputs')``."""
    if batch_keys is None:
        return None
    spec = None
    if (
        not isinstance(batch_keys, (str, bytes))
        and isinstance(batch_keys, Sequence)
        and len(batch_keys) == 2
    ):
        spec = batch_keys[0]
        if isinstance(spec, list):
            spec = tuple(spec)
        if isinstance(spec, tuple) and (
            not spec
            or len(set(spec)) != len(spec)
            or any(isinstance(k, (tuple, list)) for k in spec)
        ):
            spec = None
    if spec is None or isinstance(batch_keys[1], (tuple, list)):
        raise TypeError(
            "`batch_keys` must be None or (inputs key, targets key), e.g. "
            "('image', 'label'); the inputs key may be a tuple of distinct "
            "keys for a model of several positional inputs, e.g. (('inputs',"
            " 'inputs_position', 'inputs_segmentation'), 'targets'), "
            f"{validation.got(batch_keys)}."
        )
    return (spec, batch_keys[1])


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
