# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weight snapshots along a training run: flattened, in memory or on disk.

DimReduce (DLDR + P-BFGS) trains in the span of the top principal
directions of the parameters sampled along an earlier run: its *trajectory*.
This module flattens a params pytree into one vector (`flatten_params`),
records such vectors in memory (`Trajectory`) or as Orbax checkpoints
(`save_snapshot`, read back by `load_trajectory`), all on the host in NumPy.
The PCA of the snapshots is in ``pca.py``.

Every parameter vector here is in the order of `flatten_params`, which is
the order of ``jax.flatten_util.ravel_pytree``: tree leaves in
``jax.tree.leaves`` order, each leaf raveled in C order. The PCA and the
DimReduce step must use the same order, so both go through
`flatten_params`.

References:
  MindSpore ``mindspore.boost.DimReduce`` (``_load_weights``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import validation

PyTree = Any
PathLike = str | os.PathLike

# Orbax names: the pytree metadata file of an item, and the marker of
# a checkpoint that is still being written.
_ITEM_METADATA = "_METADATA"
_TMP_MARKER = ".orbax-checkpoint-tmp"


# --------------------------------------------------------------------------
# Flattening.


def flatten_params(params: PyTree) -> tuple[jax.Array, Callable]:
    """Flattens a params pytree into one float32 vector.

    The order is that of ``jax.flatten_util.ravel_pytree``: the leaves in
    ``jax.tree.leaves`` order, each raveled in C order, concatenated. The
    trajectory, the PCA matrix ``P`` (its columns) and the DimReduce step
    all use this order, so a column of ``P`` always meets the parameter
    entry it was computed from.

    Unlike ``ravel_pytree`` the vector is always float32 (bfloat16 leaves
    are widened); `unravel` casts each leaf back to its own dtype. Both
    functions trace under ``jax.jit``.

    Args:
      params: a pytree of arrays.

    Returns:
      ``(vector, unravel)``: the ``(N,)`` float32 vector and the function
      mapping such a vector back to a pytree like `params`.

    Example:
      >>> import jax.numpy as jnp
      >>> from boostax import flatten_params
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(1)}
      >>> vec, unravel = flatten_params(params)
      >>> vec  # "b" sorts before "w"
      Array([0., 1., 1., 1., 1.], dtype=float32)
      >>> unravel(vec)["w"].shape
      (2, 2)
    """
    leaves, treedef = jax.tree.flatten(params)
    shapes = [jnp.shape(x) for x in leaves]
    dtypes = [jnp.result_type(x) for x in leaves]
    sizes = [math.prod(s) for s in shapes]
    if leaves:
        vector = jnp.concatenate(
            [jnp.ravel(jnp.asarray(x, jnp.float32)) for x in leaves]
        )
    else:
        vector = jnp.zeros((0,), jnp.float32)
    offsets = np.cumsum([0, *sizes]).tolist()
    total = offsets[-1]

    def unravel(flat):
        if jnp.shape(flat) != (total,):
            raise ValueError(
                f"unravel expects a vector of shape ({total},), got "
                f"{jnp.shape(flat)}."
            )
        return jax.tree.unflatten(
            treedef,
            [
                jnp.reshape(flat[a:b], s).astype(d)
                for a, b, s, d in zip(
                    offsets[:-1], offsets[1:], shapes, dtypes, strict=True
                )
            ],
        )

    return vector, unravel


def _signature(params: PyTree):
    """The (treedef, leaf shapes) pair that fixes the flatten order."""
    leaves, treedef = jax.tree.flatten(params)
    return treedef, tuple(tuple(np.shape(x)) for x in leaves), leaves


def _describe(signature) -> str:
    treedef, shapes = signature
    return f"{treedef} with leaf shapes {list(shapes)}"


def _write_row(row: np.ndarray, leaves) -> None:
    """Copies the leaves to the host, in flatten order, into `row`."""
    offset = 0
    for leaf in leaves:
        host = np.asarray(leaf).reshape(-1)
        row[offset : offset + host.size] = host
        offset += host.size


# --------------------------------------------------------------------------
# In-memory recording.


class Trajectory:
    """Records flattened params on the host, keeping the last `capacity`.

    A ring buffer of float32 rows in the order of `flatten_params`. Each
    `record` copies one snapshot to host memory (a device-to-host transfer
    of the whole model; call it a few times per epoch, not every step).
    Memory is ``capacity * N * 4`` bytes, allocated at the first `record`.

    Every recorded pytree must have the structure and leaf shapes of the
    first. Arrays must be fully addressable by this process (on several
    hosts, gather them first, e.g. with
    ``jax.experimental.multihost_utils.process_allgather``).

    Args:
      capacity: how many snapshots to keep (int >= 1); older ones are
        overwritten.

    Example:
      >>> import jax.numpy as jnp
      >>> from boostax import Trajectory
      >>> traj = Trajectory(capacity=2)
      >>> for i in range(3):
      ...     traj.record({"w": jnp.full(2, float(i))})
      >>> len(traj), traj.size
      (2, 2)
      >>> traj.snapshots
      array([[1., 1.],
             [2., 2.]], dtype=float32)
    """

    def __init__(self, capacity: int):
        self._capacity = validation.check_int("capacity", capacity, minimum=1)
        self._buffer: np.ndarray | None = None
        self._signature: tuple[Any, Any] | None = None
        self._count = 0  # snapshots recorded so far, including overwritten

    @property
    def capacity(self) -> int:
        """The most snapshots kept."""
        return self._capacity

    @property
    def size(self) -> int | None:
        """N, the length of one flattened snapshot (None before `record`)."""
        return None if self._buffer is None else self._buffer.shape[1]

    def __len__(self) -> int:
        return min(self._count, self._capacity)

    def record(self, params: PyTree) -> None:
        """Copies one snapshot of `params` into the buffer.

        Args:
          params: a pytree with the structure and leaf shapes of the first
            recorded one.

        Raises:
          ValueError: the structure or a leaf shape differs from the first
            snapshot's.
        """
        treedef, shapes, leaves = _signature(params)
        if self._buffer is None:
            size = sum(math.prod(s) for s in shapes)
            self._buffer = np.empty((self._capacity, size), np.float32)
            self._signature = (treedef, shapes)
        elif (treedef, shapes) != self._signature:
            raise ValueError(
                "Every recorded params tree must match the first one: got "
                f"{_describe((treedef, shapes))}, the first was "
                f"{_describe(self._signature)}."
            )
        _write_row(self._buffer[self._count % self._capacity], leaves)
        self._count += 1

    @property
    def snapshots(self) -> np.ndarray:
        """The kept snapshots, oldest first: an ``(S, N)`` float32 copy."""
        if self._buffer is None:
            return np.zeros((0, 0), np.float32)
        if self._count <= self._capacity:
            return self._buffer[: self._count].copy()
        start = self._count % self._capacity
        return np.concatenate(
            [self._buffer[start:], self._buffer[:start]], axis=0
        )


# --------------------------------------------------------------------------
# Orbax checkpoints.


def _import_orbax():
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(
            "Reading and writing trajectory checkpoints needs "
            "`orbax-checkpoint` (pip install orbax-checkpoint)."
        ) from e
    return ocp


def save_snapshot(directory: PathLike, step: int, params: PyTree) -> None:
    """Saves `params` as step `step` of a ``CheckpointManager`` directory.

    Writes ``<directory>/<step>/default/`` with
    ``orbax.checkpoint.CheckpointManager`` and ``args.StandardSave``, the
    layout `load_trajectory` reads (and ``CheckpointManager(directory)``
    lists), synchronously: it returns once the checkpoint is on disk, and
    a failed save raises here. On several processes every process must
    call it, as for any Orbax save.

    Args:
      directory: the checkpoint directory (created if missing).
      step: the step number, larger than every step already saved there.

    Raises:
      ValueError: `step` is not larger than the directory's latest step
        (``CheckpointManager.save`` silently skips such a step).
      params: the params pytree.
    """
    step = validation.check_int("step", step, minimum=0)
    ocp = _import_orbax()
    # Synchronous: a failed asynchronous save leaves Orbax's threads
    # waiting for ever, and the process then never exits
    # (docs/checkpointing.md); a synchronous one raises here and leaves none.
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False)
    with ocp.CheckpointManager(
        os.path.abspath(os.fspath(directory)), options=options
    ) as manager:
        saved = manager.save(step, args=ocp.args.StandardSave(params))
    if not saved:
        # The manager skips, returning False, a step at or before its latest.
        raise ValueError(
            f"Step {step} was not saved in {os.fspath(directory)!r}: steps "
            "must increase (the latest saved step is larger or equal)."
        )


