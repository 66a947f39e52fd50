# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`DataParallel(engine="jit")` on 8 simulated CPU devices: the one-device
step jitted over the global batch, placed by ``NamedSharding`` s, XLA's
SPMD partitioner inserting the collectives.

Its arithmetic is the one-device step's, dropout included (one draw for
the global batch), so 8 devices train as one; any Optax optimizer shards
its state (global-norm clipping, Adafactor), and FSDP stores the params
split too.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx
from jax.sharding import PartitionSpec as P

import boostax
from tests import _utils

BATCH, CLASSES = 32, 10


class DropoutCNN(nn.Module):
    """Convolutions with BatchNorm, dropout, a pooled dense head; every
    weight's widest axis a multiple of 8."""

    @nn.compact
    def __call__(self, x, train=True):
        for features in (16, 16):
            x = nn.Conv(features, (3, 3), use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=not train)(x)
            x = nn.relu(x)
        x = x.mean(axis=(1, 2))
        x = nn.Dropout(0.25, deterministic=not train)(x)
        x = nn.relu(nn.Dense(16)(x))
        return nn.Dense(CLASSES)(x)


def loss(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


def batches(n):
    rng = np.random.default_rng(0)
    return [
        (
            rng.normal(size=(BATCH, 6, 6, 3)).astype(np.float32),
            rng.integers(0, CLASSES, size=BATCH).astype(np.int32),
        )
        for _ in range(n)
    ]


def variables():
    return DropoutCNN().init(
        {"params": jax.random.key(0), "dropout": jax.random.key(1)},
        jnp.zeros((1, 6, 6, 3)),
    )


def mesh():
    return jax.make_mesh((8,), ("data",))


def build(level="O0", config=None, optimizer=None, devices=8, **kwargs):
    config = dict(config or {})
    if devices > 1:
        config.setdefault("data_parallel", {})
        config["data_parallel"] = {**config["data_parallel"], "engine": "jit"}
    return boostax.auto_boost(
        level,
        config,
        optimizer=optimizer or optax.adam(1e-2),
        model=DropoutCNN(),
        loss=loss,
        sample_inputs=jnp.zeros((1, 6, 6, 3)),
        mesh=mesh() if devices > 1 else None,
        **_utils.with_step_options(kwargs),
    )


def train(ts, steps):
    state = ts.init(variables(), rng=jax.random.key(7))
    losses = []
    for batch in batches(steps):
        state, metrics = ts(state, batch)
        losses.append(float(metrics["loss"]))
    return state, losses


class JitEngineTest(parameterized.TestCase):
    # To reduction order: 8 devices' partial sums against one device's.
    # Adam divides by the root of each leaf's second moment, so the last
    # bits of a gradient near zero can move a param by a few 1e-6 over 12
    # to 20 steps; how many bits depends on the CPU XLA compiles for (a
    # machine's vector width), so atol is 1e-5, not 1e-6.
    def assert_trains_as_one(self, eight, one, rtol=1e-5, atol=1e-5):
        np.testing.assert_allclose(eight[1], one[1], rtol=rtol)
        _utils.assert_trees_all_close(
            eight[0].params, one[0].params, rtol=rtol, atol=atol
        )
        _utils.assert_trees_all_close(
            eight[0].model_state, one[0].model_state, rtol=rtol, atol=atol
        )

    def test_o0_with_dropout_trains_as_one_device(self):
        # One dropout draw for the global batch, BatchNorm over it: the
        # step on 8 devices is the one-device step (to reduction order).
        one = train(build(devices=1), 20)
        self.assert_trains_as_one(train(build(), 20), one)
        # Per device ("shard_map"), each device draws its own masks and
        # normalises BatchNorm by its own rows: another run.
        per_device = boostax.auto_boost(
            "O0",
            optimizer=optax.adam(1e-2),
            model=DropoutCNN(),
            loss=loss,
            sample_inputs=jnp.zeros((1, 6, 6, 3)),
            mesh=mesh(),
        )
        self.assertGreater(abs(train(per_device, 3)[1][2] - one[1][2]), 1e-3)

    def test_o1_trains_as_one_device(self):
        # LessBN and gradient freezing, each depth its own program (no
        # warm-up program).
        config = {"grad_freeze": {"total_steps": 12, "param_groups": 3}}
        ts = build("O1", config, freeze_warmup_steps=0)
        eight = train(ts, 12)
        self.assertGreater(ts.trace_count, 1)
        self.assert_trains_as_one(
            eight,
            train(build("O1", config, devices=1, freeze_warmup_steps=0), 12),
        )

    @parameterized.named_parameters(
        (
            "clipped_adamw",
            lambda: optax.chain(
                optax.clip_by_global_norm(1.0), optax.adamw(1e-3)
            ),
        ),
        ("adafactor", lambda: optax.adafactor(1e-2)),
    )
    def test_zero1_takes_any_optimizer(self, optimizer):
        # Optimizers that reduce over whole leaves (the shard_map engine
        # refuses them sharded): XLA inserts their reductions.
        sharded = {"data_parallel": {"shard_optimizer_state": True}}
        eight = train(build(config=sharded, optimizer=optimizer()), 20)
        one = train(build(optimizer=optimizer(), devices=1), 20)
        self.assert_trains_as_one(eight, one)
        state8 = boostax.measure.state_bytes_per_device(eight[0])
        state1 = boostax.measure.state_bytes_per_device(one[0])
        self.assertLessEqual(
            state8["opt_state"], state1["opt_state"] * (1 / 8 + 0.05)
        )

    def test_fsdp_stores_params_and_state_split(self):
        config = {
            "data_parallel": {
                "shard_optimizer_state": True,
                "shard_params": True,
            }
        }
        eight = train(build(config=config), 10)
        one = train(build(devices=1), 10)
        self.assert_trains_as_one(eight, one)
        state8 = boostax.measure.state_bytes_per_device(eight[0])
        state1 = boostax.measure.state_bytes_per_device(one[0])
        for part in ("params", "opt_state"):
            self.assertLessEqual(state8[part], state1[part] * (1 / 8 + 0.05))
        # The params stay split from step to step.
        kernel = eight[0].params["Conv_1"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (3, 3, 2, 16))

    def test_accumulation(self):
        config = {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 2},
            "data_parallel": {"shard_optimizer_state": True},
        }
        single = {k: v for k, v in config.items() if k != "data_parallel"}
        self.assert_trains_as_one(
            train(build(config=config), 8),
            train(build(config=single, devices=1), 8),
        )

    def test_orbax_restores_onto_another_mesh(self):
        # A FSDP state saved on 8 devices resumes on a 4-device mesh (its
        # leaves re-split for 4) and on one device, bit for bit the same
        # values, and trains on as the 8-device run does.
        config = {
            "data_parallel": {
                "shard_optimizer_state": True,
                "shard_params": True,
                "engine": "jit",
            }
        }
        ts8 = build(config=config)
        state8, _ = train(ts8, 4)
        four = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
        ts4 = boostax.auto_boost(
            "O0",
            config,
            optimizer=optax.adam(1e-2),
            model=DropoutCNN(),
            loss=loss,
            sample_inputs=jnp.zeros((1, 6, 6, 3)),
            mesh=four,
        )
        target = ts4.init(variables(), rng=jax.random.key(7))
        state4 = _utils.orbax_round_trip(state8, target)
        _utils.assert_trees_equal(state4.params, state8.params)
        _utils.assert_trees_equal(state4.opt_state, state8.opt_state)
        kernel = state4.params["Conv_1"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape[2], 4)
        batch = batches(5)[4]
        after8, metrics8 = ts8(state8, batch)
        after4, metrics4 = ts4(state4, batch)
        self.assertAlmostEqual(
            float(metrics4["loss"]), float(metrics8["loss"]), delta=1e-5
        )
        _utils.assert_trees_all_close(
            after4.params, after8.params, rtol=1e-5, atol=1e-6
        )

    def test_mid_cycle_accumulation_restores_onto_another_count(self):
        # The accumulators are the global batch's, not one per device: a
        # checkpoint taken mid-cycle on 8 devices finishes its cycle on 4.
        config = {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 2},
            "data_parallel": {"shard_optimizer_state": True, "engine": "jit"},
        }

        def step(devices):
            return boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.adam(1e-2),
                model=DropoutCNN(),
                loss=loss,
                sample_inputs=jnp.zeros((1, 6, 6, 3)),
                mesh=jax.make_mesh(
                    (devices,), ("data",), devices=jax.devices()[:devices]
                ),
            )

        ts8, ts4 = step(8), step(4)
        first, second = batches(2)
        mid8, _ = ts8(ts8.init(variables(), rng=jax.random.key(7)), first)
        mid4 = _utils.orbax_round_trip(
            mid8, ts4.init(variables(), rng=jax.random.key(7))
        )
        after8, _ = ts8(mid8, second)
        after4, metrics4 = ts4(mid4, second)
        self.assertTrue(bool(metrics4["updated"]))
        _utils.assert_trees_all_close(
            after4.params, after8.params, rtol=1e-5, atol=1e-6
        )

    def test_loss_scale_and_half_precision(self):
        # O2's float16 policy, with its dynamic loss scale: the skip
        # decision is the global batch's, as on one device.
        policy = boostax.precision_policy("O2", "float16")
        self.assertEqual(policy.loss_scale, "dynamic")
        # SGD: Adam's normalised steps turn float16 rounding of gradients
        # near zero into whole learning-rate steps.
        sgd = optax.sgd(0.1)
        eight = train(build(optimizer=sgd, precision=policy), 6)
        one = train(build(optimizer=sgd, devices=1, precision=policy), 6)
        self.assert_trains_as_one(eight, one, rtol=2e-3, atol=2e-4)

    @parameterized.named_parameters(
        ("recipe", "recipe", "float32", 1),
        ("recipe_bfloat16_accumulated", "recipe", "bfloat16", 2),
        ("o0_bfloat16_accumulated", "O0", "bfloat16", 2),
    )
    def test_levels_train_as_one_device(self, level, dtype, accumulation):
        # Issue 45's matrix under the jit engine with ZeRO-1 (O0 and O1 in
        # float32 above; O2 is AdaSum, which the engine refuses): the
        # O1 recipe's LessBN, centralisation and freezing depths, bfloat16
        # compute with float32 gradient reduction, accumulation.
        config = {}
        if level == "recipe":
            config = boostax.o1_recipe()
            config["grad_freeze"] = {
                **config["grad_freeze"],
                "total_steps": 8,
                "param_groups": 2,
            }
        if accumulation > 1:
            config["boost"] = {
                **config.get("boost", {"mode": "manual"}),
                "grad_accumulation": True,
            }
            config["grad_accumulation"] = {
                "grad_accumulation_step": accumulation
            }
        level = "O1" if level == "recipe" else level
        options = {"freeze_warmup_steps": 0} if level == "O1" else {}
        if dtype == "bfloat16":
            options["precision"] = boostax.PrecisionPolicy(
                compute_dtype="bfloat16"
            )
            # SGD: Adam turns bfloat16 rounding of gradients near zero
            # into whole learning-rate steps.
            options["optimizer"] = optax.sgd(0.1)
        sharded = {
            **config,
            "data_parallel": {"shard_optimizer_state": True},
        }
        with warnings.catch_warnings():
            # The recipe's LessBN on a model without a known BatchNorm
            # block: centralisation only, as on one device.
            warnings.filterwarnings("ignore", "LessBN found no BatchNorm")
            eight = train(build(level, sharded, **options), 8)
            one = train(build(level, config, devices=1, **options), 8)
        tolerance = (
            {"rtol": 1e-5, "atol": 1e-6}
            if dtype == "float32"
            # bfloat16 products: 8 devices sum their rows' in another order.
            else {"rtol": 2e-2, "atol": 2e-3}
        )
        self.assert_trains_as_one(eight, one, **tolerance)

    def test_o2_is_refused_with_the_reason(self):
        with self.assertRaisesRegex(NotImplementedError, "AdaSum"):
            build("O2")

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "engine"):
            boostax.DataParallel(mesh(), engine="gspmd")
        with self.assertRaisesRegex(NotImplementedError, "AdaSum"):
            boostax.DataParallel(mesh(), reduction="adasum", engine="jit")
        with self.assertRaisesRegex(ValueError, "data_parallel.engine"):
            boostax.BoostConfig.from_dict({"data_parallel": {"engine": "pjit"}})
        with self.assertRaisesRegex(NotImplementedError, "engine='jit'"):
            boostax.auto_boost(
                "O0",
                {"data_parallel": {"engine": "jit"}},
                optimizer=optax.adam(1e-2),
                model=DropoutCNN(),
                loss=loss,
                mesh=mesh(),
                precision=boostax.PrecisionPolicy(
                    compute_dtype="bfloat16", reduce_dtype="bfloat16"
                ),
            )


