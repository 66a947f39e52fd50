# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.freezing.plan` and frozen train steps."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx

import boostax
from boostax import mindspore as boost
from boostax._src import model_graph
from boostax.examples import data, models
from tests import _utils

X = np.zeros((1, 8, 8, 1), np.float32)
FREEZE_ONLY = {"boost": {"mode": "manual", "less_bn": False}}


def reference_sequence(n, strategy, p, total_steps, draws):
    """MindSpore's loops, literally; strategy 1's depths come from `draws`."""
    length = int(total_steps * 1.01)
    if n <= 1:
        return [0] * length
    if strategy == 0:
        zeros = int(p * (n - 1) // (1 - p) + 0.5)
        cycle = [0] * zeros + list(range(1, n))
        sequence = []
        while len(sequence) < length:
            sequence += cycle
        return sequence
    draws = iter(draws)
    sequence, zeros, frozen = [0], 1, 0
    while len(sequence) < length:
        if frozen / (zeros + frozen) < 1 - p:
            sequence.append(next(draws))
            frozen += 1
        else:
            sequence.append(0)
            zeros += 1
    return sequence


class SequenceTest(parameterized.TestCase):
    def test_continuous_defaults(self):
        sequence = boostax.generate_freeze_index_sequence(10, 0, 0.7, 65536)
        # 0.7 * 9 // 0.3 is 20 (the float 20.999... floored), + 0.5 -> 20.
        cycle = [0] * 20 + list(range(1, 10))
        np.testing.assert_array_equal(sequence[:29], cycle)
        self.assertEqual(len(sequence) % 29, 0)
        self.assertGreaterEqual(len(sequence), int(65536 * 1.01))
        self.assertLess(len(sequence) - 29, int(65536 * 1.01))
        np.testing.assert_array_equal(
            sequence, reference_sequence(10, 0, 0.7, 65536, ())
        )

    def test_interval_defaults(self):
        sequence = boostax.generate_freeze_index_sequence(10, 1, 0.7, 65536)
        self.assertLen(sequence, int(65536 * 1.01))
        self.assertEqual(sequence.dtype, np.int32)
        frozen = sequence[sequence > 0]
        np.testing.assert_array_equal(
            sequence, reference_sequence(10, 1, 0.7, 65536, frozen)
        )
        self.assertAlmostEqual(np.mean(sequence == 0), 0.7, places=3)
        # P(k) = (n - k) / (n (n - 1) / 2): shallow freezes likeliest.
        counts = np.bincount(frozen, minlength=10)[1:] / len(frozen)
        np.testing.assert_allclose(counts, np.arange(9, 0, -1) / 45, atol=0.006)
        # A frozen step about every third step, never two in a row here.
        self.assertFalse(np.any((sequence[1:] > 0) & (sequence[:-1] > 0)))

    def test_seeded_and_local(self):
        state = np.random.get_state()
        a = boostax.generate_freeze_index_sequence(10, 1, 0.7, 500, seed=1)
        b = boostax.generate_freeze_index_sequence(10, 1, 0.7, 500, seed=1)
        c = boostax.generate_freeze_index_sequence(10, 1, 0.7, 500, seed=2)
        np.testing.assert_array_equal(a, b)
        self.assertFalse(np.array_equal(a, c))
        np.testing.assert_array_equal(a > 0, c > 0)  # same interleave
        after = np.random.get_state()
        self.assertEqual(state[0], after[0])
        np.testing.assert_array_equal(state[1], after[1])  # global RNG unused

    @parameterized.parameters(
        (1, 0, 0.7), (1, 1, 0.3), (0, 1, 0.5), (10, 1, 1.0), (10, 0, 1.0)
    )
    def test_all_zeros(self, n, strategy, p):
        sequence = boostax.generate_freeze_index_sequence(n, strategy, p, 100)
        self.assertLen(sequence, 101)
        self.assertFalse(np.any(sequence))

    def test_freeze_p_zero(self):
        continuous = boostax.generate_freeze_index_sequence(4, 0, 0.0, 10)
        np.testing.assert_array_equal(continuous[:3], [1, 2, 3])
        interval = boostax.generate_freeze_index_sequence(4, 1, 0.0, 10)
        self.assertEqual(interval[0], 0)
        self.assertTrue(np.all(interval[1:] > 0))

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "Unsupported freezing"):
            boostax.generate_freeze_index_sequence(10, 3, 0.7, 100)
        with self.assertRaisesRegex(ValueError, r"`freeze_p` must be .* in"):
            boostax.generate_freeze_index_sequence(10, 1, 1.5, 100)
        with self.assertRaisesRegex(ValueError, "`total_steps` must be .*>= 1"):
            boostax.generate_freeze_index_sequence(10, 1, 0.5, 0)
        with self.assertRaisesRegex(TypeError, "must be an int"):
            boostax.generate_freeze_index_sequence(10.0, 1, 0.5, 10)


