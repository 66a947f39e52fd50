# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.distributed.data_parallel` on 8 simulated CPU
devices."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized

import boostax
from boostax import mindspore as boost
from boostax.examples import models
from tests import _models, _utils

BATCH = 24  # divisible by 8, 6 and 4


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return jnp.mean((h @ params["out"]["w"] - y) ** 2)


def _params():
    rng = np.random.default_rng(0)
    return {
        "hidden": {
            "w": jnp.asarray(rng.normal(size=(4, 8)), jnp.float32),
            "b": jnp.zeros((1, 8), jnp.float32),
        },
        "out": {"w": jnp.asarray(rng.normal(size=(8, 1)), jnp.float32)},
    }


def _batch(seed=1):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(BATCH, 4)).astype(np.float32),
        rng.normal(size=(BATCH, 1)).astype(np.float32),
    )


def _mesh(n):
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def _contiguous_shards(batch, n):
    size = BATCH // n
    return [
        jax.tree.map(lambda a, i=i: a[i * size : (i + 1) * size], batch)
        for i in range(n)
    ]


def _adasum_pair(a, b):
    """Float64 two-vector rule; 1-element leaves are averaged."""
    if a.size == 1:
        return (a + b) / 2
    dot = np.vdot(a, b) + 1e-12
    return (1 - dot / (2 * (np.vdot(a, a) + 1e-12))) * a + (
        1 - dot / (2 * (np.vdot(b, b) + 1e-12))
    ) * b


def _adasum_tree(vectors):
    """AdaSum of per-device arrays: remainder folded in, then pairwise."""
    vectors = [np.asarray(v, np.float64) for v in vectors]
    q = 1 << (len(vectors).bit_length() - 1)
    for k in range(len(vectors) - q):
        vectors[k] = _adasum_pair(vectors[k], vectors[q + k])
    vectors = vectors[:q]
    while len(vectors) > 1:
        vectors = [
            _adasum_pair(vectors[i], vectors[i + 1])
            for i in range(0, len(vectors), 2)
        ]
    return vectors[0]


def _adasum_cosine(trees):
    """Float64 mean over AdaSum's combinations of the per-leaf cosines."""
    vectors = [
        [np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(t)]
        for t in trees
    ]
    cosines = []

    def combine(a, b):
        cosines.append(
            np.mean(
                [
                    np.vdot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y))
                    for x, y in zip(a, b, strict=True)
                ]
            )
        )
        return [_adasum_pair(x, y) for x, y in zip(a, b, strict=True)]

    q = 1 << (len(vectors).bit_length() - 1)
    for k in range(len(vectors) - q):
        vectors[k] = combine(vectors[k], vectors[q + k])
    vectors = vectors[:q]
    while len(vectors) > 1:
        vectors = [
            combine(vectors[i], vectors[i + 1])
            for i in range(0, len(vectors), 2)
        ]
    return np.mean(cosines) if cosines else np.nan


