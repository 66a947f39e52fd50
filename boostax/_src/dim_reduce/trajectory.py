# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The PCA matrix of a weight trajectory, the first half of DimReduce.

DimReduce (DLDR + P-BFGS) trains in the span of the top principal
directions of the parameters sampled along an earlier training run.
`pca_matrix` gets the ``(k, N)`` projection matrix ``P`` the way MindSpore
does: from an ``.npy`` file if there is one (``pca_file.py``), else
computed (``pca.py``) from snapshots recorded in memory or loaded from
checkpoints (``snapshots.py``) and shared with the other processes through
that file. The DimReduce step itself lives in ``dim_reduce/quasi_newton.py``.

References:
  MindSpore ``mindspore.boost.DimReduce`` (``_compute_pca_mat``,
  ``_load_weights``, ``_load_local_pca_mat``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import numpy as np

from boostax._src import validation
from boostax._src.dim_reduce.pca import check_pca_matrix, pca_components
from boostax._src.dim_reduce.pca_file import (
    check_timeout,
    load_pca_matrix,
    save_pca_matrix,
)
from boostax._src.dim_reduce.snapshots import (
    as_snapshots,
    check_weight_dir,
    load_trajectory,
)

PyTree = Any
PathLike = str | os.PathLike

#: File name of the PCA matrix computed from ``weight_load_dir`` when no
#: ``pca_mat_path`` is given (MindSpore's name).
PCA_MAT_TEMP_NAME = "pca_mat_temp.npy"


def has_pca_source(pca_mat_path, weight_load_dir, snapshots) -> bool:
    """Whether `pca_matrix` has a matrix to read or snapshots to compute
    one from."""
    return (
        snapshots is not None
        or weight_load_dir is not None
        or (pca_mat_path is not None and os.path.isfile(pca_mat_path))
    )


def param_count(like) -> int:
    """The number of parameters of `like` (arrays or shape structs)."""
    return sum(math.prod(np.shape(x)) for x in jax.tree.leaves(like))


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
    k = validation.check_int("n_components", n_components, minimum=1)
    timeout = check_timeout("timeout", timeout)
    if pca_mat_path is not None:
        pca_mat_path = os.fspath(pca_mat_path)
        if not pca_mat_path.endswith(".npy"):
            raise ValueError(
                f"`pca_mat_path` must name a .npy file, got {pca_mat_path!r}."
            )
    size = None if like is None else param_count(like)
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
        check_weight_dir(weight_load_dir)
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
