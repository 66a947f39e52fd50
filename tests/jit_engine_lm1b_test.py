# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Flax lm1b's transformer, its params annotated with logical axes as the
example's later ``models.py`` annotates them, trained on a 2 x 4 (data x
model) mesh by `DataParallel(engine="jit")`: tensor parallelism by Flax's
logical axis rules, with dropout, against the same model on one device.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import linen as nn

import boostax
from boostax.examples import flax_lm1b_models as models
from tests import _utils

LENGTH, ROWS, VOCAB = 16, 8, 32
CONFIG = models.TransformerConfig(
    vocab_size=VOCAB,
    output_vocab_size=VOCAB,
    emb_dim=32,
    num_heads=4,
    num_layers=2,
    qkv_dim=32,
    mlp_dim=64,
    max_len=LENGTH,
    logical_axes=True,
)


def token_loss(logits, targets):
    """The example's token-weighted cross-entropy: padding (0) weighs
    nothing, divided by the tokens of the whole batch."""
    weights = (targets > 0).astype(jnp.float32)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return boostax.WeightedLoss((losses * weights).sum(), weights.sum())


def batches(n):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        tokens = rng.integers(1, VOCAB, size=(ROWS, LENGTH))
        kept = rng.integers(LENGTH // 2, LENGTH + 1, size=ROWS)
        tokens[np.arange(LENGTH)[None] >= kept[:, None]] = 0
        out.append({"inputs": tokens.astype(np.int32)})
    return out


def build(mesh, config):
    return boostax.auto_boost(
        "O0",
        config,
        optimizer=optax.adamw(3e-3),
        model=models.TransformerLM(CONFIG),
        loss=token_loss,
        sample_inputs=jnp.ones((1, LENGTH), jnp.int32),
        mesh=mesh,
        options=boostax.StepOptions(batch_keys=("inputs", "inputs")),
    )


def train(ts, variables, steps=5):
    state = ts.init(variables, rng=jax.random.key(3))
    losses = []
    for batch in batches(steps):
        state, metrics = ts(state, batch)
        losses.append(float(metrics["loss"]))
    return state, losses


class Lm1bTensorParallelTest(absltest.TestCase):
    def test_trains_as_one_device_with_dropout(self):
        boxed = models.TransformerLM(CONFIG).init(
            {"params": jax.random.key(0), "dropout": jax.random.key(1)},
            jnp.ones((1, LENGTH), jnp.int32),
        )
        one = train(build(None, None), nn.meta.unbox(boxed))
        mesh = jax.make_mesh((2, 4), ("data", "model"))
        for fsdp in (False, True):
            config = {
                "data_parallel": {
                    "engine": "jit",
                    "logical_axis_rules": models.LOGICAL_AXIS_RULES,
                    "shard_optimizer_state": fsdp,
                    "shard_params": fsdp or None,
                }
            }
            state, losses = train(build(mesh, config), boxed)
            # One dropout draw for the global batch: the same run.
            np.testing.assert_allclose(losses, one[1], rtol=2e-5)
            # AdamW (lr 3e-3, 5 steps: up to 1.5e-2 a weight) turns the
            # other reduction order's rounding of the few gradients near
            # zero into up to 1e-4.
            _utils.assert_trees_all_close(
                state.params, one[0].params, rtol=1e-4, atol=2e-4
            )
            # The MLP's hidden units over 'model' (4 ways); with FSDP its
            # input axis over 'data' (2 ways) too. The vocabulary too.
            block = state.params["decoder"]["encoderdecoderblock_0"]
            kernel = block["MlpBlock_0"]["Dense_0"]["kernel"]
            self.assertEqual(
                kernel.addressable_shards[0].data.shape,
                (16, 16) if fsdp else (32, 16),
            )
            query = block["SelfAttention_0"]["query"]["kernel"]
            self.assertEqual(query.addressable_shards[0].data.shape[1], 1)
            params = boostax.measure.state_bytes_per_device(state)["params"]
            whole = boostax.measure.state_bytes_per_device(one[0])["params"]
            self.assertLess(params, whole / (6 if fsdp else 2.5))

    def test_sequence_length_warmup(self):
        # The text recipe's warm-up cuts the batch before the step: the
        # 2 x 4 mesh trains on the cut rows as one device does.
        warmup = {
            "seq_len_warmup": {
                "enabled": True,
                "total_steps": 4,
                "duration": 0.5,
                "min_seq_length": 8,
                "step_size": 8,
            }
        }
        boxed = models.TransformerLM(CONFIG).init(
            {"params": jax.random.key(0), "dropout": jax.random.key(1)},
            jnp.ones((1, LENGTH), jnp.int32),
        )
        one = train(build(None, warmup), nn.meta.unbox(boxed), steps=4)
        config = {
            **warmup,
            "data_parallel": {
                "engine": "jit",
                "logical_axis_rules": models.LOGICAL_AXIS_RULES,
            },
        }
        mesh = jax.make_mesh((2, 4), ("data", "model"))
        state, losses = train(build(mesh, config), boxed, steps=4)
        np.testing.assert_allclose(losses, one[1], rtol=2e-5)
        _utils.assert_trees_all_close(
            state.params, one[0].params, rtol=1e-4, atol=2e-4
        )


if __name__ == "__main__":
    absltest.main()
