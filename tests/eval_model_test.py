# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A model whose dropout is a field of its config, as Flax's lm1b writes it.

lm1b's ``TransformerLM(config)`` calls ``nn.Dropout(...)(x,
deterministic=config.deterministic)`` and takes no ``train`` argument: it
draws from ``'dropout'`` whenever it is traced in training form, and it is
evaluated as another module, ``TransformerLM(config.replace(
deterministic=True))``. The step traces it (LessBN's plan, freezing's
groups) with a dropout key, and ``predict(..., model=)`` evaluates the
script's evaluation model on the step's variables.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import linen as nn
from flax import nnx

import boostax
from boostax.examples import models
from tests import _utils

VOCAB = 16
TOKENS = np.random.default_rng(0).integers(0, VOCAB, (4, 8)).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Config:
    deterministic: bool = False


class LM(nn.Module):
    config: Config

    @nn.compact
    def __call__(self, inputs):
        x = nn.Embed(VOCAB, 8)(inputs)
        x = nn.Dropout(0.5)(x, deterministic=self.config.deterministic)
        return nn.Dense(VOCAB)(x)


def token_loss(logits, targets):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, targets
    ).mean()


class DropoutByConfigTest(absltest.TestCase):
    def test_traced_with_a_dropout_key_and_evaluated_as_the_eval_model(self):
        model = LM(Config())
        # The trace for O1's plan draws dropout: it used to fail, blaming
        # `sample_inputs`.
        with self.assertWarnsRegex(UserWarning, "no BatchNorm"):
            ts = boostax.auto_boost(
                "O1",
                optimizer=optax.adam(1e-2),
                model=model,
                loss=token_loss,
                sample_inputs=TOKENS,
            )
        variables = model.init(
            {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)},
            TOKENS,
        )
        state = ts.init(variables)
        state, _ = ts(state, (TOKENS, TOKENS))
        eval_model = LM(Config(deterministic=True))
        outputs = ts.predict(state, TOKENS, model=eval_model)
        np.testing.assert_array_equal(
            outputs, eval_model.apply({"params": state.params}, TOKENS)
        )
        # The training model draws dropout: it cannot be evaluated as is,
        # and the error says where the evaluation model goes.
        with self.assertRaisesRegex(ValueError, "model=eval_model"):
            ts.predict(state, TOKENS)

    def test_less_bn_reduces_the_eval_model_as_the_step_model(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(8, 16))
        x = np.random.default_rng(1).normal(size=(4, 8, 8, 1))
        x = x.astype(np.float32)
        ts = boostax.auto_boost(
            "O1",
            {"grad_freeze": {"param_groups": 2, "total_steps": 4}},
            optimizer=optax.sgd(0.05),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=x,
        )
        state = ts.init(model.init(jax.random.PRNGKey(0), x, train=False))
        np.testing.assert_array_equal(
            ts.predict(state, x, model=model), ts.predict(state, x)
        )

    def test_refused_where_there_is_no_linen_model(self):
        class Net(nnx.Module):
            def __init__(self, rngs):
                self.dense = nnx.Linear(8, 2, rngs=rngs)

            def __call__(self, x):
                return self.dense(x)

        ts = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=Net(nnx.Rngs(0)),
            loss=lambda y, t: ((y - t) ** 2).mean(),
        )
        state = ts.init(None)
        with self.assertRaisesRegex(TypeError, r"\.eval\(\)"):
            ts.predict(state, np.zeros((2, 8), np.float32), model=LM(Config()))
        ts_linen = boostax.auto_boost(
            "O0",
            optimizer=optax.sgd(0.1),
            model=LM(Config(deterministic=True)),
            loss=token_loss,
        )
        state = ts_linen.init(
            LM(Config(True)).init(jax.random.PRNGKey(0), TOKENS)
        )
        with self.assertRaisesRegex(TypeError, "Linen module"):
            ts_linen.predict(state, TOKENS, model="eval")


class PackedLM(nn.Module):
    """lm1b's call: tokens, then their positions and segments (packed)."""

    config: Config

    @nn.compact
    def __call__(self, inputs, inputs_positions=None, inputs_segmentation=None):
        x = nn.Embed(VOCAB, 8)(inputs) + nn.Embed(8, 8)(inputs_positions)
        x = x * (inputs_segmentation[..., None] > 0)
        x = nn.Dropout(0.5)(x, deterministic=self.config.deterministic)
        return nn.Dense(VOCAB)(x)


PACKED_KEYS = (("inputs", "inputs_position", "inputs_segmentation"), "inputs")


