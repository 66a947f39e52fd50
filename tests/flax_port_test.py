# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""What a Flax training script needs to port without surgery.

Synchronised BatchNorm over a named axis (with and without a mesh, at every
level), dict batches, several RNG streams and train keyword arguments,
weight decay in MindSpore's place, ``flax.training`` TrainState both ways,
and the errors a wrong state or argument gets at the step's boundary.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx
from flax.training import train_state

import boostax
from boostax.examples import models
from tests import _utils

AXIS = "batch"  # the Flax examples' pmap axis name


class SyncBNNet(nn.Module):
    """A conv net in the style of the Flax examples' ResNets."""

    axis_name: Any = AXIS

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = functools.partial(
            nn.BatchNorm,
            use_running_average=not train,
            momentum=0.9,
            epsilon=1e-5,
            axis_name=self.axis_name,
        )
        x = nn.relu(norm()(nn.Conv(8, (3, 3), use_bias=False)(x)))
        y = nn.relu(norm()(nn.Conv(8, (3, 3), use_bias=False)(x)))
        y = norm()(nn.Conv(8, (3, 3), use_bias=False)(y))
        x = nn.relu(x + y)
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


class NNXSyncBNNet(nnx.Module):
    def __init__(self, axis_name=AXIS, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(1, 8, (3, 3), use_bias=False, rngs=rngs)
        self.norm = nnx.BatchNorm(8, axis_name=axis_name, rngs=rngs)
        self.head = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.norm(self.conv(x)))
        return self.head(jnp.mean(x, axis=(1, 2)))


class NoisyNet(nn.Module):
    """Draws from two RNG streams and takes an extra train argument."""

    @nn.compact
    def __call__(self, x, train: bool = True, noise_scale: float = 0.0):
        x = nn.Dense(16)(x.reshape(x.shape[0], -1))
        x = nn.Dropout(0.5, deterministic=not train)(x)
        noise = jax.random.normal(self.make_rng("noise"), x.shape)
        return nn.Dense(10)(x + noise_scale * noise)


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


def batch(seed=0, size=16, as_dict=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(size, 6, 6, 1)).astype(np.float32)
    y = rng.integers(0, 10, size).astype(np.int32)
    return {"image": x, "label": y} if as_dict else (x, y)


X = batch()[0]
O1_SMALL = {"grad_freeze": {"param_groups": 2, "total_steps": 4}}


def train(ts, variables, batches, **init):
    state = ts.init(variables, **init)
    for b in batches:
        state, metrics = ts(state, b)
    return state, metrics