class ManyDense(nn.Module):
    """Twelve dense layers: Dense_10 sorts before Dense_2 in tree order."""

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for _ in range(12):
            x = nn.relu(nn.Dense(8)(x))
        return x


class GroupsTest(parameterized.TestCase):
    def test_call_order_not_key_order(self):
        groups = boostax.split_parameters_groups(
            ManyDense(), 4, sample_inputs=X
        )
        order = [leaf for leaf in groups[0]]
        kernels = [leaf[0] for leaf in order if leaf[1] == "kernel"]
        self.assertEqual(kernels, [f"Dense_{i}" for i in range(12)])
        leaves = jax.tree_util.tree_flatten_with_path(
            ManyDense().init(jax.random.PRNGKey(0), X)["params"]
        )[0]
        self.assertEqual(  # what jax.tree_util's sorted order would give
            jax.tree_util.keystr(leaves[4][0]), "['Dense_10']['bias']"
        )

    @parameterized.named_parameters(
        ("linen", lambda: models.ResNet()),
        ("nnx", lambda: models.NNXResNet(rngs=nnx.Rngs(0))),
    )
    def test_resnet_groups(self, make):
        groups = boostax.split_parameters_groups(make(), 10, sample_inputs=X)
        self.assertLen(groups, 10)
        # Nested suffixes of the call order; group 0 is everything.
        for outer, inner in zip(groups, groups[1:], strict=False):
            self.assertEqual(outer[len(outer) - len(inner) :], inner)
            self.assertLess(len(inner), len(outer))
        self.assertEqual(
            [len(g) for g in groups], [47, 44, 41, 38, 35, 32, 29, 26, 23, 20]
        )
        # Chunks: every conv kernel followed by its BN's scale and bias.
        first = groups[0]
        self.assertEqual(first[0][-1], "kernel")
        self.assertEqual([p[-1] for p in first[1:3]], ["scale", "bias"])
        self.assertEqual([p[-1] for p in first[-2:]], ["kernel", "bias"])

    def test_fewer_chunks_than_groups(self):
        with self.assertWarnsRegex(UserWarning, "every group trains all"):
            groups = boostax.split_parameters_groups(
                {"w": jnp.ones(3), "b": jnp.ones(3)}, 3
            )
        self.assertEqual(groups[0], groups[2])

    def test_too_many_groups_warns_at_the_users_line(self):
        # O1's default 10 groups on a model of 7 chunks: the warning points
        # at this file (not freezing/groups.py) and says how many groups
        # would do.
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            boostax.auto_boost(
                "O1",
                {"boost": {"mode": "manual", "less_bn": False}},
                optimizer=optax.sgd(0.1),
                model=model,
                loss=models.cross_entropy,
                sample_inputs=X,
            )
        (w,) = [w for w in caught if "no freezing" in str(w.message)]
        self.assertEqual(w.filename, __file__)
        self.assertIn("at most 7 `param_groups`", str(w.message))
        groups = boostax.split_parameters_groups(model, 7, sample_inputs=X)
        self.assertLen(set(groups), 7)  # 7 groups freeze: all differ
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            boostax.split_parameters_groups({"w": jnp.ones(3)}, 2)
        self.assertEqual(caught[0].filename, __file__)
        self.assertIn("nothing can be frozen", str(caught[0].message))

    def test_model_needs_sample_inputs(self):
        with self.assertRaisesRegex(TypeError, "pass `sample_inputs=`"):
            boostax.split_parameters_groups(models.ResNet(), 10)


SMALL = {**FREEZE_ONLY, "grad_freeze": {"param_groups": 3, "total_steps": 20}}