def packed_batch(seed):
    rng = np.random.default_rng(seed)
    positions = np.tile(np.arange(16, dtype=np.int32) % 4, (4, 1))
    return {
        "inputs": rng.integers(1, VOCAB, (4, 16)).astype(np.int32),
        "inputs_position": positions,
        "inputs_segmentation": (np.arange(16, dtype=np.int32) // 4 + 1)
        * np.ones((4, 1), np.int32),
    }


class PackedBatchTest(absltest.TestCase):
    def test_positional_inputs_with_dropout_and_targets_the_inputs(self):
        model = PackedLM(Config())
        keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.key(1)}
        data = [packed_batch(i) for i in range(2)]
        args = tuple(data[0][k] for k in PACKED_KEYS[0])
        variables = model.init(keys, *args)
        tx = optax.adam(1e-2)
        ts = boostax.auto_boost(
            "O0",
            optimizer=tx,
            model=model,
            loss=token_loss,
            options=boostax.StepOptions(batch_keys=PACKED_KEYS),
        )
        state = ts.init(variables)

        # The script's own step: the step's key for stream 0 ('dropout').
        @jax.jit
        def by_hand(params, opt_state, rng, step, batch):
            key = jax.random.fold_in(jax.random.fold_in(rng, step), 0)

            def loss(params):
                logits = model.apply(
                    {"params": params},
                    *(batch[k] for k in PACKED_KEYS[0]),
                    rngs={"dropout": key},
                )
                return token_loss(logits, batch["inputs"])

            grads = jax.grad(loss)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        params, opt_state = variables["params"], tx.init(variables["params"])
        for i, batch in enumerate(data):
            params, opt_state = by_hand(params, opt_state, state.rng, i, batch)
        for batch in data:
            state, _ = ts(state, batch)
        _utils.assert_trees_equal(state.params, params)
        # Evaluated with the positional inputs as a tuple.
        eval_model = PackedLM(Config(deterministic=True))
        np.testing.assert_array_equal(
            ts.predict(state, args, model=eval_model),
            eval_model.apply({"params": state.params}, *args),
        )

    def test_a_warm_up_cuts_every_positional_input(self):
        model = PackedLM(Config())
        batch = packed_batch(0)
        args = tuple(batch[k] for k in PACKED_KEYS[0])
        ts = boostax.auto_boost(
            "O0",
            {"seq_len_warmup": {"enabled": True, "total_steps": 10}},
            optimizer=optax.sgd(0.1),
            model=model,
            loss=token_loss,
            options=boostax.StepOptions(batch_keys=PACKED_KEYS),
        )
        keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.key(1)}
        state = ts.init(model.init(keys, *args))
        state, metrics = ts(state, batch)
        # The first 8 of 16 positions of all three entries (a leaf left
        # whole would not broadcast with the others in the model).
        self.assertEqual(int(metrics["sequence_length"]), 8)
        self.assertEqual(int(metrics["tokens"]), 4 * 8)

    def test_bad_batch_keys(self):
        for bad in (
            (("inputs", "inputs"), "targets"),  # an input twice
            ((), "targets"),
            ("inputs", ("targets",)),
            ((("inputs",),), "targets"),
        ):
            with self.assertRaisesRegex(TypeError, "positional inputs"):
                boostax.make_train_step(
                    optax.sgd(0.1),
                    model=PackedLM(Config()),
                    loss=token_loss,
                    options=boostax.StepOptions(batch_keys=bad),
                )


class LossFunctionKeyTest(absltest.TestCase):
    def test_a_loss_function_taking_rng_gets_the_step_key(self):
        params = {"w": np.ones((8, VOCAB), np.float32)}
        x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
        seen = []

        def loss_fn(params, batch, rng):
            seen.append(rng)
            keep = jax.random.bernoulli(rng, 0.5, batch.shape)
            return jnp.mean((jnp.where(keep, batch, 0.0) @ params["w"]) ** 2)

        tx = optax.sgd(0.1)
        ts = boostax.make_train_step(tx, loss_fn=loss_fn)
        state = ts.init(params, rng=jax.random.PRNGKey(3))
        new_state, metrics = ts(state, x)
        self.assertLen(seen, 1)  # traced once
        key = jax.random.fold_in(jax.random.PRNGKey(3), 0)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, key)
        np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-6)
        updates, _ = tx.update(grads, tx.init(params), params)
        _utils.assert_trees_all_close(
            new_state.params,
            optax.apply_updates(params, updates),
            rtol=1e-6,
            atol=1e-7,
        )


if __name__ == "__main__":
    absltest.main()
