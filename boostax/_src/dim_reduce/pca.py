# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The PCA of weight snapshots, and what a valid PCA matrix is.

`pca_components` computes the ``(k, N)`` matrix ``P`` whose rows are the
top principal directions of ``(S, N)`` snapshots (exactly, or by randomized
SVD for large N); `check_pca_matrix` checks that a matrix from anywhere (a
file, the user) is one DimReduce can project with: finite, orthonormal
rows. Everything here runs on the host in NumPy.

References:
  Li et al., `Low Dimensional Trajectory Hypothesis is True: DNNs Can Be
  Trained in Tiny Subspaces <https://arxiv.org/abs/2103.11154>`_, IEEE
  TPAMI 2022;
  MindSpore ``mindspore.boost.DimReduce`` (``_compute_pca_mat``);
  Halko, Martinsson and Tropp, `Finding structure with randomness
  <https://arxiv.org/abs/0909.4061>`_, SIAM Review 2011.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from boostax._src import validation
from boostax._src.dim_reduce.snapshots import as_snapshots


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
    k = validation.check_int("n_components", n_components, minimum=1)
    oversampling = validation.check_int("oversampling", oversampling, minimum=0)
    power_iterations = validation.check_int(
        "power_iterations", power_iterations, minimum=0
    )
    validation.check_bool("randomized", randomized)
    seed = validation.check_int("seed", seed, minimum=0)
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
    k = validation.check_int("n_components", n_components, minimum=1)
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