RULES = (("batch", "data"), ("mlp", "model"), ("heads", "model"))


class AnnotatedBlock(nn.Module):
    """An attention and MLP block over token features, its kernels
    annotated with logical axes as MaxText-style models are: heads and the
    MLP's hidden units on the model axis."""

    @nn.compact
    def __call__(self, x):
        dense = nn.with_logical_partitioning(
            nn.initializers.lecun_normal(), ("embed", "mlp")
        )
        back = nn.with_logical_partitioning(
            nn.initializers.lecun_normal(), ("mlp", "embed")
        )
        x = nn.Dense(16)(x)
        attention = nn.MultiHeadDotProductAttention(
            num_heads=4,
            # A key bias has no gradient but rounding, which Adam would
            # turn into whole steps, another on each device count.
            use_bias=False,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.lecun_normal(), ("embed", "heads", None)
            ),
            out_kernel_init=nn.with_logical_partitioning(
                nn.initializers.lecun_normal(), ("heads", None, "embed")
            ),
        )
        x = x + attention(x)
        h = nn.relu(nn.Dense(32, kernel_init=dense)(x))
        x = x + nn.Dense(16, kernel_init=back)(h)
        return nn.Dense(CLASSES)(x.mean(axis=1))


def token_batches(n):
    rng = np.random.default_rng(1)
    return [
        (
            rng.normal(size=(BATCH, 5, 3)).astype(np.float32),
            rng.integers(0, CLASSES, size=BATCH).astype(np.int32),
        )
        for _ in range(n)
    ]