def _resnet_step(optimizer=None, config=SMALL, **kwargs):
    """A frozen train step; the small ResNet unless `config` says otherwise."""
    optimizer = optax.sgd(0.05) if optimizer is None else optimizer
    model = (
        models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        if config is SMALL
        else models.ResNet()
    )
    ts = boostax.auto_boost(
        "O1",
        config,
        optimizer=optimizer,
        model=model,
        loss=models.cross_entropy,
        sample_inputs=X,
        **kwargs,
    )
    variables = model.init(jax.random.PRNGKey(0), X, train=False)
    return model, ts, ts.init(variables)


def _batch(n=64):
    digits = _utils.digits()
    return jnp.asarray(digits.x_train[:n]), jnp.asarray(digits.y_train[:n])


class CostTest(absltest.TestCase):
    def test_flops_fall_with_depth_and_deepest_is_bounded(self):
        # The example ResNet with MindSpore's 10 groups. XLA's cost analysis
        # of each lowered step (compiling all ten would take a minute).
        model, ts, state = _resnet_step(config=FREEZE_ONLY)
        batch = _batch()
        flops = [
            ts.lower(state, batch, k).cost_analysis()["flops"]
            for k in range(10)
        ]
        self.assertTrue(
            all(a > b for a, b in zip(flops, flops[1:], strict=False)), flops
        )

        def forward(params, model_state):
            logits, _ = model.apply(
                {"params": params, **model_state},
                batch[0],
                train=True,
                mutable=["batch_stats"],
            )
            return models.cross_entropy(logits, batch[1])

        forward_flops = (
            jax.jit(forward)
            .lower(state.params, state.model_state)
            .cost_analysis()["flops"]
        )
        # The suffix's share of the forward pass, from per-layer FLOPs.
        graph = model_graph.linen_graph(model, (batch[0],), {"train": False})
        suffix = {leaf[:-1] for leaf in ts.freezing.groups[9]}
        self.assertLen(ts.freezing.groups, 10)
        layer = {
            tuple(map(str, n.path)): _layer_flops(graph, n)
            for n in graph.nodes
            if n.call is not None
        }
        share = sum(f for p, f in layer.items() if p in suffix) / sum(
            layer.values()
        )
        bound = 1.1 * (forward_flops + 2 * share * forward_flops)
        self.assertLessEqual(flops[9], bound)
        self.assertGreater(flops[9], forward_flops)


def _layer_flops(graph, node):
    source = graph.nodes[node.inputs[0]].shape
    if node.kind == "conv":
        kernel = node.call.module.kernel_size
        return 2 * math.prod(node.shape) * math.prod(kernel) * source[-1]
    if node.kind == "dense":
        return 2 * math.prod(node.shape) * source[-1]
    return 0


