# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weight trajectories and their PCA subspace, the first half of DimReduce.

DimReduce (DLDR + P-BFGS) trains in the span of the top principal
directions of the parameters sampled along an earlier training run. This
module records that trajectory (in memory with `Trajectory`, or from Orbax
checkpoints with `load_trajectory`), computes the ``(k, N)`` projection
matrix ``P`` with `pca_components` and shares it between processes through
an ``.npy`` file (`pca_matrix`). Everything here runs on the host in NumPy;
the DimReduce step itself lives in ``dim_reduce.py``.

Every parameter vector here is in the order of `flatten_params`, which is
the order of ``jax.flatten_util.ravel_pytree``: tree leaves in
``jax.tree.leaves`` order, each leaf raveled in C order. The PCA and the
DimReduce step must use the same order, so both go through
`flatten_params`.

References:
  Li et al., `Low Dimensional Trajectory Hypothesis is True: DNNs Can Be
  Trained in Tiny Subspaces <https://arxiv.org/abs/2103.11154>`_, IEEE
  TPAMI 2022;
  MindSpore ``mindspore.boost.DimReduce`` (``_compute_pca_mat``,
  ``_load_weights``, ``_load_local_pca_mat``);
  Halko, Martinsson and Tropp, `Finding structure with randomness
  <https://arxiv.org/abs/0909.4061>`_, SIAM Review 2011.
"""

from __future__ import annotations

import math
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.lib import format as npy_format

from boostax._src import validation

PyTree = Any
PathLike = str | os.PathLike

#: File name of the PCA matrix computed from ``weight_load_dir`` when no
#: ``pca_mat_path`` is given (MindSpore's name).
PCA_MAT_TEMP_NAME = "pca_mat_temp.npy"

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
        self._capacity = _check_count("capacity", capacity, 1)
        self._buffer: np.ndarray | None = None
        self._signature = None
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
    lists), and waits until it is on disk. On several processes every
    process must call it, as for any Orbax save.

    Args:
      directory: the checkpoint directory (created if missing).
      step: the step number, larger than every step already saved there.

    Raises:
      ValueError: `step` is not larger than the directory's latest step
        (``CheckpointManager.save`` silently skips such a step).
      params: the params pytree.
    """
    step = _check_count("step", step, 0)
    ocp = _import_orbax()
    manager = ocp.CheckpointManager(os.path.abspath(os.fspath(directory)))
    try:
        saved = manager.save(step, args=ocp.args.StandardSave(params))
        manager.wait_until_finished()
    finally:
        manager.close()
    if not saved:
        # The manager skips, returning False, a step at or before its latest.
        raise ValueError(
            f"Step {step} was not saved in {os.fspath(directory)!r}: steps "
            "must increase (the latest saved step is larger or equal)."
        )


def _bad_weight_dir(path) -> ValueError:
    return ValueError(
        f"The weight_load_dir: {path!r} is None / not exists / not directory."
    )


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
    found = [(n, _item_dir(os.path.join(root, n))) for n in names]
    found = [(n, item) for n, item in found if item is not None]
    matches = [re.fullmatch(r"(.*?)(\d+)", n) for n, _ in found]
    if found and all(matches) and len({m.group(1) for m in matches}) == 1:
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
    if weight_load_dir is None:
        raise _bad_weight_dir(None)
    root = os.fspath(weight_load_dir)
    if not os.path.isdir(root):
        raise _bad_weight_dir(root)
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
    return data


# --------------------------------------------------------------------------
# PCA.


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


def has_pca_source(pca_mat_path, weight_load_dir, snapshots) -> bool:
    """Whether `pca_matrix` has a matrix to read or snapshots to compute
    one from."""
    return (
        snapshots is not None
        or weight_load_dir is not None
        or (pca_mat_path is not None and os.path.isfile(pca_mat_path))
    )


