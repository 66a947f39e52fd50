# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""ZeRO-1 under a half-precision policy, on 8 simulated devices: the float32
params stored sharded like the optimizer state, all-gathered at the start
of the step in the dtype the forward reads each leaf in; and the choice of
that regime (`DataParallel.shard_params`: by default only without gradient
freezing or accumulation, where it sends fewer bytes).

Each sharded step is compared with the replicated step of the same policy.
"""

import functools
import re
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from jax.sharding import PartitionSpec as P

import boostax
from boostax._src.step import attributes as step_attributes
from boostax._src.step import param_reads
from tests import _utils

BATCH = 16
F32, BF16 = jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)
O2_BF16 = boostax.precision_policy("O2", "bfloat16")


class _Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(16)(x)  # kernel (8, 16), bias (16,): split
        x = nn.LayerNorm()(x)  # scale, bias (16,): split, float32 under O2
        # kernel (16, 3) split; bias (3,) has no axis 8 divides: whole.
        return nn.Dense(3)(jnp.tanh(x))


def _loss(outputs, targets):
    return jnp.mean((outputs - targets) ** 2)


def _variables():
    return _Model().init(jax.random.PRNGKey(0), np.zeros((1, 8), np.float32))


def _batch(seed):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(BATCH, 8)).astype(np.float32),
        rng.normal(size=(BATCH, 3)).astype(np.float32),
    )


def _mesh(n=8):
    return jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])


def _step(
    shard=True,
    precision=O2_BF16,
    data_parallel=None,
    optimizer=None,
    shard_params=None,
    **kwargs,
):
    return boostax.TrainStep(
        boostax.make_objective(model=_Model(), loss=_loss),
        optimizer or optax.adam(1e-2),
        precision=precision,
        data_parallel=data_parallel
        or boostax.DataParallel(
            _mesh(), shard_optimizer_state=shard, shard_params=shard_params
        ),
        **_utils.with_step_options(kwargs),
    )


def _run(ts, steps=3):
    state = ts.init(_variables())
    for seed in range(steps):
        state, _ = ts(state, _batch(seed))
    return state


def _assert_params_close(actual, expected, rtol=1e-6, atol=1e-7):
    _utils.assert_trees_all_close(
        jax.device_get(actual.params),
        jax.device_get(expected.params),
        rtol=rtol,
        atol=atol,
    )


def _gathers(hlo: str) -> list[tuple[str, tuple[int, ...]]]:
    """``(element type, shape)`` of each all-gather's result in `hlo`."""
    found = re.findall(r"= (\w+)\[([\d,]*)\]\S* all-gather\(", hlo)
    return sorted(
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in found
    )


def _entry(hlo: str) -> str:
    """The entry computation of compiled `hlo`."""
    entry = hlo[hlo.index("\nENTRY") :]
    return entry[: entry.index("\n}")]


def _bytes_per_update(hlo: str, k: int) -> float:
    """Bytes sent per device over the k micro-steps of an update: the
    entry computation's at each, the accumulation's conditional's once."""
    entry = boostax.measure.collective_bytes(_entry(hlo))[0]
    return (k - 1) * entry + boostax.measure.collective_bytes(hlo)[0]


def _freezing():
    """Two groups: every leaf (depth 0), then the last Dense layer only
    (depth 1, 78% of the params frozen)."""
    everything = tuple(
        tuple(k.key for k in path)
        for path, _ in jax.tree_util.tree_leaves_with_path(
            _variables()["params"]
        )
    )
    last = (("Dense_1", "kernel"), ("Dense_1", "bias"))
    return boostax.Freezing(
        (everything, last), np.asarray([0, 1, 1, 0], np.int32)
    )