def _per_device(x):
    """The values an array holds on each of its devices, in device order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.device.id)
    return [np.asarray(s.data) for s in shards]


def _assert_replicated(tree):
    for leaf in jax.tree.leaves(tree):
        copies = _per_device(leaf)
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0])


class DataParallelStepTest(parameterized.TestCase):
    def test_mean_equals_the_single_device_step(self):
        objective = boostax.make_objective(loss_fn=loss_fn)
        tx = optax.sgd(0.1, momentum=0.9)
        plain = boostax.TrainStep(objective, tx)
        dp = boostax.TrainStep(
            objective, tx, data_parallel=boostax.DataParallel(_mesh(8))
        )
        a, b = plain.init(_params()), dp.init(_params())
        for seed in range(3):
            a, ma = plain(a, _batch(seed))
            b, mb = dp(b, _batch(seed))
        np.testing.assert_allclose(mb["loss"], ma["loss"], rtol=1e-6)
        _utils.assert_trees_all_close(b.params, a.params, rtol=1e-5, atol=1e-6)
        _assert_replicated(b.params)
        self.assertEqual(dp.trace_count, 1)

    def test_batch_norm_statistics_are_averaged(self):
        model = _models.PlainBNMLP()
        x, _ = _batch()
        y = np.arange(BATCH) % 10
        variables = model.init(jax.random.PRNGKey(0), x[:1], train=False)
        tx = optax.sgd(0.1)  # linear: the step of the mean = mean of steps
        plain = boostax.make_train_step(
            tx, model=model, loss=models.cross_entropy
        )
        dp = boostax.make_train_step(
            tx,
            model=model,
            loss=models.cross_entropy,
            data_parallel=boostax.DataParallel(_mesh(4)),
        )
        state, _ = dp(dp.init(variables), (x, y))
        per_shard = [
            plain(plain.init(variables), shard)[0]
            for shard in _contiguous_shards((x, y), 4)
        ]
        expected = jax.tree.map(
            lambda *t: np.mean(np.stack(t), axis=0),
            *[(s.params, s.model_state) for s in per_shard],
        )
        _utils.assert_trees_all_close(
            (state.params, state.model_state), expected, rtol=1e-5, atol=1e-6
        )
        _assert_replicated(state.model_state)

    @parameterized.parameters(8, 6, 1)
    def test_adasum_of_the_updates(self, n):
        lr = 0.1
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optax.sgd(lr),
            data_parallel=boostax.DataParallel(_mesh(n), reduction="adasum"),
        )
        state, metrics = ts(ts.init(_params()), _batch())
        grads = [
            jax.grad(loss_fn)(_params(), shard)
            for shard in _contiguous_shards(_batch(), n)
        ]
        expected = jax.tree.map(
            lambda p, *g: p + _adasum_tree([-lr * np.asarray(x) for x in g]),
            _params(),
            *grads,
        )
        _utils.assert_trees_all_close(
            state.params, expected, rtol=1e-5, atol=1e-6
        )
        _assert_replicated(state.params)
        # The mean cosine of the combined updates (NaN: one device, none).
        np.testing.assert_allclose(
            metrics["adasum_cosine"], _adasum_cosine(grads), rtol=1e-5
        )
        self.assertTrue(n == 1 or -1 <= metrics["adasum_cosine"] <= 1)

    def test_adasum_gradients_equals_adasum_of_sgd_updates(self):
        results = []
        for reduction in ("adasum", "adasum_gradients"):
            ts = boostax.TrainStep(
                boostax.make_objective(loss_fn=loss_fn),
                optax.sgd(0.1),
                data_parallel=boostax.DataParallel(
                    _mesh(8), reduction=reduction
                ),
            )
            results.append(ts(ts.init(_params()), _batch())[0].params)
        _utils.assert_trees_all_close(*results, rtol=1e-5, atol=1e-7)

    def test_adam_state_is_per_device(self):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optax.adam(1e-2),
            data_parallel=boostax.DataParallel(_mesh(8), reduction="adasum"),
        )
        state = ts.init(_params())
        self.assertIsInstance(state.opt_state, boostax.AdaSumState)
        for seed in range(2):
            state, _ = ts(state, _batch(seed))
        mu = state.opt_state.inner_state[0].mu["out"]["w"]
        self.assertEqual(mu.shape, (8, 8, 1))
        rows = np.asarray(mu)
        self.assertFalse(np.allclose(rows[0], rows[1]))
        _assert_replicated(state.params)

    def test_hierarchical_adasum_averages_within_nodes(self):
        lr = 0.1
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optax.sgd(lr),
            data_parallel=boostax.DataParallel(
                boostax.node_mesh(4), reduction="adasum", local_axis="local"
            ),
        )
        state, metrics = ts(ts.init(_params()), _batch())
        node_grads = [
            jax.grad(loss_fn)(_params(), shard)
            for shard in _contiguous_shards(_batch(), 2)
        ]
        expected = jax.tree.map(
            lambda p, *g: p + _adasum_tree([-lr * np.asarray(x) for x in g]),
            _params(),
            *node_grads,
        )
        _utils.assert_trees_all_close(
            state.params, expected, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            metrics["adasum_cosine"], _adasum_cosine(node_grads), rtol=1e-5
        )

    def test_an_overflow_on_one_device_skips_the_step_everywhere(self):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optax.adam(1e-2),
            loss_scale=boostax.DynamicLossScale(loss_scale_value=2.0**10),
            data_parallel=boostax.DataParallel(_mesh(8), reduction="adasum"),
        )
        state = ts.init(_params())
        x, y = _batch()
        y[-1] = 1e36  # only the last device's shard overflows
        new_state, metrics = ts(state, (x, y))
        self.assertTrue(bool(metrics["overflow"]))
        _utils.assert_trees_equal(
            (new_state.params, new_state.opt_state),
            (state.params, state.opt_state),
        )
        np.testing.assert_array_equal(
            _per_device(new_state.algorithms.loss_scale.loss_scale),
            [2.0**9] * 8,
        )

    def test_errors(self):
        with self.assertRaisesRegex(TypeError, "`mesh` must be a jax"):
            boostax.DataParallel("data")
        with self.assertRaisesRegex(ValueError, "`reduction` must be one of"):
            boostax.DataParallel(_mesh(8), reduction="sum")
        with self.assertRaisesRegex(ValueError, "`local_axis` must be one of"):
            boostax.DataParallel(_mesh(8), reduction="adasum", local_axis="x")
        with self.assertRaisesRegex(ValueError, "only applies to AdaSum"):
            boostax.DataParallel(boostax.node_mesh(4), local_axis="local")
        with self.assertRaisesRegex(ValueError, "`device_number`"):
            boostax.node_mesh(3)
        with self.assertRaisesRegex(TypeError, "`data_parallel` must be"):
            boostax.make_train_step(
                optax.sgd(0.1), loss_fn=loss_fn, data_parallel=_mesh(8)
            )
        ts = boostax.make_train_step(
            boostax.adasum(optax.sgd(0.1), "data"),
            loss_fn=loss_fn,
            data_parallel=boostax.DataParallel(_mesh(8)),
        )
        with self.assertRaisesRegex(ValueError, "contains an AdaSum stage"):
            ts.init(_params())
        ts = boostax.make_train_step(
            optax.sgd(0.1),
            loss_fn=loss_fn,
            data_parallel=boostax.DataParallel(_mesh(8)),
        )
        state = ts.init(_params())
        with self.assertRaisesRegex(ValueError, "split along their leading"):
            ts(state, jax.tree.map(lambda a: a[:12], _batch()))


def _small_resnet():
    return models.ResNet(stage_sizes=(1, 1), widths=(4, 8))


class AutoBoostDataParallelTest(parameterized.TestCase):
    def test_o2_runs_adasum_with_less_bn_and_freezing(self):
        model = _small_resnet()
        digits = _utils.digits()
        x, y = digits.x_train[:16], digits.y_train[:16]
        config = {
            "common": {"device_number": 2},
            "grad_freeze": {"param_groups": 2, "total_steps": 4},
        }
        ts = boostax.auto_boost(
            "O2",
            config,
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=x,
            mesh=_mesh(8),
        )
        self.assertEqual(ts.data_parallel.reduction, "adasum")
        self.assertEqual(ts.data_parallel.num_nodes, 4)
        self.assertEqual(ts.data_parallel.local_axis, "local")
        state = ts.init(model.init(jax.random.PRNGKey(0), x[:1], train=False))
        # AdaSum's exchanges are in the compiled step of every depth.
        for compiled in ts.compile_all(state, (x, y)).values():
            self.assertIn("collective-permute", compiled.as_text())
        depths = []
        for _ in range(4):
            state, metrics = ts(state, (x, y))
            depths.append(int(metrics["frozen_groups"]))
            self.assertTrue(np.isfinite(metrics["loss"]))
        _assert_replicated(state.params)
        self.assertTrue(any(d > 0 for d in depths), depths)
        self.assertLen(ts.freezing.groups, 2)

    def test_o2_without_a_mesh_warns_and_trains_without_adasum(self):
        with self.assertWarnsRegex(UserWarning, "pass `mesh=`"):
            ts = boostax.auto_boost(
                "O2",
                {
                    "boost": {
                        "mode": "manual",
                        "less_bn": False,
                        "grad_freeze": False,
                    }
                },
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
            )
        self.assertIsNone(ts.data_parallel)

    def test_one_node_warns_and_averages(self):
        config = {
            "boost": {"mode": "manual", "adasum": True},
            "common": {"device_number": 8},
        }
        with self.assertWarnsRegex(UserWarning, "form a single node"):
            ts = boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
                mesh=_mesh(8),
            )
        self.assertEqual(ts.data_parallel.reduction, "mean")

    def test_mesh_without_adasum_averages(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ts = boostax.auto_boost(
                "O0", optimizer=optax.sgd(0.1), loss_fn=loss_fn, mesh=_mesh(8)
            )
        self.assertEqual(ts.data_parallel.reduction, "mean")
        with self.assertRaisesRegex(TypeError, "`mesh` must be a jax"):
            boostax.auto_boost(
                "O0", optimizer=optax.sgd(0.1), loss_fn=loss_fn, mesh=8
            )


class SeedApiTest(parameterized.TestCase):
    def test_adasum_class(self):
        params = _params()
        adasum = boost.AdaSum(8, 2, 4, params)
        mesh = adasum.mesh()
        self.assertEqual(dict(mesh.shape), {"node": 4, "local": 2})
        rng = np.random.default_rng(3)
        deltas = jax.tree.map(
            lambda p: rng.normal(size=(8, *p.shape)).astype(np.float32),
            params,
        )
        spec = jax.sharding.PartitionSpec(("node", "local"))
        new = jax.jit(
            jax.shard_map(
                lambda d, old: adasum(
                    jax.tree.map(lambda x: x[0], d), old, old
                ),
                mesh=mesh,
                in_specs=(spec, jax.sharding.PartitionSpec()),
                out_specs=jax.sharding.PartitionSpec(),
            )
        )(deltas, params)
        expected = jax.tree.map(
            lambda p, d: (
                p
                - _adasum_tree(
                    list(np.asarray(d).reshape(4, 2, *p.shape).mean(1))
                )
            ),
            params,
            deltas,
        )
        _utils.assert_trees_all_close(new, expected, rtol=1e-5, atol=1e-6)
        with self.assertRaisesRegex(ValueError, "must equal device_number"):
            boost.AdaSum(8, 2, 2, params)
        with self.assertRaisesRegex(ValueError, "`group_number` must be"):
            boost.AdaSum(8, 8, 0, params)
        with self.assertRaisesRegex(ValueError, "built for `rank` = 8"):
            adasum.mesh(jax.devices()[:4])

    def test_boost_cell_with_adasum(self):
        model = models.MLP(features=(8,))
        digits = _utils.digits(flat=True)
        x, y = digits.x_train[:16], digits.y_train[:16]
        variables = model.init(jax.random.PRNGKey(0), x[:1])
        cell = boost.BoostTrainOneStepCell(
            model,
            optax.sgd(1.0),
            loss=models.cross_entropy,
            variables=variables,
            mesh=_mesh(8),
            adasum=True,
            device_number=2,
        )
        self.assertTrue(cell.check_adasum_enable())
        self.assertTrue(np.isfinite(cell(x, y)))
        before = cell.state.params
        rng = np.random.default_rng(0)
        grads = jax.tree.map(
            lambda p: rng.normal(size=(8, *p.shape)).astype(np.float32),
            before,
        )
        self.assertEqual(cell.adasum_process(0.25, grads), 0.25)
        expected = jax.tree.map(
            lambda p, g: (
                p
                + _adasum_tree(
                    list(-np.asarray(g).reshape(4, 2, *p.shape).mean(1))
                )
            ),
            before,
            grads,
        )
        _utils.assert_trees_all_close(
            cell.state.params, expected, rtol=1e-5, atol=1e-6
        )
        _assert_replicated(cell.state.params)
        plain = boost.BoostTrainOneStepCell(
            model,
            optax.sgd(1.0),
            loss=models.cross_entropy,
            variables=variables,
        )
        self.assertFalse(plain.check_adasum_enable())
        with self.assertRaisesRegex(ValueError, "needs AdaSum on"):
            plain.adasum_process(0.25, grads)
        with self.assertRaisesRegex(ValueError, "pass `mesh=`"):
            boost.BoostTrainOneStepCell(
                model,
                optax.sgd(1.0),
                loss=models.cross_entropy,
                variables=variables,
                adasum=True,
            )

    def test_loss_scale_cell_with_adasum(self):
        model = models.MLP(features=(8,))
        digits = _utils.digits(flat=True)
        x, y = digits.x_train[:16], digits.y_train[:16]
        cell = boost.BoostTrainOneStepWithLossScaleCell(
            model,
            boost.GradientAccumulation(2, optax.adam(1e-3)),
            boostax.DynamicLossScale(loss_scale_value=2.0**8),
            loss=models.cross_entropy,
            variables=model.init(jax.random.PRNGKey(0), x[:1]),
            mesh=_mesh(8),
            adasum=True,
            device_number=1,
        )
        before = cell.state.params
        loss, overflow, scale = cell(x, y)
        _utils.assert_trees_equal(cell.state.params, before)  # micro-step
        loss, overflow, scale = cell(x, y)
        self.assertFalse(bool(overflow))
        self.assertEqual(float(scale), 2.0**8)
        self.assertFalse(
            np.array_equal(
                cell.state.params["Dense_0"]["kernel"],
                before["Dense_0"]["kernel"],
            )
        )
        _assert_replicated(cell.state.params)


if __name__ == "__main__":
    absltest.main()