def _check_count(name: str, value, minimum: int) -> int:
    return validation.check_int(name, value, minimum=minimum)


def _centered(snapshots, n_components: int) -> np.ndarray:
    """Float64 copy of the snapshots minus their mean over snapshots."""
    data = as_snapshots(snapshots)
    n_samples, n_features = data.shape
    if n_samples < n_components:
        raise ValueError(
            f"n_components={n_components} needs at least {n_components} "
            f"snapshots, got {n_samples}."
        )
    if n_features < n_components:
        raise ValueError(
            f"n_components={n_components} exceeds the number of parameters "
            f"N={n_features}."
        )
    x = np.array(data, dtype=np.float64)  # a copy: centered in place
    if not np.isfinite(x).all():
        raise ValueError("`snapshots` contain non-finite values.")
    x -= x.mean(axis=0, keepdims=True)
    return x


def _svd_flip(components: np.ndarray) -> np.ndarray:
    """Makes the largest-magnitude entry of each row positive."""
    rows = np.arange(components.shape[0])
    signs = np.sign(components[rows, np.argmax(np.abs(components), axis=1)])
    signs[signs == 0] = 1.0
    return components * signs[:, None]


def _gram_eigh(x: np.ndarray):
    """Eigenpairs of the smaller Gram matrix, largest eigenvalue first."""
    small_side = x @ x.T if x.shape[0] < x.shape[1] else x.T @ x
    w, v = np.linalg.eigh(small_side)
    return np.maximum(w[::-1], 0.0), v[:, ::-1]


def _exact_components(x: np.ndarray, k: int) -> np.ndarray:
    n_samples, n_features = x.shape
    _, v = _gram_eigh(x)
    if n_samples >= n_features:
        return v[:, :k].T  # eigenvectors of the covariance directly
    # Xᵀ v_i = σ_i u_i: the right singular vectors up to their norms. QR
    # normalises them and keeps the rows orthonormal even where σ_i ≈ 0
    # (centered data has rank <= S - 1, so k = S leaves one direction free).
    q, _ = np.linalg.qr(x.T @ v[:, :k])
    return q.T


def _lu_normalize(a: np.ndarray) -> np.ndarray:
    import scipy.linalg

    return scipy.linalg.lu(a, permute_l=True, check_finite=False)[0]


def _randomized_components(
    x: np.ndarray, k: int, rng, oversampling: int, power_iterations: int
) -> np.ndarray:
    # MindSpore's `_randomized_svd`: work on the wide side (A = Xᵀ, N x S,
    # when S < N); range finder with LU-normalised power iterations.
    transpose = x.shape[0] < x.shape[1]
    a = x.T if transpose else x
    q = rng.standard_normal((a.shape[1], k + oversampling))
    for _ in range(power_iterations):
        q = _lu_normalize(a @ q)
        q = _lu_normalize(a.T @ q)
    q, _ = np.linalg.qr(a @ q)
    u_small, _, vt = np.linalg.svd(q.T @ a, full_matrices=False)
    if transpose:
        return (q @ u_small[:, :k]).T  # left singular vectors of Xᵀ
    return vt[:k]


