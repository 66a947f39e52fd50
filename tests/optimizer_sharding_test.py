# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for the sharded optimizer state (ZeRO-1) on 8 simulated devices.

Each sharded step is compared with the replicated `DataParallel` step of
the same optimizer: the same params after a few steps, and 1/8 of the
optimizer state on each device.
"""

import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl.testing import absltest, parameterized
from jax.sharding import PartitionSpec as P

import boostax
from boostax._src.distributed import optimizer_sharding
from tests import _utils

BATCH = 16


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    out = h @ params["out"]["w"] * jnp.mean(params["odd"])
    return jnp.mean((out - y) ** 2)


def _params():
    rng = np.random.default_rng(0)
    return {
        "hidden": {
            "w": jnp.asarray(rng.normal(size=(4, 8)), jnp.float32),
            "b": jnp.zeros((1, 8), jnp.float32),
        },
        "out": {"w": jnp.asarray(rng.normal(size=(8, 1)), jnp.float32)},
        # No axis divisible by 8: kept whole on every device.
        "odd": jnp.ones((3,), jnp.float32),
    }


def _batch(seed):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(BATCH, 4)).astype(np.float32),
        rng.normal(size=(BATCH, 1)).astype(np.float32),
    )


def _mesh():
    return jax.make_mesh((8,), ("data",))


def _steps(
    optimizer, steps=5, mesh=None, return_steps=False, traces=None, **kwargs
):
    """``(replicated, sharded)`` states after `steps` steps of each
    (`traces`: the sharded step's programs, if not one per depth and the
    warm-up's)."""
    states, steps_ = [], []
    for shard in (False, True):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optimizer,
            data_parallel=boostax.DataParallel(
                mesh or _mesh(), shard_optimizer_state=shard
            ),
            **_utils.with_step_options(kwargs),
        )
        state = ts.init(_params())
        for seed in range(steps):
            state, _ = ts(state, _batch(seed))
        states.append(state)
        steps_.append(ts)
        if shard:
            # Each program (freeze depth) compiled once.
            expected = 1
            if "freezing" in kwargs:  # a program per depth, the warm-up's
                expected = len(set(np.asarray(kwargs["freezing"].sequence)))
                expected += bool(kwargs["freeze_warmup_steps"])
            expected = expected if traces is None else traces
            assert ts.trace_count == expected, ts.trace_count
    if return_steps:
        return states, steps_
    return states


def _freezing(sequence, micro_steps=1):
    """Depth 0 trains everything, depth 1 the last layer and `odd`."""
    everything = (("hidden", "w"), ("hidden", "b"), ("out", "w"), ("odd",))
    return boostax.Freezing(
        (everything, (("out", "w"), ("odd",))),
        np.asarray(sequence, np.int32),
        micro_steps=micro_steps,
    )


