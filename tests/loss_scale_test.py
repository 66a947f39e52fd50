# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.loss_scale` and loss-scaled train steps."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn

import boostax
from boostax import mindspore as boost
from boostax.examples import models
from tests import _models, _utils


def reference_dynamic(scale, flags, factor, window, low, high):
    """MindSpore's DynamicLossScaleUpdateCell, as a plain loop."""
    counter, scales = 0, []
    for finite in flags:
        if not finite:
            scale, counter = max(scale / factor, low), 0
        elif counter + 1 >= window:
            scale, counter = min(scale * factor, high), 0
        else:
            counter += 1
        scales.append(scale)
    return scales


def _tree(value):
    return {"a": jnp.full((3,), value, jnp.float32), "b": jnp.ones((2, 2))}


class DynamicLossScaleTest(parameterized.TestCase):
    def test_matches_reference(self):
        rule = boostax.DynamicLossScale(
            loss_scale_value=2.0**10,
            scale_factor=2.0,
            scale_window=3,
            min_loss_scale=2.0**8,
            max_loss_scale=2.0**12,
        )
        flags = (
            [True] * 7 + [False, True, False, False, False, False] + [True] * 9
        )
        state = rule.init()
        adjust = jax.jit(rule.adjust)
        scales = []
        for finite in flags:
            state, ok = adjust(state, _tree(1.0 if finite else np.inf))
            self.assertEqual(bool(ok), finite)
            scales.append(float(state.loss_scale))
        self.assertEqual(
            scales,
            reference_dynamic(2.0**10, flags, 2.0, 3, 2.0**8, 2.0**12),
        )

    def test_state_survives_jit(self):
        # jmp loses min_loss_scale across jit; here nothing but arrays is
        # state, and the bounds are static configuration.
        rule = boostax.DynamicLossScale(
            loss_scale_value=4.0, min_loss_scale=2.0, max_loss_scale=8.0
        )
        state = rule.init()
        again = jax.jit(lambda s: s)(state)
        self.assertIsInstance(again, boostax.LossScaleState)
        _utils.assert_trees_equal(again, state)
        state, _ = jax.jit(rule.adjust)(again, _tree(np.inf))
        state, _ = jax.jit(rule.adjust)(state, _tree(np.inf))
        self.assertEqual(float(state.loss_scale), 2.0)  # the bound held

    @parameterized.named_parameters(
        ("factor", dict(scale_factor=1.0), "`scale_factor` must be .* > 1"),
        ("window", dict(scale_window=0), "`scale_window` must be an int"),
        ("value", dict(loss_scale_value=-1.0), "`loss_scale_value` must be"),
        ("range", dict(loss_scale_value=2.0**30), "must be in \\[min"),
        ("type", dict(loss_scale_value="8"), "must be a finite number"),
    )
    def test_errors(self, kwargs, message):
        with self.assertRaisesRegex((ValueError, TypeError), message):
            boostax.DynamicLossScale(**kwargs)


class MLP16(nn.Module):
    dtype: object = jnp.float16

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(32, dtype=self.dtype)(x))
        return nn.Dense(10, dtype=self.dtype)(x)