def pca_components(
    snapshots,
    n_components: int,
    *,
    randomized: bool = True,
    seed: int = 0,
    oversampling: int = 10,
    power_iterations: int = 1,
) -> np.ndarray:
    """Principal directions of a weight trajectory: the rows of ``P``.

    With the snapshots as rows of ``W`` (``S x N``) and ``X = W - 1 μᵀ``
    centered over snapshots, the components are the top-k right singular
    vectors of ``X``:

    .. math::

      X = U \\Sigma V^\\top, \\qquad P = V_{:, 1:k}^\\top \\in
      \\mathbb{R}^{k \\times N}, \\qquad P P^\\top = I_k.

    ``randomized=True`` follows MindSpore's ``_compute_pca_mat``: on
    ``A = Xᵀ`` (when S < N, the normal case) draw ``k + oversampling``
    Gaussian vectors (seeded here; MindSpore's are not), run
    `power_iterations` LU-normalised power iterations, orthonormalise with
    QR, and take the SVD of the small projected matrix (Halko et al.,
    Alg. 4.4). ``randomized=False`` is exact: the eigendecomposition of the
    ``S x S`` Gram matrix ``X Xᵀ`` (the Gram trick), then QR. Each row's
    largest-magnitude entry is made positive (sklearn's ``svd_flip``
    convention), so the result is deterministic.

    Computed on the host in float64: memory is about ``8 S N`` bytes for
    the centered copy plus ``8 N (k + oversampling)`` per temporary.
    Centered data has rank at most ``S - 1``; with ``k = S`` the last row is
    an arbitrary unit direction orthogonal to the others.

    Args:
      snapshots: an ``(S, N)`` array of flattened params (rows in the order
        of `flatten_params`) or a `Trajectory`.
      n_components: k, the subspace dimension (1 <= k <= S and k <= N).
      randomized: randomized SVD (MindSpore's default) or the exact path.
      seed: seed of ``np.random.default_rng`` for the random vectors.
      oversampling: extra random vectors (MindSpore uses 10).
      power_iterations: power iterations (MindSpore uses 1).

    Returns:
      ``P``, a ``(k, N)`` float32 array with orthonormal rows.

    Raises:
      ValueError: fewer snapshots than components, k > N, or non-finite
        snapshots.

    Example:
      >>> import numpy as np
      >>> from boostax import pca_components
      >>> rng = np.random.default_rng(0)
      >>> snaps = rng.normal(size=(8, 1)) * np.ones((1, 50))  # one direction
      >>> p = pca_components(snaps, 1)
      >>> p.shape, bool(np.allclose(p, 50**-0.5))
      ((1, 50), True)

    References:
      Li et al., `Low Dimensional Trajectory Hypothesis is True: DNNs Can
      Be Trained in Tiny Subspaces <https://arxiv.org/abs/2103.11154>`_,
      2022; MindSpore ``_compute_pca_mat``.
    """
    k = _check_count("n_components", n_components, 1)
    oversampling = _check_count("oversampling", oversampling, 0)
    power_iterations = _check_count("power_iterations", power_iterations, 0)
    validation.check_bool("randomized", randomized)
    seed = _check_count("seed", seed, 0)
    x = _centered(snapshots, k)
    if randomized:
        components = _randomized_components(
            x, k, np.random.default_rng(seed), oversampling, power_iterations
        )
    else:
        components = _exact_components(x, k)
    return _svd_flip(components).astype(np.float32)


def explained_variance_ratio(snapshots, n_components: int) -> np.ndarray:
    """Share of the trajectory's variance along each principal direction.

    ``σ_i² / Σ_j σ_j²`` for the singular values of the centered snapshots,
    from the exact Gram eigenvalues (float64; all zeros for a constant
    trajectory). Its cumulative sum shows how many dimensions the
    trajectory needs.

    Args:
      snapshots: an ``(S, N)`` array or a `Trajectory`.
      n_components: how many ratios to return (1 <= k <= min(S, N)).

    Returns:
      A ``(k,)`` float64 array, decreasing.

    Example:
      >>> import numpy as np
      >>> from boostax import explained_variance_ratio
      >>> snaps = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
      >>> explained_variance_ratio(snaps, 2).round(3)
      array([0.861, 0.139])
    """
    k = _check_count("n_components", n_components, 1)
    x = _centered(snapshots, k)
    w, _ = _gram_eigh(x)
    total = float(np.sum(x * x))
    if total == 0.0:
        return np.zeros(k)
    return w[:k] / total


# --------------------------------------------------------------------------
# Checking a PCA matrix.