class SyncBatchNormTest(parameterized.TestCase):
    """The model's axis name is kept when bound, mapped when not."""

    def test_no_mesh_equals_a_model_without_axis_name(self):
        # One device: the statistics are the local ones.
        synced = SyncBNNet()
        local = SyncBNNet(axis_name=None)
        variables = local.init(jax.random.PRNGKey(0), X, train=False)
        batches = [batch(i) for i in range(2)]
        expected, _ = train(
            boostax.make_train_step(
                optax.sgd(0.1), model=local, loss=cross_entropy
            ),
            variables,
            batches,
        )
        got, _ = train(
            boostax.auto_boost(
                "O0", optimizer=optax.sgd(0.1), model=synced, loss=cross_entropy
            ),
            variables,
            batches,
        )
        _utils.assert_trees_all_close(got, expected, rtol=1e-6, atol=1e-6)

    def test_mesh_synchronises_over_every_device(self):
        # Synchronised BN over 8 devices is BN over the global batch: the
        # same step as one device on the whole batch. The mesh's axis is
        # called "data", not the model's "batch": the name is mapped.
        model = SyncBNNet()
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        batches = [batch(i) for i in range(2)]
        single, _ = train(
            boostax.auto_boost(
                "O0", optimizer=optax.sgd(0.1), model=model, loss=cross_entropy
            ),
            variables,
            batches,
        )
        mesh = jax.make_mesh((8,), ("data",))
        sharded, _ = train(
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                model=model,
                loss=cross_entropy,
                mesh=mesh,
            ),
            variables,
            batches,
        )
        _utils.assert_trees_all_close(sharded, single, rtol=2e-5, atol=2e-6)
        # Without synchronisation (per-device statistics) it would differ.
        per_device, _ = train(
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                model=SyncBNNet(axis_name=None),
                loss=cross_entropy,
                mesh=mesh,
            ),
            variables,
            batches,
        )
        self.assertFalse(
            np.allclose(
                per_device.model_state["batch_stats"]["BatchNorm_1"]["var"],
                single.model_state["batch_stats"]["BatchNorm_1"]["var"],
                rtol=1e-4,
            )
        )

    def test_bound_axis_name_is_kept(self):
        # A mesh axis named like the model's is the model's: kept.
        model = SyncBNNet()
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        mesh = jax.make_mesh((8,), (AXIS,))
        state, metrics = train(
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                model=model,
                loss=cross_entropy,
                mesh=mesh,
            ),
            variables,
            [batch()],
        )
        self.assertTrue(np.isfinite(metrics["loss"]))

    def test_o1_without_mesh(self):
        model = SyncBNNet()
        ts = boostax.auto_boost(
            "O1",
            O1_SMALL,
            optimizer=optax.sgd(0.1),
            model=model,
            loss=cross_entropy,
            sample_inputs=X,
        )
        self.assertNotEmpty(ts.less_bn_report.removed)
        state, metrics = train(
            ts,
            model.init(jax.random.PRNGKey(0), X, train=False),
            [batch(i) for i in range(2)],
        )
        self.assertTrue(np.isfinite(metrics["loss"]))

    def test_o2_mesh_becomes_node_local_and_the_name_follows(self):
        # O2 rebuilds a 1-D mesh as (node, local): the model's axis spans
        # both, so the BatchNorms that stay are synchronised over all 8.
        model = SyncBNNet()
        ts = boostax.auto_boost(
            "O2",
            {
                "boost": {"mode": "manual", "grad_freeze": False},
                "common": {"device_number": 4},
            },
            optimizer=optax.sgd(0.1),
            model=model,
            loss=cross_entropy,
            sample_inputs=X,
            mesh=jax.make_mesh((8,), (AXIS,)),
        )
        self.assertEqual(ts.data_parallel.axes, ("node", "local"))
        state, metrics = train(
            ts,
            model.init(jax.random.PRNGKey(0), X, train=False),
            [batch()],
        )
        self.assertTrue(np.isfinite(metrics["loss"]))

    def test_nnx_no_mesh_and_mesh(self):
        model = NNXSyncBNNet(rngs=nnx.Rngs(0))
        for mesh in (None, jax.make_mesh((8,), ("data",))):
            state, metrics = train(
                boostax.auto_boost(
                    "O0",
                    optimizer=optax.sgd(0.1),
                    model=model,
                    loss=cross_entropy,
                    mesh=mesh,
                ),
                model,
                [batch()],
            )
            self.assertTrue(np.isfinite(metrics["loss"]))


