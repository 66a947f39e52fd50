# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax's options beside MindSpore's LessBN and freezing.

The FN head's scale (initial value, log parametrisation), residual branches
that start at zero (``zero_init_residual``), and the progressive freeze
schedule with FreezeOut's annealing, against NumPy references.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import nnx

import boostax
from boostax._src.freezing import masked_update
from boostax._src.freezing import plan as freezing
from boostax._src.less_bn import api as less_bn
from boostax._src.less_bn import fn_head
from boostax.examples import models
from tests import _models

X32 = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype(np.float32)
X8 = np.random.default_rng(0).normal(size=(4, 8, 8, 1)).astype(np.float32)


class FNScaleTest(parameterized.TestCase):
    @parameterized.parameters((1.0, False), (10.0, False), (10.0, True))
    def test_linen_head_logits_are_scaled_cosines(self, scale, log_scale):
        head = fn_head.FNHead(3, scale_init=scale, log_scale=log_scale)
        x = np.random.default_rng(1).normal(size=(2, 5)).astype(np.float32)
        variables = head.init(jax.random.PRNGKey(0), x)
        name = "log_multiplier" if log_scale else "multiplier"
        stored = variables["params"][name]
        np.testing.assert_allclose(
            stored, [math.log(scale) if log_scale else scale], rtol=1e-6
        )
        kernel = np.asarray(variables["params"]["kernel"], np.float64)
        cosines = (x / np.linalg.norm(x, axis=-1, keepdims=True)) @ (
            kernel / np.linalg.norm(kernel, axis=0, keepdims=True)
        )
        np.testing.assert_allclose(
            jax.jit(head.apply)(variables, x), scale * cosines, rtol=1e-5
        )

    def test_log_scale_moves_by_a_fraction_of_itself(self):
        # d logits / d log(s) = logits: the step in s is proportional to s.
        head = fn_head.FNHead(3, scale_init=10.0, log_scale=True)
        x = np.ones((1, 4), np.float32)
        variables = head.init(jax.random.PRNGKey(0), x)
        grad = jax.grad(lambda v: head.apply(v, x).sum())(variables)
        np.testing.assert_allclose(
            grad["params"]["log_multiplier"],
            [head.apply(variables, x).sum()],
            rtol=1e-5,
        )

    def test_reduced_model_and_conversion(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        reduced = boostax.less_bn(
            model, X8, fn_flag=True, fn_scale=16.0, fn_log_scale=True
        )
        original = model.init(jax.random.PRNGKey(0), X8, train=False)
        converted = reduced.convert_variables(original)
        head = converted["params"]["Dense_0"]
        self.assertEqual(sorted(head), ["kernel", "log_multiplier"])
        np.testing.assert_allclose(head["log_multiplier"], [math.log(16.0)])
        # Converted twice: unchanged.
        again = reduced.convert_variables(converted)
        jax.tree.map(np.testing.assert_array_equal, again, converted)

    def test_nnx(self):
        model = models.NNXResNet(
            stage_sizes=(1, 1), widths=(16, 32), rngs=nnx.Rngs(0)
        )
        reduced = boostax.less_bn(model, X8, fn_flag=True, fn_scale=8.0)
        heads = [
            m
            for _, m in nnx.iter_modules(reduced)
            if isinstance(m, boostax.NNXFNHead)
        ]
        self.assertLen(heads, 1)
        np.testing.assert_allclose(heads[0].multiplier[...], [8.0])

    def test_scale_stays_out_of_decay_and_centralization(self):
        # One step of auto_boost's O1 LessBN, with and without weight decay
        # and gradient centralization: the FN head's log-scale moves the
        # same in all three, while some kernels do not.
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        variables = model.init(jax.random.PRNGKey(0), X8, train=False)
        batch = (X8, np.arange(4) % 10)

        def one_step(gc_flag, weight_decay):
            ts = boostax.auto_boost(
                "O1",
                {
                    "boost": {"mode": "manual", "grad_freeze": False},
                    "less_bn": {
                        "fn_scale": 16.0,
                        "fn_log_scale": True,
                        "gc_flag": gc_flag,
                    },
                },
                optimizer=optax.sgd(0.1),
                model=model,
                loss=models.cross_entropy,
                sample_inputs=X8,
                options=boostax.StepOptions(weight_decay=weight_decay),
            )
            state = ts.init(variables)
            before = state.params
            state, _ = ts(state, batch)
            return jax.tree.map(lambda a, b: a - b, state.params, before)

        plain = one_step(False, 0.0)
        for other in (one_step(True, 0.0), one_step(False, 0.5)):
            np.testing.assert_allclose(
                other["Dense_0"]["log_multiplier"],
                plain["Dense_0"]["log_multiplier"],
                rtol=1e-6,
            )
            moved_alike = jax.tree.map(np.allclose, other, plain)
            self.assertFalse(all(jax.tree.leaves(moved_alike)))

    @parameterized.parameters({"fn_scale": 4.0}, {"fn_log_scale": True})
    def test_scale_without_fn_head_is_refused(self, **options):
        model = models.ResNet(stage_sizes=(1,), widths=(16,))
        with self.assertRaisesRegex(ValueError, "`fn_flag=True`"):
            boostax.less_bn(model, X8, fn_flag=False, **options)
        config = {
            "boost": {"mode": "manual", "grad_freeze": False},
            "less_bn": {"fn_flag": False, **options},
        }
        with self.assertRaisesRegex(ValueError, "`fn_flag=True`"):
            boostax.auto_boost(
                "O1",
                config,
                optimizer=optax.sgd(0.1),
                model=model,
                loss=models.cross_entropy,
                sample_inputs=X8,
            )

    @parameterized.parameters(0.0, -1.0, math.inf, "10")
    def test_bad_scale(self, scale):
        with self.assertRaisesRegex((TypeError, ValueError), "`fn_scale`"):
            boostax.less_bn(
                models.ResNet(stage_sizes=(1,), widths=(16,)),
                X8,
                fn_flag=True,
                fn_scale=scale,
            )


class ZeroInitResidualTest(absltest.TestCase):
    def test_thinned_branches_start_at_zero(self):
        model = models.BottleneckResNet(stage_sizes=(1, 1), widths=(8, 16))
        plan = less_bn.plan(model, X32, zero_init_residual=True)
        # The BatchNorm that ends each residual branch, kept by LessBN.
        self.assertEqual(
            plan.zero_init,
            (("Bottleneck_0", "BatchNorm_2"), ("Bottleneck_1", "BatchNorm_2")),
        )
        reduced = less_bn.apply_plan(model, plan)
        for variables in (
            reduced.init(jax.random.PRNGKey(0), X32, train=False),
            reduced.convert_variables(
                model.init(jax.random.PRNGKey(0), X32, train=False)
            ),
        ):
            for path in plan.zero_init:
                scale = variables["params"][path[0]][path[1]]["scale"]
                np.testing.assert_array_equal(scale, 0.0)
            # The stem's BatchNorm does not end a residual branch.
            np.testing.assert_array_equal(
                variables["params"]["BatchNorm_0"]["scale"], 1.0
            )

    def test_identity_blocks_start_as_the_identity(self):
        # Bottleneck_1 has an identity shortcut: its branch starts at zero,
        # so it returns relu(x + 0) = x for its (non-negative) input.
        model = models.BottleneckResNet(stage_sizes=(2,), widths=(8,))
        reduced = boostax.less_bn(model, X32, zero_init_residual=True)
        variables = reduced.init(jax.random.PRNGKey(0), X32, train=False)
        _, captured = reduced.apply(
            variables, X32, train=False, capture_intermediates=True
        )
        blocks = captured["intermediates"]
        first = blocks["Bottleneck_0"]["__call__"][0]
        second = blocks["Bottleneck_1"]["__call__"][0]
        self.assertGreater(float(jnp.abs(first).max()), 0.0)
        np.testing.assert_allclose(second, first, rtol=1e-6)

    def test_off_by_default(self):
        model = models.BottleneckResNet(stage_sizes=(1,), widths=(8,))
        self.assertEqual(less_bn.plan(model, X32).zero_init, ())

    def test_nnx(self):
        model = _models.NNXBottleneckNet(rngs=nnx.Rngs(0))
        x = np.zeros((2, 8, 8, 1), np.float32)
        plan = less_bn.plan(model, x, zero_init_residual=True)
        self.assertNotEmpty(plan.zero_init)
        reduced = less_bn.apply_plan(model, plan)
        modules = dict(nnx.iter_modules(reduced))
        for path in plan.zero_init:
            np.testing.assert_array_equal(modules[path].scale[...], 0.0)


class ProgressiveScheduleTest(parameterized.TestCase):
    def test_freeze_steps(self):
        # T_d = (p + (1 - p) (d - 1) / (n - 1)) T
        np.testing.assert_array_equal(
            boostax.progressive_freeze_steps(5, 0.6, 100), [60, 70, 80, 90]
        )

    @parameterized.parameters((4, 0.5, 40), (10, 0.7, 1000), (3, 0.0, 9))
    def test_sequence_is_monotone_and_starts_on_time(self, n, p, total):
        sequence = boostax.generate_freeze_index_sequence(n, 2, p, total)
        self.assertLen(sequence, int(total * 1.01))
        self.assertTrue(np.all(np.diff(sequence) >= 0))
        starts = boostax.progressive_freeze_steps(n, p, total)
        for d, start in enumerate(starts, 1):
            self.assertEqual(int(np.argmax(sequence >= d)), start)
        self.assertEqual(sequence[-1], n - 1)

    def test_freezing_past_the_end_stays_frozen(self):
        plan = freezing.Freezing(
            ((("a",), ("b",)), (("b",),)), np.array([0, 1]), wrap=False
        )
        self.assertEqual([plan.depth(i) for i in range(4)], [0, 1, 1, 1])
        wrapping = freezing.Freezing(
            ((("a",), ("b",)), (("b",),)), np.array([0, 1])
        )
        self.assertEqual([wrapping.depth(i) for i in range(4)], [0, 1, 0, 1])


class FreezeOutTest(absltest.TestCase):
    def test_matches_numpy_under_jit(self):
        params = {"a": jnp.ones(2), "b": jnp.ones(3), "c": jnp.ones(1)}
        groups = [
            [("a",), ("b",), ("c",)],
            [("b",), ("c",)],
            [("c",)],
        ]
        steps = [4, 6]
        tx = boostax.scale_by_freeze_out(groups, steps)
        state = tx.init(params)
        update = jax.jit(tx.update)
        for t in range(8):
            updates, state = update(params, state)
            for name, at in (("a", 4), ("b", 6)):
                expected = 0.5 * (1 + np.cos(np.pi * min(t / at, 1.0)))
                np.testing.assert_allclose(updates[name], expected, atol=1e-6)
            np.testing.assert_array_equal(updates["c"], 1.0)

    def test_inside_a_masked_update(self):
        # Frozen leaves are optax.MaskedNode: the transform skips them.
        params = {"a": jnp.ones(2), "b": jnp.ones(2)}
        groups = [[("a",), ("b",)], [("b",)]]
        tx = optax.chain(
            optax.sgd(1.0), boostax.scale_by_freeze_out(groups, [2])
        )
        state = tx.init(params)
        mask = {"a": False, "b": True}
        masked = masked_update.mask_tree(params, mask)
        updates, new_state = masked_update.masked_update(
            tx, masked, state, masked, mask
        )
        self.assertIsInstance(updates["a"], optax.MaskedNode)
        np.testing.assert_array_equal(updates["b"], -1.0)
        np.testing.assert_array_equal(
            new_state[1].freeze_at["a"], state[1].freeze_at["a"]
        )

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "one update per depth"):
            boostax.scale_by_freeze_out(None, [1, 2], groups_number=2)
        with self.assertRaisesRegex(ValueError, "`freeze_steps`"):
            boostax.scale_by_freeze_out(None, [-1])