#: The largest ``max |P Pᵀ - I|`` (entrywise, computed in float64) accepted
#: for a PCA matrix. `pca_components` gives 1e-10 to 3e-8 (float32 rounding
#: of float64 orthonormal rows; measured for S x N from 10 x 50 to
#: 42 x 3e6, k up to 40); a float32 QR in JAX about 5e-7; a bfloat16 copy
#: a few 1e-3, which is refused.
ORTHONORMAL_TOLERANCE = 1e-3

# Entries of P per float64 block of the checks (8 MiB): the Gram matrix
# of a (k, N) matrix with N in the millions never needs a float64 copy of
# P (k = 32, N = 2e6: about 0.7 s on one core).
_CHECK_BLOCK_ENTRIES = 1 << 20

_FIX = (
    "Compute P with boostax.pca_components(snapshots, k) or "
    "boostax.pca_matrix(k, ...), which return orthonormal rows, or "
    "orthonormalise the rows of yours: `q, _ = np.linalg.qr(P.T); P = q.T`"
)


def _rows(indices, total: int) -> str:
    """``[0, 3, 5]``, or the first ten of many, and how many of `total`."""
    shown = [int(i) for i in indices[:10]]
    more = ", ..." if len(indices) > 10 else ""
    return f"rows {str(shown)[:-1]}{more}] ({len(indices)} of {total})"


def _is_real_dtype(dtype) -> bool:
    """Float (bfloat16 too) or integer; not bool, complex or object."""
    return jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(
        dtype, jnp.integer
    )


def check_pca_shape(shape, dtype, what: str) -> None:
    """Raises unless a PCA matrix of this shape and dtype could be valid.

    Args:
      shape: the matrix's shape.
      dtype: its dtype.
      what: how the messages name the matrix (the argument's name in
        backquotes, or the file it came from).

    Raises:
      TypeError: the dtype is not a real (float or integer) one.
      ValueError: the matrix is not 2-D or is empty.
    """
    if not _is_real_dtype(dtype):
        raise TypeError(
            f"{what} must be a float (n_components, n_params) matrix, got "
            f"dtype {dtype}. {_FIX}."
        )
    if len(shape) != 2 or 0 in shape:
        raise ValueError(
            f"{what} must be a non-empty (n_components, n_params) matrix, "
            f"got shape {tuple(shape)}. {_FIX}."
        )