def _leaves(tree):
    return {
        jax.tree_util.keystr(p): np.asarray(v)
        for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


class FrozenStepTest(parameterized.TestCase):
    def test_frozen_leaves_and_their_optimizer_slots_untouched(self):
        optimizer = optax.chain(
            optax.clip_by_global_norm(1.0), optax.adam(1e-3)
        )
        _, ts, state = _resnet_step(optimizer)
        batch = _batch()
        depth = 2
        trainable = set(ts.freezing.groups[depth])
        # Warm the moments up with a full step first.
        state, _ = ts.at_depth(0)(state, batch)
        new_state, metrics = ts.at_depth(depth)(state, batch)
        self.assertEqual(int(metrics["frozen_groups"]), depth)
        before, after = _leaves(state.params), _leaves(new_state.params)
        mu_before = _leaves(state.opt_state[1][0].mu)
        mu_after = _leaves(new_state.opt_state[1][0].mu)
        paths = {
            jax.tree_util.keystr(p): tuple(k.key for k in p)
            for p, _ in jax.tree_util.tree_flatten_with_path(state.params)[0]
        }
        for key, path in paths.items():
            if path in trainable:
                self.assertFalse(np.array_equal(before[key], after[key]), key)
                self.assertFalse(
                    np.array_equal(mu_before[key], mu_after[key]), key
                )
            else:
                np.testing.assert_array_equal(before[key], after[key])
                np.testing.assert_array_equal(mu_before[key], mu_after[key])
        # The shared step count advances.
        self.assertEqual(
            int(new_state.opt_state[1][0].count),
            int(state.opt_state[1][0].count) + 1,
        )

    def test_depth_zero_is_the_plain_step(self):
        model, ts, state = _resnet_step(optax.adam(1e-3))
        plain = boostax.make_train_step(
            optax.adam(1e-3), model=model, loss=models.cross_entropy
        )
        plain_state = plain.init(
            model.init(jax.random.PRNGKey(0), X, train=False)
        )
        batch = _batch()
        new_state, _ = ts.at_depth(0)(state, batch)
        expected, _ = plain(plain_state, batch)
        _utils.assert_trees_equal(new_state.params, expected.params)
        _utils.assert_trees_equal(new_state.opt_state, expected.opt_state)

    def test_equals_differentiating_the_suffix_by_hand(self):
        model, ts, state = _resnet_step(optax.sgd(0.1))
        batch = _batch()
        depth = 2
        mask = ts.freezing.mask(state.params, depth)

        def loss(params):
            logits, _ = model.apply(
                {"params": params, **state.model_state},
                batch[0],
                train=True,
                mutable=["batch_stats"],
            )
            return models.cross_entropy(logits, batch[1])

        grads = jax.grad(loss)(state.params)
        expected = jax.tree.map(
            lambda p, g, m: p - 0.1 * g if m else p, state.params, grads, mask
        )
        new_state, _ = ts.at_depth(depth)(state, batch)
        _utils.assert_trees_all_close(
            new_state.params, expected, rtol=1e-5, atol=1e-7
        )

    def test_dispatch_follows_the_sequence_and_resumes(self):
        _, ts, state = _resnet_step()
        digits = _utils.digits()
        batches = list(
            data.batches(digits.x_train, digits.y_train, 32, seed=0, epoch=0)
        )[:8]
        depths, uninterrupted = [], state
        for batch in batches:
            uninterrupted, metrics = ts(uninterrupted, batch)
            depths.append(int(metrics["frozen_groups"]))
        np.testing.assert_array_equal(depths, ts.freezing.sequence[:8])
        self.assertEqual(int(uninterrupted.algorithms.freeze.position), 8)
        self.assertLessEqual(ts.trace_count, len(set(depths)))
        # Stop after 5 steps and save; then a fresh run in between (the
        # step's host mirror now points elsewhere); then resume.
        resumed = state
        for batch in batches[:5]:
            resumed, _ = ts(resumed, batch)
        saved = jax.device_get(resumed)
        other = state
        for batch in batches[:2]:
            other, _ = ts(other, batch)
        restored = jax.tree.map(jnp.asarray, saved)
        for batch in batches[5:]:
            restored, _ = ts(restored, batch)
        _utils.assert_trees_equal(restored, uninterrupted)
        traces = ts.trace_count
        # A new step object resumes the same way.
        _, fresh, _ = _resnet_step()
        restored = jax.tree.map(jnp.asarray, saved)
        for batch in batches[5:]:
            restored, _ = fresh(restored, batch)
        _utils.assert_trees_equal(restored, uninterrupted)
        self.assertEqual(ts.trace_count, traces)

    def test_o1_trains_less_bn_and_freezing(self):
        digits = _utils.digits()
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        ts = boostax.auto_boost(
            "O1",
            {"grad_freeze": {"param_groups": 3, "total_steps": 60}},
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=X,
        )
        self.assertEqual(
            ts.config.enabled_algorithms, ("less_bn", "grad_freeze")
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), X, train=False))
        losses = []
        for epoch in range(3):
            for batch in data.batches(
                digits.x_train, digits.y_train, 64, seed=0, epoch=epoch
            ):
                state, metrics = ts(state, batch)
                losses.append(float(metrics["loss"]))
        self.assertLess(np.mean(losses[-5:]), np.mean(losses[:5]))
        self.assertLen(ts.freezing.groups, 3)
        self.assertGreater(len(set(ts.freezing.sequence[:63])), 1)

    def test_o1_groups_are_cut_on_the_original_model(self):
        # As MindSpore, which cuts its groups on the network's parameters:
        # LessBN's removed BNs would otherwise merge chunks until fewer than
        # 10 remain, and nothing would freeze.
        model = models.ResNet()
        ts = boostax.auto_boost(
            "O1",
            optimizer=optax.sgd(0.1),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=X,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), X, train=False))
        groups = ts.freezing.groups
        sizes = [len(g) for g in groups]
        # The full model's 47 leaves, minus 8 removed BNs' scales and biases.
        self.assertEqual(sizes[0], 47 - 16)
        self.assertTrue(
            all(a > b for a, b in zip(sizes, sizes[1:], strict=False)), sizes
        )
        leaves = set(groups[0])
        self.assertLen(leaves, len(jax.tree.leaves(state.params)))
        self.assertNotIn(("BasicBlock_0", "BatchNorm_0", "scale"), leaves)
        self.assertIn(("Dense_0", "multiplier"), groups[9])
        self.assertNotIn(("Dense_0", "bias"), leaves)

    def test_plain_function_freezing(self):
        def loss_fn(params, batch):
            h = jnp.tanh(batch @ params["layer_1"]["w"])
            return jnp.mean((h @ params["layer_2"]["w"]) ** 2)

        params = {
            "layer_1": {"w": jnp.ones((4, 4))},
            "layer_2": {"w": jnp.ones((4, 2))},
        }
        ts = boostax.auto_boost(
            "O1",
            {
                **FREEZE_ONLY,
                "grad_freeze": {
                    "param_groups": 2,
                    "freeze_type": 0,
                    "freeze_p": 0.5,
                },
            },
            optimizer=optax.sgd(0.1),
            loss_fn=loss_fn,
        )
        with self.assertWarnsRegex(UserWarning, "every group trains all"):
            state = ts.init(params)
        state, metrics = ts(state, jnp.ones((3, 4)))
        self.assertIn("frozen_groups", metrics)

    def test_step_before_init(self):
        ts = boostax.auto_boost(
            "O1",
            FREEZE_ONLY,
            optimizer=optax.sgd(0.1),
            loss_fn=lambda p, b: jnp.sum(p),
            sample_inputs=X,
        )
        with self.assertRaisesRegex(TypeError, "`state` must be the boostax"):
            ts(None, None)