def _forward_dtypes(policy):
    params = _variables()["params"]
    x = np.zeros((2, 8), np.float32)

    def loss_fn(p):
        p, inputs = policy.cast_parameters(p), policy.cast_inputs(x)
        with step_attributes.linen_step_attributes(policy):
            return _Model().apply({"params": p}, inputs)

    return param_reads.forward_dtypes(loss_fn, params, policy.compute_dtype)


class ForwardDtypesTest(parameterized.TestCase):
    def test_o2_casts_the_dense_layers_not_the_normalisation(self):
        dtypes = _forward_dtypes(O2_BF16)
        self.assertEqual(
            dtypes,
            {
                "Dense_0": {"kernel": BF16, "bias": BF16},
                "LayerNorm_0": {"scale": F32, "bias": F32},
                "Dense_1": {"kernel": BF16, "bias": BF16},
            },
        )

    def test_o3_casts_everything(self):
        dtypes = _forward_dtypes(boostax.precision_policy("O3", "bfloat16"))
        self.assertEqual(set(jax.tree.leaves(dtypes)), {BF16})

    def test_float32_modules_are_read_in_float32(self):
        policy = boostax.precision_policy(
            "O2", "bfloat16", float32_modules=("Dense",)
        )
        self.assertEqual(set(jax.tree.leaves(_forward_dtypes(policy))), {F32})

    def test_a_read_in_a_loop_or_beside_the_cast_is_float32(self):
        def loss_fn(p):
            cast = p["a"].astype(jnp.bfloat16) + p["b"].astype(jnp.bfloat16)
            loop = jax.lax.fori_loop(0, 2, lambda i, c: c * 2, p["c"])
            return jnp.sum(cast) + jnp.sum(loop) + jnp.sum(p["b"])

        params = {k: jnp.ones((4,), jnp.float32) for k in "abcd"}
        self.assertEqual(
            param_reads.forward_dtypes(loss_fn, params, jnp.bfloat16),
            # "d" is never read: any copy will do.
            {"a": BF16, "b": F32, "c": F32, "d": BF16},
        )