class TrainStepTest(parameterized.TestCase):
    def _step(self, loss_scale, model, optimizer=None):
        return boostax.TrainStep(
            boostax.make_objective(model=model, loss=models.cross_entropy),
            optimizer or optax.adam(1e-2),
            loss_scale=loss_scale,
        )

    def test_static_power_of_two_scale_is_exact(self):
        digits = _utils.digits(flat=True)
        batch = (digits.x_train[:32], digits.y_train[:32])
        model = models.MLP(features=(16,))
        variables = model.init(jax.random.PRNGKey(0), batch[0])
        plain = boostax.make_train_step(
            optax.adam(1e-2), model=model, loss=models.cross_entropy
        )
        scaled = self._step(boostax.StaticLossScale(2.0**12), model)
        a, _ = plain(plain.init(variables), batch)
        b, metrics = scaled(scaled.init(variables), batch)
        _utils.assert_trees_equal(b.params, a.params)
        self.assertFalse(bool(metrics["overflow"]))
        self.assertEqual(float(metrics["loss_scale"]), 2.0**12)

    def test_overflow_skips_the_step_bit_for_bit(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        digits = _utils.digits()
        batch = (digits.x_train[:16], digits.y_train[:16])
        ts = self._step(
            boostax.DynamicLossScale(loss_scale_value=2.0**10),
            model,
            optax.sgd(0.1, momentum=0.9),
        )
        state = ts.init(
            model.init(jax.random.PRNGKey(0), batch[0], train=False)
        )
        state, metrics = ts(state, batch)  # one normal step
        self.assertFalse(bool(metrics["overflow"]))
        bad = (batch[0] * np.float32(np.inf), batch[1])
        new_state, metrics = ts(state, bad)
        self.assertTrue(bool(metrics["overflow"]))
        _utils.assert_trees_equal(new_state.params, state.params)
        _utils.assert_trees_equal(new_state.opt_state, state.opt_state)
        _utils.assert_trees_equal(new_state.model_state, state.model_state)
        self.assertEqual(
            float(new_state.algorithms.loss_scale.loss_scale), 2.0**9
        )
        self.assertEqual(int(new_state.step), 2)
        self.assertEqual(ts.trace_count, 1)

    @parameterized.parameters((jnp.float16,), (jnp.bfloat16,))
    def test_half_precision_trains(self, dtype):
        model = MLP16(dtype=dtype)
        digits = _utils.digits(flat=True)
        ts = self._step(
            boostax.DynamicLossScale(loss_scale_value=2.0**15, scale_window=20),
            model,
            optax.adam(3e-3),
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), digits.x_train[:1]))
        losses = []
        for i in range(60):
            j = (32 * i) % 1280
            state, metrics = ts(
                state, (digits.x_train[j : j + 32], digits.y_train[j : j + 32])
            )
            losses.append(float(metrics["loss"]))
        self.assertLess(np.mean(losses[-10:]), 0.5 * np.mean(losses[:10]))
        self.assertTrue(
            all(np.isfinite(x).all() for x in jax.tree.leaves(state.params))
        )

    def test_freezing_with_loss_scaling(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        x = np.zeros((1, 8, 8, 1), np.float32)
        ts = boostax.auto_boost(
            "O1",
            {
                "boost": {"mode": "manual", "less_bn": False},
                "grad_freeze": {"param_groups": 3, "total_steps": 20},
            },
            optimizer=optax.sgd(0.05),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=x,
            loss_scale=boostax.DynamicLossScale(loss_scale_value=2.0**8),
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
        digits = _utils.digits()
        for i in range(4):
            state, metrics = ts(
                state,
                (
                    digits.x_train[16 * i : 16 * i + 16],
                    digits.y_train[16 * i : 16 * i + 16],
                ),
            )
        self.assertIn("frozen_groups", metrics)
        self.assertFalse(bool(metrics["overflow"]))


def two_group_loss(params, batch):
    x, y = batch
    x = boostax.enhanced_amp(x, 0, 1)
    h = jnp.tanh(x @ params["early"]["w"])
    h = boostax.enhanced_amp(h, 1, 2)
    out = h @ params["late"]["w"]
    out = boostax.enhanced_amp(out, 2, 3)
    return jnp.mean((out - y) ** 2)


def _two_group_params():
    rng = np.random.default_rng(0)
    return {
        "early": {"w": jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)},
        "late": {"w": jnp.asarray(rng.normal(size=(8, 1)), jnp.float32)},
    }


class SkippedStepsTest(parameterized.TestCase):
    def _run(self, ts, state, batches):
        """Calls `ts` on each batch; the RuntimeWarnings it raised."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for batch in batches:
                state, metrics = ts(state, batch)
        found = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        return state, metrics, found

    def test_nonfinite_step_skipped_without_loss_scaling(self):
        model = _models.PlainBNMLP()
        x = np.ones((8, 4), np.float32)
        y = np.arange(8) % 10
        ts = boostax.make_train_step(
            optax.adam(1e-2),
            model=model,
            loss=models.cross_entropy,
            options=boostax.StepOptions(
                skip_nonfinite=True, max_consecutive_skips=2
            ),
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
        state, metrics = ts(state, (x, y))
        self.assertFalse(bool(metrics["overflow"]))
        nan = (np.full_like(x, np.nan), y)
        new, metrics, found = self._run(ts, state, [nan])
        self.assertTrue(bool(metrics["overflow"]))
        # Lose nothing: params, optimizer and model state, bit for bit.
        _utils.assert_trees_equal(
            (new.params, new.opt_state, new.model_state),
            (state.params, state.opt_state, state.model_state),
        )
        self.assertEqual(int(new.step), 2)
        # The host reads the flags in windows of 2 (here), never the
        # newest: the run of 3 skips is reported two calls after it.
        new, _, found = self._run(ts, new, [nan, nan])
        self.assertEmpty(found)
        new, _, found = self._run(ts, new, [(x, y), (x, y)])
        (w,) = found
        self.assertEqual(w.filename, __file__)
        self.assertIn("2 train steps in a row were skipped", str(w.message))
        ts.raise_on_skips = True
        new, _, _ = self._run(ts, new, [nan] * 3)
        with self.assertRaisesRegex(FloatingPointError, "2 train steps"):
            ts(new, nan)  # raised before the step: `new` stays valid
        self.assertEqual(ts.trace_count, 1)

    def test_loss_scale_stuck_at_its_minimum_warns(self):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=two_group_loss),
            optax.sgd(0.1),
            loss_scale=boostax.DynamicLossScale(loss_scale_value=1.0),
            options=boostax.StepOptions(max_consecutive_skips=3),
        )
        state = ts.init(_two_group_params())
        nan = (jnp.full((5, 4), jnp.nan), jnp.zeros((5, 1)))
        _, metrics, found = self._run(ts, state, [nan] * 5)
        self.assertEqual(float(metrics["loss_scale"]), 1.0)  # the minimum
        self.assertLen(found, 1)
        ts = boostax.make_train_step(
            optax.sgd(0.1),
            loss_fn=two_group_loss,
            options=boostax.StepOptions(max_consecutive_skips=1),
        )  # no loss scaling, no skip_nonfinite: nothing to watch
        _, metrics, found = self._run(ts, ts.init(_two_group_params()), [nan])
        self.assertNotIn("overflow", metrics)

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "`max_consecutive_skips` must"):
            boostax.make_train_step(
                optax.sgd(0.1),
                loss_fn=two_group_loss,
                options=boostax.StepOptions(max_consecutive_skips=0),
            )
        with self.assertRaisesRegex(TypeError, "`skip_nonfinite` must be a b"):
            boostax.make_train_step(
                optax.sgd(0.1),
                loss_fn=two_group_loss,
                options=boostax.StepOptions(skip_nonfinite=1),
            )


class GroupLossScaleTest(parameterized.TestCase):
    def test_boundary_backward_multiplies_by_the_ratio(self):
        rule = boostax.GroupLossScale([4.0, 0.5], [["a"], ["b"]])
        state = rule.init()

        def f(x):
            with rule.context(state):
                return jnp.sum(boostax.enhanced_amp(x, 1, 2) ** 2)

        x = jnp.arange(3.0)
        np.testing.assert_allclose(jax.grad(f)(x), 2 * x * (4.0 / 0.5))
        # Outside a train step: the identity.
        np.testing.assert_allclose(
            jax.grad(lambda x: jnp.sum(boostax.enhanced_amp(x, 1, 2) ** 2))(x),
            2 * x,
        )

    def test_each_group_unscaled_by_its_own_scale(self):
        params = _two_group_params()
        batch = (jnp.ones((5, 4)), jnp.zeros((5, 1)))
        rule = boostax.GroupLossScale(
            [2.0**10, 2.0**3], [["early/w"], ["late/w"]]
        )
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=two_group_loss),
            optax.sgd(0.1),
            loss_scale=rule,
        )
        plain = boostax.make_train_step(optax.sgd(0.1), loss_fn=two_group_loss)
        a, _ = plain(plain.init(params), batch)
        b, metrics = ts(ts.init(params), batch)
        _utils.assert_trees_all_close(b.params, a.params, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(metrics["loss_scale"], [2.0**10, 2.0**3])
        # Clean step: both groups grow by 2**(1/1000).
        np.testing.assert_allclose(
            b.algorithms.loss_scale.loss_scale,
            np.array([2.0**10, 2.0**3]) * 2 ** (1 / 1000),
            rtol=1e-6,
        )

    def test_an_overflowing_group_backs_off_alone(self):
        params = _two_group_params()
        # Zero early weights: tanh'(0) = 1, and the late layer sees h = 0.
        params["early"]["w"] = jnp.zeros((4, 8))
        rule = boostax.GroupLossScale(
            [2.0**10, 2.0**3], {"early": {"w": 0}, "late": {"w": 1}}
        )
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=two_group_loss),
            optax.sgd(0.1),
            loss_scale=rule,
        )
        state = ts.init(params)
        # A huge input overflows the early layer's gradients only.
        batch = (jnp.full((5, 4), 1e37), jnp.ones((5, 1)))
        new_state, metrics = ts(state, batch)
        self.assertTrue(bool(metrics["overflow"]))
        _utils.assert_trees_equal(new_state.params, state.params)
        np.testing.assert_allclose(
            new_state.algorithms.loss_scale.loss_scale,
            [2.0**10 * 2**-0.5, 2.0**3 * 2 ** (1 / 1000)],
            rtol=1e-6,
        )

    @parameterized.named_parameters(
        ("missing", [["early/w"]], "is in no group"),
        ("overlap", [["early/w", "late/w"], ["late/w"]], r"in groups \[0, 1\]"),
        (
            "unknown",
            [["early/w", "late/w"], ["middle/w"]],
            "do not exist: \\['middle/w'\\]",
        ),
        ("tree", {"early": 0}, "structure of the parameters"),
    )
    def test_group_validation(self, groups, message):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=two_group_loss),
            optax.sgd(0.1),
            loss_scale=boostax.GroupLossScale(8.0, groups),
        )
        with self.assertRaisesRegex(ValueError, message):
            ts.init(_two_group_params())

    def test_boundary_index_checked(self):
        rule = boostax.GroupLossScale(1.0, [["a"]])
        with rule.context(rule.init()):
            with self.assertRaisesRegex(ValueError, "`layer2` must be an int"):
                boostax.enhanced_amp(jnp.ones(2), 0, 5)


def fp16_loss(params, batch):
    """Features ~1e-3 into a layer whose activations are ~1e4 (float16).

    The late kernel's gradient is ~2e4, so one global scale cannot exceed
    ~2 without overflowing it, and the early kernel's gradient (~1e-10 in
    float32) then rounds to zero in float16. Per-group scales let the early
    group use ~2**20.
    """
    x, y = batch
    p = jax.tree.map(lambda t: t.astype(jnp.float16), params)
    x = boostax.enhanced_amp(x.astype(jnp.float16), 0, 1)
    h = jax.nn.relu(x @ p["early"]["kernel"] + p["early"]["bias"])
    h = boostax.enhanced_amp(h, 1, 2)
    out = h @ p["late"]["kernel"] + p["late"]["bias"]
    out = boostax.enhanced_amp(out, 2, 3)
    return jnp.mean((out.astype(jnp.float32) - y) ** 2)


class Float16UnderflowTest(parameterized.TestCase):
    def test_group_scales_recover_the_early_gradients(self):
        params, batch = _utils.fp16_underflow_problem()
        x, y = (np.asarray(t, np.float64) for t in batch)
        w1 = np.asarray(params["early"]["kernel"], np.float64)
        w2 = np.asarray(params["late"]["kernel"], np.float64)
        h = x @ w1 + 1e4
        d_out = 2 * (h @ w2 - y) / y.size
        expected = x.T @ (d_out @ w2.T)  # float64 early-kernel gradient
        rule = _utils.fp16_underflow_groups()
        state = rule.init()

        def scaled_grads(p):
            with rule.context(state):
                return jax.grad(
                    lambda q: rule.scale(fp16_loss(q, batch), state)
                )(p)

        grads = rule.unscale(jax.jit(scaled_grads)(params), state, params)
        early = np.asarray(grads["early"]["kernel"], np.float64)
        self.assertLess(np.abs(expected).max(), 1e-8)
        np.testing.assert_allclose(
            early, expected, atol=0.15 * np.abs(expected).max()
        )

    def test_global_scale_underflows_where_group_scales_train(self):
        params, batch = _utils.fp16_underflow_problem()
        rules = {
            "global": boostax.DynamicLossScale(
                loss_scale_value=2.0**16, scale_window=1000
            ),
            "group": _utils.fp16_underflow_groups(),
        }
        results = {}
        for name, rule in rules.items():
            ts = boostax.TrainStep(
                boostax.make_objective(loss_fn=fp16_loss),
                optax.adam(1e-6),
                loss_scale=rule,
            )
            state, overflows, losses = ts.init(params), 0, []
            for _ in range(60):
                state, metrics = ts(state, batch)
                overflows += int(metrics["overflow"])
                losses.append(float(metrics["loss"]))
            results[name] = (state.params, overflows, losses)

        global_params, global_overflows, _ = results["global"]
        # The global scale backs off to ~2 (the late kernel's limit) ...
        self.assertGreater(global_overflows, 10)
        # ... where the early kernel's float16 gradient is exactly zero:
        # Adam never moves it, while the late kernel trains.
        _utils.assert_trees_equal(
            global_params["early"]["kernel"], params["early"]["kernel"]
        )
        self.assertFalse(
            np.array_equal(
                global_params["late"]["kernel"], params["late"]["kernel"]
            )
        )
        group_params, group_overflows, group_losses = results["group"]
        self.assertEqual(group_overflows, 0)
        self.assertGreater(
            np.abs(
                group_params["early"]["kernel"] - params["early"]["kernel"]
            ).min(),
            0.0,
        )
        self.assertLess(group_losses[-1], 0.01 * group_losses[0])


class SeedApiTest(parameterized.TestCase):
    def test_group_loss_scale_manager(self):
        manager = boost.GroupLossScaleManager(8.0, [["a"], ["b"]])
        self.assertEqual(manager.get_loss_scale(), 8.0)
        self.assertIs(manager.get_update_cell(), manager)
        np.testing.assert_array_equal(manager.scales, [1, 8, 8, 1])
        self.assertEqual(manager.update_loss_scale_status(1, 0.5), 4.0)
        manager.set_loss_scale_status(3, [1.0, 2.0, 4.0])
        np.testing.assert_array_equal(manager.scales, [1, 1, 2, 4, 1])
        with self.assertRaisesRegex(ValueError, "`layer` must be in"):
            manager.update_loss_scale_status(5, 2.0)

    @parameterized.named_parameters(
        ("number", 2.0**10),
        ("scalar_array", np.float32(2.0**10)),
        ("shape_1", np.array([2.0**10], np.float32)),
        ("dynamic", boostax.DynamicLossScale(loss_scale_value=2.0**10)),
    )
    def test_scale_sense(self, scale_sense):
        model = models.MLP(features=(8,))
        digits = _utils.digits(flat=True)
        cell = boost.BoostTrainOneStepWithLossScaleCell(
            model,
            optax.sgd(0.1),
            scale_sense,
            loss=models.cross_entropy,
            variables=model.init(jax.random.PRNGKey(0), digits.x_train[:1]),
        )
        loss, overflow, scale = cell(digits.x_train[:16], digits.y_train[:16])
        self.assertTrue(np.isfinite(loss))
        self.assertFalse(bool(overflow))
        self.assertEqual(float(np.reshape(scale, ())), 2.0**10)

    def test_scale_sense_errors(self):
        model = models.MLP(features=(8,))
        with self.assertRaisesRegex(ValueError, r"shape \(\) or \(1,\)"):
            boost.BoostTrainOneStepWithLossScaleCell(
                model, optax.sgd(0.1), np.ones(2), loss=models.cross_entropy
            )
        with self.assertRaisesRegex(TypeError, "`scale_sense` must be"):
            boost.BoostTrainOneStepWithLossScaleCell(
                model, optax.sgd(0.1), "dynamic", loss=models.cross_entropy
            )

    def test_group_manager_in_auto_boost(self):
        params = _two_group_params()
        manager = boost.GroupLossScaleManager(8.0, [["early/w"], ["late/w"]])
        config = {"boost": {"mode": "manual", "loss_scale_group": True}}
        ts = boostax.auto_boost(
            "O0",
            config,
            optimizer=optax.sgd(0.1),
            loss_fn=two_group_loss,
            loss_scale=manager,
        )
        state, metrics = ts(
            ts.init(params), (jnp.ones((5, 4)), jnp.zeros((5, 1)))
        )
        self.assertEqual(metrics["loss_scale"].shape, (2,))
        with self.assertRaisesRegex(ValueError, "`loss_scale_group` is on"):
            boostax.auto_boost(
                "O0", config, optimizer=optax.sgd(0.1), loss_fn=two_group_loss
            )
        with self.assertRaisesRegex(ValueError, "needs `loss_scale_group`"):
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                loss_fn=two_group_loss,
                loss_scale=manager,
            )

    def test_o1_groups_named_on_the_original_model(self):
        # Group 0 names the BatchNorms LessBN removes and the Dense bias the
        # FN head drops; they drop out, and the FN multiplier joins Dense_0's
        # group, as freezing restricts its groups.
        x = np.zeros((1, 8, 8, 1), np.float32)
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        init = jax.jit(model.init, static_argnames="train")  # one compile
        variables = init(jax.random.PRNGKey(0), x, train=False)
        groups = model.loss_scale_groups(variables["params"])
        self.assertIn("BasicBlock_0/BatchNorm_0/scale", groups[0])
        ts = boostax.auto_boost(
            "O1",
            {
                "boost": {"mode": "manual", "loss_scale_group": True},
                "grad_freeze": {"param_groups": 2, "total_steps": 10},
            },
            optimizer=optax.sgd(0.05),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=x,
            loss_scale=boost.GroupLossScaleManager(2.0**8, groups),
        )
        state = ts.init(variables)  # raised before: unknown parameters
        self.assertEqual(state.algorithms.loss_scale.loss_scale.shape, (2,))
        names = [{"/".join(p) for p in g} for g in ts.loss_scale.groups]
        self.assertNotIn("BasicBlock_0/BatchNorm_0/scale", names[0])
        self.assertIn("Dense_0/multiplier", names[1])
        self.assertNotIn("Dense_0/bias", names[1])
        self.assertEqual(
            set().union(*names),
            {
                "/".join(k.key for k in path)
                for path, _ in jax.tree_util.tree_leaves_with_path(state.params)
            },
        )
        bad = [[*groups[0], "Nowhere/kernel"], groups[1]]
        with self.assertRaisesRegex(ValueError, "Nowhere/kernel"):
            boostax.auto_boost(
                "O1",
                {"boost": {"mode": "manual", "loss_scale_group": True}},
                optimizer=optax.sgd(0.05),
                model=model,
                loss=models.cross_entropy,
                sample_inputs=x,
                loss_scale=boost.GroupLossScaleManager(2.0**8, bad),
            )

    def test_boost_cell_sens(self):
        model = models.MLP(features=(8,))
        digits = _utils.digits(flat=True)
        cell = boost.BoostTrainOneStepCell(
            model,
            optax.sgd(0.1),
            1024.0,
            loss=models.cross_entropy,
            variables=model.init(jax.random.PRNGKey(0), digits.x_train[:1]),
        )
        loss = cell(digits.x_train[:16], digits.y_train[:16])
        self.assertTrue(np.isfinite(loss))
        self.assertEqual(
            float(cell.state.algorithms.loss_scale.loss_scale), 1024.0
        )

    def test_gradient_accumulation_process(self):
        model = models.MLP(features=(8,))
        digits = _utils.digits(flat=True)
        variables = model.init(jax.random.PRNGKey(0), digits.x_train[:1])
        cell = boost.BoostTrainOneStepCell(
            model,
            boost.GradientAccumulation(2, optax.sgd(1.0)),
            loss=models.cross_entropy,
            variables=variables,
        )
        grads = jax.tree.map(jnp.ones_like, cell.state.params)
        before = cell.state.params
        cell.gradient_accumulation_process(0.5, grads, 2.0)
        _utils.assert_trees_equal(cell.state.params, before)
        loss = cell.gradient_accumulation_process(0.5, grads, 2.0)
        self.assertEqual(loss, 0.5)
        _utils.assert_trees_all_close(
            cell.state.params,
            jax.tree.map(lambda p: p - 0.5, before),
            rtol=1e-6,
            atol=1e-7,
        )


if __name__ == "__main__":
    absltest.main()
