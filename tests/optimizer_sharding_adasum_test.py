# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The sharded optimizer state with AdaSum (O2) on 8 simulated devices.

``DataParallel(reduction="adasum", local_axis=..., shard_optimizer_state=
True)``: gradients reduce-scattered within each node (the node's mean, a
slice per device), the optimizer run on the slices (each node's state
split over its devices), the slices' updates AdaSum'd across nodes with
each leaf's dot products and norms summed over the node's slices, and the
new slices all-gathered within the node. Compared with the replicated O2
step and with a float64 NumPy reference of the definition.
"""

import jax
import numpy as np
import optax
from absl.testing import absltest, parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import boostax
from boostax._src.distributed import adasum as adasum_lib
from boostax._src.distributed import optimizer_sharding
from boostax.examples import models
from tests import _utils
from tests.adasum_test import _reference_tree
from tests.optimizer_sharding_test import _batch, _params, loss_fn

# Split over 4 (and over 2) devices along axis 0, along axis 1, kept whole
# (no axis divisible), a scalar and a 1-element leaf (averaged).
SHAPES = {"a": (4, 6), "b": (3, 8), "odd": (3, 5), "s": (), "one": (1,)}


def _dp(per_node, shard):
    return boostax.DataParallel(
        boostax.node_mesh(per_node),
        reduction="adasum",
        local_axis="local",
        shard_optimizer_state=shard,
    )


def _run(optimizer, per_node, steps=3):
    """``(replicated, sharded)`` O2 states and last metrics."""
    out = []
    for shard in (False, True):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optimizer,
            data_parallel=_dp(per_node, shard),
        )
        state = ts.init(_params())
        for seed in range(steps):
            state, metrics = ts(state, _batch(seed))
        assert ts.trace_count == 1, ts.trace_count
        out.append((state, metrics))
    return out


class ShardedAdaSumTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("two_nodes_of_4_adam", 4, optax.adam(1e-2)),
        ("four_nodes_of_2_momentum", 2, optax.sgd(0.1, momentum=0.9)),
    )
    def test_equals_the_replicated_o2_step(self, per_node, optimizer):
        (replicated, m_rep), (sharded, m_sh) = _run(optimizer, per_node)
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            m_sh["adasum_cosine"], m_rep["adasum_cosine"], rtol=1e-5
        )
        self.assertTrue(np.isfinite(m_sh["adasum_cosine"]))
        # One state per node (the replicated step keeps one per device,
        # equal within a node), split over the node's devices.
        _utils.assert_trees_all_close(
            jax.device_get(sharded.opt_state),
            jax.tree.map(
                lambda x: np.asarray(x)[::per_node],
                jax.device_get(replicated.opt_state),
            ),
            rtol=1e-5,
            atol=1e-6,
        )
        slots = [  # the hidden kernel's (4, 8) slots, per node
            x
            for x in jax.tree.leaves(sharded.opt_state)
            if x.shape == (8 // per_node, 4, 8)
        ]
        self.assertNotEmpty(slots)
        for slot in slots:
            self.assertEqual(slot.sharding.spec, P(("node",), "local"))
            self.assertEqual(
                slot.addressable_shards[0].data.shape, (1, 4 // per_node, 8)
            )

    def test_accumulation(self):
        # AdaSum inside the accumulation: it combines accumulated updates.
        states = []
        for shard in (False, True):
            dp = _dp(4, shard)
            ts = boostax.TrainStep(
                boostax.make_objective(loss_fn=loss_fn),
                boostax.gradient_accumulation(dp.adasum(optax.adam(1e-2)), 2),
                data_parallel=dp,
            )
            state = ts.init(_params())
            for seed in range(4):
                state, metrics = ts(state, _batch(seed))
            self.assertTrue(metrics["updated"])
            states.append(state)
        _utils.assert_trees_all_close(
            states[1].params, states[0].params, rtol=1e-5, atol=1e-6
        )

    @parameterized.parameters(4, 2)
    def test_equals_a_float64_reference(self, per_node):
        nodes = 8 // per_node
        rng = np.random.default_rng(per_node)
        grads = [
            {
                k: rng.normal(size=s).astype(np.float32)
                for k, s in SHAPES.items()
            }
            for _ in range(8)
        ]
        mesh = boostax.node_mesh(per_node)
        stacked = jax.device_put(
            jax.tree.map(lambda *xs: np.stack(xs), *grads),
            NamedSharding(mesh, P(("node", "local"))),
        )
        whole = jax.tree.map(lambda x: x[0], stacked)
        tx = boostax.adasum(optax.identity(), "node", local_axis_name="local")

        @jax.jit
        @jax.shard_map(
            mesh=mesh,
            in_specs=P(("node", "local")),
            out_specs=P(),
            check_vma=False,
        )
        def combine(g):
            g = jax.tree.map(lambda x: x[0], g)
            # The replicated O2 combination: node means, AdaSum'd.
            unsharded, state = tx.update(g, tx.init(g))
            # The sharded one: this device's slices of the node's mean.
            slices = optimizer_sharding.reduce_scatter_mean(
                g, ("local",), per_node
            )
            with adasum_lib.node_slices(whole, per_node):
                updates, sliced_state = tx.update(slices, tx.init(slices))
            sharded = optimizer_sharding.gather(
                updates, g, ("local",), per_node
            )
            return sharded, unsharded, sliced_state.cosine, state.cosine

        sharded, unsharded, cosine, unsharded_cosine = combine(stacked)
        node_means = [
            jax.tree.map(
                lambda *xs: np.mean(np.stack(xs).astype(np.float64), axis=0),
                *grads[n * per_node : (n + 1) * per_node],
            )
            for n in range(nodes)
        ]
        want = _reference_tree(node_means)
        for k in SHAPES:
            np.testing.assert_allclose(
                np.asarray(sharded[k], np.float64),
                want[k],
                rtol=1e-5,
                atol=1e-6,
                err_msg=k,
            )
        _utils.assert_trees_all_close(sharded, unsharded, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cosine, unsharded_cosine, rtol=1e-5)

    def test_auto_boost_o2_with_freezing(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(4, 8))
        digits = _utils.digits()
        x, y = digits.x_train[:16], digits.y_train[:16]
        config = {
            "common": {"device_number": 4},
            "grad_freeze": {"param_groups": 2, "total_steps": 4},
        }
        states = []
        for shard in (False, True):
            ts = boostax.auto_boost(
                "O2",
                {**config, "data_parallel": {"shard_optimizer_state": shard}},
                optimizer=optax.sgd(0.05, momentum=0.9),
                model=model,
                loss=models.cross_entropy,
                sample_inputs=x,
                mesh=jax.make_mesh((8,), ("data",)),
            )
            state = ts.init(
                model.init(jax.random.PRNGKey(0), x[:1], train=False)
            )
            depths = []
            for _ in range(4):
                state, metrics = ts(state, (x, y))
                depths.append(int(metrics["frozen_groups"]))
            self.assertIn(1, depths)  # a frozen group's masked updates
            states.append(state)
        self.assertTrue(ts.data_parallel.shard_optimizer_state)
        _utils.assert_trees_all_close(
            states[1].params, states[0].params, rtol=1e-5, atol=1e-6
        )

    def test_the_step_reduce_scatters_within_nodes(self):
        ts = boostax.make_train_step(
            optax.adam(1e-2), loss_fn=loss_fn, data_parallel=_dp(4, True)
        )
        state = ts.init(_params())
        hlo = ts.lower(state, _batch(0)).compile().as_text()
        _, counts = boostax.measure.collective_bytes(hlo)
        self.assertIn("reduce-scatter", counts)
        self.assertIn("all-gather", counts)
        self.assertIn("collective-permute", counts)  # AdaSum across nodes
        # Every reduce-scatter stays within a node of 4 devices.
        for line in hlo.splitlines():
            if " reduce-scatter(" in line:
                for group in boostax.measure.replica_groups(line):
                    self.assertLen({d // 4 for d in group}, 1, line)

    def test_errors(self):
        mesh = boostax.node_mesh(4)
        with self.assertRaisesRegex(ValueError, "needs a `local_axis`"):
            boostax.DataParallel(
                mesh, reduction="adasum", shard_optimizer_state=True
            )
        with self.assertRaisesRegex(ValueError, "needs a `local_axis`"):
            boostax.DataParallel(
                boostax.node_mesh(1),
                reduction="adasum",
                local_axis="local",
                shard_optimizer_state=True,
            )
        with self.assertRaisesRegex(NotImplementedError, "adasum_gradients"):
            boostax.DataParallel(
                mesh,
                reduction="adasum_gradients",
                local_axis="local",
                shard_optimizer_state=True,
            )
        # An optimizer that reads whole leaves is refused inside AdaSum too.
        ts = boostax.make_train_step(
            optax.lamb(1e-2), loss_fn=loss_fn, data_parallel=_dp(4, True)
        )
        with self.assertRaisesRegex(ValueError, "elementwise"):
            ts.init(_params())

    @parameterized.parameters(4, 8)
    def test_refuses_a_rule_read_from_the_slice_shape(self, num_shards):
        # Centralization's mask tests the fan-in (32, a multiple of 16):
        # a slice's (32 / 4 or / 8) fails it, and would not be centralized.
        # The split plan splits it along its output axis instead.
        tx = boostax.with_gradient_centralization(optax.sgd(0.1))
        kernel = {"k": jax.ShapeDtypeStruct((3, 3, 32, 32), np.float32)}
        with self.assertRaisesRegex(ValueError, "otherwise on a slice"):
            optimizer_sharding.check_elementwise(tx, kernel, num_shards)
        plan = optimizer_sharding.split_plan(tx, kernel, num_shards)
        self.assertEqual(plan, {"k": 3})
        optimizer_sharding.check_elementwise(tx, kernel, num_shards, plan=plan)


if __name__ == "__main__":
    absltest.main()