class BatchAndRngTest(absltest.TestCase):
    def test_dict_batches(self):
        model = SyncBNNet(axis_name=None)
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        pairs, _ = train(
            boostax.make_train_step(
                optax.sgd(0.1), model=model, loss=cross_entropy
            ),
            variables,
            [batch(0)],
        )
        dicts, _ = train(
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                model=model,
                loss=cross_entropy,
                options=boostax.StepOptions(batch_keys=("image", "label")),
            ),
            variables,
            [batch(0, as_dict=True)],
        )
        _utils.assert_trees_equal(dicts, pairs)

    def test_dict_batch_without_keys_says_batch_keys(self):
        model = SyncBNNet(axis_name=None)
        ts = boostax.make_train_step(
            optax.sgd(0.1), model=model, loss=cross_entropy
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), X, train=False))
        with self.assertRaisesRegex(TypeError, r"batch_keys=\(inputs key") as e:
            ts(state, batch(as_dict=True))
        self.assertNotIn("loss_fn", str(e.exception))

    def test_several_rng_streams_and_train_kwargs(self):
        model = NoisyNet()
        variables = model.init(
            {"params": jax.random.PRNGKey(0), "noise": jax.random.PRNGKey(1)},
            X,
            train=False,
        )
        with self.assertRaisesRegex(Exception, "noise"):
            train(
                boostax.make_train_step(
                    optax.sgd(0.1), model=model, loss=cross_entropy
                ),
                variables,
                [batch()],
            )
        losses = {}
        for scale in (0.0, 10.0):
            _, metrics = train(
                boostax.auto_boost(
                    "O0",
                    optimizer=optax.sgd(0.1),
                    model=model,
                    loss=cross_entropy,
                    options=boostax.StepOptions(
                        rng_collections=("dropout", "noise"),
                        train_kwargs={"train": True, "noise_scale": scale},
                    ),
                ),
                variables,
                [batch()],
            )
            losses[scale] = float(metrics["loss"])
        # The noise reached the model (the extra keyword argument did).
        self.assertGreater(abs(losses[10.0] - losses[0.0]), 1e-3)

    def test_model_options_refused_with_loss_fn(self):
        with self.assertRaisesRegex(ValueError, "`batch_keys=` configures"):
            boostax.make_train_step(
                optax.sgd(0.1),
                loss_fn=lambda p, b: jnp.sum(p),
                options=boostax.StepOptions(batch_keys=("x", "y")),
            )


class WeightDecayTest(absltest.TestCase):
    def test_o0_equals_decay_chained_before_the_optimizer(self):
        model = SyncBNNet(axis_name=None)
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        decay = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)  # noqa: E731
        expected, _ = train(
            boostax.make_train_step(
                optax.chain(
                    optax.add_decayed_weights(1e-2, decay), optax.sgd(0.1)
                ),
                model=model,
                loss=cross_entropy,
            ),
            variables,
            [batch()],
        )
        got, _ = train(
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                model=model,
                loss=cross_entropy,
                options=boostax.StepOptions(weight_decay=1e-2),
            ),
            variables,
            [batch()],
        )
        _utils.assert_trees_equal(got, expected)

    def test_o1_decays_before_centralizing(self):
        # MindSpore's order: g + wd * w, then centralization. With a zero
        # gradient the update of a centralized kernel is the centralized
        # decay: zero mean over its fan-in, and not zero.
        model = models.ResNet(stage_sizes=(1,), widths=(16,))
        x = np.zeros((2, 8, 8, 1), np.float32)
        ts = boostax.auto_boost(
            "O1",
            {"boost": {"mode": "manual", "grad_freeze": False}},
            optimizer=optax.sgd(1.0),
            model=model,
            loss=cross_entropy,
            sample_inputs=x,
            options=boostax.StepOptions(weight_decay=0.5),
        )
        params = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
        params = params.params
        updates, _ = ts.optimizer.update(
            jax.tree.map(jnp.zeros_like, params),
            ts.optimizer.init(params),
            params,
        )
        kernel = updates["BasicBlock_0"]["Conv_1"]["kernel"]  # 3x3x16 -> 16
        np.testing.assert_allclose(kernel.mean(axis=(0, 1, 2)), 0.0, atol=1e-6)
        self.assertGreater(float(jnp.abs(kernel).max()), 1e-3)

    def test_refused_with_dim_reduce_and_mask_without_decay(self):
        with self.assertRaisesRegex(ValueError, "`weight_decay` cannot apply"):
            boostax.auto_boost(
                "O0",
                {"boost": {"mode": "manual", "dim_reduce": True}},
                optimizer=optax.sgd(0.1),
                loss_fn=lambda p, b: jnp.sum(p),
                options=boostax.StepOptions(
                    pca_matrix=np.eye(32, 40, dtype=np.float32),
                    weight_decay=1e-4,
                ),
            )
        with self.assertRaisesRegex(ValueError, "`weight_decay_mask` is given"):
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                loss_fn=lambda p, b: jnp.sum(p),
                options=boostax.StepOptions(weight_decay_mask=lambda p: p),
            )