def _save_and_restore(state, ts, strict=True):
    """`state` saved with Orbax and restored into the shapes and shardings
    of a fresh state of `ts` (docs/checkpointing.md's recipe)."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        ocp.CheckpointManager(tmp) as m,
    ):
        m.save(1, args=ocp.args.StandardSave(state))
        m.wait_until_finished()
        target = jax.tree.map(
            ocp.utils.to_shape_dtype_struct, ts.init(_params())
        )
        return m.restore(
            1, args=ocp.args.StandardRestore(target, strict=strict)
        )


def _device_bytes(tree) -> tuple[int, int]:
    """``(bytes on device 0, bytes of the whole tree)``."""
    on_one = whole = 0
    for leaf in jax.tree.leaves(tree):
        whole += leaf.nbytes
        device = min(leaf.sharding.device_set, key=lambda d: d.id)
        on_one += sum(
            s.data.nbytes for s in leaf.addressable_shards if s.device == device
        )
    return on_one, whole


class ShardedOptimizerStateTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("sgd_momentum", optax.sgd(0.1, momentum=0.9)),
        ("adam", optax.adam(1e-2)),
        ("adamw", optax.adamw(1e-2, weight_decay=0.1)),
    )
    def test_equals_the_replicated_step(self, optimizer):
        replicated, sharded = _steps(optimizer)
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        _utils.assert_trees_all_close(
            jax.device_get(sharded.opt_state),
            jax.device_get(replicated.opt_state),
            rtol=1e-5,
            atol=1e-6,
        )
        # Params whole on every device; the state's leaves split, but the
        # odd leaf's slots (no axis divisible by 8) and the step count.
        for leaf in jax.tree.leaves(sharded.params):
            self.assertTrue(leaf.sharding.is_fully_replicated)
        slots = [
            leaf
            for leaf in jax.tree.leaves(sharded.opt_state)
            if leaf.ndim and leaf.shape != (3,)
        ]
        self.assertNotEmpty(slots)
        for leaf in slots:
            axis = optimizer_sharding.split_axis(leaf.shape, 8)
            expected = list(leaf.shape)
            expected[axis] //= 8
            for shard in leaf.addressable_shards:
                self.assertEqual(shard.data.shape, tuple(expected))
        on_one, whole = _device_bytes(sharded.opt_state)
        odd = sum(
            leaf.nbytes
            for leaf in jax.tree.leaves(sharded.opt_state)
            if leaf.ndim == 0 or leaf.shape == (3,)
        )
        self.assertEqual(on_one, (whole - odd) // 8 + odd)
        self.assertLess(on_one, whole / 4)

    def test_over_two_mesh_axes(self):
        replicated, sharded = _steps(
            optax.adam(1e-2), steps=3, mesh=boostax.node_mesh(4)
        )
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        mu = sharded.opt_state[0].mu["hidden"]["w"]
        self.assertEqual(mu.sharding.spec, P(None, ("node", "local")))
        self.assertEqual(mu.addressable_shards[0].data.shape, (4, 1))

    def test_the_step_reduce_scatters_and_all_gathers(self):
        ts = boostax.make_train_step(
            optax.adam(1e-2),
            loss_fn=loss_fn,
            data_parallel=boostax.DataParallel(
                _mesh(), shard_optimizer_state=True
            ),
        )
        state = ts.init(_params())
        hlo = ts.lower(state, _batch(0)).compile().as_text()
        _, counts = boostax.measure.collective_bytes(hlo)
        self.assertIn("reduce-scatter", counts)
        self.assertIn("all-gather", counts)

    def test_dynamic_loss_scale(self):
        replicated, sharded = _steps(
            optax.adam(1e-2),
            loss_scale=boostax.DynamicLossScale(2.0**8, scale_window=2),
        )
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        _utils.assert_trees_equal(
            jax.device_get(sharded.algorithms.loss_scale),
            jax.device_get(replicated.algorithms.loss_scale),
        )

    def test_an_overflow_in_one_slice_skips_the_step_everywhere(self):
        ts = boostax.TrainStep(
            boostax.make_objective(loss_fn=loss_fn),
            optax.adam(1e-2),
            loss_scale=boostax.DynamicLossScale(2.0**10),
            data_parallel=boostax.DataParallel(
                _mesh(), shard_optimizer_state=True
            ),
        )
        state = ts.init(_params())
        x, y = _batch(0)
        y[-1] = 1e36  # only the last device's rows overflow
        new_state, metrics = ts(state, (x, y))
        self.assertTrue(bool(metrics["overflow"]))
        _utils.assert_trees_equal(
            jax.device_get((new_state.params, new_state.opt_state)),
            jax.device_get((state.params, state.opt_state)),
        )
        self.assertEqual(
            float(new_state.algorithms.loss_scale.loss_scale), 2.0**9
        )

    def test_accumulation(self):
        optimizer = boostax.gradient_accumulation(optax.adam(1e-2), 2)
        (replicated, sharded), (_, ts) = _steps(
            optimizer, steps=5, return_steps=True
        )
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        # Each device accumulates its own gradients, whole (stacked on a
        # device axis): their mean is the replicated step's accumulator
        # (step 5 is the first micro-step of a cycle).
        acc = sharded.opt_state.acc_grads["out"]["w"]
        self.assertEqual(acc.shape, (8, 8, 1))
        self.assertEqual(acc.addressable_shards[0].data.shape, (1, 8, 1))
        self.assertGreater(float(jnp.std(acc, axis=0).max()), 1e-3)
        _utils.assert_trees_all_close(
            jax.tree.map(lambda a: jnp.mean(a, 0), sharded.opt_state.acc_grads),
            replicated.opt_state.acc_grads,
            rtol=1e-5,
            atol=1e-6,
        )
        # The gradients are reduce-scattered and the new params gathered
        # only on the micro-steps that update: in a branch of a
        # conditional, not in the entry computation.
        hlo = ts.lower(sharded, _batch(0)).compile().as_text()
        entry = hlo[hlo.index("\nENTRY") :]
        entry = entry[: entry.index("\n}")]
        for collective in ("reduce-scatter", "all-gather"):
            self.assertIn(collective, hlo)
            self.assertNotIn(collective, entry)

    def test_accumulation_skips_an_overflowing_micro_step(self):
        # The overflow is seen in one device's unreduced gradients: every
        # device drops the cycle's update, as the replicated step does.
        optimizer = boostax.gradient_accumulation(optax.adam(1e-2), 2)
        states = []
        for shard in (False, True):
            ts = boostax.TrainStep(
                boostax.make_objective(loss_fn=loss_fn),
                optimizer,
                loss_scale=boostax.DynamicLossScale(2.0**10),
                data_parallel=boostax.DataParallel(
                    _mesh(), shard_optimizer_state=shard
                ),
            )
            state = ts.init(_params())
            for seed in range(4):
                x, y = _batch(seed)
                if seed == 1:
                    y[-1] = 1e36  # only the last device's rows overflow
                state, metrics = ts(state, (x, y))
                self.assertEqual(bool(metrics["updated"]), seed == 3)
            states.append(state)
        replicated, sharded = states
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        _utils.assert_trees_equal(
            jax.device_get(sharded.algorithms.loss_scale),
            jax.device_get(replicated.algorithms.loss_scale),
        )

    @parameterized.parameters(0, 2)
    def test_freezing(self, warmup):
        freezing = _freezing([0, 1, 1, 0, 1])
        (replicated, sharded), (_, ts) = _steps(
            optax.sgd(0.1, momentum=0.9),
            freezing=freezing,
            freeze_warmup_steps=warmup,
            steps=5,
            return_steps=True,
        )
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        if not warmup:
            # The frozen leaves are neither reduced nor gathered.
            compiled = ts.compile_all(sharded, _batch(0))
            gathers = [
                boostax.measure.collective_bytes(
                    compiled[k].compiled.as_text()
                )[1]
                for k in (0, 1)
            ]
            self.assertLess(gathers[1]["all-gather"], gathers[0]["all-gather"])
            self.assertLess(
                gathers[1]["reduce-scatter"], gathers[0]["reduce-scatter"]
            )

    # (4 warm-up steps: the warm-up program, then depth 0's.)
    @parameterized.parameters((0, 2), (4, 2))
    def test_freezing_with_accumulation(self, warmup, traces):
        # Each depth's program accumulates the trained leaves' unreduced
        # gradients and reduce-scatters them on the updating micro-step.
        freezing = _freezing([0, 1, 0], micro_steps=2)
        replicated, sharded = _steps(
            boostax.gradient_accumulation(optax.sgd(0.1, momentum=0.9), 2),
            freezing=freezing,
            freeze_warmup_steps=warmup,
            steps=6,
            traces=traces,
        )
        _utils.assert_trees_all_close(
            sharded.params, replicated.params, rtol=1e-5, atol=1e-6
        )
        self.assertEqual(sharded.opt_state.acc_grads["out"]["w"].shape[0], 8)

    @parameterized.named_parameters(
        (
            "global_norm_clipping",
            optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1)),
        ),
        ("lamb", optax.lamb(1e-3)),
        ("lars", optax.lars(1e-3)),
        # Its update clips each leaf by its root mean square.
        ("adafactor", optax.adafactor(1e-3)),
    )
    def test_refuses_optimizers_that_read_whole_leaves(self, optimizer):
        ts = boostax.make_train_step(
            optimizer,
            loss_fn=loss_fn,
            data_parallel=boostax.DataParallel(
                _mesh(), shard_optimizer_state=True
            ),
        )
        with self.assertRaisesRegex(ValueError, "correct only for elementwise"):
            ts.init(_params())

    def test_orbax_restores_the_sharded_state(self):
        # docs/checkpointing.md's recipe: restore into a fresh state's
        # shapes and shardings.
        ts = boostax.make_train_step(
            optax.adam(1e-2),
            loss_fn=loss_fn,
            data_parallel=boostax.DataParallel(
                _mesh(), shard_optimizer_state=True
            ),
        )
        state, _ = ts(ts.init(_params()), _batch(0))
        restored = _save_and_restore(state, ts)
        mu = restored.opt_state[0].mu["hidden"]["w"]
        self.assertEqual(mu.sharding.spec, P(None, "data"))
        _utils.assert_trees_equal(
            jax.device_get(ts(restored, _batch(1))[0]),
            jax.device_get(ts(state, _batch(1))[0]),
        )

    def _reshard(self, optimizer, steps, strict=True):
        """``(saved, restored)``: the state after `steps` sharded steps on 8
        devices, and its checkpoint restored (docs/checkpointing.md) onto a
        step over the first 4 devices; with their steps."""
        meshes = [
            jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])
            for n in (8, 4)
        ]
        ts8, ts4 = (
            boostax.make_train_step(
                optimizer,
                loss_fn=loss_fn,
                data_parallel=boostax.DataParallel(
                    mesh, shard_optimizer_state=True
                ),
            )
            for mesh in meshes
        )
        state = ts8.init(_params())
        for seed in range(steps):
            state, _ = ts8(state, _batch(seed))
        return (ts8, state), (ts4, _save_and_restore(state, ts4, strict))

    def _continue_equally(self, saved, restored, steps):
        (ts8, a), (ts4, b) = saved, restored
        for seed in range(10, 10 + steps):
            a, _ = ts8(a, _batch(seed))
            b, _ = ts4(b, _batch(seed))
        _utils.assert_trees_all_close(
            jax.device_get(b.params),
            jax.device_get(a.params),
            rtol=1e-5,
            atol=1e-6,
        )

    def test_restores_onto_another_device_count(self):
        # The state's leaves keep the parameters' shapes: Orbax re-shards
        # them to the specs of the 4-device step's target.
        saved, restored = self._reshard(optax.adam(1e-2), steps=1)
        mu = restored[1].opt_state[0].mu["hidden"]["w"]
        self.assertEqual(mu.sharding.spec, P("data"))
        self.assertLen(mu.sharding.device_set, 4)
        self.assertEqual(mu.addressable_shards[0].data.shape, (1, 8))
        _utils.assert_trees_equal(
            jax.device_get(restored[1].opt_state),
            jax.device_get(saved[1].opt_state),
        )
        self._continue_equally(saved, restored, steps=1)

    def test_restores_a_centralized_state_onto_another_device_count(self):
        # Centralized over its rows, hidden/w is split along its columns on
        # 8 devices and on 4 (where its rows, 4, would divide too).
        tx = boostax.with_gradient_centralization(
            optax.adam(1e-2), fan_in_multiple=1
        )
        saved, restored = self._reshard(tx, steps=1)
        for (ts, state), n in ((saved, 8), (restored, 4)):
            self.assertEqual(
                ts.builder.current_plan.split["hidden"]["w"], 1, msg=n
            )
            mu = state.opt_state[2][0].mu["hidden"]["w"]
            self.assertEqual(mu.sharding.spec, P(None, "data"))
            self.assertEqual(mu.addressable_shards[0].data.shape, (4, 8 // n))
        self._continue_equally(saved, restored, steps=1)

    def test_per_device_accumulators_restore_at_an_update(self):
        optimizer = boostax.gradient_accumulation(optax.adam(1e-2), 2)
        # One accumulator per device: 8 saved, 4 wanted; Orbax refuses.
        with self.assertRaisesRegex(ValueError, "stored shape"):
            self._reshard(optimizer, steps=2)
        # After an update every accumulator is zero: dropping (or adding)
        # zero rows is exact (docs/scaling.md).
        saved, restored = self._reshard(optimizer, steps=2, strict=False)
        self.assertEqual(
            restored[1].opt_state.acc_grads["out"]["w"].shape[0], 4
        )
        self._continue_equally(saved, restored, steps=2)

    def test_refuses_dim_reduce(self):
        ts = boostax.make_train_step(
            boostax.dim_reduce(np.eye(8, 51, dtype=np.float32)),
            loss_fn=loss_fn,
            data_parallel=boostax.DataParallel(
                _mesh(), shard_optimizer_state=True
            ),
        )
        with self.assertRaisesRegex(ValueError, "cannot run DimReduce"):
            ts.init(_params())

    def test_a_device_count_that_divides_no_leaf_is_said(self):
        # 6 and 7 devices divide no axis of these params (3 divides "odd"):
        # nothing was sharded, and nothing said so.
        for n in (6, 7):
            mesh = jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])
            ts = boostax.make_train_step(
                optax.adam(1e-2),
                loss_fn=loss_fn,
                data_parallel=boostax.DataParallel(
                    mesh, shard_optimizer_state=True
                ),
            )
            with (
                self.subTest(n),
                self.assertWarnsRegex(
                    UserWarning,
                    rf"^shard_optimizer_state=True shards nothing over the {n} "
                    rf"devices .* no parameter leaf has an axis whose size {n} "
                    r"divides, .* or shard_optimizer_state=False\.$",
                ),
            ):
                ts.init(_params())
            split = ts.builder.current_plan.split
            self.assertEqual(
                jax.tree.leaves(split, is_leaf=lambda x: x is None),
                [None] * 4,
            )
        # Where an axis divides but the optimizer reads along it (a
        # centralized kernel's fan-in), the warning says that instead.
        with self.assertWarnsRegex(
            UserWarning, "the optimizer reads each leaf along every axis"
        ):
            optimizer_sharding.split_plan(
                boostax.with_gradient_centralization(
                    optax.sgd(0.1), fan_in_multiple=1
                ),
                {"w": jnp.zeros((8, 3))},
                8,
            )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            optimizer_sharding.split_plan(optax.adam(1e-2), _params(), 8)

    def test_weakly_typed_params_shard_like_strong_ones(self):
        # jnp.full(shape, 0.01) and jnp.array(1.0) are weakly typed: the
        # whole-leaf trace converted their weak optimizer states (a
        # convert_element_type the sliced trace lacked), and Adam, AdamW
        # and momentum were refused as "computing otherwise on a slice".
        weak = jax.tree.map(lambda x: jnp.full(x.shape, 0.01), _params())
        weak["scale"] = jnp.array(1.0)
        self.assertTrue(all(x.weak_type for x in jax.tree.leaves(weak)))
        strong = jax.tree.map(lambda x: x.astype(jnp.float32), weak)
        for name, tx in (
            ("adam", optax.adam(1e-2)),
            ("adamw", optax.adamw(1e-2)),
            ("sgd_momentum", optax.sgd(0.1, momentum=0.9)),
        ):
            with self.subTest(name):
                self.assertEqual(
                    optimizer_sharding.split_plan(tx, weak, 8),
                    optimizer_sharding.split_plan(tx, strong, 8),
                )
        # The sharded step trains them as the replicated one does.
        states = []
        for shard in (False, True):
            ts = boostax.make_train_step(
                optax.adamw(1e-2),
                loss_fn=lambda p, b: loss_fn(p, b) * p["scale"],
                data_parallel=boostax.DataParallel(
                    _mesh(), shard_optimizer_state=shard
                ),
            )
            state = ts.init(weak)
            for seed in range(2):
                state, _ = ts(state, _batch(seed))
            states.append(jax.device_get(state.params))
        self.assertEqual(ts.builder.current_plan.split["hidden"]["w"], 1)
        _utils.assert_trees_all_close(*states, rtol=1e-6, atol=1e-7)

    def test_a_rule_read_from_the_slice_shape_names_the_leaf(self):
        # The refusal named no leaf.
        tx = boostax.with_gradient_centralization(optax.sgd(0.1))
        params = {
            "conv": {"k": jax.ShapeDtypeStruct((3, 3, 32, 32), jnp.float32)},
            "bias": jnp.zeros(32),
        }
        with self.assertRaisesRegex(
            ValueError,
            r"computes otherwise on a slice of \['conv'\]\['k'\] than on ",
        ):
            optimizer_sharding.check_elementwise(tx, params, 8)

    def test_elementwise_clipping_is_accepted(self):
        optimizer_sharding.check_elementwise(
            optax.chain(optax.clip(1.0), optax.adam(1e-3)), _params(), 8
        )

    def test_errors(self):
        with self.assertRaisesRegex(TypeError, "`shard_optimizer_state`"):
            boostax.DataParallel(_mesh(), shard_optimizer_state="yes")
        with self.assertRaisesRegex(ValueError, "pass `mesh=`"):
            boostax.auto_boost(
                "O0",
                {"data_parallel": {"shard_optimizer_state": True}},
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
            )

    def test_the_old_argument_warns_and_reaches_the_plan(self):
        with self.assertWarnsRegex(
            DeprecationWarning, "'data_parallel': {'shard_optimizer_state'"
        ):
            ts = boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
                mesh=_mesh(),
                shard_optimizer_state=True,
            )
        self.assertTrue(ts.data_parallel.shard_optimizer_state)

    def test_the_config_key_switches_it_on(self):
        config = {"data_parallel": {"shard_optimizer_state": True}}
        ts = boostax.auto_boost(
            "O0",
            config,
            optimizer=optax.sgd(0.1),
            loss_fn=loss_fn,
            mesh=_mesh(),
        )
        self.assertTrue(ts.data_parallel.shard_optimizer_state)
        self.assertTrue(
            boostax.BoostConfig.from_dict(
                config
            ).data_parallel.shard_optimizer_state
        )
        with (
            self.assertRaisesRegex(ValueError, "contradicts the config's"),
            self.assertWarns(DeprecationWarning),
        ):
            boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.sgd(0.1),
                loss_fn=loss_fn,
                mesh=_mesh(),
                shard_optimizer_state=False,
            )
        with self.assertRaisesRegex(ValueError, "pass `mesh=`"):
            boostax.auto_boost(
                "O0", config, optimizer=optax.sgd(0.1), loss_fn=loss_fn
            )
        with self.assertRaisesRegex(TypeError, "shard_optimizer_state"):
            boostax.BoostConfig.from_dict(
                {"data_parallel": {"shard_optimizer_state": "yes"}}
            )

    def test_cost_report_shows_the_state_each_device_holds(self):
        ts = boostax.auto_boost(
            "O0",
            {"data_parallel": {"shard_optimizer_state": True}},
            optimizer=optax.adam(1e-2),
            loss_fn=loss_fn,
            mesh=_mesh(),
        )
        state = ts.init(_params())
        report = boostax.measure.cost_report(ts, state, _batch(0))
        ours, plain = report.state_bytes["boosted"], report.state_bytes["plain"]
        self.assertEqual(ours, boostax.measure.state_bytes_per_device(state))
        # Adam's two slots of the 8-divisible leaves (4x8, 1x8, 8x1: 48
        # floats) are split over 8 devices; "odd" (3) stays whole.
        self.assertEqual(ours["opt_state"] - plain["opt_state"], -2 * 42 * 4)
        self.assertEqual(ours["params"], plain["params"])
        self.assertEqual(ours["opt_state"], _device_bytes(state.opt_state)[0])
        self.assertIn("state per device: params", str(report))
        self.assertEqual(report.as_dict()["state_bytes"]["plain"], plain)


if __name__ == "__main__":
    absltest.main()
