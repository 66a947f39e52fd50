# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Gradient freezing x accumulation x skipped micro-steps.

The invariant: train step ``i`` is micro-step ``i mod k`` of update
``i // k``, whatever was skipped; all k micro-steps of an update train the
depth the freeze sequence gives that update; an update is the mean of its
k micro-gradients, and a cycle with a skipped (non-finite) micro-step makes
no update. Checked over random skip patterns, freeze sequences and k
against a float64 NumPy simulation.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from hypothesis import given, settings
from hypothesis import strategies as st

import boostax
from boostax._src.freezing import plan as freezing_lib
from boostax._src.step import objectives
from boostax._src.step import train_step as train_step_lib

LEAVES = ("a", "b", "c")
# Depth 0 trains every leaf, 1 the last two, 2 the last one.
GROUPS = ((("a",), ("b",), ("c",)), (("b",), ("c",)), (("c",),))
SIZE = 3
LR, MOMENTUM = 0.5, 0.9
SEQUENCE = np.random.default_rng(0).integers(0, len(GROUPS), 64)


def loss_fn(params, batch):
    """``sum_j |p_j - x_j|^2 / 2``; a NaN `poison` makes every gradient NaN."""
    x, poison = batch
    value = sum(
        jnp.sum((params[name] - x[j]) ** 2) / 2 for j, name in enumerate(LEAVES)
    )
    return value + poison * sum(jnp.sum(p) for p in params.values())


def initial_params():
    return {
        name: jnp.arange(SIZE, dtype=jnp.float32) + j
        for j, name in enumerate(LEAVES)
    }


@functools.cache
def train_step(k: int, loss_scale: bool = False) -> train_step_lib.TrainStep:
    """One step per k for the whole module: each depth compiles once."""
    return train_step_lib.TrainStep(
        objectives.FunctionObjective(loss_fn),
        boostax.gradient_accumulation(optax.sgd(LR, momentum=MOMENTUM), k),
        freezing=freezing_lib.Freezing(GROUPS, SEQUENCE, micro_steps=k),
        loss_scale=boostax.StaticLossScale(1.0) if loss_scale else None,
        options=boostax.StepOptions(skip_nonfinite=not loss_scale),
    )


def batches(seed: int, skips):
    rng = np.random.default_rng(seed)
    return [
        (
            rng.normal(size=(len(LEAVES), SIZE)).astype(np.float32),
            np.float32(np.nan if skip else 0.0),
        )
        for skip in skips
    ]


def simulate(k, start, data):
    """float64 NumPy: params after the micro-steps of `data` from `start`."""
    params = {n: np.asarray(p, np.float64) for n, p in initial_params().items()}
    momentum = {n: np.zeros(SIZE) for n in LEAVES}
    for u in range(len(data) // k):
        cycle = data[u * k : (u + 1) * k]
        if any(np.isnan(poison) for _, poison in cycle):
            continue  # the update is dropped
        depth = SEQUENCE[(start // k + u) % len(SEQUENCE)]
        for (name,) in GROUPS[depth]:
            j = LEAVES.index(name)
            grad = np.mean([params[name] - x[j] for x, _ in cycle], axis=0)
            momentum[name] = grad + MOMENTUM * momentum[name]
            params[name] = params[name] - LR * momentum[name]
    return params


def run(k, start_update, data, loss_scale=False):
    ts = train_step(k, loss_scale)
    state = ts.init(initial_params())
    start = start_update * k
    state = state.replace(
        algorithms=state.algorithms._replace(
            freeze=state.algorithms.freeze._replace(position=jnp.int32(start))
        )
    )
    state = ts.freezing.stamp(state)  # its steps so far: this plan's
    history = []
    for batch in data:
        state, metrics = ts(state, batch)
        history.append(jax.device_get(metrics))
    return state, history


class SkippedMicroStepsTest(absltest.TestCase):
    @settings(max_examples=25, deadline=None)
    @given(
        k=st.sampled_from([1, 2, 3]),
        updates=st.integers(1, 5),
        start_update=st.integers(0, len(SEQUENCE) - 1),
        seed=st.integers(0, 2**16),
        skip_probability=st.sampled_from([0.0, 0.2, 0.5]),
    )
    def test_every_update_trains_one_depth(
        self, k, updates, start_update, seed, skip_probability
    ):
        skips = np.random.default_rng(seed).random(updates * k)
        data = batches(seed, skips < skip_probability)
        state, history = run(k, start_update, data)

        depths = [int(m["frozen_groups"]) for m in history]
        for u in range(updates):
            cycle = depths[u * k : (u + 1) * k]
            expected = SEQUENCE[(start_update + u) % len(SEQUENCE)]
            self.assertEqual(cycle, [expected] * k, (u, depths))
            poisoned = any(np.isnan(p) for _, p in data[u * k : (u + 1) * k])
            updated = [bool(m["updated"]) for m in history[u * k : (u + 1) * k]]
            self.assertEqual(updated, [False] * (k - 1) + [not poisoned])
        overflow = [bool(m["overflow"]) for m in history]
        self.assertEqual(overflow, [bool(np.isnan(p)) for _, p in data])

        expected = simulate(k, start_update * k, data)
        for name in LEAVES:
            np.testing.assert_allclose(
                state.params[name], expected[name], rtol=1e-5, atol=1e-5
            )
        # Every cycle has ended: nothing is left in the accumulator, frozen
        # leaves included (it would leak into a later update).
        acc = state.opt_state
        self.assertEqual(int(acc.mini_step), 0)
        for name in LEAVES:
            np.testing.assert_array_equal(acc.acc_grads[name], 0.0)

    def test_loss_scale_skip_keeps_params_and_inner_state(self):
        # A skipped micro-step (the loss scale's overflow check) keeps params
        # and the inner optimizer's state bit for bit; only the counters move.
        k = 2
        data = batches(1, [False, False, True, False])
        ts = train_step(k, loss_scale=True)
        state = ts.init(initial_params())
        for batch in data[:2]:
            state, metrics = ts(state, batch)
        self.assertTrue(bool(metrics["updated"]))
        before = state
        state, metrics = ts(state, data[2])
        self.assertTrue(bool(metrics["overflow"]))
        jax.tree.map(
            np.testing.assert_array_equal,
            (state.params, state.opt_state.inner_state, state.model_state),
            (before.params, before.opt_state.inner_state, before.model_state),
        )
        self.assertEqual(int(state.opt_state.mini_step), 1)
        self.assertEqual(int(state.algorithms.freeze.position), 3)
        state, metrics = ts(state, data[3])
        # The cycle's update was dropped, and the next starts aligned.
        self.assertFalse(bool(metrics["updated"]))
        self.assertFalse(bool(boostax.has_updated(state)))
        self.assertEqual(int(state.opt_state.mini_step), 0)
        jax.tree.map(np.testing.assert_array_equal, state.params, before.params)


if __name__ == "__main__":
    absltest.main()
