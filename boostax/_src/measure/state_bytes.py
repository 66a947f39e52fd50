# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The bytes of a train state each device holds (its shard of every
sharded leaf, every replicated leaf whole)."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np

from boostax._src import validation


def _bytes_per_device(leaf) -> int:
    """Bytes of one device's share of `leaf` (an array, or its shapes): its
    shard under a `jax.sharding` sharding, else the whole leaf."""
    shape = tuple(np.shape(leaf))
    sharding = getattr(leaf, "sharding", None)
    if sharding is not None:
        shape = tuple(sharding.shard_shape(shape))
    # A typed PRNG key's dtype knows the bytes of its key data.
    return int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize


def _check_train_state(state) -> None:
    """Refuses what is not a train state (``None``, a variables dict), which
    failed with an ``AttributeError`` on ``.params``. Read by its fields: a
    flax.training TrainState counts as well (its ``tx`` is static)."""
    if all(hasattr(state, a) for a in ("params", "opt_state", "replace")):
        return
    hint = ""
    if isinstance(state, Mapping) and "params" in state:
        hint = " These look like the model's variables: pass them to `init`."
    raise TypeError(
        "`state` must be a boostax.TrainState: the one a step's `init` "
        "returns (`ts.init(variables)`) or its shapes "
        f"(`jax.eval_shape(ts.init, variables)`), {validation.got(state)}."
        f"{hint}"
    )


def state_bytes_per_device(state) -> dict[str, int]:
    """The bytes of a `TrainState` that each device holds, by part.

    A replicated leaf counts whole on every device; a sharded one
    (`DataParallel(shard_optimizer_state=True)`, or AdaSum's per-device
    optimizer states) counts its shard.

    Args:
      state: a `TrainState`, of arrays or of ``jax.ShapeDtypeStruct``.

    Returns:
      ``{"params", "opt_state", "other" (model state, key, counters and
      the algorithms' states), "total"}``, in bytes.
    """

    _check_train_state(state)

    def part(tree) -> int:
        return sum(_bytes_per_device(x) for x in jax.tree.leaves(tree))

    parts = {
        "params": part(state.params),
        "opt_state": part(state.opt_state),
        "other": part(state.replace(params=None, opt_state=None)),
    }
    return {**parts, "total": sum(parts.values())}