class FreezeOptTest(parameterized.TestCase):
    def test_independent_states_per_group(self):
        params = {"a": {"w": jnp.ones(2)}, "b": {"w": jnp.ones(2)}}
        groups = [["a/w", "b/w"], ["b/w"]]
        opt = boost.FreezeOpt(optax.sgd(1.0, momentum=0.5), groups, [0, 1])
        ts = boostax.make_train_step(
            optax.sgd(1.0),
            loss_fn=lambda p, b: p["a"]["w"].sum() + 2 * p["b"]["w"].sum(),
        )
        ts = boostax.TrainStep(
            ts.objective, opt.optimizers[0], freezing=opt.freezing
        )
        state = ts.init(params)
        self.assertLen(state.opt_state, 2)  # one state per group
        state, _ = ts(state, None)  # group 0: a and b
        state, _ = ts(state, None)  # group 1: b only, its own momentum
        np.testing.assert_allclose(state.params["a"]["w"], [0.0, 0.0])
        # b: -2 (group 0, fresh momentum) then -2 (group 1, fresh momentum).
        np.testing.assert_allclose(state.params["b"]["w"], [-3.0, -3.0])

    def test_learning_rate_list_is_split(self):
        from boostax._src.freezing import plan as freezing

        schedules = freezing.split_learning_rates(
            [0.1, 0.2, 0.3, 0.4, 0.5], [0, 1, 0, 1, 0], 2
        )
        np.testing.assert_allclose(
            [float(schedules[0](i)) for i in range(3)], [0.1, 0.3, 0.5]
        )
        np.testing.assert_allclose(
            [float(schedules[1](i)) for i in range(2)], [0.2, 0.4]
        )
        # Longer than the strategy: not split.
        long = freezing.split_learning_rates([0.1, 0.2, 0.3], [0, 1], 2)
        np.testing.assert_allclose(float(long[1](2)), 0.3)

    def test_factory_with_learning_rates(self):
        params = {"w": jnp.ones(1)}
        opt = boost.FreezeOpt(
            optax.sgd,
            [["w"], ["w"]],
            [0, 1, 1, 0],
            learning_rate=[0.1, 0.2, 0.3, 0.4],
        )
        ts = boostax.make_train_step(
            optax.sgd(1.0), loss_fn=lambda p, b: p["w"].sum()
        )
        ts = boostax.TrainStep(
            ts.objective, opt.optimizers[0], freezing=opt.freezing
        )
        state = ts.init(params)
        values = []
        for _ in range(4):
            before = float(state.params["w"][0])
            state, _ = ts(state, None)
            values.append(before - float(state.params["w"][0]))
        np.testing.assert_allclose(values, [0.1, 0.2, 0.3, 0.4], rtol=1e-6)

    def test_errors(self):
        with self.assertRaisesRegex(TypeError, "`optimizer` must be"):
            boost.FreezeOpt("sgd")
        with self.assertRaisesRegex(ValueError, "needs `train_parameter_"):
            boost.FreezeOpt(optax.sgd(0.1), None, [0])
        with self.assertRaisesRegex(TypeError, "must be a tuple or list"):
            boost.FreezeOpt(optax.sgd(0.1), "w")
        with self.assertRaisesRegex(TypeError, "Each group"):
            boost.FreezeOpt(optax.sgd(0.1), ["w"])
        with self.assertRaisesRegex(TypeError, "hold ints only"):
            boost.FreezeOpt(optax.sgd(0.1), [["w"]], [0.5])
        with self.assertRaisesRegex(ValueError, "1-D integer array"):
            boost.FreezeOpt(optax.sgd(0.1), [["w"]], np.zeros((2, 2), int))
        with self.assertRaisesRegex(TypeError, "tuple, list or integer"):
            boost.FreezeOpt(optax.sgd(0.1), [["w"]], "0")
        with self.assertRaisesRegex(TypeError, "must be a factory"):
            boost.FreezeOpt(optax.sgd(0.1), [["w"]], [0], learning_rate=[0.1])