class FlaxTrainStateTest(absltest.TestCase):
    def test_round_trip_and_a_flax_eval_step(self):
        class TrainState(train_state.TrainState):
            batch_stats: Any = None

        model = SyncBNNet()
        ts = boostax.auto_boost(
            "O1",
            O1_SMALL,
            optimizer=optax.sgd(0.1),
            model=model,
            loss=cross_entropy,
            sample_inputs=X,
            loss_scale=boostax.DynamicLossScale(),
        )
        state, _ = train(
            ts, model.init(jax.random.PRNGKey(0), X, train=False), [batch()]
        )
        with self.assertRaisesRegex(TypeError, "batch_stats"):
            boostax.to_flax_train_state(ts, state)
        flax_state = boostax.to_flax_train_state(ts, state, cls=TrainState)

        # The Flax example's evaluation reads state.apply_fn and the fields.
        logits = flax_state.apply_fn(
            {
                "params": flax_state.params,
                "batch_stats": flax_state.batch_stats,
            },
            X,
            train=False,
        )
        np.testing.assert_allclose(
            logits, ts.predict(state, X), rtol=1e-6, atol=1e-6
        )
        back = boostax.from_flax_train_state(ts, flax_state, like=state)
        _utils.assert_trees_equal(back, state)
        # Without `like`: a fresh loss scale, the freeze position at the step.
        fresh = boostax.from_flax_train_state(ts, flax_state)
        self.assertEqual(int(fresh.algorithms.freeze.position), 1)
        ts(fresh, batch(1))

    def test_a_plain_flax_checkpoint_into_o1(self):
        # Variables of the original model (before LessBN) and the state of
        # another optimizer: converted, and the optimizer started afresh.
        class TrainState(train_state.TrainState):
            batch_stats: Any = None

        model = SyncBNNet(axis_name=None)
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        plain = TrainState.create(
            apply_fn=model.apply,
            params=variables["params"],
            tx=optax.adam(1e-3),
            batch_stats=variables["batch_stats"],
        )
        ts = boostax.auto_boost(
            "O1",
            O1_SMALL,
            optimizer=optax.sgd(0.1),
            model=model,
            loss=cross_entropy,
            sample_inputs=X,
        )
        with self.assertRaisesRegex(ValueError, "init_optimizer=True"):
            boostax.from_flax_train_state(ts, plain)
        state = boostax.from_flax_train_state(ts, plain, init_optimizer=True)
        ts(state, batch())


