# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.dim_reduce.quasi_newton` against a float64 NumPy
reference."""

import math
import os
import tempfile
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from jax.flatten_util import ravel_pytree

import boostax
from boostax import mindspore as boost
from boostax._src.dim_reduce import pca as pca_lib
from boostax._src.dim_reduce import quasi_newton as dim_reduce_lib
from tests import _utils

HIDDEN = 6


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def _params():
    rng = np.random.default_rng(0)
    return {
        "w1": jnp.asarray(rng.normal(size=(3, HIDDEN)), jnp.float32),
        "w2": jnp.asarray(0.5 * rng.normal(size=(HIDDEN, 1)), jnp.float32),
    }


def _batches(n):
    rng = np.random.default_rng(1)
    return [
        (
            rng.normal(size=(16, 3)).astype(np.float32),
            rng.normal(size=(16, 1)).astype(np.float32),
        )
        for _ in range(n)
    ]


def _orthonormal_rows(k, n, seed=2):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, k)))
    return q.T.astype(np.float32)


class NumpyProblem:
    """The MLP's loss and gradient in float64, over the flattened params
    (``ravel_pytree`` order: w1 then w2)."""

    def __init__(self, batch):
        self.x, self.y = (np.asarray(t, np.float64) for t in batch)

    def split(self, w):
        w1 = w[: 3 * HIDDEN].reshape(3, HIDDEN)
        return w1, w[3 * HIDDEN :].reshape(HIDDEN, 1)

    def loss(self, w):
        w1, w2 = self.split(w)
        return np.mean((np.tanh(self.x @ w1) @ w2 - self.y) ** 2)

    def grad(self, w):
        w1, w2 = self.split(w)
        h = np.tanh(self.x @ w1)
        d_out = 2 * (h @ w2 - self.y) / self.y.size
        d_w2 = h.T @ d_out
        d_w1 = self.x.T @ ((d_out @ w2.T) * (1 - h**2))
        return np.concatenate([d_w1.ravel(), d_w2.ravel()])


def reference_dim_reduce(w, p, batches, rho, gamma, alpha, sigma, trials):
    """MindSpore's DimReduce (newest version), float64, one batch per step."""
    p = np.asarray(p, np.float64)
    k = p.shape[0]
    gk_last, initialized = np.zeros(k), False
    bk, sk, m = np.eye(k), np.zeros(k), np.zeros_like(w)
    steps = []
    for batch in batches:
        problem = NumpyProblem(batch)
        g, old = problem.grad(w), problem.loss(w)
        gk = p @ g
        backup = gk_last, bk
        if initialized:
            y = gk - gk_last
            ys = y @ sk
            if ys > 1e-20:
                r_ = 1 / ys
                t = np.eye(k) - r_ * np.outer(y, sk)
                bk = t.T @ bk @ t + r_ * np.outer(sk, sk)
        initialized = True
        gk_last = gk
        dk = -bk @ gk
        dn = p.T @ dk
        step = 0.0
        for i in range(trials):
            r = rho**i
            if problem.loss(w + r * dn) < old + sigma * r * (gk @ dk):
                step, sk = r, r * dk
                break
        if step == 0.0:
            gk_last, bk = backup
        m = gamma * m + g - p.T @ gk
        w = w + step * dn - alpha * m
        steps.append(step)
    return w, steps


class DimReduceTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("defaults", 0.55, 0.9, 0.001, 0.4, 2, {1.0, 0.55}),
        ("more_momentum_three_trials", 0.4, 0.5, 0.05, 0.3, 3, {1.0}),
    )
    def test_matches_the_numpy_reference(
        self, rho, gamma, alpha, sigma, trials, step_sizes
    ):
        params = _params()
        n = ravel_pytree(params)[0].size
        p = _orthonormal_rows(4, n)
        tx = dim_reduce_lib.dim_reduce(
            p, rho=rho, gamma=gamma, alpha=alpha, sigma=sigma, max_trials=trials
        )
        ts = boostax.TrainStep(boostax.make_objective(loss_fn=loss_fn), tx)
        state = ts.init(params)
        batches = _batches(5)
        steps, trials_run = [], []
        for batch in batches:
            state, metrics = ts(state, batch)
            steps.append(float(state.opt_state.step_size))
            self.assertEqual(float(metrics["dim_reduce_step_size"]), steps[-1])
            trials_run.append(int(metrics["dim_reduce_trials"]))
        expected, expected_steps = reference_dim_reduce(
            np.asarray(ravel_pytree(params)[0], np.float64),
            p,
            batches,
            rho,
            gamma,
            alpha,
            sigma,
            trials,
        )
        np.testing.assert_allclose(steps, expected_steps, rtol=1e-6)
        self.assertEqual({round(r, 6) for r in steps}, step_sizes)
        # Trial i (from 0) accepted: i + 1 trials run; none: all of them.
        expected_trials = [
            1 + round(np.log(r) / np.log(rho)) if r else trials
            for r in expected_steps
        ]
        self.assertEqual(trials_run, expected_trials)
        np.testing.assert_allclose(
            ravel_pytree(state.params)[0], expected, rtol=1e-5, atol=1e-6
        )
        self.assertEqual(ts.trace_count, 1)

    def test_no_accepted_trial_rolls_back(self):
        # Along -g in a subspace, a huge step overshoots on every trial.
        params = {"w": jnp.array([1.0, 0.0])}
        tx = dim_reduce_lib.dim_reduce(
            np.eye(2), rho=0.5, alpha=0.0, max_trials=2
        )
        state = tx.init(params)
        state = state._replace(bk=100.0 * state.bk, initialized=jnp.array(True))
        loss = lambda q: jnp.sum(q["w"] ** 2)
        updates, new = jax.jit(
            lambda s: tx.update(
                jax.grad(loss)(params),
                s,
                params,
                value=loss(params),
                value_fn=loss,
            )
        )(state)
        _utils.assert_trees_equal(updates, {"w": jnp.zeros(2)})
        self.assertEqual(float(new.step_size), 0.0)
        np.testing.assert_array_equal(new.bk, state.bk)
        np.testing.assert_array_equal(new.gk_last, state.gk_last)

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"`rho` must be .* in \(0, 1"):
            dim_reduce_lib.dim_reduce(np.eye(2), rho=1.5)
        with self.assertRaisesRegex(ValueError, "`alpha` must be .* >= 0"):
            dim_reduce_lib.dim_reduce(np.eye(2), alpha=-1.0)
        # gamma in [0, 1), as the config's `dim_reduce.gamma`.
        dim_reduce_lib.dim_reduce(np.eye(2), gamma=0.0)
        with self.assertRaisesRegex(
            ValueError, r"`gamma` must be .* in \[0, 1\)"
        ):
            dim_reduce_lib.dim_reduce(np.eye(2), gamma=1.0)
        with self.assertRaisesRegex(ValueError, "`max_trials` must be"):
            dim_reduce_lib.dim_reduce(np.eye(2), max_trials=0)
        with self.assertRaisesRegex(
            ValueError, r"`pca_matrix` must be .*\(3,\)"
        ):
            dim_reduce_lib.dim_reduce(np.ones(3))
        with self.assertRaisesRegex(ValueError, r"`pca_matrix` .*\(0, 3\)"):
            dim_reduce_lib.dim_reduce(np.zeros((0, 3)))
        tx = dim_reduce_lib.dim_reduce(np.eye(3))
        with self.assertRaisesRegex(ValueError, "has 3 columns but"):
            tx.init(jnp.zeros(2))
        state = tx.init(jnp.zeros(3))
        with self.assertRaisesRegex(ValueError, "needs `params`, `value`"):
            tx.update(jnp.ones(3), state, jnp.zeros(3))

    @parameterized.named_parameters(
        ("alpha_inf", {"alpha": math.inf}, ValueError, "`alpha`.*got inf"),
        ("alpha_nan", {"alpha": math.nan}, ValueError, "`alpha`.*got nan"),
        ("rho_nan", {"rho": math.nan}, ValueError, "`rho`.*got nan"),
        ("sigma_inf", {"sigma": math.inf}, ValueError, "`sigma`.*got inf"),
        ("gamma_nan", {"gamma": math.nan}, ValueError, "`gamma`.*got nan"),
        ("alpha_bool", {"alpha": True}, TypeError, "`alpha`.*bool"),
        ("gamma_bool", {"gamma": False}, TypeError, "`gamma`.*bool"),
        ("rho_string", {"rho": "0.5"}, TypeError, "`rho`.*str"),
        ("trials_bool", {"max_trials": True}, TypeError, "`max_trials`.*bool"),
        ("trials_float", {"max_trials": 2.0}, TypeError, "`max_trials`.*2.0"),
    )
    def test_hyper_parameters_must_be_finite_numbers(
        self, kwargs, error, message
    ):
        with self.assertRaisesRegex(error, message):
            dim_reduce_lib.dim_reduce(np.eye(2), **kwargs)

    def test_traced_matrix_is_not_checked(self):
        # Under jit P has no values to check; the step still runs.
        loss = lambda w: jnp.sum((w - 1.0) ** 2)

        @jax.jit
        def step(p, w):
            tx = dim_reduce_lib.dim_reduce(p)
            state = tx.init(w)
            updates, state = tx.update(
                jax.grad(loss)(w), state, w, value=loss(w), value_fn=loss
            )
            return updates, state.pca_matrix.dtype == jnp.float32

        updates, is_float32 = step(jnp.eye(2, dtype=jnp.bfloat16), jnp.zeros(2))
        self.assertTrue(is_float32)
        # d = -B g = 2 (B = I); the first trial overshoots, rho = 0.55 passes.
        np.testing.assert_allclose(updates, [1.1, 1.1], rtol=1e-6)
        with self.assertRaisesRegex(ValueError, r"`pca_matrix`.*\(2,\)"):
            step(jnp.ones(2), jnp.zeros(2))

    def test_data_parallel_shards_the_pca_rows(self):
        params = _params()
        n = ravel_pytree(params)[0].size
        p = _orthonormal_rows(8, n)
        mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
        batches = [
            tuple(np.concatenate([t] * 4) for t in b) for b in _batches(3)
        ]
        results = []
        for dp in (None, boostax.DataParallel(mesh)):
            tx = dim_reduce_lib.dim_reduce(
                p, axis_name=None if dp is None else dp.axes
            )
            ts = boostax.make_train_step(tx, loss_fn=loss_fn, data_parallel=dp)
            state = ts.init(params)
            for batch in batches:
                state, _ = ts(state, batch)
            results.append(state)
        plain, sharded = results
        self.assertEqual(
            sharded.opt_state.pca_matrix.sharding.shard_shape(p.shape),
            (2, n),
        )
        _utils.assert_trees_all_close(
            sharded.params, plain.params, rtol=1e-5, atol=1e-6
        )
        with self.assertRaisesRegex(ValueError, "divisible by"):
            ts = boostax.make_train_step(
                dim_reduce_lib.dim_reduce(p[:6], axis_name="data"),
                loss_fn=loss_fn,
                data_parallel=boostax.DataParallel(mesh),
            )
            ts.init(params)


