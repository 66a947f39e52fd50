# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""DimReduce: quasi-Newton training in the PCA subspace of the trajectory.

The weights of a network trained for a while move in a tiny subspace (Li et
al., 2022): the top principal directions ``P`` (``k x N``, orthonormal rows)
of snapshots of the flattened weights (``snapshots.py``, ``pca.py``).
DimReduce then trains with BFGS in that ``k``-dimensional subspace, an
Armijo line search on the same mini-batch, and a small momentum step on the
part of the gradient outside the subspace.

References:
  Li, Tan, Huang, Tao, Liu, Huang, `Low Dimensional Trajectory Hypothesis is
  True: DNNs Can Be Trained in Tiny Subspaces
  <https://arxiv.org/abs/2103.11154>`_, IEEE TPAMI 2022;
  MindSpore ``mindspore.boost.DimReduce``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.flatten_util import ravel_pytree

from boostax._src import validation
from boostax._src.dim_reduce import pca as pca_lib

# MindSpore's threshold on y.s below which the BFGS update is skipped.
_CURVATURE_EPS = 1e-20


class DimReduceState(NamedTuple):
    """State of `dim_reduce`.

    Attributes:
      pca_matrix: ``P``, ``(k, N)`` float32 with orthonormal rows (inside a
        data-parallel step, this device's block of rows).
      gk_last: the previous subspace gradient ``P g``, ``(k,)``.
      initialized: whether `gk_last` holds a gradient yet (the first step
        only records it).
      bk: the inverse-Hessian approximation ``B``, ``(k, k)``.
      sk: the last accepted subspace step ``s``, ``(k,)``.
      momentum: the residual momentum ``m``, ``(N,)``.
      step_size: the Armijo step taken by the last update (0: none).
      trials: line-search trials (forward passes) the last update ran,
        ``int32``: 1 up to ``max_trials`` (0 before the first update).
    """

    pca_matrix: jax.Array
    gk_last: jax.Array
    initialized: jax.Array
    bk: jax.Array
    sk: jax.Array
    momentum: jax.Array
    step_size: jax.Array
    trials: jax.Array


def _check_matrix(pca_matrix) -> Any:
    """``P`` as float32, checked (`pca.check_pca_matrix`) if concrete.

    A traced matrix (``dim_reduce`` built inside ``jax.jit`` from an
    argument) has no values to check: only its shape and dtype are.
    """
    if isinstance(pca_matrix, jax.core.Tracer):
        pca_lib.check_pca_shape(
            pca_matrix.shape, pca_matrix.dtype, "`pca_matrix`"
        )
        return pca_matrix.astype(jnp.float32)
    return pca_lib.check_pca_matrix(pca_matrix, "`pca_matrix`")


def bfgs_update(bk, sk, y):
    """BFGS update of the inverse Hessian, skipped when ``y.s <= 1e-20``.

    .. math::

      B \\leftarrow (I - \\rho s y^\\top) B (I - \\rho y s^\\top)
      + \\rho s s^\\top, \\qquad \\rho = 1 / y^\\top s
    """
    ys = jnp.vdot(y, sk)
    safe = jnp.where(ys > _CURVATURE_EPS, ys, 1.0)
    rho = 1.0 / safe
    t = jnp.eye(bk.shape[0], dtype=bk.dtype) - rho * jnp.outer(y, sk)
    updated = t.T @ bk @ t + rho * jnp.outer(sk, sk)
    return jnp.where(ys > _CURVATURE_EPS, updated, bk)


