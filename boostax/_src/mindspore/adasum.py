# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""``AdaSum``: MindSpore's ``mindspore.boost.AdaSum`` (hierarchical AdaSum).

Mirrors ``mindspore/boost/adasum.py``; the work is done by
`boostax.hierarchical_adasum_reduce` on a `boostax.node_mesh`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from boostax._src import validation
from boostax._src.distributed import adasum as adasum_lib
from boostax._src.distributed import data_parallel as data_parallel_lib


class AdaSum:
    """MindSpore's ``AdaSum``: hierarchical AdaSum of weight deltas.

    ``AdaSum(rank, device_number, group_number, parameter_tuple)``: the
    deltas are averaged over the `device_number` devices of a node and
    AdaSum'd across the `group_number` nodes. Call it inside
    ``jax.shard_map`` over `mesh` (axes ``node``, ``local``):

    .. math::

      w_\\text{new} = w_\\text{old} - \\operatorname{AdaSum}_\\text{nodes}
      \\bigl(\\operatorname{mean}_\\text{node}(w_\\text{old} - w')\\bigr)

    Args:
      rank: the total number of devices (``device_number * group_number``).
      device_number: devices per node.
      group_number: number of nodes.
      parameter_tuple: the weights (a pytree); the deltas must match its
        structure.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import PartitionSpec as P
      >>> from boostax import mindspore as boost
      >>> n = len(jax.devices())
      >>> w = {"w": jnp.ones(2)}
      >>> adasum = boost.AdaSum(n, 1, n, w)
      >>> def step(delta, old):
      ...   return adasum(delta, old, old)
      >>> new = jax.jit(jax.shard_map(
      ...     step, mesh=adasum.mesh(), in_specs=(P(), P()), out_specs=P(),
      ... ))({"w": jnp.array([0.5, 0.5])}, w)
      >>> new["w"]  # equal deltas on every node: their mean
      Array([0.5, 0.5], dtype=float32)
    """

    def __init__(
        self,
        rank: int,
        device_number: int,
        group_number: int,
        parameter_tuple: Any,
    ):
        rank, device_number, group_number = (
            validation.check_int(name, value, minimum=1)
            for name, value in (
                ("rank", rank),
                ("device_number", device_number),
                ("group_number", group_number),
            )
        )
        if rank != device_number * group_number:
            raise ValueError(
                "`rank` (the total number of devices) must equal "
                f"device_number * group_number = {device_number} * "
                f"{group_number}, got {rank}."
            )
        self.rank = rank
        self.device_number = device_number
        self.group_number = group_number
        self.parameter_tuple = parameter_tuple
        self._structure = jax.tree.structure(parameter_tuple)

    def mesh(self, devices: Any = None):
        """The ``(node, local)`` mesh of `rank` devices this AdaSum runs on."""
        devices = np.asarray(jax.devices() if devices is None else devices)
        if devices.size != self.rank:
            raise ValueError(
                f"AdaSum was built for `rank` = {self.rank} devices, got "
                f"{devices.size}."
            )
        return data_parallel_lib.node_mesh(self.device_number, devices)

    def __call__(self, delta_weights, parameters, old_parameters):
        """The updated weights ``old - AdaSum(delta)`` (inside shard_map)."""
        del parameters  # replaced by the result, as MindSpore assigns it
        for name, tree in (
            ("delta_weights", delta_weights),
            ("old_parameters", old_parameters),
        ):
            if jax.tree.structure(tree) != self._structure:
                raise ValueError(
                    f"`{name}` must have the structure of `parameter_tuple` "
                    f"{self._structure}, got {jax.tree.structure(tree)}."
                )
        delta = adasum_lib.hierarchical_adasum_reduce(
            delta_weights, local_axis="local", node_axis="node"
        )
        return jax.tree.map(lambda w, d: w - d, old_parameters, delta)
