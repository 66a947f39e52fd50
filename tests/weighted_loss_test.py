# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`boostax.WeightedLoss`: a token-weighted loss over padded rows is the
global batch's, on one device and on 8 simulated ones.

Each row is a sequence of tokens; token 0 is padding and weighs nothing.
The padding is spread unevenly (one row a device has none, another is
mostly padding), so the mean of the devices' means is not the batch's
mean: the plain per-device loss misses it, the WeightedLoss hits it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import linen as nn

import boostax
from tests import _utils

VOCAB, WIDTH, ROWS, LENGTH = 11, 8, 8, 6


class TokenModel(nn.Module):
    """Embeds each token, mixes the row through a dense layer, and predicts
    a next-token distribution per position."""

    @nn.compact
    def __call__(self, tokens):
        h = nn.Embed(VOCAB, WIDTH)(tokens)
        h = jnp.tanh(nn.Dense(WIDTH)(h))
        return nn.Dense(VOCAB)(h)


def token_sums(logits, targets):
    weights = (targets > 0).astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return (losses * weights).sum(), weights.sum()


def weighted(logits, targets):
    return boostax.WeightedLoss(*token_sums(logits, targets))


def per_device_mean(logits, targets):
    total, weight = token_sums(logits, targets)
    return total / weight


def padded_batch(seed):
    """Rows of 1 to LENGTH real tokens, the rest padding (0)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, size=(ROWS, LENGTH))
    kept = np.array([6, 1, 2, 6, 3, 5, 1, 4])[rng.permutation(ROWS)]
    tokens[np.arange(LENGTH)[None, :] >= kept[:, None]] = 0
    return {"inputs": tokens.astype(np.int32), "targets": tokens[:, ::-1]}


def reference_loss(variables, batch):
    """Float64 NumPy: the batch's summed token losses over its tokens."""
    logits = np.asarray(
        TokenModel().apply(variables, batch["inputs"]), np.float64
    )
    targets = batch["targets"]
    logits -= logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    losses = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    weights = targets > 0
    return (losses * weights).sum() / weights.sum()


def build(loss, devices, **kwargs):
    mesh = None
    if devices > 1:
        mesh = jax.make_mesh(
            (devices,), ("data",), devices=jax.devices()[:devices]
        )
    return boostax.auto_boost(
        "O0",
        optimizer=optax.adam(1e-2),
        model=TokenModel(),
        loss=loss,
        sample_inputs=jnp.zeros((1, LENGTH), jnp.int32),
        mesh=mesh,
        **_utils.with_step_options(kwargs, batch_keys=("inputs", "targets")),
    )


def variables():
    return TokenModel().init(
        jax.random.key(0), jnp.zeros((1, LENGTH), jnp.int32)
    )


def train(ts, steps=3):
    state = ts.init(variables())
    losses = []
    for seed in range(steps):
        state, metrics = ts(state, padded_batch(seed))
        losses.append(float(metrics["loss"]))
    return state, losses


class WeightedLossTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.one = train(build(weighted, 1))
        cls.eight = train(build(weighted, 8))

    def test_loss_is_the_batchs_token_mean(self):
        self.assertAlmostEqual(
            self.one[1][0],
            reference_loss(variables(), padded_batch(0)),
            delta=1e-6,
        )

    def test_eight_devices_train_as_one(self):
        np.testing.assert_allclose(self.eight[1], self.one[1], rtol=2e-6)
        _utils.assert_trees_all_close(
            self.eight[0].params, self.one[0].params, rtol=1e-5, atol=1e-6
        )

    def test_a_per_device_mean_is_not_the_batchs(self):
        # What the WeightedLoss fixes: each device dividing by its own
        # tokens averages the rows' means.
        _, losses = train(build(per_device_mean, 8), steps=1)
        self.assertGreater(abs(losses[0] - self.one[1][0]), 1e-2)

    def test_sharded_optimizer_state_and_accumulation(self):
        # A sharded state reduces the gradients by reduce-scatter; with
        # accumulation each micro-step is normalised by its own batch's
        # tokens (as optax.MultiSteps averages micro-steps' means).
        config = {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_accumulation": {"grad_accumulation_step": 3},
            "data_parallel": {"shard_optimizer_state": True},
        }
        ts = boostax.auto_boost(
            "O0",
            config,
            optimizer=optax.adam(1e-2),
            model=TokenModel(),
            loss=weighted,
            sample_inputs=jnp.zeros((1, LENGTH), jnp.int32),
            mesh=jax.make_mesh((8,), ("data",)),
            options=boostax.StepOptions(batch_keys=("inputs", "targets")),
        )
        state, _ = train(ts)
        multi = optax.MultiSteps(optax.adam(1e-2), every_k_schedule=3)
        params = variables()["params"]
        opt_state = multi.init(params)

        def batch_loss(p, batch):
            logits = TokenModel().apply({"params": p}, batch["inputs"])
            return per_device_mean(logits, batch["targets"])

        for seed in range(3):
            grads = jax.grad(batch_loss)(params, padded_batch(seed))
            updates, opt_state = multi.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
        _utils.assert_trees_all_close(
            state.params, params, rtol=1e-5, atol=1e-6
        )

    def test_has_aux_form(self):
        def loss(logits, targets):
            return weighted(logits, targets), {
                "tokens": token_sums(logits, targets)[1]
            }

        ts = build(loss, 1, has_aux=True)
        _, metrics = ts(ts.init(variables()), padded_batch(0))
        self.assertAlmostEqual(
            float(metrics["loss"]), self.one[1][0], delta=1e-6
        )

    def test_bare_weighted_loss_with_has_aux_is_refused(self):
        ts = build(weighted, 1, has_aux=True)
        with self.assertRaisesRegex(TypeError, "bare WeightedLoss"):
            ts(ts.init(variables()), padded_batch(0))

    def test_non_scalar_fields_are_refused(self):
        def loss(logits, targets):
            weights = (targets > 0).astype(jnp.float32)
            losses = optax.softmax_cross_entropy_with_integer_labels(
                logits, targets
            )
            return boostax.WeightedLoss(losses * weights, weights.sum())

        ts = build(loss, 1)
        with self.assertRaisesRegex(TypeError, "`total` has shape"):
            ts(ts.init(variables()), padded_batch(0))


if __name__ == "__main__":
    absltest.main()
