# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Trained or fresh: said by the user, or read against the model's own
initialisers, never guessed silently.

LessBN changes a fresh model (drops BatchNorms, zero-initialised residual
scales, a new FN head) and keeps a trained one's function (folds, no FN
head). The weights tell which only through variables the model initialises
at a constant, compared with the model's own initialiser: Flax's ImageNet
``ResNetBlock`` starts its last BatchNorm at scale zero, so a fresh model
must not read as trained; a model with no such variable cannot tell, and
then the user must say (``trained=``). Also: float32 master weights
whatever dtype the variables come in.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import linen as nn
from flax import nnx
from flax.training import train_state

import boostax
from boostax.examples import flax_imagenet
from tests import _utils

X = np.random.default_rng(0).normal(size=(8, 8, 8, 1)).astype(np.float32)
Y = np.arange(8, dtype=np.int32) % 10
# The Flax example's own models file: the last BatchNorm of each block
# starts at scale zero (scale_init=zeros_init()).
RESNET = flax_imagenet.ResNet(stage_sizes=(1, 1), num_filters=8)
FRESH = RESNET.init(jax.random.PRNGKey(0), X, train=False)
MINDSPORE_O1 = {"boost": {"mode": "manual", "less_bn": True}}


def step(model, config=None, level="O1", optimizer=None):
    return boostax.auto_boost(
        level,
        config,
        optimizer=optimizer or optax.sgd(0.05),
        model=model,
        loss=lambda logits, y: optax.softmax_cross_entropy_with_integer_labels(
            logits, y
        ).mean(),
        sample_inputs=X,
    )


def train_plainly(model, variables, steps=5):
    """`steps` of plain Optax Adam on the original model (train mode)."""
    tx = optax.adam(1e-2)
    params, rest = (
        variables["params"],
        {k: v for k, v in variables.items() if k != "params"},
    )
    opt_state = tx.init(params)

    @jax.jit
    def update(params, rest, opt_state):
        def forward(params, x):
            outputs = model.apply(
                {"params": params, **rest}, x, mutable=list(rest) or False
            )
            return outputs if rest else (outputs, {})

        def loss(params):
            # One replica on the axis the example's BatchNorms sync over.
            logits, new_rest = jax.vmap(
                forward, in_axes=(None, 0), axis_name="batch"
            )(params, X[None])
            logits, new_rest = jax.tree.map(lambda x: x[0], (logits, new_rest))
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, Y)
            return ce.mean(), new_rest

        grads, new_rest = jax.grad(loss, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_rest, opt_state

    for _ in range(steps):
        params, rest, opt_state = update(params, rest, opt_state)
    return {"params": params, **rest}


class MLP(nn.Module):
    """A classifier without BatchNorm; `bias` switches every bias."""

    bias: bool = True

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(16, use_bias=self.bias)(x))
        return nn.Dense(10, use_bias=False)(x)


class ZeroInitScalesTest(absltest.TestCase):
    def test_a_fresh_flax_resnet_is_fresh_at_o1_and_o2(self):
        for level in ("O1", "O2"):
            ts = step(RESNET, level=level)
            state = ts.init(FRESH)  # no refusal: these are fresh
            self.assertIn("multiplier", state.params["Dense_0"])

    def test_saying_trained_keeps_the_head_and_folds(self):
        ts = step(RESNET, {"less_bn": {"fn_flag": False}})
        state = ts.init(FRESH, trained=True)
        variables = {"params": state.params, **state.model_state}
        # Folding keeps the fresh model's function exactly, zero scales
        # included (each block's branch outputs zero).
        np.testing.assert_allclose(
            ts.model.apply(variables, X, train=False),
            RESNET.apply(FRESH, X, train=False),
            rtol=1e-5,
            atol=1e-6,
        )
        with self.assertRaisesRegex(ValueError, "trained=False"):
            step(RESNET).init(FRESH, trained=True)

    def test_trained_weights_are_read_as_trained(self):
        trained = train_plainly(RESNET, FRESH)
        with self.assertRaisesRegex(ValueError, "FN head"):
            step(RESNET).init(trained)
        with self.assertRaisesRegex(ValueError, "says the weights are fresh"):
            step(RESNET).init(trained, trained=False)
        ts = step(RESNET, {"less_bn": {"fn_flag": False}})
        state = ts.init(trained)
        np.testing.assert_allclose(
            ts.model.apply(
                {"params": state.params, **state.model_state}, X, train=False
            ),
            RESNET.apply(trained, X, train=False),
            rtol=1e-4,
            atol=1e-5,
        )

    def test_a_flax_state_past_step_zero_is_trained(self):
        flax_state = flax_imagenet.TrainState.create(
            apply_fn=RESNET.apply,
            params=FRESH["params"],
            tx=optax.sgd(0.1),
            batch_stats=FRESH["batch_stats"],
            dynamic_scale=None,
        )
        ts = step(RESNET)
        boostax.from_flax_train_state(ts, flax_state, init_optimizer=True)
        with self.assertRaisesRegex(ValueError, "FN head"):
            boostax.from_flax_train_state(
                ts, flax_state.replace(step=3), init_optimizer=True
            )