class MeshStateTest(absltest.TestCase):
    def test_a_typed_key_on_a_mesh(self):
        # jax.random.key (a typed key, as the Flax examples use) is placed
        # on the mesh like the rest of the state.
        model = SyncBNNet()
        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=model,
            loss=cross_entropy,
            mesh=jax.make_mesh((8,), ("data",)),
        )
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        state = ts.init(variables, rng=jax.random.key(1))
        self.assertTrue(jnp.issubdtype(state.rng.dtype, jax.dtypes.prng_key))
        np.testing.assert_array_equal(
            jax.random.key_data(state.rng),
            jax.random.key_data(jax.random.key(1)),
        )
        state, metrics = ts(state, batch())
        self.assertTrue(np.isfinite(metrics["loss"]))

    def test_o2_flax_state_is_replicated_and_converts_back(self):
        # AdaSum keeps one optimizer state per device; the Flax TrainState
        # holds that stack whole on every device, as Flax code expects (a
        # pmapped evaluation with in_axes=None), and converts back exactly.
        class TrainState(train_state.TrainState):
            batch_stats: Any = None

        model = SyncBNNet()
        ts = boostax.auto_boost(
            "O2",
            {
                "boost": {"mode": "manual", "grad_freeze": False},
                "common": {"device_number": 4},
            },
            optimizer=optax.sgd(0.1, momentum=0.9),
            model=model,
            loss=cross_entropy,
            sample_inputs=X,
            mesh=jax.make_mesh((8,), (AXIS,)),
        )
        state, _ = train(
            ts, model.init(jax.random.PRNGKey(0), X, train=False), [batch()]
        )
        flax_state = boostax.to_flax_train_state(ts, state, cls=TrainState)
        for leaf in jax.tree.leaves(flax_state.opt_state):
            self.assertEqual(leaf.shape[0], 8)  # one slice per device
            self.assertTrue(leaf.sharding.is_fully_replicated)

        def predict(state, x):
            variables = {
                "params": state.params,
                "batch_stats": state.batch_stats,
            }
            return state.apply_fn(variables, x, train=False)

        logits = jax.pmap(predict, in_axes=(None, 0))(
            flax_state, X.reshape(8, 2, *X.shape[1:])
        )
        np.testing.assert_allclose(
            logits.reshape(16, -1), ts.predict(state, X), rtol=1e-5, atol=1e-6
        )
        back = boostax.from_flax_train_state(ts, flax_state, like=state)
        _utils.assert_trees_equal(back, state)
        for a, b in zip(
            jax.tree.leaves(back.opt_state),
            jax.tree.leaves(state.opt_state),
            strict=True,
        ):
            self.assertTrue(a.sharding.is_equivalent_to(b.sharding, a.ndim))
        ts(back, batch(1))

    def test_sharded_state_is_replicated_and_converts_back(self):
        # ZeRO-1 under a bfloat16 policy splits the optimizer state and the
        # float32 params over the devices; the Flax TrainState holds them
        # whole on every device and converts back to the step's placement.
        class TrainState(train_state.TrainState):
            batch_stats: Any = None

        model = SyncBNNet()
        ts = boostax.auto_boost(
            "O0",
            {"data_parallel": {"shard_optimizer_state": True}},
            optimizer=optax.adam(1e-2),
            model=model,
            loss=cross_entropy,
            sample_inputs=X,
            mesh=jax.make_mesh((8,), (AXIS,)),
            precision=boostax.precision_policy("O2", "bfloat16"),
        )
        state, _ = train(
            ts, model.init(jax.random.PRNGKey(0), X, train=False), [batch()]
        )
        split = [
            leaf
            for leaf in jax.tree.leaves((state.params, state.opt_state))
            if not leaf.sharding.is_fully_replicated
        ]
        self.assertNotEmpty(split)
        flax_state = boostax.to_flax_train_state(ts, state, cls=TrainState)
        for leaf in jax.tree.leaves((flax_state.params, flax_state.opt_state)):
            self.assertTrue(leaf.sharding.is_fully_replicated)
        back = boostax.from_flax_train_state(ts, flax_state, like=state)
        _utils.assert_trees_equal(back, state)
        for a, b in zip(
            jax.tree.leaves(back), jax.tree.leaves(state), strict=True
        ):
            self.assertTrue(a.sharding.is_equivalent_to(b.sharding, a.ndim))
        ts(back, batch(1))