def check_pca_matrix(
    matrix, what: str = "`pca_matrix`", fix: str = _FIX
) -> np.ndarray:
    """Checks that `matrix` is a usable PCA matrix ``P``; returns it as float32.

    ``P`` must be 2-D and non-empty, finite, with no all-zero row, and have
    orthonormal rows: ``max |P Pᵀ - I| <= ORTHONORMAL_TOLERANCE`` (1e-3).
    The checks run in float64 on blocks of columns: the ``k x k`` Gram
    matrix costs ``k² N`` operations and no float64 copy of ``P``.

    Args:
      matrix: the ``(k, N)`` matrix (a concrete array).
      what: how the messages name the matrix: the argument's name in
        backquotes (the default), or ``"The PCA matrix '/path/pca.npy'"``.
      fix: how to fix a matrix that fails a check, for the messages.

    Returns:
      `matrix` as a float32 NumPy array.

    Raises:
      TypeError: the dtype is not a real (float or integer) one.
      ValueError: a check fails; the message says which (the rows holding
        NaN or inf, the all-zero rows, or the largest deviation from
        orthonormality and where it is).
    """
    matrix = np.asarray(matrix)
    check_pca_shape(matrix.shape, matrix.dtype, what)
    coarse = (
        matrix.dtype
        if jnp.issubdtype(matrix.dtype, jnp.floating)
        and matrix.dtype.itemsize < 4
        else None
    )
    matrix = matrix.astype(np.float32, copy=False)
    k, n = matrix.shape
    step = max(1, _CHECK_BLOCK_ENTRIES // k)
    bad = np.zeros(k, np.int64)  # non-finite entries per row
    gram = np.zeros((k, k), np.float64)
    for start in range(0, n, step):
        # (columns, k) C-contiguous: `block.T @ block` is one BLAS syrk.
        block = np.ascontiguousarray(
            matrix[:, start : start + step].T, dtype=np.float64
        )
        finite = np.isfinite(block)
        if not finite.all():
            bad += np.sum(~finite, axis=0)
            continue
        gram += block.T @ block
    if bad.any():
        raise ValueError(
            f"{what} must be finite, but {_rows(np.flatnonzero(bad), k)} "
            f"hold NaN or inf ({int(bad.sum())} of {matrix.size} entries). "
            "Recompute P from finite snapshots with "
            "boostax.pca_components(snapshots, k)."
        )
    norms = np.sqrt(np.diag(gram))
    zero = np.flatnonzero(norms == 0.0)
    if zero.size:
        raise ValueError(
            f"{what} must have unit rows, but {_rows(zero, k)} are all "
            f"zero: drop them (a smaller n_components) or recompute P. {fix}."
        )
    deviation = np.abs(gram - np.eye(k))
    worst = float(deviation.max())
    if worst > ORTHONORMAL_TOLERANCE:
        i, j = np.unravel_index(np.argmax(deviation), deviation.shape)
        if i == j:
            where = f"row {i} has norm {norms[i]:.6g}"
        else:
            where = (
                f"rows {min(i, j)} and {max(i, j)} have dot product "
                f"{gram[i, j]:.6g}"
            )
        raise ValueError(
            f"{what} must have orthonormal rows (P P^T = I), but max "
            f"|P P^T - I| = {worst:.3g} > {ORTHONORMAL_TOLERANCE:g} ({where}; "
            f"row norms from {norms.min():.6g} to {norms.max():.6g}). {fix}"
            + (
                "."
                if coarse is None
                else f", and keep P in float32 ({coarse} is too coarse)."
            )
        )
    return matrix


# --------------------------------------------------------------------------
# The PCA matrix file.


class PCAMatrixTimeoutError(TimeoutError, RuntimeError):
    """The PCA matrix file did not appear in time.

    A ``TimeoutError``, and a ``RuntimeError`` as in MindSpore.
    """


def _host_tag() -> str:
    """This host's name, reduced to characters safe in a file name."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _temp_prefix(path: str) -> str:
    """The prefix of `save_pca_matrix`'s temporary files for `path`.

    ``.<basename>.<host>.<pid>.``: the writer's host and process id, so a
    later save can tell a dead writer's leftover from a live one's file.
    """
    return f".{os.path.basename(path)}.{_host_tag()}.{os.getpid()}."


def _process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (True when unsure)."""
    if pid <= 0 or os.name != "posix":  # os.kill(pid, 0) is a probe on POSIX
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # e.g. another user's process
        return True
    return True


def _remove_stale_temporaries(path: str) -> list[str]:
    """Removes temporary files of `path` whose writer died on this host.

    A writer killed (``SIGKILL``, out of memory) between creating its
    temporary file and ``os.replace`` leaves it behind. Only files named by
    `_temp_prefix` for this host are considered, and only those whose
    process no longer runs; files of live writers (this process's other
    threads too) and of other hosts are left alone.

    Returns:
      The paths removed.
    """
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(
        rf"\.{re.escape(os.path.basename(path))}\."
        rf"{re.escape(_host_tag())}\.(\d+)\.[a-z0-9_]+\.tmp"
    )
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or _process_alive(int(match.group(1))):
            continue
        stale = os.path.join(directory, name)
        try:
            os.remove(stale)
        except OSError:  # removed by another writer first, or not ours
            continue
        removed.append(stale)
    return removed


def save_pca_matrix(path: PathLike, matrix) -> None:
    """Saves the PCA matrix as ``.npy``, atomically.

    Writes a temporary file in the same directory (created if missing),
    flushes it to disk and renames it over `path` with ``os.replace``, so a
    reader polling for `path` (`load_pca_matrix`) never sees a partial
    file. The temporary file is named
    ``.<basename>.<host>.<pid>.<random>.tmp`` after its writer; temporary
    files of `path` left on this host by writers that no longer run (killed
    before their rename) are removed first.

    Args:
      path: the destination file, written exactly there (no ``.npy`` is
        appended).
      matrix: the array to save.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix=_temp_prefix(path), suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.asarray(matrix))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _check_timeout(name: str, value, *, positive: bool = False) -> float:
    ok = isinstance(value, int | float | np.integer | np.floating) and not (
        isinstance(value, bool)
    )
    if ok:
        value = float(value)
        ok = not math.isnan(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"`{name}` must be a number {bound}, got {value!r}.")
    return value


def _npy_state(path: str) -> tuple[str, str]:
    """Whether the ``.npy`` file at `path` is there and complete.

    Complete: its header parses (``numpy.lib.format``) and its size is the
    header's plus ``prod(shape) * itemsize``, as `np.save` writes it. A
    non-atomic writer (``np.save`` to the path, ``cp``) makes the file
    appear before it is complete.

    Returns:
      ``("missing", why)``, ``("incomplete", what was seen)`` or
      ``("ready", "")``.

    Raises:
      OSError: the file exists but cannot be opened (e.g. permissions);
        the message names the path.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return "missing", "no file at that path"
    except IsADirectoryError:
        return "missing", "a directory is at that path, not a file"
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = npy_format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = npy_format.read_array_header_2_0(f)
            else:  # a newer format: np.load judges it
                return "ready", ""
        except (ValueError, EOFError) as e:
            return "incomplete", (
                f"{size} bytes whose .npy header does not parse ({e})"
            )
        if dtype.hasobject:  # no fixed size; np.load refuses it
            return "ready", ""
        header = f.tell()
    expected = header + math.prod(shape) * dtype.itemsize
    if size != expected:
        return "incomplete", (
            f"{size} bytes where its header ({header} bytes: shape {shape}, "
            f"dtype {dtype}) needs {expected}"
        )
    return "ready", ""


def _load_error(path: str, error: Exception) -> Exception:
    """`error` from ``np.load``, re-raised naming the file."""
    message = (
        f"Could not load the PCA matrix {path!r}: {type(error).__name__}: "
        f"{error}. It must be a .npy file of a (n_components, n_params) "
        "float array, as boostax.save_pca_matrix writes."
    )
    if isinstance(error, OSError):
        return type(error)(message)
    return ValueError(message)


def load_pca_matrix(
    path: PathLike, *, timeout: float = 1800.0, poll_interval: float = 1.0
) -> np.ndarray:
    """Loads the PCA matrix, waiting for another process to write it.

    The file is read once it is complete: its ``.npy`` header parses and
    its size is the header's plus the data's. Until then (no file yet, or
    one still being written by a non-atomic writer such as ``np.save``
    straight to `path` or ``cp``) it checks every `poll_interval` seconds.
    `save_pca_matrix` writes atomically, so its file is complete as soon as
    it appears.

    Args:
      path: the ``.npy`` file.
      timeout: seconds to wait (>= 0; ``math.inf`` waits forever). MindSpore
        waits 1800 s. With 0, a missing or incomplete file is an error at
        once.
      poll_interval: seconds between checks (> 0).

    Returns:
      The array.

    Raises:
      PCAMatrixTimeoutError: (a ``TimeoutError`` and ``RuntimeError``) the
        file did not appear, or stayed incomplete or unreadable, within
        `timeout` seconds; the message names the path and what was seen
        (the size against the size its header implies).
      ValueError: the complete file cannot be loaded as an array (e.g. it
        holds Python objects); the message names the path.
      OSError: the file cannot be read (e.g. permissions).

    Example:
      >>> import os, tempfile, numpy as np
      >>> from boostax import load_pca_matrix, save_pca_matrix
      >>> path = os.path.join(tempfile.mkdtemp(), "pca.npy")
      >>> save_pca_matrix(path, np.eye(2, 3, dtype=np.float32))
      >>> load_pca_matrix(path, timeout=0).shape
      (2, 3)
    """
    path = os.fspath(path)
    timeout = _check_timeout("timeout", timeout)
    poll_interval = _check_timeout(
        "poll_interval", poll_interval, positive=True
    )
    deadline = time.monotonic() + timeout
    while True:
        state, seen = _npy_state(path)
        if state == "ready":
            try:
                return np.load(path, allow_pickle=False)
            except (OSError, ValueError, EOFError, TypeError) as e:
                # A writer may have started to rewrite it since the check.
                state, seen = _npy_state(path)
                if state == "ready":
                    raise _load_error(path, e) from e
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(poll_interval, remaining))
    if state == "missing":
        raise PCAMatrixTimeoutError(
            f"Waited {timeout:g} s for the PCA matrix {path!r}, and it "
            f"did not appear ({seen}; the time of waiting to load the pca "
            f"mat is larger than {timeout:g} second)."
        )
    raise PCAMatrixTimeoutError(
        f"Waited {timeout:g} s for the PCA matrix {path!r} to be complete, "
        f"and it stayed incomplete or unreadable: the last check saw {seen}. "
        "Write it with boostax.save_pca_matrix (atomic), or make sure its "
        "writer finished; delete a truncated file to compute it again."
    )