class HandBuiltWrapperTest(absltest.TestCase):
    def test_running_statistics_tell_without_the_plan(self):
        # A LinenLessBN built by hand has no record of the initialisers:
        # the running statistics (0 and 1 in every Flax model) tell.
        model = boostax.LinenLessBN(RESNET, fn_head=("Dense_0",))
        converted = model.convert_variables(FRESH)
        self.assertIn("multiplier", converted["params"]["Dense_0"])
        trained = jax.tree_util.tree_map_with_path(
            lambda path, x: x + 0.5 if "mean" in str(path) else x, FRESH
        )
        with self.assertRaisesRegex(ValueError, "mean of BatchNorm"):
            model.convert_variables(trained)


class BiasFreeHeadTest(absltest.TestCase):
    def test_a_trained_bias_free_head_is_never_replaced(self):
        model = MLP()
        fresh = model.init(jax.random.PRNGKey(0), X)
        trained = train_plainly(model, fresh)
        # The first layer's bias moved: the weights read as trained.
        with self.assertRaisesRegex(ValueError, "Dense_0 is not the value"):
            step(model, MINDSPORE_O1).init(trained)
        state = step(model, MINDSPORE_O1).init(fresh)
        self.assertIn("multiplier", state.params["Dense_1"])

    def test_no_variable_can_tell_so_the_user_says(self):
        model = MLP(bias=False)
        fresh = model.init(jax.random.PRNGKey(0), X)
        ts = step(model, MINDSPORE_O1)
        with self.assertRaisesRegex(ValueError, "cannot tell.*trained=False"):
            ts.init(fresh)
        state = ts.init(fresh, trained=False)
        self.assertIn("multiplier", state.params["Dense_1"])
        with self.assertRaisesRegex(ValueError, "FN head"):
            ts.init(fresh, trained=True)
        with self.assertRaisesRegex(
            TypeError, r"`trained` must be a bool \(True or False\) or None"
        ):
            ts.init(fresh, trained="yes")


class NNXNet(nnx.Module):
    def __init__(self, rngs):
        self.conv = nnx.Conv(1, 8, (3, 3), use_bias=False, rngs=rngs)
        # Started at zero, as a zero-initialised residual branch's.
        self.norm = nnx.BatchNorm(
            8, scale_init=nnx.initializers.zeros_init(), rngs=rngs
        )
        self.head = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.norm(self.conv(x)))
        return self.head(x.mean(axis=(1, 2)))


class NNXTest(absltest.TestCase):
    def test_a_zero_initialised_scale_reads_as_fresh(self):
        model = NNXNet(nnx.Rngs(0))
        reduced = boostax.less_bn(model, X, fn_flag=True)
        self.assertIsInstance(reduced.head, boostax.NNXFNHead)

    def test_moved_running_statistics_read_as_trained(self):
        model = NNXNet(nnx.Rngs(0))
        model.norm.mean[...] = jnp.full((8,), 0.5)
        with self.assertRaisesRegex(ValueError, "mean of BatchNorm norm"):
            boostax.less_bn(model, X, fn_flag=True)
        with self.assertRaisesRegex(ValueError, "says the weights are fresh"):
            boostax.less_bn(model, X, fn_flag=True, trained=False)

    def test_linen_takes_trained_at_conversion(self):
        with self.assertRaisesRegex(ValueError, "convert_variables"):
            boostax.less_bn(RESNET, X, trained=True)


class Float32MastersTest(absltest.TestCase):
    def test_half_precision_variables_become_float32_masters(self):
        for dtype in (jnp.bfloat16, jnp.float16):
            half = jax.tree.map(lambda x, d=dtype: x.astype(d), FRESH)
            ts = step(RESNET, level="O0", optimizer=optax.adam(1e-3))
            state = ts.init(half)
            for leaf in jax.tree.leaves((state.params, state.opt_state)):
                if jnp.issubdtype(leaf.dtype, jnp.floating):
                    self.assertEqual(leaf.dtype, jnp.float32)
            # Exact: the values are the half-precision ones.
            _utils.assert_trees_equal(
                state.params,
                jax.tree.map(lambda x: x.astype(jnp.float32), half["params"]),
            )


class FlaxStateTest(absltest.TestCase):
    def test_a_plain_flax_state_is_not_a_subclass_problem(self):
        # flax.training's own TrainState (no batch_stats) of the MLP.
        model = MLP()
        fresh = model.init(jax.random.PRNGKey(0), X)
        flax_state = train_state.TrainState.create(
            apply_fn=model.apply, params=fresh["params"], tx=optax.sgd(0.1)
        )
        ts = step(model, MINDSPORE_O1)
        state = boostax.from_flax_train_state(
            ts, flax_state, init_optimizer=True
        )
        self.assertIn("multiplier", state.params["Dense_1"])


if __name__ == "__main__":
    absltest.main()
