# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel train steps over a device mesh, with averaging or AdaSum.

The step runs under ``jax.shard_map``: each device takes its shard of the
batch (split along the leading dimension over every mesh axis), computes
its gradients, and the devices combine them:

* ``"mean"``: gradients averaged (``lax.pmean``), one optimizer state;
* ``"adasum"``: each device (or node) runs the optimizer on its own
  gradients, and the updates — the weight deltas — are AdaSum'd, as
  MindSpore's boost and Horovod do; the optimizer state is per device;
* ``"adasum_gradients"``: raw gradients AdaSum'd, one optimizer state.

With a ``local_axis`` (devices within a node), gradients are averaged over
it first and AdaSum runs over the other axes (MindSpore's hierarchy).
With ``shard_optimizer_state``, the gradients are reduce-scattered
instead, each device updates its slice of the parameters and of the
optimizer state, and the new slices are all-gathered
(`boostax._src.distributed.optimizer_sharding`: ZeRO-1); with
``"adasum"``, within a
node (each node's state split over its devices), the slices' updates
AdaSum'd across nodes in between (`boostax.adasum`). With
``shard_params`` (by default: under a half-precision policy, without
gradient freezing or accumulation) the float32 params are stored split
like the optimizer state too and all-gathered at the start of each step
in the dtype the forward reads (`sharded_param_specs`, `gather_params`),
with no final gather; otherwise they stay replicated;
BatchNorm statistics are averaged over all devices after each step; the
loss-scale state is reduced so that every device skips the same steps.

Works across processes (``jax.distributed``) unchanged: every process
passes its share of the global batch.

With ``engine="jit"`` the step is not run per device: the one-device step
is jitted over the global batch, placed on the mesh by ``NamedSharding`` s,
and XLA's SPMD partitioner inserts the collectives (`DataParallel.engine`).

Where the state and batch live (their specs, their placement, the step
under ``shard_map``) is `data_parallel_placement`'s, a base of the class.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import AxisType, Mesh

from boostax._src import accumulation as accumulation_lib
from boostax._src import validation
from boostax._src.distributed import adasum as adasum_lib
from boostax._src.distributed import optimizer_sharding, partitioning
from boostax._src.distributed.placement import Placement
from boostax._src.tree_utils import contains_state

REDUCTIONS = ("mean", "adasum", "adasum_gradients")
ENGINES = ("shard_map", "jit")


def _is_float(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


@dataclasses.dataclass(frozen=True, eq=False)
class DataParallel(Placement):
    """How a `TrainStep` runs data-parallel over a device mesh.

    Attributes:
      mesh: the ``jax.sharding.Mesh``; the batch is split along its leading
        dimension over all of the mesh's axes, in order.
      reduction: ``"mean"`` (plain data parallelism), ``"adasum"`` (AdaSum
        of the optimizer's updates after a local step; per-device optimizer
        state) or ``"adasum_gradients"`` (AdaSum of the gradients).
      local_axis: with AdaSum, the mesh axis of the devices within a node:
        gradients are averaged over it, AdaSum runs over the other axes.
        ``None``: AdaSum over every device.
      eps: AdaSum's epsilon on dot products and squared norms.
      shard_optimizer_state: store the optimizer state split over the
        devices (1/D of it on each) and run the optimizer on each device's
        slice: gradients reduce-scattered, new parameters all-gathered
        (ZeRO-1; the same bytes as one all-reduce). With ``"mean"`` and
        `boostax.gradient_accumulation` as the optimizer, each device
        accumulates its own micro-gradients, whole, and the reduce-scatter
        runs once per update, on the micro-step that updates. With
        ``"adasum"``, each node's state is split over its devices
        (`local_axis`, of 2 or more): the node's mean gradient is
        reduce-scattered, and each device's slice of the updates is
        AdaSum'd with the same slice on the other nodes, the dot products
        and norms of AdaSum's rule summed over the node's slices (those of
        whole leaves, as without sharding); ``"adasum_gradients"`` is not
        built. A leaf is split along its first axis whose size is a
        multiple of the number of devices it is split over and that the
        optimizer does not mix over (found from its traced update when the
        step is built, `optimizer_sharding.split_plan`: with gradient
        centralization, a kernel is split along its output axis); a leaf
        with none stays whole. Where the params are replicated
        (`shard_params`), the new slices of the trained leaves are
        all-gathered in float32 at the end of the step (a frozen leaf is
        neither reduced nor gathered). An optimizer that reads a whole
        leaf or tree (global-norm clipping, LARS/LAMB, Adafactor,
        DimReduce) is refused when the step is built. Default ``False``:
        the state then stays whole on every device, which any optimizer
        allows and which costs nothing while it fits in memory.
      shard_params: with `shard_optimizer_state`, whether the float32
        params are stored split too, like the state (each device keeps the
        slice it updates, 1/D of the params; ``state.params`` are still
        whole float32 ``jax.Array`` s, sharded on `auto_mesh`). The step
        then starts by all-gathering each slice cast to the dtype the
        forward reads the leaf in (under a policy whose compute dtype is
        not float32, the compute dtype, or float32 for normalisation
        layers under O2 and ``float32_modules``; float32 without one),
        reduce-scatters the gradients (in the policy's ``reduce_dtype``)
        and ends without a gather: per device
        ``(n_c b_c + 4 n_32)(D-1)/D + 4n(D-1)/D`` bytes (``n_c`` elements
        gathered in the compute dtype of ``b_c`` bytes, ``n_32`` in
        float32) instead of ``8n(D-1)/D``. But every program gathers every
        leaf its forward reads, frozen ones included, and with gradient
        accumulation every micro-step gathers: with freezing past about
        half the params, or accumulation over 2 micro-steps or more (3
        where every leaf is cast), it sends more than the replicated
        params' final float32 gather of the trained leaves.
        ``True``: stored split (without a half-precision policy, float32
        ZeRO-1 with sharded params: 1/D of the params stored, the same
        bytes as replicated params without freezing or accumulation);
        ``False``: replicated, the
        final gather in float32. ``None`` (default): decided when the step
        is built (`shards_params`): split only under a half-precision
        policy and without gradient freezing or accumulation, where it
        sends fewer bytes (0.75x when every leaf is cast). ``True`` needs
        `shard_optimizer_state`.

      engine: how the step runs on the mesh. ``"shard_map"`` (default):
        per device under ``jax.shard_map``, its collectives written out
        (this module's docstring): each device draws its own dropout masks
        and, without an ``axis_name``, normalises BatchNorm by its own
        rows; ``shard_optimizer_state`` takes elementwise optimizers.
        ``"jit"``: the one-device step, jitted over the global batch split
        over every mesh axis, with the state placed by ``NamedSharding``;
        XLA's SPMD partitioner inserts the collectives. Its arithmetic is
        the one-device step's: BatchNorm over the global batch, one dropout
        draw for the global batch (the same on any number of devices), a
        loss over the global batch. `shard_optimizer_state` splits each
        optimizer-state leaf along its largest axis that the device count
        divides (`global_specs`) and takes any Optax optimizer (global-norm
        clipping, Adafactor, LAMB: XLA inserts their reductions);
        `shard_params` stores the params split the same way (FSDP: XLA
        gathers each where the forward reads it; ``None`` is ``False``).
        Reduction ``"mean"`` only.
      logical_axis_rules: with ``engine="jit"``, Flax's logical axis rules
        (``(logical name, mesh axis or axes or None)`` pairs, as
        ``nn.logical_axis_rules`` takes): Linen variables annotated with
        ``nn.with_logical_partitioning`` are placed as their names map to
        mesh axes (``nn.with_partitioning`` names mesh axes directly: no
        rules needed), so a model axis shards the params as the model says
        (tensor parallelism), and the batch is split over the axes the
        ``"batch"`` rule names (required), replicated over the others.
        ``None``: no rules; the batch split over every mesh axis.

    Example:
      >>> import jax, optax, boostax
      >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
      >>> dp = boostax.DataParallel(mesh, reduction="adasum")
      >>> dp.node_axes, dp.num_devices == len(jax.devices())
      (('data',), True)
    """

    mesh: Mesh
    reduction: str = "mean"
    local_axis: str | None = None
    eps: float = 1e-12
    shard_optimizer_state: bool = False
    shard_params: bool | None = None
    engine: str = "shard_map"
    logical_axis_rules: Any = None

    def __post_init__(self):
        validation.check_instance(
            "mesh",
            self.mesh,
            Mesh,
            "a jax.sharding.Mesh (e.g. jax.make_mesh((n,), ('data',)))",
        )
        validation.check_one_of("reduction", self.reduction, REDUCTIONS)
        if self.local_axis is not None:
            if not isinstance(self.local_axis, str):
                raise TypeError(
                    "`local_axis` must be None or one of the mesh's axes "
                    f"{tuple(self.mesh.axis_names)}, "
                    f"{validation.got(self.local_axis)}."
                )
            if self.local_axis not in self.mesh.axis_names:
                raise ValueError(
                    "`local_axis` must be one of the mesh's axes "
                    f"{tuple(self.mesh.axis_names)}, got {self.local_axis!r}."
                )
            if self.reduction == "mean":
                raise ValueError(
                    "`local_axis` only applies to AdaSum (reduction "
                    "'adasum' or 'adasum_gradients'); with 'mean' every "
                    "device is averaged."
                )
            if len(self.mesh.axis_names) < 2:
                raise ValueError(
                    "`local_axis` needs a mesh with a node axis beside it, "
                    f"got the mesh axes {tuple(self.mesh.axis_names)}."
                )
        adasum_lib.check_eps(self.eps)
        validation.check_one_of("engine", self.engine, ENGINES)
        if self.logical_axis_rules is not None:
            object.__setattr__(
                self,
                "logical_axis_rules",
                partitioning.check_rules(
                    self.logical_axis_rules, self.mesh, self.engine
                ),
            )
        if self.engine == "jit" and self.reduction != "mean":
            raise NotImplementedError(
                "engine='jit' is built for reduction 'mean': AdaSum combines "
                "each device's own gradients or updates with explicit "
                f"collectives (reduction={self.reduction!r}). Use "
                "engine='shard_map' with AdaSum."
            )
        validation.check_bool(
            "shard_optimizer_state", self.shard_optimizer_state
        )
        validation.check_optional_bool("shard_params", self.shard_params)
        if self.shard_params and not self.shard_optimizer_state:
            raise ValueError(
                "`shard_params=True` stores the params split like the "
                "optimizer state: it needs shard_optimizer_state=True, got "
                "shard_optimizer_state=False."
            )
        if self.shard_optimizer_state and self.reduction == "adasum_gradients":
            raise NotImplementedError(
                "shard_optimizer_state is built for reduction 'mean' and "
                "'adasum' (a node's state split over its devices), not for "
                "'adasum_gradients'. Use reduction='adasum', or "
                "shard_optimizer_state=False."
            )
        if self.shard_optimizer_state and self.reduction == "adasum":
            if self.local_axis is None or self.mesh.shape[self.local_axis] < 2:
                raise ValueError(
                    "shard_optimizer_state with reduction='adasum' splits "
                    "each node's optimizer state over the node's devices: "
                    "it needs a `local_axis` of 2 or more devices, got "
                    f"local_axis={self.local_axis!r} on the mesh "
                    f"{dict(self.mesh.shape)}."
                )

    @property
    def axes(self) -> tuple[str, ...]:
        """Every mesh axis: the batch is split over all of them."""
        return tuple(self.mesh.axis_names)

    @property
    def node_axes(self) -> tuple[str, ...]:
        """The axes AdaSum combines over."""
        return tuple(a for a in self.axes if a != self.local_axis)

    @property
    def num_devices(self) -> int:
        return self.mesh.devices.size

    @property
    def num_nodes(self) -> int:
        return math.prod(self.mesh.shape[a] for a in self.node_axes)

    @property
    def auto_mesh(self) -> Mesh:
        """The mesh's devices and axes, every axis of type ``Auto``.

        Params stored sharded (`sharded_param_specs`) live on it, so that
        any jitted function of the user's reads them as whole arrays, XLA
        gathering what it needs. On ``Explicit`` axes (``jax.make_mesh``'s
        default) their sharding would be part of their type, and a matmul
        contracting a sharded axis (``x @ kernel``) refuses to guess its
        output's sharding.
        """
        return Mesh(
            self.mesh.devices,
            self.mesh.axis_names,
            axis_types=(AxisType.Auto,) * len(self.mesh.axis_names),
        )

    @property
    def batch_axes(self) -> tuple[str, ...]:
        """The mesh axes the batch is split over: those of the
        ``"batch"`` logical axis rule, else every axis."""
        if self.logical_axis_rules is None:
            return self.axes
        return partitioning.rule_axes(dict(self.logical_axis_rules)["batch"])

    @property
    def batch_devices(self) -> int:
        """How many ways the batch is split (`batch_axes`' devices)."""
        return math.prod(self.mesh.shape[a] for a in self.batch_axes)

    @property
    def explicit(self) -> bool:
        """Whether the step runs per device with its collectives written
        out (``engine="shard_map"``), not jitted over the global batch."""
        return self.engine == "shard_map"

    @property
    def placement_mesh(self) -> Mesh:
        """The mesh the state and batches are placed on: `mesh`, or for the
        ``"jit"`` engine `auto_mesh` (XLA propagates shardings on ``Auto``
        axes; on ``Explicit`` ones a contraction over a split axis has no
        sharding to infer)."""
        return self.mesh if self.explicit else self.auto_mesh

    @property
    def per_device_optimizer_state(self) -> bool:
        """Whether each device keeps its own optimizer state (AdaSum)."""
        return self.reduction == "adasum" and not self.shard_optimizer_state

    def shards_params(
        self, *, half_precision: bool, freezes: bool, accumulates: bool
    ) -> bool:
        """Whether a step stores its float32 params sharded (see
        `shard_params`).

        Args:
          half_precision: whether the step's precision policy computes in
            a dtype other than float32.
          freezes: whether the step freezes gradients.
          accumulates: whether its optimizer accumulates gradients over
            micro-steps.

        Returns:
          False without `shard_optimizer_state`; `shard_params` where it
          is a bool; otherwise (``None``) the rule: sharded under a
          half-precision policy without freezing or accumulation, where
          gathering at the start of every program always sends fewer
          bytes than the final float32 gather of the trained leaves.
        """
        if not self.shard_optimizer_state:
            return False
        if self.shard_params is not None:
            return self.shard_params
        if not self.explicit:
            return False
        return half_precision and not freezes and not accumulates

    @property
    def shard_axes(self) -> tuple[str, ...]:
        """The axes a sharded optimizer state is split over: every axis,
        or with AdaSum the local one (each node keeps its own state)."""
        if self.reduction == "adasum":
            assert self.local_axis is not None  # checked at construction
            return (self.local_axis,)
        return self.axes

    @property
    def num_shards(self) -> int:
        """The devices a sharded optimizer state is split over."""
        return math.prod(self.mesh.shape[a] for a in self.shard_axes)

    # -- the optimizer -----------------------------------------------------

    def optimizer(self, optimizer: optax.GradientTransformation, params):
        """`optimizer` with AdaSum added where this reduction needs it.

        ``"adasum"`` wraps the optimizer in `boostax.adasum` unless it
        already contains an AdaSum stage (e.g. built as
        ``gradient_accumulation(adasum(inner), k)`` so that AdaSum runs only
        on real updates); the other reductions reject one.
        """
        has_adasum = contains_state(
            jax.eval_shape(optimizer.init, params), adasum_lib.AdaSumState
        )
        if self.reduction != "adasum":
            if has_adasum:
                raise ValueError(
                    "The optimizer contains an AdaSum stage (boostax.adasum) "
                    f"but the data-parallel reduction is {self.reduction!r}:"
                    " use reduction='adasum', or drop the stage."
                )
            return optimizer
        if has_adasum:
            return optimizer
        return self.adasum(optimizer)

    def adasum(self, optimizer: optax.GradientTransformation):
        """`boostax.adasum` of `optimizer` over this plan's node axes."""
        return adasum_lib.adasum(
            optimizer,
            self.node_axes,
            local_axis_name=self.local_axis,
            eps=self.eps,
        )

    # -- inside the step (under shard_map) ---------------------------------

    def device_index(self) -> jax.Array:
        """This device's position along the flattened mesh axes."""
        return lax.axis_index(self.axes)

    def reduce_gradients(self, grads, plan=None):
        """Combines the devices' gradients as the reduction says.

        With `shard_optimizer_state`, returns this device's slices of the
        mean (`local_slices`), split as `plan` says (the step's split plan,
        `optimizer_sharding.split_plan`; ``None``: each leaf's first axis
        the device count divides).
        """
        if self.shard_optimizer_state:
            # With AdaSum, the node's mean: the optimizer's AdaSum stage
            # combines the nodes (`adasum_lib.node_slices`).
            return optimizer_sharding.reduce_scatter_mean(
                grads, self.shard_axes, self.num_shards, plan
            )
        if self.reduction == "mean":
            return lax.pmean(grads, self.axes)
        if self.reduction == "adasum_gradients":
            if self.local_axis is None:
                return adasum_lib.adasum_reduce(
                    grads, self.node_axes, eps=self.eps
                )
            return adasum_lib.hierarchical_adasum_reduce(
                grads,
                local_axis=self.local_axis,
                node_axis=self.node_axes,
                eps=self.eps,
            )
        return grads  # "adasum": the optimizer reduces its updates

    def defers_reduction(self, opt_state) -> bool:
        """Whether the step leaves its gradients unreduced for the optimizer
        to reduce once per update.

        So it does with `shard_optimizer_state` when the optimizer is a
        `boostax.gradient_accumulation` (its state, `opt_state`, is a
        ``GradientAccumulationState``): each device accumulates its own
        micro-gradients, and the accumulation reduce-scatters their mean on
        the micro-step that updates. Its accumulator is then per device,
        stacked on a leading device axis (`stack_accumulator`).
        """
        return (
            self.explicit
            and self.shard_optimizer_state
            and self.reduction == "mean"
            and isinstance(
                opt_state, accumulation_lib.GradientAccumulationState
            )
        )

    def stack_accumulator(self, opt_state, stack):
        """`opt_state` with `stack` applied to each leaf of its accumulator
        where the devices keep their own (`defers_reduction`)."""
        if not self.defers_reduction(opt_state):
            return opt_state
        return opt_state._replace(
            acc_grads=jax.tree.map(stack, opt_state.acc_grads)
        )

    def local_slices(self, tree, plan=None):
        """This device's slices of replicated leaves, split as `plan` says
        (see `reduce_gradients`; the identity unless
        `shard_optimizer_state`)."""
        if not self.shard_optimizer_state:
            return tree
        return optimizer_sharding.local_slices(
            tree, self.shard_axes, self.num_shards, plan
        )

    def gather(self, slices, like, mask=None, plan=None):
        """The whole leaves of this device's `slices` (all-gathered along
        the axes of `plan`, see `reduce_gradients`; the identity unless
        `shard_optimizer_state`); `like`: whole leaves, returned where the
        static bool tree `mask` is False."""
        if not self.shard_optimizer_state:
            return slices
        return optimizer_sharding.gather(
            slices, like, self.shard_axes, self.num_shards, mask, plan
        )

    def gather_params(self, slices, whole, dtypes, plan=None):
        """The whole parameters the forward reads, from this device's
        float32 `slices` (parameters stored sharded: `sharded_param_specs`).

        Each split leaf is cast to its dtype in `dtypes` (the compute dtype
        where the forward reads it only so, `param_reads.forward_dtypes`)
        before the all-gather, so that half-precision leaves travel in half
        the bytes, and comes back in float32, holding the values the
        forward's own cast gives; leaves kept whole pass as they are.

        Args:
          slices: this device's slices (whole leaves for those kept whole).
          whole: the whole leaves' shapes (``jax.ShapeDtypeStruct``).
          dtypes: the dtype each leaf is sent in.
          plan: the split plan (see `reduce_gradients`).
        """

        def send(x, w, dtype):
            if tuple(x.shape) == tuple(w.shape):  # kept whole: not gathered
                return x
            if jnp.dtype(dtype) == w.dtype:
                return x
            # As the unsigned integers of the same bits: XLA's CPU compiler
            # runs a bfloat16 or float16 all-gather in float32 (it moves the
            # forward's upcast before the collective), which would send
            # float32's bytes.
            return lax.bitcast_convert_type(
                x.astype(dtype),
                jnp.dtype(f"uint{8 * jnp.dtype(dtype).itemsize}"),
            )

        def receive(g, w, dtype):
            if g.dtype != w.dtype:
                g = lax.bitcast_convert_type(g, dtype)
            return g.astype(w.dtype)

        sent = jax.tree.map(send, slices, whole, dtypes)
        gathered = self.gather(sent, whole, plan=plan)
        return jax.tree.map(receive, gathered, whole, dtypes)

    def mean(self, tree, keep=None):
        """The mean over all devices of the floating-point leaves.

        Args:
          tree: the values of this device.
          keep: ``None``, or a bool per leaf of `tree`: True leaves are
            returned as they are (constants, the same on every device).
        """
        if keep is None:
            keep = jax.tree.map(lambda _: False, tree)
        return jax.tree.map(
            lambda x, k: (
                lax.pmean(x, self.axes) if _is_float(x) and not k else x
            ),
            tree,
            keep,
        )

    def minimum(self, tree):
        """The minimum over all devices of every leaf (bools included)."""

        def pmin(x):
            x = jnp.asarray(x)
            if x.dtype == jnp.bool_:
                return lax.pmin(x.astype(jnp.int32), self.axes).astype(bool)
            return lax.pmin(x, self.axes)

        return jax.tree.map(pmin, tree)


def node_mesh(
    device_number: int, devices: Any = None, *, axis_names=("node", "local")
) -> Mesh:
    """A ``(nodes, device_number)`` mesh for hierarchical AdaSum.

    Args:
      device_number: devices per node (MindSpore's
        ``common.device_number``); it must divide the device count.
      devices: the devices, in rank order (default: ``jax.devices()``);
        a `Mesh` is flattened in its device order.
      axis_names: names of the node and local axes.

    Returns:
      A `Mesh` whose first axis runs over nodes and second within a node.

    Example:
      >>> import jax, boostax
      >>> mesh = boostax.node_mesh(1)
      >>> mesh.axis_names, mesh.devices.shape == (len(jax.devices()), 1)
      (('node', 'local'), True)
    """
    if isinstance(devices, Mesh):
        devices = devices.devices
    devices = np.asarray(
        jax.devices() if devices is None else devices, dtype=object
    ).reshape(-1)
    if not devices.size or not all(isinstance(d, jax.Device) for d in devices):
        raise TypeError(
            "`devices` must be None, a Mesh or a non-empty sequence of "
            f"jax.Device, {validation.got(devices.tolist())}."
        )
    expected = (
        "`device_number` (devices per node) must be an int >= 1 that "
        f"divides the device count {devices.size}"
    )
    if not validation.is_int(device_number):
        raise TypeError(f"{expected}, {validation.got(device_number)}.")
    if device_number < 1 or devices.size % device_number:
        raise ValueError(f"{expected}, got {device_number!r}.")
    if (
        not isinstance(axis_names, (tuple, list))
        or len(axis_names) != 2
        or not all(isinstance(a, str) for a in axis_names)
    ):
        raise TypeError(
            "`axis_names` must be two str (the node and local axes), "
            f"{validation.got(axis_names)}."
        )
    if axis_names[0] == axis_names[1]:
        raise ValueError(
            f"`axis_names` must be two different names, got {axis_names!r}."
        )
    device_number = int(device_number)
    return Mesh(
        devices.reshape(devices.size // device_number, device_number),
        tuple(axis_names),
    )