def _like_size(like) -> int:
    return sum(math.prod(_shape_dtype(x)[0]) for x in jax.tree.leaves(like))


def _check_matrix(matrix, n_components: int, size, path: str) -> np.ndarray:
    """The loaded matrix, if it has the expected shape and is a valid P."""
    expected = (n_components, "N" if size is None else size)
    if (
        matrix.ndim != 2
        or matrix.shape[0] != n_components
        or (size is not None and matrix.shape[1] != size)
    ):
        raise ValueError(
            f"The PCA matrix {path!r} has shape {matrix.shape}, expected "
            f"({expected[0]}, {expected[1]}) (n_components, number of "
            "parameters)."
        )
    return check_pca_matrix(
        matrix,
        what=f"The PCA matrix {path!r}",
        fix=(
            "Delete the file so that boostax.pca_matrix computes P again "
            "from the snapshots, or write one with orthonormal rows: "
            "boostax.pca_components(snapshots, k), or `q, _ = "
            "np.linalg.qr(P.T); P = q.T`"
        ),
    )


def pca_matrix(
    n_components: int,
    *,
    pca_mat_path: PathLike | None = None,
    weight_load_dir: PathLike | None = None,
    snapshots=None,
    like: PyTree | None = None,
    timeout: float = 1800.0,
    seed: int = 0,
) -> np.ndarray:
    """The ``(k, N)`` PCA matrix, loaded, or computed and shared by file.

    MindSpore's resolution order:

    1. `pca_mat_path` names an existing ``.npy`` file: load it once it is
       complete (`load_pca_matrix`, waiting at most `timeout` for a
       non-atomic writer), and check it (`check_pca_matrix`).
    2. Otherwise compute it with `pca_components` (randomized, `seed`) from
       `snapshots` or, failing that, the checkpoints in `weight_load_dir`
       (`load_trajectory`), and save it (`save_pca_matrix`) to
       `pca_mat_path` if given, else to
       ``<weight_load_dir>/pca_mat_temp.npy`` (from `snapshots` with neither
       path, nothing is saved).

    With several JAX processes only process 0 computes and saves; the others
    wait for the file (`load_pca_matrix` with `timeout`), so the file must
    be on storage every process sees (with no file to write, every process
    computes the same seeded result from its own `snapshots`). A stale
    ``<weight_load_dir>/pca_mat_temp.npy`` from an earlier run could be read
    by a waiting process before process 0 replaces it: on several processes
    pass a `pca_mat_path`, or delete the old file first.

    Args:
      n_components: k, the subspace dimension.
      pca_mat_path: the ``.npy`` file to load, or to write the result to.
      weight_load_dir: directory of params checkpoints (`save_snapshot`).
      snapshots: an ``(S, N)`` array or a `Trajectory`; takes precedence
        over `weight_load_dir`.
      like: a params pytree: restores the checkpoints into its structure
        and checks that the matrix has N = its number of parameters.
      timeout: seconds the other processes wait for process 0, and any
        process for an existing file still being written (>= 0).
      seed: seed of the randomized SVD.

    Returns:
      ``P``, an ``(n_components, N)`` float32 array.

    Raises:
      ValueError: no source given, a bad `weight_load_dir`, or a loaded
        matrix of the wrong shape, with NaN or inf entries, all-zero rows
        or rows that are not orthonormal (the message names the file).
      PCAMatrixTimeoutError: a waiting process timed out, or the file
        stayed incomplete.

    Example:
      >>> import os, tempfile, numpy as np
      >>> from boostax import pca_matrix
      >>> path = os.path.join(tempfile.mkdtemp(), "pca.npy")
      >>> snaps = np.random.default_rng(0).normal(size=(6, 20))
      >>> p = pca_matrix(4, pca_mat_path=path, snapshots=snaps)
      >>> again = pca_matrix(4, pca_mat_path=path)  # loaded from the file
      >>> p.shape, bool((p == again).all())
      ((4, 20), True)
    """
    k = _check_count("n_components", n_components, 1)
    timeout = _check_timeout("timeout", timeout)
    if pca_mat_path is not None:
        pca_mat_path = os.fspath(pca_mat_path)
        if not pca_mat_path.endswith(".npy"):
            raise ValueError(
                f"`pca_mat_path` must name a .npy file, got {pca_mat_path!r}."
            )
    size = None if like is None else _like_size(like)
    if snapshots is not None:
        snapshots = as_snapshots(snapshots)
        if size is None:
            size = snapshots.shape[1]

    if pca_mat_path is not None and os.path.isfile(pca_mat_path):
        # Read once complete: a non-atomic writer may still be writing it.
        matrix = load_pca_matrix(pca_mat_path, timeout=timeout)
        return _check_matrix(matrix, k, size, pca_mat_path)

    if not has_pca_source(pca_mat_path, weight_load_dir, snapshots):
        raise ValueError(
            "pca_matrix needs an existing `pca_mat_path`, or `snapshots` (an "
            "(S, N) array or a Trajectory) or `weight_load_dir` (a directory "
            "of params checkpoints) to compute it from."
        )
    if snapshots is None:
        root = os.fspath(weight_load_dir)
        if not os.path.isdir(root):
            raise _bad_weight_dir(root)
    if pca_mat_path is not None:
        target = pca_mat_path
    elif weight_load_dir is not None:
        target = os.path.join(os.fspath(weight_load_dir), PCA_MAT_TEMP_NAME)
    else:
        target = None  # from `snapshots` alone: nothing is written

    if target is not None and jax.process_count() > 1:
        if jax.process_index() != 0:
            matrix = load_pca_matrix(target, timeout=timeout)
            return _check_matrix(matrix, k, size, target)

    if snapshots is None:
        snapshots = load_trajectory(weight_load_dir, like=like)
    if size is not None and snapshots.shape[1] != size:
        raise ValueError(
            f"The snapshots have N={snapshots.shape[1]} parameters, `like` "
            f"has {size}."
        )
    matrix = pca_components(snapshots, k, seed=seed)
    if target is not None:
        save_pca_matrix(target, matrix)
    return matrix