def check_weight_dir(weight_load_dir) -> str:
    """`weight_load_dir` as a str, if it names a directory (else ValueError).

    The message is MindSpore's.
    """
    root = None if weight_load_dir is None else os.fspath(weight_load_dir)
    if root is None or not os.path.isdir(root):
        raise ValueError(
            f"The weight_load_dir: {root!r} is None / not exists / not "
            "directory."
        )
    return root


def _item_dir(step_dir: str) -> str | None:
    """The pytree item inside one checkpoint directory, or None."""
    if os.path.isfile(os.path.join(step_dir, _ITEM_METADATA)):
        return step_dir  # a plain `StandardCheckpointer().save(path, ...)`
    items = sorted(
        e.name
        for e in os.scandir(step_dir)
        if e.is_dir() and os.path.isfile(os.path.join(e.path, _ITEM_METADATA))
    )
    if not items:
        return None
    if len(items) == 1:
        return os.path.join(step_dir, items[0])
    for name in ("default", "params"):
        if name in items:
            return os.path.join(step_dir, name)
    raise ValueError(
        f"The checkpoint {step_dir!r} holds several items {items}; expected "
        "one, 'default' or 'params'."
    )


def _checkpoint_dirs(root: str) -> list[str]:
    """Checkpoint directories in `root`, in step (or name) order."""
    names = sorted(
        e.name
        for e in os.scandir(root)
        if e.is_dir() and _TMP_MARKER not in e.name
    )
    found = [
        (n, item)
        for n in names
        if (item := _item_dir(os.path.join(root, n))) is not None
    ]
    matches = [
        m for n, _ in found if (m := re.fullmatch(r"(.*?)(\d+)", n)) is not None
    ]
    if (
        found
        and len(matches) == len(found)
        and len({m.group(1) for m in matches}) == 1
    ):
        # Numbered steps, e.g. "5" or "step_5": numeric order, 5 before 10.
        steps = {
            n: int(m.group(2)) for (n, _), m in zip(found, matches, strict=True)
        }
        found.sort(key=lambda f: steps[f[0]])
    return [item for _, item in found]