class DynamicScaleTest(absltest.TestCase):
    def test_the_guides_loss_scale_follows_flax_dynamic_scale(self):
        # docs/porting_flax.md change 6: DynamicScale(growth_interval=n)
        # doubles on the finite step after n finite ones in a row, so it
        # is DynamicLossScale(scale_window=n + 1), step for step.
        from flax.training import dynamic_scale as dynamic_scale_lib

        finite = [True] * 5 + list(np.random.default_rng(0).random(40) > 0.15)
        flax_scale = dynamic_scale_lib.DynamicScale(growth_interval=3)
        loss_scale = boostax.DynamicLossScale(
            loss_scale_value=2.0**16, scale_window=4
        )
        state = loss_scale.init()
        scales = []
        for ok in finite:
            c = 1.0 if ok else np.inf
            flax_scale, _, _, _ = flax_scale.value_and_grad(
                lambda x, c=c: x * c
            )(jnp.float32(1.0))
            state, _ = loss_scale.adjust(state, {"g": jnp.float32(c)})
            scales.append((float(flax_scale.scale), float(state.loss_scale)))
        expected, got = zip(*scales, strict=True)
        self.assertEqual(got, expected)
        self.assertGreater(max(got), 2.0**16)  # it grew
        self.assertLess(min(got), 2.0**16)  # and backed off


class StateCheckTest(absltest.TestCase):
    def setUp(self):
        super().setUp()
        self.loss_fn = lambda p, b: jnp.sum((p["w"] - b) ** 2)
        self.params = {"w": jnp.zeros(3)}

    def test_variables_before_init(self):
        model = SyncBNNet(axis_name=None)
        ts = boostax.make_train_step(
            optax.sgd(0.1), model=model, loss=cross_entropy
        )
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        with self.assertRaisesRegex(
            TypeError, r"pass them to the step's `init`"
        ):
            ts(variables, batch())

    def test_state_of_another_optimizer_names_the_slot(self):
        adam = boostax.make_train_step(optax.adam(0.1), loss_fn=self.loss_fn)
        sgd = boostax.make_train_step(optax.sgd(0.1), loss_fn=self.loss_fn)
        state = adam.init(self.params)
        with self.assertRaisesRegex(
            ValueError, r"`state.opt_state\[0\]` does not match .* expected"
        ):
            sgd(state, jnp.ones(3))

    def test_state_of_another_config(self):
        accumulate = boostax.auto_boost(
            "O0",
            {
                "boost": {"mode": "manual", "grad_accumulation": True},
                "grad_accumulation": {"grad_accumulation_step": 2},
            },
            optimizer=optax.sgd(0.1),
            loss_fn=self.loss_fn,
        )
        plain = boostax.auto_boost(
            "O0", optimizer=optax.sgd(0.1), loss_fn=self.loss_fn
        )
        with self.assertRaisesRegex(
            ValueError, "GradientAccumulationState.*ts.init"
        ):
            plain(accumulate.init(self.params), jnp.ones(3))
        scaled = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            loss_fn=self.loss_fn,
            loss_scale=boostax.DynamicLossScale(),
        )
        with self.assertRaisesRegex(
            ValueError, r"`state.algorithms.loss_scale`.*its `loss_scale`"
        ):
            scaled(plain.init(self.params), jnp.ones(3))

    def test_params_of_another_model(self):
        ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=self.loss_fn)
        ts.init(self.params)
        other = boostax.make_train_step(optax.sgd(0.1), loss_fn=self.loss_fn)
        with self.assertRaisesRegex(ValueError, r"`state.params` does not"):
            ts(other.init({"v": jnp.zeros(3)}), jnp.ones(3))

    def test_a_loss_metric_may_not_shadow_the_steps(self):
        ts = boostax.make_train_step(
            optax.sgd(0.1),
            loss_fn=lambda p, b: (self.loss_fn(p, b), {"loss": 0.0}),
            options=boostax.StepOptions(has_aux=True),
        )
        with self.assertRaisesRegex(ValueError, r"name\(s\) \['loss'\]"):
            ts(ts.init(self.params), jnp.ones(3))

    def test_flax_state_field_without_default(self):
        class TrainState(train_state.TrainState):
            dynamic_scale: Any

        ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=self.loss_fn)
        state = ts.init(self.params)
        with self.assertRaisesRegex(TypeError, "`dynamic_scale=None`"):
            boostax.to_flax_train_state(ts, state, cls=TrainState)

    def test_a_restored_state_is_accepted(self):
        ts = boostax.make_train_step(optax.sgd(0.1), loss_fn=self.loss_fn)
        state = ts.init(self.params)
        copy = jax.tree.map(jnp.array, state)  # not the object init returned
        ts(copy, jnp.ones(3))