class AnnotatedTest(absltest.TestCase):
    """A 2 x 4 (data x model) mesh: the params placed by their logical
    annotations, the batch split over 'data' only."""

    def build(self, mesh, config):
        return boostax.auto_boost(
            "O0",
            config,
            optimizer=optax.adamw(1e-2),
            model=AnnotatedBlock(),
            loss=loss,
            mesh=mesh,
        )

    def train(self, ts, variables, steps=10):
        state = ts.init(variables)
        for batch in token_batches(steps):
            state, metrics = ts(state, batch)
        return state, float(metrics["loss"])

    def test_tensor_parallel_trains_as_one_device(self):
        boxed = AnnotatedBlock().init(jax.random.key(0), jnp.zeros((1, 5, 3)))
        mesh2d = jax.make_mesh((2, 4), ("data", "model"))
        for sharded in (False, True):
            config = {
                "data_parallel": {
                    "engine": "jit",
                    "logical_axis_rules": RULES,
                    "shard_optimizer_state": sharded,
                    "shard_params": sharded or None,
                }
            }
            state, last = self.train(self.build(mesh2d, config), boxed)
            one, last1 = self.train(
                self.build(None, None), nn.meta.unbox(boxed)
            )
            self.assertAlmostEqual(last, last1, delta=1e-5)
            _utils.assert_trees_all_close(
                state.params, one.params, rtol=1e-5, atol=1e-5
            )
            # The MLP's hidden units on the model axis (4 ways), and with
            # FSDP its other axis over 'data' (2 ways) too.
            kernel = state.params["Dense_1"]["kernel"]
            self.assertEqual(
                kernel.addressable_shards[0].data.shape,
                (8, 8) if sharded else (16, 8),
            )
            mu = state.opt_state[0].mu["Dense_1"]["kernel"]
            self.assertEqual(
                mu.addressable_shards[0].data.shape,
                (8, 8) if sharded else (16, 8),
            )

    def test_params_placed_by_the_user_stay_placed(self):
        # A model initialised by jax.jit with out_shardings (MaxText's
        # way), no annotations: the step keeps each param's split.
        mesh2d = jax.make_mesh((2, 4), ("data", "model"))
        model = AnnotatedBlock()
        shapes = jax.eval_shape(
            model.init, jax.random.key(0), jnp.zeros((1, 5, 3))
        )
        unboxed = nn.meta.unbox(shapes)

        def split(path, x):
            names = [getattr(k, "key", None) for k in path]
            wide = "Dense_1" in names and names[-1] == "kernel"
            spec = P(None, "model") if wide else P()
            return jax.sharding.NamedSharding(mesh2d, spec)

        shardings = jax.tree_util.tree_map_with_path(split, unboxed)
        placed = jax.jit(
            lambda key, x: nn.meta.unbox(model.init(key, x)),
            out_shardings=shardings,
        )(jax.random.key(0), jnp.zeros((1, 5, 3)))
        config = {
            "data_parallel": {
                "engine": "jit",
                "logical_axis_rules": (("batch", "data"),),
            }
        }
        state, last = self.train(self.build(mesh2d, config), placed)
        kernel = state.params["Dense_1"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (16, 8))
        one, last1 = self.train(self.build(None, None), jax.device_get(placed))
        self.assertAlmostEqual(last, last1, delta=1e-5)
        _utils.assert_trees_all_close(
            state.params, one.params, rtol=1e-5, atol=1e-5
        )

    def test_nnx_variables_sharded_at_creation_stay_sharded(self):
        # NNX shards an annotated Variable when it creates it (under a
        # mesh): the step keeps the split, where "shard_map" refuses it.
        class Block(nnx.Module):
            def __init__(self, rngs):
                split = nnx.with_partitioning(
                    nnx.initializers.lecun_normal(), (None, "model")
                )
                self.hidden = nnx.Linear(3, 32, kernel_init=split, rngs=rngs)
                self.head = nnx.Linear(32, CLASSES, rngs=rngs)

            def __call__(self, x):
                return self.head(nnx.relu(self.hidden(x)).mean(axis=1))

        mesh2d = jax.make_mesh((2, 4), ("data", "model"))
        with jax.set_mesh(mesh2d):
            model = Block(nnx.Rngs(0))
        one_device = jax.make_mesh(
            (1, 1), ("data", "model"), devices=jax.devices()[:1]
        )
        with jax.set_mesh(one_device):
            single = Block(nnx.Rngs(0))
        config = {
            "data_parallel": {
                "engine": "jit",
                "logical_axis_rules": (("batch", "data"),),
            }
        }

        def build(model, mesh, config):
            return boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.adamw(1e-2),
                model=model,
                loss=loss,
                mesh=mesh,
            )

        state, last = self.train(build(model, mesh2d, config), None)
        kernel = state.params["hidden"]["kernel"]
        self.assertEqual(kernel.addressable_shards[0].data.shape, (3, 8))
        one, last1 = self.train(build(single, None, None), None)
        self.assertAlmostEqual(last, last1, delta=1e-5)
        _utils.assert_trees_all_close(
            state.params, one.params, rtol=1e-5, atol=1e-5
        )
        with self.assertRaisesRegex(ValueError, "engine"):
            build(model, mesh2d, None).init(None)

    def test_unannotated_engine_refuses_rules_without_batch(self):
        with self.assertRaisesRegex(ValueError, "'batch'"):
            boostax.DataParallel(
                jax.make_mesh((2, 4), ("data", "model")),
                engine="jit",
                logical_axis_rules=(("mlp", "model"),),
            )
        with self.assertRaisesRegex(ValueError, "engine='jit'"):
            boostax.DataParallel(
                jax.make_mesh((2, 4), ("data", "model")),
                logical_axis_rules=RULES,
            )
        with self.assertRaisesRegex(ValueError, "not axes of the mesh"):
            boostax.DataParallel(
                jax.make_mesh((2, 4), ("data", "model")),
                engine="jit",
                logical_axis_rules=(("batch", "dp"),),
            )


if __name__ == "__main__":
    absltest.main()
