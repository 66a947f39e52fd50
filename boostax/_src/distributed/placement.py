# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Where a data-parallel step's state and batch live: specs and placement.

`DataParallel` (`boostax._src.distributed.data_parallel`) inherits
`Placement`: the
``PartitionSpec`` s of a `TrainState` (replicated, stacked per device or
node, or split like the optimizer state's slices), its placement on the
mesh from the host, each process's batch as global arrays, and the step
run per device under ``jax.shard_map`` with those specs. The collectives
inside the step stay in `data_parallel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from boostax._src.distributed import optimizer_sharding, partitioning


def _is_dim_reduce_state(x) -> bool:
    return isinstance(x, dim_reduce_lib.DimReduceState)


def _is_typed_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(
        x.dtype, jax.dtypes.prng_key
    )


class Placement:
    """The specs and placement of a `DataParallel` plan's state and batch.

    A base of `DataParallel`, whose mesh, reduction, axes and device
    counts it reads (and `defers_reduction`, `stack_accumulator`).
    """

    if TYPE_CHECKING:  # those the annotated methods here read
        reduction: str
        shard_optimizer_state: bool

        @property
        def num_devices(self) -> int: ...

        @property
        def num_nodes(self) -> int: ...

        @property
        def batch_axes(self) -> tuple[str, ...]: ...

    def sharded_opt_state_specs(self, init, params, plan=None):
        """With `shard_optimizer_state`, the spec of each leaf of the state
        ``init(params)``: split like the parameters' slices, or replicated.

        Args:
          init: ``params -> optimizer state``.
          params: the whole parameters (arrays or shapes).
          plan: the split plan (see `reduce_gradients`).
        """
        local = optimizer_sharding.abstract_slices(
            params, self.num_shards, plan
        )
        whole = jax.eval_shape(init, params)
        specs = optimizer_sharding.opt_state_specs(
            whole, jax.eval_shape(init, local), self.shard_axes
        )
        if self.reduction == "adasum":
            # One state per node, stacked along a leading node axis.
            return jax.tree.map(
                lambda spec: P(self.node_axes, *spec),
                specs,
                is_leaf=lambda x: isinstance(x, P),
            )
        if self.defers_reduction(whole):
            # Per-device accumulators, stacked on a leading device axis.
            specs = specs._replace(
                acc_grads=jax.tree.map(lambda _: P(self.axes), whole.acc_grads)
            )
        return specs

    def sharded_param_specs(self, params, plan=None):
        """The spec of each leaf of `params` stored sharded: split like the
        optimizer state's slots (the same axis), or replicated (a leaf kept
        whole).

        With `shard_optimizer_state` and `shard_params` (see
        `shards_params`) the float32 params are stored so: each device
        holds the slice it updates, and the step all-gathers them in the
        dtype the forward reads (`gather_params`).

        Args:
          params: the whole parameters (arrays or shapes).
          plan: the split plan (see `reduce_gradients`).
        """
        local = optimizer_sharding.abstract_slices(
            params, self.num_shards, plan
        )
        return optimizer_sharding.opt_state_specs(
            params, local, self.shard_axes
        )

    def state_specs(self, state, opt_state_specs=None, param_specs=None):
        """The ``shard_map`` specs of a `TrainState` (a pytree prefix).

        Everything is replicated but a per-device optimizer state (stacked
        along a leading device axis), a sharded one (`opt_state_specs`, from
        `sharded_opt_state_specs`), params stored sharded (`param_specs`,
        from `sharded_param_specs`) and DimReduce's PCA matrix (its rows
        split over the devices).
        """
        return state.replace(
            step=P(),
            params=P() if param_specs is None else param_specs,
            opt_state=self._opt_state_specs(state.opt_state, opt_state_specs),
            model_state=P(),
            rng=P(),
            algorithms=P(),
            fingerprint=P(),
        )

    def _opt_state_specs(self, opt_state, sharded=None):
        if not self.explicit and sharded is not None:
            return sharded  # "jit": by the rule, or like annotated params
        if self.per_device_optimizer_state:
            return P(self.axes)
        if self.shard_optimizer_state:
            if sharded is None:
                raise ValueError(
                    "shard_optimizer_state: pass the optimizer state's specs "
                    "(`sharded_opt_state_specs`)."
                )
            return sharded

        def spec(node):
            if not isinstance(node, dim_reduce_lib.DimReduceState):
                return P()
            rows = node.pca_matrix.shape[0]
            if rows % self.num_devices:
                raise ValueError(
                    "DimReduce splits the PCA matrix's rows over the "
                    f"devices: `n_components` ({rows}) must be divisible by "
                    f"the number of devices ({self.num_devices})."
                )
            specs = {field: P() for field in node._fields}
            return node._replace(**{**specs, "pca_matrix": P(self.axes)})

        return jax.tree.map(spec, opt_state, is_leaf=_is_dim_reduce_state)

    def _state_copies(self) -> int:
        """How many optimizer states are stacked along a leading axis: one
        per device (AdaSum), one per node (AdaSum with a sharded state), or
        none (0)."""
        if self.reduction != "adasum":
            return 0
        return (
            self.num_nodes if self.shard_optimizer_state else self.num_devices
        )

    def batch_spec(self) -> P:
        return P(self.batch_axes)

    def place_state(self, state, opt_state_specs=None, param_specs=None):
        """Puts a host-side `TrainState` on the mesh.

        Replicates everything; with a per-device optimizer state, stacks
        ``num_devices`` copies of it along a new leading axis, one per
        device; with a sharded one, splits its leaves as `opt_state_specs`
        say (`sharded_opt_state_specs`), the per-device accumulators
        (`defers_reduction`) stacked too; params stored sharded are split
        as `param_specs` say (`sharded_param_specs`). Works in every
        process of a multi-process run (each process passes the same
        initial state).
        """
        stack = self._state_copies()
        state = state.replace(
            opt_state=self.stack_accumulator(
                state.opt_state,
                lambda x: np.broadcast_to(
                    np.asarray(x), (self.num_devices, *np.shape(x))
                ),
            )
        )

        def put(x, spec, stack=0, mesh=self.placement_mesh):
            if _is_typed_key(x):
                # A typed key (jax.random.key) has no NumPy form: place its
                # key data and wrap it again with the same implementation.
                return jax.random.wrap_key_data(
                    put(jax.random.key_data(x), spec, stack),
                    impl=jax.random.key_impl(x),
                )
            host = np.asarray(x)
            if stack:
                host = np.broadcast_to(host, (stack, *host.shape))
            return jax.make_array_from_callback(
                host.shape,
                NamedSharding(mesh, spec),
                lambda index: host[index],
            )

        def put_tree(spec, tree, stack=0):
            return jax.tree.map(lambda x: put(x, spec, stack), tree)

        opt_state = jax.tree.map(
            lambda spec, tree: put_tree(spec, tree, stack),
            self._opt_state_specs(state.opt_state, opt_state_specs),
            state.opt_state,
            is_leaf=lambda x: isinstance(x, P),
        )
        if param_specs is None:
            params = put_tree(P(), state.params)
        else:
            params = jax.tree.map(
                lambda spec, x: put(x, spec, mesh=self.auto_mesh),
                param_specs,
                state.params,
                is_leaf=lambda x: isinstance(x, P),
            )
        rest = put_tree(P(), state.replace(opt_state=None, params=None))
        return rest.replace(opt_state=opt_state, params=params)

    def shard_batch(self, batch):
        """This process's share of the batch as global arrays on the mesh.

        Leaves that already are arrays sharded like the step wants pass
        through; host arrays are split along the leading dimension, whose
        global size must be a multiple of the device count.
        """
        sharding = NamedSharding(self.placement_mesh, self.batch_spec())

        def put(x):
            if isinstance(x, jax.Array) and x.sharding == sharding:
                return x
            x = np.asarray(x)
            global_rows = x.shape[0] * jax.process_count() if x.ndim else 0
            if x.ndim == 0 or global_rows % self.batch_devices:
                raise ValueError(
                    "Data-parallel batches are split along their leading "
                    f"dimension over {self.batch_devices} devices; got a leaf "
                    f"of shape {x.shape} ({global_rows} rows in all)."
                )
            return jax.make_array_from_process_local_data(sharding, x)

        return jax.tree.map(put, batch)

    def shard_step(self, step, state, opt_state_specs=None, param_specs=None):
        """``step(state, batch)`` run per device under ``jax.shard_map``.

        A per-device optimizer state (or accumulator: `defers_reduction`)
        enters as this device's slice and leaves with its leading axis
        back; a sharded one (`opt_state_specs`), and params stored sharded
        (`param_specs`), enter and leave as this device's slices.
        """
        per_device = bool(self._state_copies())

        def local(state, batch):
            opt_state = self.stack_accumulator(state.opt_state, lambda x: x[0])
            if per_device:
                opt_state = jax.tree.map(lambda x: x[0], opt_state)
            new_state, metrics = step(state.replace(opt_state=opt_state), batch)
            opt_state = self.stack_accumulator(
                new_state.opt_state, lambda x: x[None]
            )
            if per_device:
                opt_state = jax.tree.map(lambda x: x[None], opt_state)
            return new_state.replace(opt_state=opt_state), metrics

        specs = self.state_specs(state, opt_state_specs, param_specs)
        # The replicated outputs are made identical by collectives whose
        # results JAX cannot prove invariant (AdaSum's ppermutes, per-device
        # optimizer updates), hence no varying-axes check.
        mapped = jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(specs, self.batch_spec()),
            out_specs=(specs, P()),
            check_vma=False,
        )
        if param_specs is None:
            return mapped

        def run(state, batch):
            # Params stored sharded enter the step on the mesh's own axes
            # and leave on `auto_mesh`'s, where the user reads them.
            params = self._constrain(state.params, param_specs, self.mesh)
            new_state, metrics = mapped(state.replace(params=params), batch)
            params = self._constrain(
                new_state.params, param_specs, self.auto_mesh
            )
            return new_state.replace(params=params), metrics

        return run

    def global_specs(self, tree, base=None):
        """`partitioning.global_specs` over this plan's batch axes."""
        return partitioning.global_specs(
            tree, self.batch_axes, self.batch_devices, base
        )

    @staticmethod
    def _constrain(tree, specs, mesh: Mesh):
        """`tree` (in a jitted function) sharded as `specs` on `mesh`."""
        explicit = all(t == AxisType.Explicit for t in mesh.axis_types)
        return jax.tree.map(
            lambda spec, x: (
                jax.sharding.reshard(x, NamedSharding(mesh, spec))
                if explicit
                else lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
            ),
            specs,
            tree,
            is_leaf=lambda x: isinstance(x, P),
        )
