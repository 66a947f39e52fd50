# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""FreezeOut's annealing and the progressive freeze sequence stay in step.

The rule: every counter that a schedule reads advances on the same events.
The freeze sequence counts train steps, dropped updates (non-finite
gradients) included, so FreezeOut's annealing reads the same index: each
group's last update before its freeze point ``T`` runs at FreezeOut's rate
of the update it is made at (``T - 1`` unless that one was dropped), and
the group never moves from ``T`` on, whatever was dropped and whatever the
accumulation. A dropped update leaves params and the optimizer's state
exactly as they were.
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
from boostax._src import tree_utils

GROUPS = ("g0", "g1", "g2")
LR = 0.5
TOTAL_STEPS = 10
FREEZE_P = 0.5
# Depth 1 (g0 frozen) from update 5, depth 2 (g0, g1 frozen) from update 8.
FREEZE_AT = {"g0": 5, "g1": 8, "g2": np.inf}
UPDATES = 10  # two past the last freeze point


def initial_params():
    # Three leaves per group: natural-sort chunks of three, one per group.
    return {g: {c: jnp.zeros(2, jnp.float32) for c in "abc"} for g in GROUPS}


def loss_fn(params, batch):
    """``sum_g x_g sum(p_g)``; a NaN `poison` makes every gradient NaN."""
    x, poison = batch
    value = sum(
        x[j] * jnp.sum(leaf)
        for j, g in enumerate(GROUPS)
        for leaf in jax.tree.leaves(params[g])
    )
    return value + poison * sum(jnp.sum(p) for p in jax.tree.leaves(params))


@functools.cache
def train_step(k: int):
    """`auto_boost`'s progressive freezing (with FreezeOut) over k micro-steps,
    compiled once per depth for the whole module."""
    config = {
        "boost": {
            "mode": "manual",
            "grad_freeze": True,
            "grad_accumulation": k > 1,
        },
        "grad_freeze": {
            "param_groups": len(GROUPS),
            "freeze_type": 2,
            "freeze_p": FREEZE_P,
            "total_steps": TOTAL_STEPS,
        },
    }
    if k > 1:
        config["grad_accumulation"] = {"grad_accumulation_step": k}
    return boostax.auto_boost(
        "O0",
        config,
        optimizer=optax.sgd(LR),
        loss_fn=loss_fn,
        options=boostax.StepOptions(skip_nonfinite=True),
    )


def freeze_out_rate(update, freeze_at):
    return 0.5 * (1 + np.cos(np.pi * min(update / freeze_at, 1.0)))


def run(k, xs, dropped):
    """Trains ``len(dropped)`` updates of k micro-steps; returns each
    update's movement of each group (one leaf's first entry) and whether
    every dropped step left params and FreezeOut's state as they were."""
    ts = train_step(k)
    state = ts.init(initial_params())
    moves = np.zeros((len(dropped), len(GROUPS)))
    for u, drop in enumerate(dropped):
        before = state.params
        for m in range(k):
            # The last micro-step is poisoned: the whole update is dropped.
            poison = np.float32(np.nan if drop and m == k - 1 else 0.0)
            previous = state
            state, metrics = ts(state, (xs[u * k + m], poison))
            if np.isnan(poison):
                np.testing.assert_equal(bool(metrics["overflow"]), True)
                jax.tree.map(
                    np.testing.assert_array_equal,
                    (state.params, freeze_out_state(state)),
                    (previous.params, freeze_out_state(previous)),
                )
        for j, g in enumerate(GROUPS):
            moves[u, j] = float(before[g]["a"][0] - state.params[g]["a"][0])
    return moves


def freeze_out_state(state):
    return tree_utils.find_state(state.opt_state, boostax.FreezeOutState)


class FreezeOutSyncTest(absltest.TestCase):
    def test_schedule(self):
        np.testing.assert_array_equal(
            boostax.progressive_freeze_steps(
                len(GROUPS), FREEZE_P, TOTAL_STEPS
            ),
            [FREEZE_AT["g0"], FREEZE_AT["g1"]],
        )

    def test_reads_freeze_update_when_given(self):
        # The step's index, not the transform's own count of its updates.
        params = {"a": jnp.ones(2), "b": jnp.ones(2)}
        tx = boostax.scale_by_freeze_out([[("a",), ("b",)], [("b",)]], [5])
        state = tx.init(params)
        updates, state = tx.update(params, state, freeze_update=4)
        np.testing.assert_allclose(
            updates["a"], freeze_out_rate(4, 5), rtol=1e-6
        )
        np.testing.assert_array_equal(updates["b"], 1.0)
        self.assertEqual(int(state.count), 5)
        updates, state = tx.update(params, state)  # alone: its own count
        np.testing.assert_allclose(updates["a"], 0.0, atol=1e-7)
        self.assertEqual(int(state.count), 6)

    def test_three_dropped_updates_still_anneal_to_zero(self):
        # Group 0 freezes at update 5; updates 0-2 are dropped. Its last
        # update (4) runs at FreezeOut's rate of update 4 (0.095), not at
        # that of the second update made (0.905).
        ts = train_step(1)
        np.testing.assert_array_equal(ts.freezing.sequence[:6], [0] * 5 + [1])
        state = ts.init(initial_params())
        moves = []
        for u in range(6):
            before = state.params["g0"]["a"][0]
            poison = np.float32(np.nan if u < 3 else 0.0)
            state, _ = ts(state, (np.ones(3, np.float32), poison))
            moves.append(float(before - state.params["g0"]["a"][0]) / LR)
        np.testing.assert_allclose(
            moves,
            [0, 0, 0, freeze_out_rate(3, 5), freeze_out_rate(4, 5), 0],
            atol=1e-6,
        )
        self.assertAlmostEqual(moves[4], 0.0955, places=4)

    @settings(max_examples=12, deadline=None)
    @given(
        k=st.integers(1, 3),
        dropped=st.lists(st.booleans(), min_size=UPDATES, max_size=UPDATES),
        seed=st.integers(0, 2**16),
    )
    def test_last_update_at_freeze_out_rate_whatever_the_drops(
        self, k, dropped, seed
    ):
        dropped = np.array(dropped)
        rng = np.random.default_rng(seed)
        xs = rng.uniform(0.5, 1.5, (UPDATES * k, len(GROUPS)))
        xs = xs.astype(np.float32)
        moves = run(k, xs, dropped)
        for j, g in enumerate(GROUPS):
            at = FREEZE_AT[g]
            for u in range(UPDATES):
                grad = xs[u * k : (u + 1) * k, j].mean()
                rate = 0.0 if dropped[u] else freeze_out_rate(u, at)
                # Frozen from its freeze point on: not a single bit moves.
                if u >= at:
                    self.assertEqual(moves[u, j], 0.0, (g, u, dropped))
                np.testing.assert_allclose(
                    moves[u, j],
                    LR * rate * grad,
                    rtol=1e-5,
                    atol=1e-7,
                    err_msg=f"group {g}, update {u}, dropped {dropped}",
                )
            if np.isfinite(at):
                made = [u for u in range(int(at)) if not dropped[u]]
                # Its last update is the last one made before `at` (update
                # `at - 1` unless that was dropped), at that update's rate
                # (checked above).
                moved = np.flatnonzero(moves[:, j])
                self.assertEqual(moved[-1:].tolist(), made[-1:], dropped)


if __name__ == "__main__":
    absltest.main()
