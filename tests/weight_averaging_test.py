# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Weight averaging (`average_params`): the EMA of the params in the state.

The transform against a float64 NumPy EMA under ``jax.jit``; in
`auto_boost` at O1 (LessBN, freezing, accumulation, a dynamic loss scale)
in one step: it advances once per update, a skipped update leaves it bit
for bit, frozen leaves keep theirs, `predict` evaluates it, and an Orbax
round trip keeps it and resumes bitwise; at O0 (a skipped step, the
EMA of the step's params), under ZeRO-1 and with DimReduce.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import serialization
from flax.training import train_state as flax_train_state

import boostax
from boostax._src import tree_utils
from tests import _utils

DECAY = 0.5  # large steps of the average: every update shows


def reference_ema(xs, decay, *, start_step=0, debias=True):
    """The averages after each of the params `xs[1:]` (float64), from
    ``xs[0]`` (the initial params)."""
    average = np.asarray(xs[0], np.float64)
    biased, out = 0.0 * average, []
    for t, x in enumerate(xs[1:], start=1):
        x = np.asarray(x, np.float64)
        n = t - start_step
        if n <= 0:
            average = x
        elif debias:
            biased = decay * biased + (1 - decay) * x
            average = biased / (1 - decay**n)
        else:
            average = decay * average + (1 - decay) * x
        out.append(average)
    return out


def last_average(trees, decay):
    """`reference_ema`'s last average, leaf by leaf of the param trees."""
    return jax.tree.map(lambda *xs: reference_ema(xs, decay)[-1], *trees)


def _weight(n, decay=DECAY):
    """The weight of the new params at the n-th averaged update (debias)."""
    return (1 - decay) / (1 - decay**n)


def _ema_leaf(average, param, changed, w):
    """One leaf's average after an update that `changed` it or not."""
    return average + w * (np.float64(param) - average) if changed else average


def _average_state(opt_state):
    return tree_utils.find_state(opt_state, boostax.AverageParamsState)


class AverageParamsTest(parameterized.TestCase):
    @parameterized.parameters(
        (0.9, 0, True),
        (0.999, 0, True),
        (0.9, 3, True),
        (0.9, 0, False),
        (0.99, 4, False),
        (0.0, 0, True),
    )
    def test_matches_the_float64_reference(self, decay, start_step, debias):
        rng = np.random.default_rng(0)
        params = {
            "w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
            "b": jnp.asarray(rng.normal(size=(2,)), jnp.float32),
        }
        tx = optax.chain(
            optax.sgd(0.1, momentum=0.9),
            boostax.average_params(decay, start_step=start_step, debias=debias),
        )

        @jax.jit
        def step(params, state, grads):
            updates, state = tx.update(grads, state, params)
            return optax.apply_updates(params, updates), state, updates

        state, seen, averages = tx.init(params), [params], []
        for _ in range(12):
            grads = jax.tree.map(
                lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype),
                params,
            )
            params, state, _ = step(params, state, grads)
            seen.append(params)
            averages.append(boostax.averaged_params(state))
        for name in params:
            want = reference_ema(
                [p[name] for p in seen],
                decay,
                start_step=start_step,
                debias=debias,
            )
            for got, ref in zip(averages, want, strict=True):
                self.assertEqual(got[name].dtype, jnp.float32)
                np.testing.assert_allclose(got[name], ref, rtol=2e-6, atol=1e-6)
        self.assertEqual(int(_average_state(state).count), 12)

    def test_updates_pass_unchanged(self):
        tx = boostax.average_params(0.9)
        params = jnp.arange(3.0)
        updates = jnp.array([0.1, -0.2, 0.3])
        out, _ = jax.jit(tx.update)(updates, tx.init(params), params)
        np.testing.assert_array_equal(out, updates)

    def test_bias_correction_of_a_decay_near_one_keeps_float32(self):
        # (1 - d) / (1 - d^2) = 1 / (1 + d): float32 d^2 would lose 4 digits.
        decay = 0.9999
        tx = boostax.average_params(decay)
        state = tx.init(jnp.zeros(1))
        update = jax.jit(tx.update)
        _, state = update(jnp.ones(1), state, jnp.zeros(1))  # average 1
        _, state = update(jnp.ones(1), state, jnp.ones(1))  # params 2
        np.testing.assert_allclose(
            boostax.averaged_params(state), [1 + 1 / (1 + decay)], rtol=1e-7
        )

    def test_masked_leaves_keep_their_average(self):
        # As the step hands a frozen leaf to the optimizer (MaskedNode).
        tx = optax.chain(optax.sgd(1.0), boostax.average_params(DECAY))
        params = {"a": jnp.ones(2), "b": jnp.ones(3)}
        state = tx.init(params)
        sub = optax.tree_map_params(
            tx,
            lambda s, m: s if m else optax.MaskedNode(),
            state,
            {"a": True, "b": False},
        )
        masked = {"a": params["a"], "b": optax.MaskedNode()}
        grads = {"a": jnp.ones(2), "b": optax.MaskedNode()}
        _, new = jax.jit(tx.update)(grads, sub, masked)
        average = boostax.averaged_params(new)
        np.testing.assert_array_equal(average["a"], [0.0, 0.0])
        self.assertIsInstance(average["b"], optax.MaskedNode)
        self.assertEqual(int(_average_state(new).count), 1)

    def test_advances_once_per_accumulated_update(self):
        k = 3
        tx = boostax.gradient_accumulation(
            optax.chain(optax.sgd(1.0), boostax.average_params(DECAY)), k
        )
        params, state = jnp.zeros(2), None
        state = tx.init(params)
        update = jax.jit(tx.update)
        seen = [params]
        for i in range(2 * k):
            before = boostax.averaged_params(state)
            updates, state = update(jnp.full(2, float(i)), state, params)
            params = optax.apply_updates(params, updates)
            if (i + 1) % k:
                # A micro-step: no update, the average as it was.
                _utils.assert_trees_equal(
                    boostax.averaged_params(state), before
                )
            else:
                seen.append(params)
        self.assertEqual(int(_average_state(state).count), 2)
        np.testing.assert_allclose(
            boostax.averaged_params(state),
            reference_ema(seen, DECAY)[-1],
            rtol=1e-6,
        )

    def test_half_life(self):
        decay = boostax.half_life_decay(10)
        self.assertAlmostEqual(decay**10, 0.5, places=12)
        with self.assertRaisesRegex(ValueError, "`half_life` must be .*> 0"):
            boostax.half_life_decay(0)

    @parameterized.parameters(
        (dict(decay=1.0), ValueError, r"`decay` must be .*\[0, 1\), got 1.0"),
        (dict(decay=-0.1), ValueError, r"`decay` must be .*\[0, 1\)"),
        (dict(decay=float("nan")), ValueError, "`decay` must be"),
        (dict(decay="0.9"), TypeError, r"`decay` must be .*got str"),
        (dict(decay=True), TypeError, "`decay` must be .*bool"),
        (dict(start_step=-1), ValueError, "`start_step` must be .*>= 0"),
        (dict(start_step=1.5), TypeError, "`start_step` must be an int"),
        (dict(debias=1), TypeError, r"`debias` must be a bool"),
    )
    def test_bad_settings_raise_naming_them(self, kwargs, error, pattern):
        with self.assertRaisesRegex(error, pattern):
            boostax.average_params(**kwargs)

    def test_update_without_params_raises(self):
        tx = boostax.average_params()
        with self.assertRaisesRegex(ValueError, "needs `params`"):
            tx.update(jnp.ones(2), tx.init(jnp.ones(2)))

    def test_averaged_params_finds_it_or_gives_none(self):
        params = jnp.ones(2)
        self.assertIsNone(boostax.averaged_params(optax.adam(1.0).init(params)))
        tx = boostax.gradient_accumulation(
            optax.chain(optax.adam(1.0), boostax.average_params()), 2
        )
        np.testing.assert_array_equal(
            boostax.averaged_params(tx.init(params)), params
        )