class PCAMatrixCheckTest(parameterized.TestCase):
    """The factory refuses a P that would train to NaN or off the subspace."""

    def _fails(self, matrix, *patterns):
        with self.assertRaises(ValueError) as cm:
            dim_reduce_lib.dim_reduce(matrix)
        for pattern in ("^`pca_matrix` ", *patterns):
            self.assertRegex(str(cm.exception), pattern)

    def test_rejects_nan_and_inf(self):
        p = _orthonormal_rows(4, 30)
        p[1, 3], p[3, 0], p[3, 7] = np.nan, np.inf, -np.inf
        self._fails(
            p,
            r"must be finite, but rows \[1, 3\] \(2 of 4\) hold NaN or inf "
            r"\(3 of 120 entries\)",
            "boostax.pca_components",
        )

    def test_rejects_zero_rows(self):
        p = _orthonormal_rows(4, 30)
        p[2] = 0.0
        self._fails(
            p,
            r"must have unit rows, but rows \[2\] \(1 of 4\) are all zero",
            "boostax.pca_components",
        )

    @parameterized.named_parameters(
        ("scaled_row", 0, 1.5, r"row 0 has norm 1\.5"),
        ("overlapping_rows", 2, None, r"rows 0 and 2 have dot product 0\.8"),
    )
    def test_rejects_rows_that_are_not_orthonormal(self, row, scale, where):
        p = _orthonormal_rows(3, 30).astype(np.float64)
        if scale is None:
            p[row] = 0.8 * p[0] + 0.6 * p[1]  # a unit row, not orthogonal
        else:
            p[row] *= scale
        self._fails(
            p,
            r"must have orthonormal rows \(P P\^T = I\), but max "
            r"\|P P\^T - I\| = [0-9.]+ > 0\.001",
            where,
            r"np\.linalg\.qr\(P\.T\)",
        )

    def test_tolerance_is_1e_3_and_checked_in_blocks(self):
        p = _orthonormal_rows(4, 50).astype(np.float64)
        # Blocks of 2 columns: the Gram matrix and the NaN rows are summed
        # over 25 blocks.
        with mock.patch.object(pca_lib, "_CHECK_BLOCK_ENTRIES", 8):
            for excess, ok in ((0.9e-3, True), (1.1e-3, False)):
                q = p.copy()
                q[3] *= np.sqrt(1.0 + excess)  # |q_3|^2 - 1 = excess
                if ok:
                    dim_reduce_lib.dim_reduce(q)
                else:
                    self._fails(q, r"= 0\.0011 > 0\.001 \(row 3 has norm")
            q = p.copy()
            q[2, 49] = np.nan
            self._fails(q, r"rows \[2\] \(1 of 4\)")
        # bfloat16 rounding is too coarse (3^-0.5 rounds to 0.578125, the
        # norm to 1.0013); the message says so.
        self._fails(
            jnp.full((1, 3), 3**-0.5, jnp.bfloat16),
            r"= 0\.00269 > 0\.001 .*keep P in float32 \(bfloat16",
        )

    def test_accepts_our_own_pca_output(self):
        rng = np.random.default_rng(3)
        snaps = np.cumsum(rng.normal(size=(12, 400)), axis=0)
        for randomized in (True, False):
            p = boostax.pca_components(snaps, 6, randomized=randomized)
            deviation = np.abs(p.astype(np.float64) @ p.T - np.eye(6)).max()
            self.assertLess(deviation, 1e-6)  # 1000x below the tolerance
            dim_reduce_lib.dim_reduce(p)
        q = jnp.linalg.qr(jnp.asarray(rng.normal(size=(400, 6)), jnp.float32))
        dim_reduce_lib.dim_reduce(q[0].T)  # a float32 QR in JAX
        dim_reduce_lib.dim_reduce(np.eye(3, 5, dtype=np.int32))

    def test_rejects_non_real_dtypes(self):
        with self.assertRaisesRegex(TypeError, "`pca_matrix` .*dtype bool"):
            dim_reduce_lib.dim_reduce(np.eye(2, dtype=bool))
        with self.assertRaisesRegex(TypeError, "`pca_matrix` .*complex"):
            dim_reduce_lib.dim_reduce(np.eye(2, dtype=complex))