def dim_reduce(
    pca_matrix: Any,
    *,
    rho: float = 0.55,
    gamma: float = 0.9,
    alpha: float = 0.001,
    sigma: float = 0.4,
    max_trials: int = 2,
    axis_name: str | tuple[str, ...] | None = None,
) -> optax.GradientTransformationExtraArgs:
    """MindSpore's DimReduce step, as an Optax transform (the optimizer).

    With ``g`` the flattened gradient (``ravel_pytree``
    order, the order of the trajectory's snapshots) and ``L`` the loss on
    the current batch:

    .. math::

      g_k &= P g, \\quad B \\leftarrow \\text{BFGS}(B, s, g_k - g_k^{last})
        \\text{ if } y^\\top s > 10^{-20}, \\quad d = -B g_k \\\\
      r &= \\text{first of } \\rho^0, \\rho^1, \\ldots \\text{ with }
        L(w + r P^\\top d) < L(w) + \\sigma r\\, g_k^\\top d
        \\text{, else } 0 \\\\
      m &\\leftarrow \\gamma m + g - P^\\top g_k, \\qquad
      w \\leftarrow w + r P^\\top d - \\alpha m

    An accepted trial sets ``s = r d``; when none is accepted the step is
    zero and ``B``, ``g_k^{last}`` are rolled back (MindSpore's newest
    version). The trials are forward passes on the same batch through
    ``value_fn``; the first call only records ``g_k``. Unlike MindSpore,
    the trials do not move BatchNorm statistics.

    Args:
      pca_matrix: ``P``, ``(k, N)`` with orthonormal rows (see
        `boostax.pca_components`); ``N`` must be the size
        of the flattened params. A concrete matrix is checked: finite, no
        all-zero row, ``max |P Pᵀ - I| <= 1e-3`` (in float64; a traced
        one, inside ``jax.jit``, cannot be and is not).
      rho: backtracking factor of the Armijo trials, in (0, 1).
      gamma: decay of the residual momentum, in [0, 1) (0: the residual
        gradient alone).
      alpha: step of the residual momentum, finite and >= 0 (0 turns it
        off).
      sigma: Armijo's sufficient-decrease constant, in (0, 1).
      max_trials: line-search trials, an int >= 1 (MindSpore: 2).
      axis_name: inside a data-parallel step, the mesh axes ``P``'s rows
        are sharded over (each device holds ``k / devices`` rows).

    Returns:
      An ``optax.GradientTransformationExtraArgs`` whose ``update`` needs
      ``value`` (the loss at ``params``) and ``value_fn`` (the loss at other
      params on the same batch), as Optax's line searches do; boostax's
      train step passes both.

    Raises:
      ValueError: `pca_matrix` is not a non-empty 2-D matrix, holds NaN or
        inf, has an all-zero row or rows that are not orthonormal (the
        message says which check failed and how to fix it); a
        hyper-parameter is NaN, infinite or out of its range.
      TypeError: `pca_matrix` is not a real (float) array; a
        hyper-parameter is not a number (a bool is not one), or
        `max_trials` not an int.

    Example:
      >>> import jax, jax.numpy as jnp, optax, boostax
      >>> loss = lambda w: jnp.sum((w - 1.0) ** 2)
      >>> tx = boostax.dim_reduce(jnp.eye(2))  # the whole space: plain BFGS
      >>> w = jnp.zeros(2); state = tx.init(w)
      >>> for _ in range(3):
      ...   u, state = tx.update(jax.grad(loss)(w), state, w,
      ...                        value=loss(w), value_fn=loss)
      ...   w = optax.apply_updates(w, u)
      >>> bool(loss(w) < 1e-3)
      True

    References:
      Li et al., `Low Dimensional Trajectory Hypothesis is True
      <https://arxiv.org/abs/2103.11154>`_, TPAMI 2022;
      MindSpore ``mindspore.boost.DimReduce``.
    """
    matrix = _check_matrix(pca_matrix)
    rho = validation.check_number(
        "rho", rho, minimum=0, maximum=1, open_minimum=True, open_maximum=True
    )
    gamma = validation.check_number(
        "gamma", gamma, minimum=0, maximum=1, open_maximum=True
    )
    alpha = validation.check_number("alpha", alpha, minimum=0)
    sigma = validation.check_number(
        "sigma",
        sigma,
        minimum=0,
        maximum=1,
        open_minimum=True,
        open_maximum=True,
    )
    max_trials = validation.check_int("max_trials", max_trials, minimum=1)
    axes = None
    if axis_name is not None:
        axes = validation.check_axis_names("axis_name", axis_name)
    k, n = matrix.shape

    def init_fn(params):
        size = ravel_pytree(params)[0].size
        if size != n:
            raise ValueError(
                f"`pca_matrix` has {n} columns but the params have {size} "
                "entries: it must come from snapshots of these params."
            )
        return DimReduceState(
            pca_matrix=jnp.asarray(matrix),
            gk_last=jnp.zeros(k, jnp.float32),
            initialized=jnp.zeros([], bool),
            bk=jnp.eye(k, dtype=jnp.float32),
            sk=jnp.zeros(k, jnp.float32),
            momentum=jnp.zeros(n, jnp.float32),
            step_size=jnp.zeros([], jnp.float32),
            trials=jnp.zeros([], jnp.int32),
        )

    def project(p_rows, g):
        """``P g``, gathered over the devices holding P's rows."""
        gk = p_rows @ g
        if axes is None:
            return gk
        return lax.all_gather(gk, axes, tiled=True)

    def lift(p_rows, *vectors):
        """``P^T v`` for each (k,) vector, summed over the devices."""
        stacked = jnp.stack(vectors)
        if axes is not None:
            rows = p_rows.shape[0]
            start = lax.axis_index(axes) * rows
            stacked = lax.dynamic_slice_in_dim(stacked, start, rows, axis=1)
        lifted = stacked @ p_rows
        if axes is not None:
            lifted = lax.psum(lifted, axes)
        return list(lifted)

    def update_fn(
        updates,
        state,
        params=None,
        *,
        value=None,
        value_fn: Callable[[Any], jax.Array] | None = None,
        **extra_args,
    ):
        del extra_args
        if params is None or value is None or value_fn is None:
            raise ValueError(
                "dim_reduce's update needs `params`, `value` (the loss) and "
                "`value_fn` (the loss at other params on the same batch); "
                "boostax's train step passes them."
            )
        if axes is None and state.pca_matrix.shape[0] != k:
            raise ValueError(
                "This DimReduce holds a block of P's rows: it runs in a "
                "data-parallel step, so build it with `axis_name=`."
            )
        g, unravel = ravel_pytree(updates)
        g = g.astype(jnp.float32)
        w, unravel_params = ravel_pytree(params)
        gk = project(state.pca_matrix, g)
        bk = jnp.where(
            state.initialized,
            bfgs_update(state.bk, state.sk, gk - state.gk_last),
            state.bk,
        )
        dk = -bk @ gk
        dn, g_proj = lift(state.pca_matrix, dk, gk)
        slope = jnp.vdot(gk, dk)
        old = jnp.asarray(value, jnp.float32)

        def trial(r):
            trial_params = unravel_params((w + r * dn).astype(w.dtype))
            new = jnp.asarray(value_fn(trial_params), jnp.float32)
            return new < old + sigma * r * slope

        # Trials run only until one is accepted (forward passes under a
        # cond, which XLA runs at full speed; no backward pass here).
        step = jnp.zeros([], jnp.float32)
        accepted = jnp.zeros([], bool)
        trials = jnp.zeros([], jnp.int32)
        for i in range(max_trials):
            r = rho**i
            trials = trials + (~accepted).astype(jnp.int32)
            ok = lax.cond(
                accepted, lambda: jnp.zeros([], bool), lambda r=r: trial(r)
            )
            step = jnp.where(~accepted & ok, r, step)
            accepted = accepted | ok
        momentum = gamma * state.momentum + g - g_proj
        delta = step * dn - alpha * momentum
        new_state = DimReduceState(
            pca_matrix=state.pca_matrix,
            gk_last=jnp.where(accepted, gk, state.gk_last),
            initialized=jnp.ones([], bool),
            bk=jnp.where(accepted, bk, state.bk),
            sk=jnp.where(accepted, step * dk, state.sk),
            momentum=momentum,
            step_size=step,
            trials=trials,
        )
        return optax.tree.cast_like(unravel(delta), updates), new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