class ShardedParamsTest(parameterized.TestCase):
    def test_gathers_each_leaf_in_the_dtype_the_forward_reads(self):
        ts = _step()
        state = ts.init(_variables())
        self.assertTrue(ts.builder.stores_sharded_params)
        hlo = ts.lower(state, _batch(0)).compile().as_text()
        # The Dense leaves as 16-bit words (bfloat16's bits), the
        # LayerNorm's in float32; the (3,) bias is not gathered. Each once.
        self.assertEqual(
            _gathers(hlo),
            [
                ("f32", (16,)),
                ("f32", (16,)),
                ("u16", (8, 16)),
                ("u16", (16,)),
                ("u16", (16, 3)),
            ],
        )
        ours, counts = boostax.measure.collective_bytes(hlo)
        self.assertEqual(counts["all-gather"], 5)
        # The float32 ZeRO-1 step gathers the same leaves in float32.
        plain = _step(precision=None)
        theirs, _ = boostax.measure.collective_bytes(
            plain.lower(plain.init(_variables()), _batch(0)).compile().as_text()
        )
        half = 8 * 16 + 16 + 16 * 3  # elements gathered in bfloat16
        self.assertEqual(theirs - ours, half * 2 * 7 / 8)
        self.assertLess(ours, 0.85 * theirs)

    def test_params_are_float32_whole_arrays_stored_sharded(self):
        ts = _step()
        state = ts.init(_variables())
        whole = _variables()["params"]
        for path, leaf in jax.tree_util.tree_leaves_with_path(state.params):
            name = jax.tree_util.keystr(path)
            self.assertEqual(leaf.dtype, F32, name)
        kernel = state.params["Dense_0"]["kernel"]
        self.assertEqual(kernel.shape, (8, 16))
        self.assertEqual(kernel.sharding.spec, P("data"))
        self.assertEqual(kernel.addressable_shards[0].data.shape, (1, 16))
        self.assertEqual(
            state.params["Dense_1"]["kernel"].sharding.spec, P("data")
        )
        self.assertTrue(
            state.params["Dense_1"]["bias"].sharding.is_fully_replicated
        )
        _utils.assert_trees_equal(jax.device_get(state.params), whole)
        on_device = boostax.measure.state_bytes_per_device(state)["params"]
        split = 8 * 16 + 16 + 2 * 16 + 16 * 3  # elements split over 8
        self.assertEqual(on_device, split * 4 // 8 + 3 * 4)

    def test_equals_the_replicated_step(self):
        replicated = _run(_step(shard=False))
        sharded_ts = _step()
        sharded = _run(sharded_ts)
        # The forward reads the same rounded values and the gradients are
        # the float32 transposes of the same casts: the params agree to
        # float32 rounding (the reduce-scatter sums in its own order).
        _assert_params_close(sharded, replicated)
        moved = jax.tree.map(
            lambda a, b: float(jnp.max(jnp.abs(a - b))),
            jax.device_get(sharded.params),
            _variables()["params"],
        )
        self.assertGreater(min(jax.tree.leaves(moved)), 1e-3)
        # Evaluation under jit reads the sharded params as whole arrays.
        x, _ = _batch(9)
        np.testing.assert_allclose(
            sharded_ts.predict(sharded, x),
            _step(shard=False).predict(replicated, x),
            rtol=1e-6,
            atol=1e-6,
        )

    def test_a_skipped_step_changes_nothing(self):
        # float16 brings a dynamic loss scale; one device's rows overflow.
        ts = _step(precision=boostax.precision_policy("O2", "float16"))
        state, _ = ts(ts.init(_variables()), _batch(0))
        x, y = _batch(1)
        y[-1] = 1e30
        new_state, metrics = ts(state, (x, y))
        self.assertTrue(bool(metrics["overflow"]))
        _utils.assert_trees_equal(
            jax.device_get((new_state.params, new_state.opt_state)),
            jax.device_get((state.params, state.opt_state)),
        )
        kernel = new_state.params["Dense_0"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (1, 16))
        self.assertEqual(
            float(new_state.algorithms.loss_scale.loss_scale),
            float(state.algorithms.loss_scale.loss_scale) / 2,
        )

    def test_the_reduce_scatter_runs_in_the_reduce_dtype(self):
        policy = boostax.precision_policy(
            "O2", "bfloat16", reduce_dtype="bfloat16"
        )
        ts = _step(precision=policy)
        lowered = ts.lower(ts.init(_variables()), _batch(0))
        hlo = lowered.as_text(dialect="hlo")
        scattered = re.findall(r"= (\w+)\[[\d,]*\]\S* reduce-scatter\(", hlo)
        # The split leaves' gradients, rounded to bfloat16 and summed so
        # (XLA's CPU compiler then widens the sum to float32).
        self.assertEqual(scattered, ["bf16"] * 5)

    def test_o3_gathers_every_split_leaf_in_half_precision(self):
        ts = _step(precision=boostax.precision_policy("O3", "bfloat16"))
        hlo = ts.lower(ts.init(_variables()), _batch(0)).compile().as_text()
        self.assertEqual({t for t, _ in _gathers(hlo)}, {"u16"})
        self.assertLen(_gathers(hlo), 5)

    def test_freezing_gathers_the_frozen_leaves_when_asked(self):
        # Depth 1 trains the last Dense layer only; its forward still
        # reads the frozen ones, which are gathered as at depth 0.
        states = []
        for shard in (False, True):
            ts = _step(
                shard,
                shard_params=shard or None,
                freezing=_freezing(),
                freeze_warmup_steps=0,
            )
            states.append(_run(ts, steps=4))
        self.assertTrue(ts.builder.stores_sharded_params)
        _assert_params_close(states[1], states[0])
        compiled = ts.compile_all(states[1], _batch(0))
        hlo = [compiled[k].compiled.as_text() for k in (0, 1)]
        self.assertEqual(_gathers(hlo[0]), _gathers(hlo[1]))
        self.assertLen(_gathers(hlo[1]), 5)
        scattered = [
            boostax.measure.collective_bytes(h)[1]["reduce-scatter"]
            for h in hlo
        ]
        self.assertEqual(scattered, [5, 1])  # Dense_1's bias is whole
        # The bytes of the rule's choice: 78% of the params frozen, the
        # start-of-step gather of every leaf sends more than the final
        # float32 gather of the trained ones (docs/scaling.md).
        sent = [boostax.measure.collective_bytes(h)[0] for h in hlo]
        self.assertEqual(sent, [1260, 644])

    def test_accumulation_gathers_at_every_micro_step(self):
        states = []
        for shard in (False, True):
            ts = boostax.make_train_step(
                boostax.gradient_accumulation(optax.adam(1e-2), 2),
                model=_Model(),
                loss=_loss,
                precision=O2_BF16,
                data_parallel=boostax.DataParallel(
                    _mesh(),
                    shard_optimizer_state=shard,
                    shard_params=shard or None,
                ),
            )
            states.append(_run(ts, steps=4))
        _assert_params_close(states[1], states[0])
        # Every micro-step's forward reads the params: the all-gathers are
        # in the entry computation; the reduce-scatter runs in the
        # accumulation's conditional, on the micro-step that updates.
        hlo = ts.lower(states[1], _batch(0)).compile().as_text()
        entry = _entry(hlo)
        self.assertLen(_gathers(entry), 5)
        self.assertIn("reduce-scatter", hlo)
        self.assertNotIn("reduce-scatter", entry)
        # Two gathers (448 bytes each: O2's LayerNorm in float32) against
        # the final float32 gather's 784: more than the replicated params
        # send (1603).
        self.assertEqual(_bytes_per_update(hlo, 2), 1715)

    def test_params_follow_the_split_plan_of_centralization(self):
        # Centralization averages each kernel over its fan-in: the split
        # plan cuts kernels along their output axis, params as the state.
        optimizer = optax.chain(
            boostax.centralize_gradients(fan_in_multiple=1), optax.adam(1e-2)
        )
        states = [
            _run(_step(shard, optimizer=optimizer)) for shard in (False, True)
        ]
        _assert_params_close(states[1], states[0])
        kernel = states[1].params["Dense_0"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (8, 2))
        mu = states[1].opt_state[1][0].mu["Dense_0"]["kernel"]
        self.assertEqual(mu.sharding.spec, kernel.sharding.spec)

    def test_adasum_stores_each_nodes_params_split_over_its_devices(self):
        states = []
        for shard in (False, True):
            dp = boostax.DataParallel(
                boostax.node_mesh(4),
                reduction="adasum",
                local_axis="local",
                shard_optimizer_state=shard,
            )
            states.append(_run(_step(data_parallel=dp)))
        _assert_params_close(states[1], states[0], rtol=1e-5, atol=1e-6)
        kernel = states[1].params["Dense_0"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (2, 16))

    def _save_and_restore(self, state, ts):
        return _utils.orbax_round_trip(state, ts.init(_variables()))

    def test_orbax_resumes_bit_for_bit(self):
        ts = _step()
        state, _ = ts(ts.init(_variables()), _batch(0))
        restored = self._save_and_restore(state, ts)
        kernel = restored.params["Dense_0"]["kernel"]
        self.assertEqual(kernel.sharding.spec, P("data"))
        self.assertEqual(kernel.shape, (8, 16))
        _utils.assert_trees_equal(
            jax.device_get(ts(restored, _batch(1))[0]),
            jax.device_get(ts(state, _batch(1))[0]),
        )
        # Onto 4 devices: Orbax re-shards the whole arrays.
        ts4 = _step(
            data_parallel=boostax.DataParallel(
                _mesh(4), shard_optimizer_state=True
            )
        )
        restored4 = self._save_and_restore(state, ts4)
        kernel = restored4.params["Dense_0"]["kernel"]
        self.assertLen(kernel.sharding.device_set, 4)
        self.assertEqual(kernel.addressable_shards[0].data.shape, (2, 16))
        _utils.assert_trees_equal(
            jax.device_get(restored4.params), jax.device_get(state.params)
        )


class ShardParamsChoiceTest(parameterized.TestCase):
    """`DataParallel.shard_params`: True, False, or the rule (None)."""

    def _compiled_depths(self, ts, state):
        compiled = ts.compile_all(state, _batch(0))
        return [compiled[k].compiled.as_text() for k in (0, 1)]

    def test_default_keeps_params_replicated_with_freezing(self):
        ts = _step(freezing=_freezing(), freeze_warmup_steps=0)
        state = ts.init(_variables())
        self.assertFalse(ts.builder.stores_sharded_params)
        kernel = state.params["Dense_0"]["kernel"]
        self.assertTrue(kernel.sharding.is_fully_replicated)
        hlo = self._compiled_depths(ts, state)
        # Depth 0 gathers every split leaf after the update, in float32;
        # depth 1 only the trained kernel of Dense_1 (its bias is whole):
        # no frozen leaf is gathered.
        self.assertEqual(
            _gathers(hlo[0]),
            [
                ("f32", (8, 16)),
                ("f32", (16,)),
                ("f32", (16,)),
                ("f32", (16,)),
                ("f32", (16, 3)),
            ],
        )
        self.assertEqual(_gathers(hlo[1]), [("f32", (16, 3))])
        sent = [boostax.measure.collective_bytes(h)[0] for h in hlo]
        self.assertEqual(sent, [1596, 364])
        replicated = _run(
            _step(False, freezing=_freezing(), freeze_warmup_steps=0), 4
        )
        _assert_params_close(_run(ts, 4), replicated)

    def test_default_keeps_params_replicated_with_accumulation(self):
        ts = boostax.make_train_step(
            boostax.gradient_accumulation(optax.adam(1e-2), 2),
            model=_Model(),
            loss=_loss,
            precision=O2_BF16,
            data_parallel=boostax.DataParallel(
                _mesh(), shard_optimizer_state=True
            ),
        )
        state = ts.init(_variables())
        self.assertFalse(ts.builder.stores_sharded_params)
        kernel = state.params["Dense_0"]["kernel"]
        self.assertTrue(kernel.sharding.is_fully_replicated)
        # The gather runs once per update, in the accumulation's
        # conditional: none in the entry computation (every micro-step).
        hlo = ts.lower(state, _batch(0)).compile().as_text()
        self.assertLen(_gathers(hlo), 5)
        self.assertEmpty(_gathers(_entry(hlo)))
        self.assertEqual(_bytes_per_update(hlo, 2), 1603)
        # optax.MultiSteps accumulates too.
        multi = optax.MultiSteps(optax.adam(1e-2), 2)
        ts = _step(optimizer=multi.gradient_transformation())
        ts.init(_variables())
        self.assertFalse(ts.builder.stores_sharded_params)

    def test_float32_params_stored_sharded_when_asked(self):
        ts = _step(precision=None, shard_params=True)
        state = ts.init(_variables())
        self.assertTrue(ts.builder.stores_sharded_params)
        kernel = state.params["Dense_0"]["kernel"]
        self.assertEqual(kernel.dtype, F32)
        self.assertEqual(kernel.sharding.spec, P("data"))
        self.assertEqual(kernel.addressable_shards[0].data.shape, (1, 16))
        on_device = boostax.measure.state_bytes_per_device(state)["params"]
        split = 8 * 16 + 16 + 2 * 16 + 16 * 3  # elements split over 8
        self.assertEqual(on_device, split * 4 // 8 + 3 * 4)
        # Gathered at the start in float32: the same leaves and bytes as
        # the replicated params' final gather.
        hlo = ts.lower(state, _batch(0)).compile().as_text()
        self.assertEqual({t for t, _ in _gathers(hlo)}, {"f32"})
        self.assertLen(_gathers(hlo), 5)
        # The default without a half-precision policy: replicated.
        plain = _step(precision=None)
        plain_state = plain.init(_variables())
        self.assertFalse(plain.builder.stores_sharded_params)
        self.assertTrue(
            plain_state.params["Dense_0"]["kernel"].sharding.is_fully_replicated
        )
        plain_hlo = plain.lower(plain_state, _batch(0)).compile().as_text()
        self.assertEqual(_gathers(hlo), _gathers(plain_hlo))
        self.assertEqual(
            boostax.measure.collective_bytes(hlo)[0],
            boostax.measure.collective_bytes(plain_hlo)[0],
        )
        sharded = _run(ts)
        _assert_params_close(sharded, _run(_step(False, precision=None)))
        kernel = sharded.params["Dense_0"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (1, 16))

    def test_errors(self):
        for bad in ("yes", 1, 0.0):
            with self.assertRaisesRegex(
                TypeError,
                r"`shard_params` must be a bool \(True or False\) or None",
            ):
                boostax.DataParallel(
                    _mesh(), shard_optimizer_state=True, shard_params=bad
                )
        with self.assertRaisesRegex(
            ValueError, "needs shard_optimizer_state=True"
        ):
            boostax.DataParallel(_mesh(), shard_params=True)
        # False without a sharded state: what it does anyway.
        self.assertFalse(
            boostax.DataParallel(_mesh(), shard_params=False).shard_params
        )
        with self.assertRaisesRegex(ValueError, "call `init`"):
            _step().builder.stores_sharded_params  # noqa: B018

    def test_the_config_key_and_the_keyword(self):
        config = {
            "data_parallel": {
                "shard_optimizer_state": True,
                "shard_params": False,
            }
        }
        parsed = boostax.BoostConfig.from_dict(config)
        self.assertFalse(parsed.data_parallel.shard_params)
        self.assertEqual(
            boostax.BoostConfig.from_dict(parsed.to_dict()), parsed
        )
        self.assertIsNone(boostax.BoostConfig().data_parallel.shard_params)
        with self.assertRaisesRegex(
            TypeError, "data_parallel.shard_params` must be a bool or None"
        ):
            boostax.BoostConfig.from_dict(
                {"data_parallel": {"shard_params": "yes"}}
            )
        boost = functools.partial(
            boostax.auto_boost,
            "O0",
            optimizer=optax.adam(1e-2),
            model=_Model(),
            loss=_loss,
            precision="bfloat16",
        )
        ts = boost(config, mesh=_mesh())
        self.assertIs(ts.data_parallel.shard_params, False)
        ts.init(_variables())
        self.assertFalse(ts.builder.stores_sharded_params)
        # The keywords (read for one release, with a DeprecationWarning):
        # alone, and agreeing with the config.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.assertIs(
                boost(
                    mesh=_mesh(), shard_optimizer_state=True, shard_params=False
                ).data_parallel.shard_params,
                False,
            )
            self.assertIs(
                boost(
                    config, mesh=_mesh(), shard_params=False
                ).data_parallel.shard_params,
                False,
            )
            with self.assertRaisesRegex(ValueError, "contradicts the config's"):
                boost(config, mesh=_mesh(), shard_params=True)
            with self.assertRaisesRegex(ValueError, "pass `mesh=`"):
                boost(shard_params=True)
            with self.assertRaisesRegex(
                TypeError,
                r"`shard_params` must be a bool \(True or False\) or None",
            ):
                boost(mesh=_mesh(), shard_optimizer_state=True, shard_params=1)


if __name__ == "__main__":
    absltest.main()