def _trajectory(steps=8):
    """Snapshots of plain SGD on the MLP: the trajectory DimReduce needs."""
    ts = boostax.make_train_step(optax.sgd(0.2), loss_fn=loss_fn)
    state = ts.init(_params())
    trajectory = boostax.Trajectory(steps)
    for batch in _batches(steps):
        state, _ = ts(state, batch)
        trajectory.record(state.params)
    return state.params, trajectory


class AutoBoostDimReduceTest(parameterized.TestCase):
    def _config(self, path, **extra):
        return {
            "boost": {"mode": "manual", "dim_reduce": True, **extra},
            "dim_reduce": {"n_components": 4, "pca_mat_path": path},
        }

    def test_manual_mode_with_the_seed_keys(self):
        params, trajectory = _trajectory()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pca.npy")
            ts = boostax.auto_boost(
                "O0",
                self._config(path),
                optimizer=optax.sgd(1.0),
                loss_fn=loss_fn,
                options=boostax.StepOptions(trajectory=trajectory),
            )
            # The matrix was computed and saved; a second run loads it.
            saved = np.load(path)
            again = boostax.auto_boost(
                "O0",
                self._config(path),
                optimizer=optax.sgd(1.0),
                loss_fn=loss_fn,
            )
        self.assertTrue(ts.step is not None)
        state = ts.init(params)
        np.testing.assert_array_equal(state.opt_state.pca_matrix, saved)
        np.testing.assert_array_equal(
            again.init(params).opt_state.pca_matrix, saved
        )
        np.testing.assert_allclose(
            saved,
            boostax.pca_components(trajectory, 4),
            rtol=1e-6,
            atol=1e-7,
        )
        losses, steps = [], []
        for batch in _batches(4):
            state, metrics = ts(state, batch)
            losses.append(float(metrics["loss"]))
            steps.append(float(state.opt_state.step_size))
        self.assertTrue(np.all(np.isfinite(losses)))
        self.assertGreater(max(steps), 0.0)

    def test_loss_scaling_unscales_once(self):
        params, trajectory = _trajectory()
        p = boostax.pca_components(trajectory, 4)
        results = []
        for loss_scale in (None, boostax.StaticLossScale(2.0**10)):
            ts = boostax.TrainStep(
                boostax.make_objective(loss_fn=loss_fn),
                dim_reduce_lib.dim_reduce(p),
                loss_scale=loss_scale,
            )
            state = ts.init(params)
            for batch in _batches(3):
                state, _ = ts(state, batch)
            results.append(state.params)
        # A power-of-two scale is exact: the same bits as no scaling (a
        # second division, as MindSpore's, would shrink the step 1024x).
        _utils.assert_trees_equal(*results)

    def test_with_gradient_accumulation(self):
        params, trajectory = _trajectory()
        with tempfile.TemporaryDirectory() as tmp:
            config = self._config(
                os.path.join(tmp, "pca.npy"), grad_accumulation=True
            )
            config["grad_accumulation"] = {"grad_accumulation_step": 2}
            ts = boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.sgd(1.0),
                loss_fn=loss_fn,
                options=boostax.StepOptions(trajectory=trajectory),
            )
        state = ts.init(params)
        batch1, batch2 = _batches(2)
        state, metrics = ts(state, batch1)
        _utils.assert_trees_equal(state.params, params)  # micro-step
        self.assertFalse(metrics["updated"])
        self.assertFalse(boostax.has_updated(state))
        self.assertEqual(int(metrics["dim_reduce_trials"]), 0)  # no update
        state, metrics = ts(state, batch2)
        self.assertFalse(np.array_equal(state.params["w1"], params["w1"]))
        self.assertTrue(metrics["updated"])
        self.assertTrue(boostax.has_updated(state))
        self.assertBetween(int(metrics["dim_reduce_trials"]), 1, 2)
        self.assertIsInstance(
            state.opt_state.inner_state, boostax.DimReduceState
        )

    def test_no_pca_source_names_auto_boosts_arguments(self):
        with self.assertRaisesRegex(
            ValueError,
            r"no source for it \(`pca_mat_path` '.*pca.npy' does not "
            r"exist\): pass `options=boostax.StepOptions\(pca_matrix=\.\.\.\)`"
            r" .* or `trajectory=`",
        ):
            with tempfile.TemporaryDirectory() as tmp:
                boostax.auto_boost(
                    "O0",
                    self._config(os.path.join(tmp, "pca.npy")),
                    optimizer=optax.sgd(1.0),
                    loss_fn=loss_fn,
                )
        with self.assertRaisesRegex(
            ValueError, r"`trajectory` must be a boostax.Trajectory .*\(5,\)"
        ):
            boostax.auto_boost(
                "O0",
                self._config(None),
                optimizer=optax.sgd(1.0),
                loss_fn=loss_fn,
                options=boostax.StepOptions(trajectory=np.zeros(5)),
            )

    def test_too_few_snapshots(self):
        _, trajectory = _trajectory(steps=3)
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaisesRegex(ValueError, "at least 4 snapshots"):
                boostax.auto_boost(
                    "O0",
                    self._config(os.path.join(tmp, "pca.npy")),
                    optimizer=optax.sgd(1.0),
                    loss_fn=loss_fn,
                    options=boostax.StepOptions(trajectory=trajectory),
                )


