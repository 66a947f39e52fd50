# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.accumulation`."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized

import boostax
from boostax import mindspore as boost
from boostax.examples import models
from tests import _utils


def _params():
    return {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}


def _grads(n, seed=0):
    rng = np.random.default_rng(seed)
    return [
        jax.tree.map(
            lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32),
            _params(),
        )
        for _ in range(n)
    ]


def _run(tx, grads):
    params, state = _params(), tx.init(_params())
    update = jax.jit(tx.update)
    flags = []
    for g in grads:
        updates, state = update(g, state, params)
        params = optax.apply_updates(params, updates)
        flags.append(state)
    return params, state, flags


class MatchesMultiStepsTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("adam_k3", optax.adam(1e-2), 3),
        ("momentum_k2", optax.sgd(0.1, momentum=0.9), 2),
        ("adamw_schedule", optax.adamw(1e-2), lambda step: 2 + step % 2),
    )
    def test_numerics(self, inner, k):
        grads = _grads(10)
        ours, ours_state, ours_states = _run(
            boostax.gradient_accumulation(inner, k), grads
        )
        multi = optax.MultiSteps(inner, k)
        theirs, _, theirs_states = _run(multi.gradient_transformation(), grads)
        _utils.assert_trees_all_close(ours, theirs, rtol=1e-6, atol=1e-7)
        self.assertEqual(
            [bool(boostax.has_updated(s)) for s in ours_states],
            [bool(multi.has_updated(s)) for s in theirs_states],
        )

    def test_inner_count_is_real_updates(self):
        tx = boostax.gradient_accumulation(optax.adam(1e-2), 3)
        _, state, _ = _run(tx, _grads(7))
        self.assertEqual(int(state.gradient_step), 2)
        self.assertEqual(int(state.inner_state[0].count), 2)
        self.assertEqual(int(state.mini_step), 1)

    def test_example_mean(self):
        tx = boostax.gradient_accumulation(optax.sgd(1.0), 2)
        params = jnp.zeros(2)
        state = tx.init(params)
        u1, state = tx.update(jnp.array([1.0, 1.0]), state, params)
        u2, state = tx.update(jnp.array([3.0, 3.0]), state, params)
        np.testing.assert_array_equal(u1, [0.0, 0.0])
        np.testing.assert_array_equal(u2, [-2.0, -2.0])
        np.testing.assert_array_equal(state.acc_grads, [0.0, 0.0])

    def test_bad_k(self):
        for k, error in ((0, ValueError), (-1, ValueError), (2.0, TypeError)):
            with self.assertRaisesRegex(error, "`every_k_schedule"):
                boostax.gradient_accumulation(optax.sgd(0.1), k)
        for k in (True, "2"):
            with self.assertRaisesRegex(TypeError, "`every_k_schedule"):
                boostax.gradient_accumulation(optax.sgd(0.1), k)
        with self.assertRaisesRegex(TypeError, "`inner` must be an optax"):
            boostax.gradient_accumulation(lambda g: g, 2)
        with self.assertRaisesRegex(TypeError, "`accumulator_dtype`"):
            boostax.gradient_accumulation(
                optax.sgd(0.1), 2, accumulator_dtype=1
            )


class CostTest(absltest.TestCase):
    def test_inner_optimizer_runs_only_on_the_kth_step(self):
        # A host callback inside the inner update fires only when it runs.
        calls = []

        def counting(inner):
            def update_fn(updates, state, params=None):
                jax.debug.callback(lambda: calls.append(1))
                return inner.update(updates, state, params)

            return optax.GradientTransformation(inner.init, update_fn)

        inner = counting(optax.sgd(0.1))
        for tx, expected in [
            (boostax.gradient_accumulation(inner, 4), 2),
            (optax.MultiSteps(inner, 4).gradient_transformation(), 8),
        ]:
            calls.clear()
            _run(tx, _grads(8))
            jax.effects_barrier()
            self.assertLen(calls, expected)

    def test_flops_and_memory(self):
        params = {f"w{i}": jnp.ones((64, 64)) for i in range(4)}
        grads = jax.tree.map(jnp.ones_like, params)
        inner = optax.contrib.muon(1e-3)
        k = 4

        def compiled(fn, *args):
            return jax.jit(fn).lower(*args).compile()

        ours = boostax.gradient_accumulation(inner, k)
        multi = optax.MultiSteps(inner, k).gradient_transformation()
        inner_cost = compiled(
            inner.update, grads, inner.init(params), params
        ).cost_analysis()["flops"]
        multi_cost = compiled(
            multi.update, grads, multi.init(params), params
        ).cost_analysis()["flops"]
        accumulate_cost = compiled(
            _accumulate,
            grads,
            ours.init(params),
        ).cost_analysis()["flops"]
        # MultiSteps computes the inner update on every micro-step; ours on
        # one micro-step in k (under lax.cond, whose cost analysis counts
        # the larger branch), plus the running mean on every one.
        self.assertGreaterEqual(multi_cost, inner_cost)
        ours_per_micro_step = inner_cost / k + accumulate_cost
        self.assertLess(ours_per_micro_step, 1.1 * multi_cost / k)
        # Memory: one accumulator in the state, like MultiSteps, and no
        # parameter-sized temporary beside it (the mean is recomputed in the
        # branch instead of being an operand of the cond).
        param_bytes = sum(4 * math.prod(p.shape) for p in params.values())
        ours_memory = compiled(
            ours.update, grads, ours.init(params), params
        ).memory_analysis()
        multi_memory = compiled(
            multi.update, grads, multi.init(params), params
        ).memory_analysis()
        # Ours keeps one more int32: the micro-steps its cycle dropped.
        self.assertEqual(
            ours_memory.argument_size_in_bytes,
            multi_memory.argument_size_in_bytes + 4,
        )
        self.assertLessEqual(
            ours_memory.temp_size_in_bytes,
            multi_memory.temp_size_in_bytes + param_bytes // 16,
        )
        # Outputs: the same buffers, plus a few scalars (no parameter-sized
        # one).
        self.assertBetween(
            ours_memory.output_size_in_bytes
            - multi_memory.output_size_in_bytes,
            0,
            16,
        )