class ConfigSectionTest(absltest.TestCase):
    def test_keys_and_round_trip(self):
        config = boostax.BoostConfig.from_dict(
            {"weight_averaging": {"enabled": True, "decay": 0.99}}
        )
        section = config.weight_averaging
        self.assertIsInstance(section, boostax.config.WeightAveragingSection)
        self.assertEqual(
            (
                section.enabled,
                section.decay,
                section.start_step,
                section.debias,
            ),
            (True, 0.99, 0, True),
        )
        again = boostax.BoostConfig.from_dict(config.to_dict())
        self.assertEqual(again, config)

    def test_bad_values_raise_naming_the_key(self):
        for values, error, pattern in (
            (
                {"decay": 1.0},
                ValueError,
                r"`weight_averaging.decay` .*\[0, 1\)",
            ),
            ({"start_step": -1}, ValueError, "`weight_averaging.start_step`"),
            ({"debias": "yes"}, TypeError, "`weight_averaging.debias`"),
            ({"half_life": 5}, ValueError, "Unknown key 'half_life'"),
        ):
            with self.assertRaisesRegex(error, pattern):
                boostax.BoostConfig.from_dict({"weight_averaging": values})

    def test_a_setting_while_disabled_warns(self):
        with self.assertWarnsRegex(
            UserWarning, "`weight_averaging.decay=0.9` is ignored"
        ):
            boostax.BoostConfig.from_dict({"weight_averaging": {"decay": 0.9}})