class SeedApiTest(absltest.TestCase):
    def test_dim_reduce_class(self):
        from boostax.examples import models

        model = models.MLP(features=(4,))
        x = np.random.default_rng(0).normal(size=(8, 64)).astype(np.float32)
        y = np.arange(8) % 10
        params = model.init(jax.random.PRNGKey(0), x[:1])["params"]
        n = ravel_pytree(params)[0].size
        p = _orthonormal_rows(4, n)
        dim_reduce = boost.DimReduce(
            model,
            optax.sgd(1.0),
            params,
            p,
            4,
            0.55,
            0.9,
            0.001,
            0.4,
            0,
            1,
            loss=models.cross_entropy,
        )
        grads = jax.grad(
            lambda q: models.cross_entropy(model.apply({"params": q}, x), y)
        )(params)
        self.assertEqual(dim_reduce(0.5, grads, params, params, x, y), 0.5)
        tx = dim_reduce_lib.dim_reduce(p)
        loss = lambda q: models.cross_entropy(model.apply({"params": q}, x), y)
        step, _ = tx.update(
            grads, tx.init(params), params, value=loss(params), value_fn=loss
        )
        _utils.assert_trees_all_close(
            dim_reduce.weight,
            jax.tree.map(lambda w, u: w + u, params, step),
            rtol=1e-6,
            atol=1e-7,
        )
        with self.assertRaisesRegex(NotImplementedError, "rank_size > 1"):
            boost.DimReduce(
                model,
                optax.sgd(1.0),
                params,
                p,
                4,
                0.55,
                0.9,
                0.001,
                0.4,
                0,
                2,
                loss=models.cross_entropy,
            )
        with self.assertRaisesRegex(ValueError, "`n_components` = 8 rows"):
            boost.DimReduce(
                model,
                optax.sgd(1.0),
                params,
                p,
                8,
                0.55,
                0.9,
                0.001,
                0.4,
                0,
                1,
                loss=models.cross_entropy,
            )

    def test_boost_cell_check_dim_reduce_enable(self):
        from boostax.examples import models

        model = models.MLP(features=(4,))
        variables = model.init(jax.random.PRNGKey(0), np.zeros((1, 64)))
        n = ravel_pytree(variables["params"])[0].size
        cell = boost.BoostTrainOneStepCell(
            model,
            dim_reduce_lib.dim_reduce(_orthonormal_rows(4, n)),
            loss=models.cross_entropy,
            variables=variables,
        )
        self.assertTrue(cell.check_dim_reduce_enable())
        x = np.random.default_rng(0).normal(size=(8, 64)).astype(np.float32)
        self.assertTrue(np.isfinite(cell(x, np.arange(8) % 10)))
        plain = boost.BoostTrainOneStepCell(
            model,
            optax.sgd(0.1),
            loss=models.cross_entropy,
            variables=variables,
        )
        self.assertFalse(plain.check_dim_reduce_enable())


if __name__ == "__main__":
    absltest.main()