class ArgumentTest(parameterized.TestCase):
    loss_fn = staticmethod(lambda p, b: jnp.sum(p))

    @parameterized.parameters(
        ("donate_state", "False"),
        ("skip_nonfinite", 1),
        ("raise_on_skips", "no"),
        ("has_aux", np.bool_(False)),
        ("background_compile", "0"),
    )
    def test_flags_are_bools(self, name, value):
        with self.assertRaisesRegex(TypeError, f"`{name}` must be a bool"):
            boostax.StepOptions(**{name: value})

    def test_donate_state_string_in_make_train_step(self):
        with self.assertRaisesRegex(TypeError, "`donate_state` must be a bool"):
            boostax.make_train_step(
                optax.sgd(0.1),
                loss_fn=self.loss_fn,
                options=boostax.StepOptions(donate_state="False"),
            )

    @parameterized.parameters(
        (-1, ValueError), ("0", TypeError), (True, TypeError), (1.5, TypeError)
    )
    def test_seed(self, seed, error):
        with self.assertRaisesRegex(error, "`seed` must be an int >= 0"):
            boostax.auto_boost(
                "O1",
                optimizer=optax.sgd(0.1),
                model=SyncBNNet(),
                loss=cross_entropy,
                sample_inputs=X,
                seed=seed,
            )

    @parameterized.parameters(("abc",), ([[1.0, 2.0], [3.0]],), (object(),))
    def test_sample_inputs(self, sample_inputs):
        with self.assertRaisesRegex(TypeError, "`sample_inputs` must be"):
            boostax.auto_boost(
                "O1",
                optimizer=optax.sgd(0.1),
                model=SyncBNNet(),
                loss=cross_entropy,
                sample_inputs=sample_inputs,
            )

    def test_dim_reduce_arguments_need_dim_reduce(self):
        with self.assertRaisesRegex(
            ValueError, "`options.pca_matrix` is DimReduce's"
        ):
            boostax.auto_boost(
                "O0",
                optimizer=optax.sgd(0.1),
                loss_fn=self.loss_fn,
                options=boostax.StepOptions(pca_matrix=np.eye(2, 3)),
            )

    def test_pca_matrix_rows_must_match_n_components(self):
        with self.assertRaisesRegex(
            ValueError, "`dim_reduce.n_components` is 32"
        ):
            boostax.auto_boost(
                "O0",
                {"boost": {"mode": "manual", "dim_reduce": True}},
                optimizer=optax.sgd(0.1),
                loss_fn=self.loss_fn,
                options=boostax.StepOptions(
                    pca_matrix=np.eye(4, 40, dtype=np.float32)
                ),
            )

    def test_config_alpha_must_be_finite(self):
        with self.assertRaisesRegex(
            ValueError, "`dim_reduce.alpha` must be a finite"
        ):
            boostax.BoostConfig.from_dict({"dim_reduce": {"alpha": np.inf}})

    def test_settings_of_an_algorithm_that_is_off_warn(self):
        with self.assertWarnsRegex(
            UserWarning,
            r"`grad_accumulation.grad_accumulation_step=4` is ignored: "
            r"`grad_accumulation` is off at level 'O0'",
        ):
            boostax.auto_boost(
                "O0",
                {"grad_accumulation": {"grad_accumulation_step": 4}},
                optimizer=optax.sgd(0.1),
                loss_fn=self.loss_fn,
            )


if __name__ == "__main__":
    absltest.main()
