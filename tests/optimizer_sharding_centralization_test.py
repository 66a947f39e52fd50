# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The sharded optimizer state (ZeRO-1) with gradient centralization.

Centralization averages each kernel's gradient over its fan-in axes, so
the split plan (`optimizer_sharding.split_plan`) splits those kernels
along their output axis: each device's slice holds whole fan-ins, and the
update on the slices is the whole leaves' update, on 8 simulated devices.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from jax.sharding import PartitionSpec as P

import boostax
from boostax._src.distributed import optimizer_sharding
from tests import _utils

D = 8
LR, MOMENTUM = 0.1, 0.9
B1, B2, EPS = 0.9, 0.999, 1e-8

# A Dense kernel (in, out), a convolution's (kh, kw, in, out) and a bias:
# fan-ins 16 and 144, multiples of 16, so MindSpore's rule centralizes both.
SHAPES = {
    "dense": {"kernel": (16, 32), "bias": (32,)},
    "conv": {"kernel": (3, 3, 16, 32)},
}
FAN_IN = {("dense", "kernel"): (0,), ("conv", "kernel"): (0, 1, 2)}


def _abstract():
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, jnp.float32),
        SHAPES,
        is_leaf=lambda s: isinstance(s, tuple),
    )


def _random(seed):
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda s: rng.normal(size=s).astype(np.float32),
        SHAPES,
        is_leaf=lambda s: isinstance(s, tuple),
    )


def _reference(optimizer: str, params, grads_seq):
    """The params after one centralized update per gradient tree, in
    float64 NumPy, on the whole leaves."""
    out = {}
    for layer, leaves in params.items():
        out[layer] = {}
        for name, p in leaves.items():
            p = np.float64(p)
            m, v = np.zeros_like(p), np.zeros_like(p)
            for t, grads in enumerate(grads_seq, start=1):
                g = np.float64(grads[layer][name])
                axes = FAN_IN.get((layer, name))
                if axes is not None:
                    g = g - g.mean(axis=axes, keepdims=True)
                if optimizer == "sgd_momentum":
                    m = g + MOMENTUM * m
                    p = p - LR * m
                else:
                    m = B1 * m + (1 - B1) * g
                    v = B2 * v + (1 - B2) * g**2
                    m_hat, v_hat = m / (1 - B1**t), v / (1 - B2**t)
                    p = p - LR * m_hat / (np.sqrt(v_hat) + EPS)
            out[layer][name] = p
    return out


def _optimizer(name):
    core = (
        optax.sgd(LR, momentum=MOMENTUM)
        if name == "sgd_momentum"
        else optax.adam(LR, b1=B1, b2=B2, eps=EPS)
    )
    return boostax.with_gradient_centralization(core)


class SplitPlanTest(parameterized.TestCase):
    def test_centralized_kernels_split_along_their_output_axis(self):
        with_gc = optimizer_sharding.split_plan(
            _optimizer("sgd_momentum"), _abstract(), D
        )
        self.assertEqual(
            with_gc, {"dense": {"kernel": 1, "bias": 0}, "conv": {"kernel": 3}}
        )
        # Without centralization: the first axis 8 divides, as before.
        plain = optimizer_sharding.split_plan(
            optax.sgd(LR, momentum=MOMENTUM), _abstract(), D
        )
        self.assertEqual(
            plain, {"dense": {"kernel": 0, "bias": 0}, "conv": {"kernel": 2}}
        )
        self.assertEqual(plain, optimizer_sharding.default_plan(_abstract(), D))
        # The slices of the first-axis plan fail the fan-in test (16 / 8):
        # they would run another computation than the whole kernels.
        with self.assertRaisesRegex(ValueError, "otherwise on a slice"):
            optimizer_sharding.check_elementwise(
                _optimizer("sgd_momentum"), _abstract(), D, plan=plain
            )

    def test_a_kernel_whose_output_axis_8_does_not_divide_stays_whole(self):
        params = {"k": jax.ShapeDtypeStruct((16, 4), jnp.float32)}
        # Its only leaf whole: the plan shards nothing, and says so.
        with self.assertWarnsRegex(UserWarning, "shards nothing over the 8"):
            plan = optimizer_sharding.split_plan(
                _optimizer("adam"), params, D, None
            )
        self.assertEqual(plan, {"k": None})

    @parameterized.named_parameters(
        # g / rms over the rows: a per-column (output unit) statistic.
        (
            "column_rms",
            lambda g: g / jnp.sqrt(jnp.mean(g**2, axis=0, keepdims=True)),
            1,
        ),
        # A running sum down each column, through a transpose and back.
        ("cumsum_rows", lambda g: jnp.cumsum(g.T, axis=1).T, 1),
        # A contraction over the columns only (a fixed mixing of units).
        ("matmul_columns", lambda g: g @ jnp.eye(32, dtype=g.dtype), 0),
        # Reshaped, reduced over the (4, 4) split of the rows, broadcast.
        (
            "reshaped_rows",
            lambda g: g - g.reshape(4, 4, -1).mean(axis=(0, 1))[None],
            1,
        ),
        # A sort within each row.
        ("sort_rows", lambda g: jnp.sort(g, axis=1), 0),
    )
    def test_follows_the_split_axis(self, fn, axis):
        tx = optax.chain(optax.stateless(lambda g, p: jax.tree.map(fn, g)))
        params = {"k": jax.ShapeDtypeStruct((16, 32), jnp.float32)}
        plan = optimizer_sharding.split_plan(tx, params, D)
        self.assertEqual(plan, {"k": axis})

    def test_a_state_slot_read_along_its_split_axis_moves_its_leaf(self):
        # Momentum, k's scaled by its previous column means: the reduction
        # reads only k's slot, whose split follows k's (not `other`'s, of
        # the same shape).
        def update(grads, slots, params=None):
            del params
            scale = 1 + jnp.mean(jnp.abs(slots["k"]), axis=0, keepdims=True)
            slots = jax.tree.map(lambda m, g: 0.9 * m + g, slots, grads)
            return {"k": slots["k"] / scale, "other": slots["other"]}, slots

        tx = optax.GradientTransformation(
            lambda p: jax.tree.map(jnp.zeros_like, p), update
        )
        params = {
            "k": jax.ShapeDtypeStruct((16, 32), jnp.float32),
            "other": jax.ShapeDtypeStruct((16, 32), jnp.float32),
        }
        plan = optimizer_sharding.split_plan(tx, params, D)
        self.assertEqual(plan, {"k": 1, "other": 0})

    @parameterized.named_parameters(
        (
            "global_norm_clipping",
            optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1)),
            "reduce_sum` over every axis",
        ),
        ("lamb", optax.lamb(1e-3), "over every axis"),
        ("trust_ratio", optax.scale_by_trust_ratio(), "over every axis"),
        (
            "unknown_primitive",
            optax.stateless(
                lambda g, p: jax.tree.map(lambda x: jnp.fft.fft(x).real, g)
            ),
            "cannot follow",
        ),
    )
    def test_refuses_what_reads_a_whole_leaf(self, tx, message):
        with self.assertRaisesRegex(ValueError, message):
            optimizer_sharding.split_plan(tx, _abstract(), D)
        # And names the leaf.
        with self.assertRaisesRegex(ValueError, r"from \['dense'\]\["):
            optimizer_sharding.split_plan(
                tx, {"dense": _abstract()["dense"]}, D
            )