class AutoBoostProgressiveTest(absltest.TestCase):
    def test_o1_progressive_trains_depths_in_order(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        ts = boostax.auto_boost(
            "O1",
            {
                "grad_freeze": {
                    "param_groups": 3,
                    "freeze_type": 2,
                    "freeze_p": 0.5,
                    "total_steps": 6,
                },
                "less_bn": {"fn_scale": 16.0, "zero_init_residual": True},
            },
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=X8,
            # each depth's own program: cost_report's
            options=boostax.StepOptions(freeze_warmup_steps=0),
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), X8, train=False))
        self.assertFalse(ts.freezing.wrap)
        y = np.arange(4) % 10
        depths = []
        for _ in range(8):
            state, metrics = ts(state, (X8, y))
            depths.append(int(metrics["frozen_groups"]))
        starts = boostax.progressive_freeze_steps(3, 0.5, 6)  # [3, 4]
        self.assertEqual(depths, [int(np.sum(u >= starts)) for u in range(8)])
        # FreezeOut's state, after the optimizer's: one past the index of
        # the last update in the freeze sequence.
        self.assertIsInstance(state.opt_state[-1], boostax.FreezeOutState)
        self.assertEqual(int(state.opt_state[-1].count), 8)
        self.assertTrue(np.isfinite(metrics["loss"]))
        # cost_report weights each depth by the progressive sequence itself:
        # the later, deeper depths by their (long) stretches of training.
        report = boostax.measure.cost_report(ts, state, (X8, y))
        sequence = np.asarray(ts.freezing.sequence)
        self.assertEqual(sequence.tolist(), sorted(sequence.tolist()))
        for k in range(3):
            self.assertAlmostEqual(
                report.shares[f"depth {k}"], float(np.mean(sequence == k))
            )
        self.assertLess(report.ratios["flops"], 1.0)


if __name__ == "__main__":
    absltest.main()
