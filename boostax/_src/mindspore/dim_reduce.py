# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""``DimReduce``: MindSpore's ``mindspore.boost.DimReduce``.

Mirrors ``mindspore/boost/dim_reduce.py``; the work is done by
`boostax.dim_reduce`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from boostax._src import validation
from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from boostax._src.step import objectives


class DimReduce:
    """MindSpore's ``DimReduce``: one DimReduce update per call.

    ``DimReduce(network, optimizer, weight, pca_mat_local, n_components,
    rho, gamma, alpha, sigma, rank, rank_size)``. Each call
    ``dim_reduce(loss, old_grad, weight, weight_clone, *inputs)`` computes
    `boostax.dim_reduce`'s step ``u`` from the gradient `old_grad` (the
    Armijo trials evaluate the loss on `inputs`) and, as MindSpore does,
    hands ``-u`` to `optimizer` as a gradient: with ``optax.sgd(1.0)``
    (MindSpore's ``SGD(lr=1)``), ``w <- w + u``. The new weights are in
    `weight` (JAX arrays are immutable; MindSpore assigns in place).

    Args:
      network: a Flax Linen or NNX module, trained on ``(inputs, targets)``.
      optimizer: the Optax optimizer applying the step (``optax.sgd(1.0)``).
      weight: the params pytree.
      pca_mat_local: the PCA matrix ``(n_components, n_params)``.
      n_components, rho, gamma, alpha, sigma: as the ``dim_reduce`` section.
      rank, rank_size: this process's rank and the world size; the seed
        API's data-parallel DimReduce is `auto_boost(..., mesh=...)`, so
        they must be 0 and 1 here.
      loss: ``loss(outputs, targets) -> scalar``.
      model_state: the network's non-trainable variables (BatchNorm
        statistics), if any.
    """

    def __init__(
        self,
        network: Any,
        optimizer: optax.GradientTransformation,
        weight: Any,
        pca_mat_local: Any,
        n_components: int,
        rho: float,
        gamma: float,
        alpha: float,
        sigma: float,
        rank: int,
        rank_size: int,
        *,
        loss: Callable[..., Any],
        model_state: Any = None,
    ):
        validation.check_flax_module("network", network)
        validation.check_optimizer("optimizer", optimizer)
        n_components = validation.check_int(
            "n_components", n_components, minimum=1
        )
        rank = validation.check_int("rank", rank, minimum=0)
        rank_size = validation.check_int("rank_size", rank_size, minimum=1)
        if rank >= rank_size:
            raise ValueError(
                f"`rank` must be in [0, rank_size - 1] = [0, {rank_size - 1}],"
                f" got {rank}."
            )
        if rank != 0 or rank_size != 1:
            raise NotImplementedError(
                "DimReduce with rank_size > 1: build the data-parallel step "
                "with boostax.auto_boost(..., mesh=...) (P's rows are split "
                "over the mesh's devices)."
            )
        matrix = np.asarray(pca_mat_local)
        if matrix.dtype == np.bool_ or not np.issubdtype(
            matrix.dtype, np.number
        ):
            raise TypeError(
                "`pca_mat_local` must be a numeric matrix (n_components, "
                f"n_params), got an array of dtype {matrix.dtype}."
            )
        if matrix.ndim != 2 or matrix.shape[0] != n_components:
            raise ValueError(
                f"`pca_mat_local` must have `n_components` = {n_components} "
                f"rows, got shape {matrix.shape}."
            )
        self.objective = objectives.make_objective(model=network, loss=loss)
        self.optimizer = optimizer
        self.tx = dim_reduce_lib.dim_reduce(
            matrix, rho=rho, gamma=gamma, alpha=alpha, sigma=sigma
        )
        self.weight = weight
        if model_state is None and isinstance(network, nn.Module):
            model_state = {}  # a Linen model without batch statistics
        self.model_state = model_state
        self.state = self.tx.init(weight)
        self.opt_state = optimizer.init(weight)
        self._step = jax.jit(self._update)

    def _update(self, state, opt_state, grads, weight, model_state, batch):
        def value_fn(params):
            value, _ = self.objective.loss_fn(
                params, model_state, batch, jax.random.PRNGKey(0)
            )
            return value

        step, state = self.tx.update(
            grads, state, weight, value=value_fn(weight), value_fn=value_fn
        )
        updates, opt_state = self.optimizer.update(
            jax.tree.map(jnp.negative, step), opt_state, weight
        )
        return optax.apply_updates(weight, updates), state, opt_state

    def __call__(self, loss, old_grad, weight, weight_clone, *inputs):
        """One update with gradient `old_grad` at `weight`; returns `loss`."""
        del weight_clone  # the trials never modify `weight` in JAX
        self.weight, self.state, self.opt_state = self._step(
            self.state,
            self.opt_state,
            old_grad,
            weight,
            self.model_state,
            inputs,
        )
        return loss