class CentralizedSlicesTest(parameterized.TestCase):
    @parameterized.parameters("sgd_momentum", "adam")
    def test_slices_match_a_float64_reference(self, name):
        tx = _optimizer(name)
        plan = optimizer_sharding.split_plan(tx, _abstract(), D)
        mesh = jax.make_mesh((D,), ("data",))
        params, grads_seq = _random(0), [_random(1), _random(2)]

        @jax.jit
        @jax.shard_map(mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)
        def train(params, grads_seq):
            def local(tree):
                return optimizer_sharding.local_slices(tree, ("data",), D, plan)

            p = local(params)
            state = tx.init(p)
            for grads in grads_seq:
                updates, state = tx.update(local(grads), state, p)
                p = optax.apply_updates(p, updates)
            return optimizer_sharding.gather(p, params, ("data",), D, plan=plan)

        got = jax.device_get(train(params, grads_seq))
        _utils.assert_trees_all_close(
            got, _reference(name, params, grads_seq), rtol=1e-5, atol=1e-5
        )


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"][None])
    return jnp.mean((jnp.tanh(h @ params["w2"]) @ params["w3"] - y) ** 2)


def _params():
    rng = np.random.default_rng(0)
    return {
        "w1": jnp.asarray(rng.normal(size=(16, 32)) / 4, jnp.float32),
        "b1": jnp.zeros((32,), jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(32, 16)) / 6, jnp.float32),
        # Fan-in 16, 4 outputs: centralized over its rows, no other axis
        # 8 divides, so it stays whole.
        "w3": jnp.asarray(rng.normal(size=(16, 4)) / 4, jnp.float32),
    }


def _batch(seed):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(16, 16)).astype(np.float32),
        rng.normal(size=(16, 4)).astype(np.float32),
    )


class CentralizedStepTest(absltest.TestCase):
    def test_sharded_step_equals_the_replicated_step(self):
        tx = boostax.with_gradient_centralization(
            optax.adam(1e-2), weight_decay=1e-4
        )
        states, steps = [], []
        for shard in (False, True):
            ts = boostax.make_train_step(
                tx,
                loss_fn=loss_fn,
                data_parallel=boostax.DataParallel(
                    jax.make_mesh((D,), ("data",)),
                    shard_optimizer_state=shard,
                ),
            )
            state = ts.init(_params())
            for seed in range(3):
                state, _ = ts(state, _batch(seed))
            states.append(state)
            steps.append(ts)
        replicated, sharded = states
        self.assertEqual(steps[1].trace_count, 1)
        plan = steps[1].builder.current_plan.split
        self.assertEqual(plan, {"w1": 1, "b1": 0, "w2": 1, "w3": None})
        mu = sharded.opt_state[2][0].mu
        self.assertEqual(mu["w1"].sharding.spec, P(None, "data"))
        self.assertTrue(mu["w3"].sharding.is_fully_replicated)
        _utils.assert_trees_all_close(
            jax.device_get(sharded.params),
            jax.device_get(replicated.params),
            rtol=1e-5,
            atol=1e-6,
        )
        # Per device: 1/8 of the split leaves' slots, w3's whole.
        whole = boostax.measure.state_bytes_per_device(replicated)["opt_state"]
        ours = boostax.measure.state_bytes_per_device(sharded)["opt_state"]
        w3 = 2 * 4 * 16 * 4  # Adam's two float32 slots
        self.assertEqual(ours - w3, (whole - w3 - 4) // D + 4)  # + count


if __name__ == "__main__":
    absltest.main()