def _shape_dtype(x):
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), np.dtype(x.dtype)
    x = np.asarray(x)
    return x.shape, x.dtype


def _restore_target(checkpointer, item: str, like):
    """NumPy arrays to restore into: from `like`, else the metadata."""
    if like is None:
        from etils import epath  # an orbax dependency

        # The handler's metadata, not the checkpointer's: that one also
        # looks for the step metadata, which a CheckpointManager keeps one
        # directory up, and logs a warning when it is not beside the item.
        meta = checkpointer.handler.metadata(epath.Path(item))
        like = getattr(meta, "tree", meta)  # a TreeMetadata (orbax >= 0.11)
    return jax.tree.map(lambda x: np.empty(*_shape_dtype(x)), like)


def load_trajectory(
    weight_load_dir: PathLike | None, *, like: PyTree | None = None
) -> np.ndarray:
    """Reads the params checkpoints in a directory as an ``(S, N)`` array.

    Each subdirectory that is an Orbax pytree checkpoint is one snapshot:
    the ``CheckpointManager`` layout (``<dir>/<step>/default/``, or one item
    per step, ``'params'`` chosen among several) in step order, or plain
    ``StandardCheckpointer().save(<dir>/<name>, params)`` directories in
    name order (numeric order when the names are one prefix plus a number).
    Other subdirectories and files are skipped, as are checkpoints still
    being written. Rows are in the order of `flatten_params`.

    The checkpoints are restored as host NumPy arrays by this process alone
    (no cross-process barrier), so one process may call this while the
    others do not.

    Args:
      weight_load_dir: the directory (MindSpore's ``weight_load_dir``).
      like: a params pytree (arrays or ``jax.ShapeDtypeStruct``) giving the
        structure and dtypes to restore into. Without it the structure comes
        from the checkpoint metadata: dicts and lists restore as saved, but
        tuples come back as lists and custom nodes as dicts, so pass `like`
        when the step's params are not plain dicts and lists.

    Returns:
      The ``(S, N)`` float32 snapshots, oldest first.

    Raises:
      ValueError: the path is None, missing or not a directory; it holds no
        checkpoint; or a checkpoint's structure differs from the first's.
    """
    root = check_weight_dir(weight_load_dir)
    items = _checkpoint_dirs(root)
    if not items:
        raise ValueError(
            f"The weight_load_dir: {root!r} holds no Orbax checkpoint "
            "(expected numbered step directories, e.g. from `save_snapshot`)."
        )
    ocp = _import_orbax()
    me = jax.process_index()
    checkpointer = ocp.StandardCheckpointer(
        multiprocessing_options=ocp.options.MultiprocessingOptions(
            primary_host=me, active_processes={me}
        )
    )
    data = None
    first = None
    try:
        for i, item in enumerate(items):
            path = os.path.abspath(item)
            restored = checkpointer.restore(
                path, _restore_target(checkpointer, path, like)
            )
            treedef, shapes, leaves = _signature(restored)
            if data is None:
                size = sum(math.prod(s) for s in shapes)
                data = np.empty((len(items), size), np.float32)
                first = (treedef, shapes)
            elif (treedef, shapes) != first:
                got = _describe((treedef, shapes))
                raise ValueError(
                    f"The checkpoint {item!r} holds {got}, the first one "
                    f"{items[0]!r} holds {_describe(first)}."
                )
            _write_row(data[i], leaves)
    finally:
        checkpointer.close()
    assert data is not None  # `items` is not empty
    return data


# --------------------------------------------------------------------------
# Snapshots as an array.


def as_snapshots(snapshots, name: str = "snapshots") -> np.ndarray:
    """The ``(S, N)`` array of a `Trajectory` or an array; `name` is the
    argument the caller's user passed it as, for the error."""
    if isinstance(snapshots, Trajectory):
        snapshots = snapshots.snapshots
    data = np.asarray(snapshots)
    if data.ndim != 2:
        raise ValueError(
            f"`{name}` must be a boostax.Trajectory or an (S, N) array of "
            f"flattened params snapshots, got shape {data.shape}."
        )
    return data