class SeedApiTest(absltest.TestCase):
    def test_gradient_freeze_and_cells(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        freeze = boost.GradientFreeze(3, 1, 0.5, 40)
        network, optimizer = freeze.freeze_generate(
            model, optax.sgd(0.05), sample_inputs=X
        )
        self.assertIs(network, model)
        self.assertIsInstance(optimizer, boost.FreezeOpt)
        self.assertLen(optimizer.train_parameter_groups, 3)
        self.assertLen(optimizer.train_strategy, int(40 * 1.01))
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        cell = boost.BoostTrainOneStepCell(
            network, optimizer, loss=models.cross_entropy, variables=variables
        )
        x, y = _batch(16)
        losses = [float(cell.gradient_freeze_process(x, y)) for _ in range(4)]
        self.assertTrue(np.all(np.isfinite(losses)))
        self.assertEqual(int(cell.state.algorithms.freeze.position), 4)
        cells = boost.freeze_cell(
            False,
            model,
            optimizer,
            None,
            None,
            False,
            loss=models.cross_entropy,
        )
        self.assertLen(cells, 3)
        state = cells.train_step.init(variables)
        state, metrics = cells[2](state, (x, y))
        self.assertEqual(int(metrics["frozen_groups"]), 2)

    def test_errors(self):
        optimizer = boost.FreezeOpt(optax.sgd(0.1))
        with self.assertRaisesRegex(NotImplementedError, "data-parallel"):
            boost.freeze_cell(
                True,
                models.MLP(),
                optimizer,
                None,
                None,
                False,
                loss=models.cross_entropy,
            )
        with self.assertRaisesRegex(NotImplementedError, "accumulation"):
            boost.freeze_cell(
                False,
                models.MLP(),
                optimizer,
                None,
                None,
                True,
                loss=models.cross_entropy,
            )
        with self.assertRaisesRegex(ValueError, "grad=None"):
            boost.freeze_cell(
                False,
                models.MLP(),
                optimizer,
                None,
                jax.grad,
                False,
                loss=models.cross_entropy,
            )
        with self.assertRaisesRegex(TypeError, "must be a FreezeOpt"):
            boost.freeze_cell(
                False,
                models.MLP(),
                optax.sgd(0.1),
                None,
                None,
                False,
                loss=models.cross_entropy,
            )
        with self.assertRaisesRegex(
            TypeError, "`sens` must be a finite number"
        ):
            boost.BoostTrainOneStepCell(
                models.MLP(), optax.sgd(0.1), "1", loss=models.cross_entropy
            )
        with self.assertRaisesRegex(ValueError, r"freeze_p` must be .* in"):
            boost.GradientFreeze(10, 1, 1.5, 100)


if __name__ == "__main__":
    absltest.main()