# --- In the train step: O1 (LessBN + freezing + accumulation + loss scale).

BATCH, K = 8, 2  # K: accumulation micro-steps
NAN_STEP = 5  # the second micro-step of the third update: it overflows


class TinyNet(nn.Module):
    """A stem and a residual conv with BatchNorms (LessBN removes one)."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        def norm(name):
            return nn.BatchNorm(use_running_average=not train, name=name)

        x = nn.relu(norm("stem_bn")(nn.Conv(4, (3, 3), name="stem")(x)))
        y = nn.relu(norm("bn_a")(nn.Conv(4, (3, 3), name="conv_a")(x)))
        y = norm("bn_b")(nn.Conv(4, (3, 3), name="conv_b")(y))
        x = nn.relu(x + y)
        return nn.Dense(3, name="head")(jnp.mean(x, axis=(1, 2)))


def batch(i):
    rng = np.random.default_rng(i)
    x = rng.normal(size=(BATCH, 6, 6, 1)).astype(np.float32)
    if i == NAN_STEP:
        x[0, 0, 0, 0] = np.nan
    return jnp.asarray(x), jnp.asarray(rng.integers(0, 3, size=BATCH))


def loss(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


O1_CONFIG = {
    "boost": {"mode": "manual", "grad_accumulation": True},
    "grad_accumulation": {"grad_accumulation_step": K},
    "less_bn": {"fn_flag": False},
    "grad_freeze": {"param_groups": 2, "total_steps": 16},
    "weight_averaging": {"enabled": True, "decay": DECAY},
}


class O1StepTest(absltest.TestCase):
    @staticmethod
    def build(freeze_warmup_steps):
        return boostax.auto_boost(
            "O1",
            O1_CONFIG,
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=TinyNet(),
            loss=loss,
            sample_inputs=batch(0)[0],
            loss_scale=boostax.DynamicLossScale(2.0**8),
            options=boostax.StepOptions(
                freeze_warmup_steps=freeze_warmup_steps,
                background_compile=False,
            ),
        )

    @staticmethod
    def train(ts):
        variables = TinyNet().init(
            jax.random.PRNGKey(0), batch(0)[0], train=False
        )
        state = ts.init(variables)
        states, metrics = [state], []
        for i in range(8):
            state, m = ts(state, batch(i))
            states.append(state)
            metrics.append(m)
        return states, metrics

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # Each depth's own program from the first step.
        cls.ts = cls.build(freeze_warmup_steps=0)
        cls.states, cls.metrics = cls.train(cls.ts)

    def test_o1_runs_less_bn_and_freezing(self):
        self.assertEqual(
            self.ts.config.enabled_algorithms,
            ("less_bn", "grad_freeze", "grad_accumulation"),
        )
        self.assertLen({int(m["frozen_groups"]) for m in self.metrics}, 2)

    def test_advances_once_per_update_and_keeps_a_skipped_one(self):
        self.assertTrue(self.metrics[NAN_STEP]["overflow"])
        updated = [bool(m["updated"]) for m in self.metrics]
        # Updates at steps 1, 3, 7; the cycle of steps 4-5 overflowed.
        self.assertEqual(updated, [False, True] * 2 + [False] * 3 + [True])
        average = jax.tree.map(
            lambda p: np.asarray(p, np.float64), self.states[0].params
        )
        n = partial = 0
        for i, did in enumerate(updated):
            old, new = self.states[i], self.states[i + 1]
            got = boostax.averaged_params(new.opt_state)
            if not did:
                # A micro-step or a skipped update: bit for bit.
                _utils.assert_trees_equal(
                    got, boostax.averaged_params(old.opt_state)
                )
                _utils.assert_trees_equal(new.params, old.params)
                continue
            n += 1
            changed = jax.tree.map(
                lambda a, b: not np.array_equal(a, b), new.params, old.params
            )
            partial += not all(jax.tree.leaves(changed))
            average = jax.tree.map(
                functools.partial(_ema_leaf, w=_weight(n)),
                average,
                new.params,
                changed,
            )
            _utils.assert_trees_all_close(got, average, rtol=1e-6, atol=1e-7)
            self.assertEqual(int(_average_state(new.opt_state).count), n)
        self.assertEqual(n, 3)
        self.assertEqual(partial, 1)  # one update with a frozen group

    def test_the_freezing_warm_up_program_averages_the_same(self):
        # The masked program of the first steps (the default): every
        # gradient computed, the frozen leaves' params and slots restored.
        ts = self.build(freeze_warmup_steps=8)
        states, metrics = self.train(ts)
        self.assertTrue(all("masked" in str(k) for k in ts.compile_seconds))
        self.assertEqual(
            [bool(m["updated"]) for m in metrics],
            [bool(m["updated"]) for m in self.metrics],
        )
        for got, want in zip(states, self.states, strict=True):
            _utils.assert_trees_all_close(
                boostax.averaged_params(got.opt_state),
                boostax.averaged_params(want.opt_state),
                rtol=1e-5,
                atol=1e-6,
            )

    def test_predict_evaluates_the_average(self):
        state, x = self.states[-1], batch(9)[0]
        average = boostax.averaged_params(state.opt_state)
        averaged = self.ts.predict(state, x)
        raw = self.ts.predict(state, x, averaged=False)
        np.testing.assert_array_equal(
            averaged,
            self.ts.predict(state.replace(params=average), x, averaged=False),
        )
        self.assertFalse(np.allclose(averaged, raw))
        with self.assertRaisesRegex(TypeError, "`averaged` must be a bool"):
            self.ts.predict(state, x, averaged=None)

    def test_to_flax_train_state(self):
        class State(flax_train_state.TrainState):
            batch_stats: object = None

        state = self.states[-1]
        raw = boostax.to_flax_train_state(self.ts, state, State)
        _utils.assert_trees_equal(raw.params, state.params)
        averaged = boostax.to_flax_train_state(
            self.ts, state, State, averaged=True
        )
        _utils.assert_trees_equal(
            averaged.params, boostax.averaged_params(state.opt_state)
        )
        _utils.assert_trees_equal(averaged.opt_state, raw.opt_state)

    def test_orbax_round_trip_keeps_it_and_resumes_bitwise(self):
        saved = self.states[4]  # after an update, mid-run
        restored = _utils.orbax_round_trip(saved, saved)
        _utils.assert_trees_equal(restored, saved)
        _utils.assert_trees_equal(
            boostax.averaged_params(restored.opt_state),
            boostax.averaged_params(saved.opt_state),
        )
        state = restored
        for i in range(4, 8):
            state, _ = self.ts(state, batch(i))
        _utils.assert_trees_equal(state, self.states[8])
        # Flax's serialization (flax.training.checkpoints) keeps it too.
        again = serialization.from_bytes(saved, serialization.to_bytes(saved))
        _utils.assert_trees_equal(
            boostax.averaged_params(again.opt_state),
            boostax.averaged_params(saved.opt_state),
        )


# --- O0: the EMA of the step's params; a skipped step; ZeRO-1; DimReduce.


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2)


def predict_fn(params, x):
    return jnp.tanh(x @ params["w1"]) @ params["w2"]


def mlp_params():
    rng = np.random.default_rng(0)
    return {
        "w1": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
        "w2": jnp.asarray(0.5 * rng.normal(size=(4, 1)), jnp.float32),
    }


def mlp_batches(n, nan_at=None):
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        x = rng.normal(size=(8, 3)).astype(np.float32)
        if i == nan_at:
            x[0, 0] = np.nan
        out.append((x, rng.normal(size=(8, 1)).astype(np.float32)))
    return out


AVERAGING = {"weight_averaging": {"enabled": True, "decay": DECAY}}


def run(ts, batches):
    state = ts.init(mlp_params())
    states = [state]
    for b in batches:
        state, _ = ts(state, b)
        states.append(state)
    return states


class O0StepTest(absltest.TestCase):
    def test_the_ema_of_the_params_and_a_skipped_step(self):
        ts = boostax.auto_boost(
            "O0",
            AVERAGING,
            optimizer=optax.adam(0.05),
            loss_fn=loss_fn,
            options=boostax.StepOptions(
                predict_fn=predict_fn, skip_nonfinite=True
            ),
        )
        states = run(ts, mlp_batches(6, nan_at=3))
        # The skipped step (3) keeps the params and the average bit for bit.
        _utils.assert_trees_equal(
            (states[4].params, states[4].opt_state),
            (states[3].params, states[3].opt_state),
        )
        kept = states[:4] + states[5:]
        _utils.assert_trees_all_close(
            boostax.averaged_params(states[-1].opt_state),
            last_average([s.params for s in kept], DECAY),
            rtol=1e-6,
            atol=1e-7,
        )
        self.assertEqual(int(_average_state(states[-1].opt_state).count), 5)

    def test_zero_1_shards_it_like_the_optimizer_state(self):
        # Both data-parallel engines: shard_map's split plan (which walks
        # the optimizer's update) and jit's one rule for every leaf.
        mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
        whole = boostax.auto_boost(
            "O0", AVERAGING, optimizer=optax.adam(0.05), loss_fn=loss_fn
        )
        batches = mlp_batches(3)
        want = boostax.averaged_params(run(whole, batches)[-1].opt_state)
        for engine in ("shard_map", "jit"):
            sharded = boostax.auto_boost(
                "O0",
                {
                    **AVERAGING,
                    "data_parallel": {
                        "shard_optimizer_state": True,
                        "engine": engine,
                    },
                },
                optimizer=optax.adam(0.05),
                loss_fn=loss_fn,
                mesh=mesh,
            )
            state = run(sharded, batches)[-1]
            average = boostax.averaged_params(state.opt_state)
            mu = tree_utils.find_state(
                state.opt_state, optax.ScaleByAdamState
            ).mu
            for name in ("w1", "w2"):
                self.assertEqual(
                    average[name].sharding.spec, mu[name].sharding.spec
                )
            self.assertFalse(average["w1"].sharding.is_fully_replicated)
            _utils.assert_trees_all_close(average, want, rtol=1e-5, atol=1e-6)

    def test_with_dim_reduce(self):
        # DimReduce replaces the optimizer: the average is chained after it.
        trajectory = boostax.Trajectory(6)
        for i in range(6):
            trajectory.record(
                jax.tree.map(
                    lambda p, i=i: p * (1 + 0.1 * i) + 0.01 * i,
                    mlp_params(),
                )
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts = boostax.auto_boost(
                "O0",
                {
                    "boost": {"mode": "manual", "dim_reduce": True},
                    "dim_reduce": {"n_components": 3},
                    **AVERAGING,
                },
                optimizer=optax.sgd(1.0),
                loss_fn=loss_fn,
                options=boostax.StepOptions(
                    pca_matrix=boostax.pca_components(trajectory, 3)
                ),
            )
        states = run(ts, mlp_batches(3))
        self.assertFalse(
            np.array_equal(states[-1].params["w1"], states[0].params["w1"])
        )
        _utils.assert_trees_all_close(
            boostax.averaged_params(states[-1].opt_state),
            last_average([s.params for s in states], DECAY),
            rtol=1e-6,
            atol=1e-7,
        )


class MindSporeLayerTest(absltest.TestCase):
    def test_network_auto_process_train(self):
        auto = boostax.mindspore.AutoBoost(
            "O0",
            {
                "boost": {"mode": "manual", "grad_accumulation": True},
                "grad_accumulation": {"grad_accumulation_step": 2},
                **AVERAGING,
            },
        )
        _, tx = auto.network_auto_process_train(TinyNet(), optax.sgd(0.1))
        state = tx.init(mlp_params())
        self.assertIsInstance(state, boostax.GradientAccumulationState)
        self.assertIsNotNone(boostax.averaged_params(state))
        freezing = boostax.mindspore.AutoBoost(
            "O1",
            {
                "less_bn": {"fn_flag": False},
                "grad_freeze": {"param_groups": 2},
                **AVERAGING,
            },
        )
        with self.assertRaisesRegex(ValueError, "FreezeOpt"):
            freezing.network_auto_process_train(
                TinyNet(), optax.sgd(0.1), sample_inputs=batch(0)[0]
            )


if __name__ == "__main__":
    absltest.main()