def _accumulate(grads, state):
    from boostax._src import accumulation

    return accumulation.accumulate(grads, state)


class AutoBoostAccumulationTest(absltest.TestCase):
    def _step(self, config, optimizer=None):
        return boostax.auto_boost(
            "O0",
            config,
            optimizer=optimizer or optax.adam(1e-2),
            model=models.MLP(features=(8,)),
            loss=models.cross_entropy,
        )

    def test_switch_and_step_count(self):
        config = {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 3},
        }
        ts = self._step(config)
        digits = _utils.digits(flat=True)
        batches = [
            (digits.x_train[i : i + 16], digits.y_train[i : i + 16])
            for i in range(0, 96, 16)
        ]
        variables = ts.objective.module.init(
            jax.random.PRNGKey(0), batches[0][0]
        )
        state = ts.init(variables)
        multi = boostax.make_train_step(
            optax.MultiSteps(optax.adam(1e-2), 3).gradient_transformation(),
            model=models.MLP(features=(8,)),
            loss=models.cross_entropy,
        )
        expected = multi.init(variables)
        updated, has_updated = [], []
        for batch in batches:
            state, metrics = ts(state, batch)
            expected, _ = multi(expected, batch)
            updated.append(bool(metrics["updated"]))
            has_updated.append(bool(boostax.has_updated(state)))  # TrainState
        self.assertEqual(updated, [False, False, True] * 2)
        self.assertEqual(has_updated, updated)
        self.assertEqual(
            bool(boostax.has_updated(state.opt_state)), updated[-1]
        )
        _utils.assert_trees_all_close(
            state.params, expected.params, rtol=1e-6, atol=1e-7
        )
        self.assertEqual(int(state.opt_state.gradient_step), 2)
        self.assertEqual(ts.trace_count, 1)

    def test_one_step_is_no_wrapper(self):
        config = {"boost": {"mode": "manual", "grad_accumulation": True}}
        with self.assertWarnsRegex(UserWarning, "nothing to accumulate"):
            ts = self._step(config)
        state = ts.init(
            ts.objective.module.init(jax.random.PRNGKey(0), jnp.ones((2, 64)))
        )
        self.assertNotIsInstance(
            state.opt_state, boostax.GradientAccumulationState
        )
        with self.assertRaisesRegex(
            TypeError, "holding one .*got TrainState without one"
        ):
            boostax.has_updated(state)

    def test_freezing_keeps_a_depth_for_k_micro_steps(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        x = np.zeros((1, 8, 8, 1), np.float32)
        ts = boostax.auto_boost(
            "O1",
            {
                "boost": {
                    "mode": "manual",
                    "less_bn": False,
                    "grad_accumulation": True,
                },
                "grad_freeze": {"param_groups": 3, "total_steps": 20},
                "grad_accumulation": {"grad_accumulation_step": 2},
            },
            optimizer=optax.sgd(0.05),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=x,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
        digits = _utils.digits()
        depths = []
        for i in range(8):
            batch = (
                digits.x_train[16 * i : 16 * i + 16],
                digits.y_train[16 * i : 16 * i + 16],
            )
            state, metrics = ts(state, batch)
            depths.append(int(metrics["frozen_groups"]))
        np.testing.assert_array_equal(
            depths, np.repeat(ts.freezing.sequence[:4], 2)
        )
        self.assertTrue(np.all(np.isfinite(jax.tree.leaves(state.params)[0])))


class GradientAccumulationClassTest(absltest.TestCase):
    def test_seed_api(self):
        acc = boost.GradientAccumulation(2, optax.sgd(1.0))
        params = jnp.zeros(2)
        state = acc.init(params)
        _, state = acc.update(jnp.ones(2), state, params)
        self.assertFalse(bool(acc.has_updated(state)))
        updates, state = acc.update(jnp.ones(2), state, params)
        self.assertTrue(bool(acc.has_updated(state)))
        np.testing.assert_array_equal(updates, [-1.0, -1.0])
        optax.chain(acc.gradient_transformation()).init(params)


if __name__ == "__main__":
    absltest.main()
