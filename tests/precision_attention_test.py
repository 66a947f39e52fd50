# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for the softmax of Flax's attention under a precision policy
(`boostax._src.step.attributes.float32_softmax_attention`)."""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx

import boostax
from boostax._src import jaxpr_walk
from boostax._src.step import attributes as step_attributes
from boostax.examples import models

BATCH, LENGTH, FEATURES, HEADS, CLASSES = 4, 5, 6, 2, 3
# The attention weights: [batch, heads, q_length, kv_length].
WEIGHTS_SHAPE = (BATCH, HEADS, LENGTH, LENGTH)


class LinenAttention(nn.Module):
    """Self-attention, a mean over positions, a classifier."""

    attention_fn: object = nn.dot_product_attention

    @nn.compact
    def __call__(self, x):
        # (Self-attention: Flax deprecates nn.SelfAttention, its subclass.)
        x = nn.MultiHeadDotProductAttention(
            num_heads=HEADS, qkv_features=8, attention_fn=self.attention_fn
        )(x, deterministic=True)
        return nn.Dense(CLASSES)(x.mean(axis=1))


class NNXAttention(nnx.Module):
    """The same in NNX; `dropout_rate` > 0 takes Flax's own weights path
    (without, Flax calls ``jax.nn.dot_product_attention``)."""

    def __init__(self, dropout_rate=0.0, *, rngs):
        self.attention = nnx.MultiHeadAttention(
            HEADS,
            FEATURES,
            qkv_features=8,
            dropout_rate=dropout_rate,
            decode=False,
            rngs=rngs,
        )
        self.head = nnx.Linear(FEATURES, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.head(self.attention(x).mean(axis=1))


def _batch():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(BATCH, LENGTH, FEATURES)), jnp.float32)
    return x, jnp.asarray(rng.integers(0, CLASSES, BATCH))


def _step(model, precision):
    return boostax.make_train_step(
        optax.sgd(0.1),
        model=model,
        loss=models.cross_entropy,
        precision=precision,
    )


def _traced(kind, precision, **kwargs):
    """The jaxpr of one train step of a tiny attention model (not compiled)."""
    batch = _batch()
    if kind == "linen":
        model = LinenAttention(**kwargs)
        variables = model.init(jax.random.PRNGKey(0), batch[0])
    else:
        model = NNXAttention(**kwargs, rngs=nnx.Rngs(0))
        variables = NNXAttention(**kwargs, rngs=nnx.Rngs(0))
    ts = _step(model, precision)
    return ts.trace(ts.init(variables), batch).jaxpr


def _dtypes(jaxpr, primitive, shape):
    """The output dtypes of `primitive` on `shape`, forward and backward
    (rematerialised ones included)."""
    found = []
    for eqn in jaxpr_walk.equations(jaxpr.jaxpr):
        if eqn.primitive.name != primitive:
            continue
        out = eqn.outvars[0].aval
        if out.shape == shape:
            found.append(out.dtype.name)
    return found


def _matmul_operand_dtypes(jaxpr):
    return {
        v.aval.dtype.name
        for eqn in jaxpr_walk.equations(jaxpr.jaxpr)
        if eqn.primitive.name == "dot_general"
        for v in eqn.invars
    }


def _qkv(dtype):
    rng = np.random.default_rng(1)
    return tuple(
        jnp.asarray(rng.normal(size=(2, 8, 2, 4)), dtype) for _ in range(3)
    )


class AttentionSoftmaxTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("linen_bf16", "linen", "bfloat16", "bfloat16", {}),
        ("linen_o2", "linen", "O2", "float16", {}),
        ("linen_o3", "linen", "O3", "float16", {}),
        (
            "nnx_dropout_bf16",
            "nnx",
            "bfloat16",
            "bfloat16",
            {"dropout_rate": 0.1},
        ),
    )
    def test_softmax_in_float32_matmuls_in_the_compute_dtype(
        self, kind, precision, dtype, kwargs
    ):
        jaxpr = _traced(kind, precision, **kwargs)
        # The softmax's exp (forward, and recomputed for the backward) and
        # its max over the keys run in float32...
        exps = _dtypes(jaxpr, "exp", WEIGHTS_SHAPE)
        self.assertNotEmpty(exps)
        self.assertEqual(set(exps), {"float32"})
        self.assertEqual(
            set(_dtypes(jaxpr, "reduce_max", WEIGHTS_SHAPE[:-1])), {"float32"}
        )
        # ... and every matmul, the query-key and the weights-value ones
        # among them, in the compute dtype.
        self.assertEqual(_matmul_operand_dtypes(jaxpr), {dtype})
        self.assertEqual(
            set(_dtypes(jaxpr, "dot_general", WEIGHTS_SHAPE)), {dtype}
        )

    def test_a_users_attention_fn_is_used_as_given(self):
        # A user's own attention_fn (here Flax's, under another name) is
        # never replaced: its softmax runs in the compute dtype, as Flax's
        # own does without the policy.
        own = functools.partial(nn.dot_product_attention)
        jaxpr = _traced("linen", "bfloat16", attention_fn=own)
        self.assertIn("bfloat16", _dtypes(jaxpr, "exp", WEIGHTS_SHAPE))

    def test_nnx_without_dropout_keeps_jaxs_attention(self):
        # Without dropout (or sown weights) Flax calls
        # jax.nn.dot_product_attention, whose logits and softmax are float32
        # already: the call is Flax's, unchanged.
        q, k, v = _qkv(jnp.bfloat16)
        mask = nn.make_causal_mask(jnp.zeros((2, 8)))
        self.assertEqual(
            str(
                jax.make_jaxpr(step_attributes.nnx_float32_softmax)(
                    q, k, v, mask=mask
                )
            ),
            str(jax.make_jaxpr(nnx.dot_product_attention)(q, k, v, mask=mask)),
        )
        jaxpr = _traced("nnx", "bfloat16")
        # (JAX's own attention groups the heads: one more axis.)
        exps = _dtypes(jaxpr, "exp", (1, *WEIGHTS_SHAPE))
        self.assertNotEmpty(exps)
        self.assertEqual(set(exps), {"float32"})

    @parameterized.named_parameters(
        ("linen", step_attributes.linen_float32_softmax),
        ("nnx", step_attributes.nnx_float32_softmax),
    )
    def test_the_reference_attentions_arithmetic(self, attention_fn):
        # Logits in the compute dtype, softmax in float32, weights cast
        # back: bit for bit models.reference_attention, which Flax's own
        # bfloat16 softmax is not.
        q, k, v = _qkv(jnp.bfloat16)
        mask = nn.make_causal_mask(jnp.zeros((2, 8)))
        reference = models.reference_attention(q, k, v, mask=mask)
        # Dropout's path (deterministic: no weight dropped) for NNX's.
        found = attention_fn(
            q, k, v, mask=mask, dropout_rate=0.1, deterministic=True
        )
        self.assertEqual(found.dtype, jnp.bfloat16)
        np.testing.assert_array_equal(
            np.asarray(found, np.float32), np.asarray(reference, np.float32)
        )
        half = nn.dot_product_attention(q, k, v, mask=mask)
        self.assertFalse(
            np.array_equal(
                np.asarray(half, np.float32), np.asarray(reference, np.float32)
            )
        )

    def test_float32_and_users_attention_fn_are_kept(self):
        layer = nn.SelfAttention(num_heads=HEADS)
        find = step_attributes.float32_softmax_attention
        self.assertIs(
            find(layer, jnp.bfloat16), step_attributes.linen_float32_softmax
        )
        self.assertIsNone(find(layer, jnp.float32))
        own = nn.SelfAttention(
            num_heads=HEADS, attention_fn=models.reference_attention
        )
        self.assertIsNone(find(own, jnp.bfloat16))
        # Linen passes an attention_fn the keyword arguments its signature
        # names: the wrapper's are Flax's (dtype, dropout, module for sow).
        signature = inspect.signature(step_attributes.linen_float32_softmax)
        self.assertIn("module", signature.parameters)

    def test_without_a_policy_the_model_is_unchanged(self):
        x, y = _batch()
        model = LinenAttention()
        variables = model.init(jax.random.PRNGKey(0), x)

        def plain(variables):
            return models.cross_entropy(model.apply(variables, x), y)

        def in_step(variables):
            with step_attributes.linen_step_attributes(None):
                return plain(variables)

        self.assertEqual(
            str(jax.make_jaxpr(in_step)(variables)),
            str(jax.make_jaxpr(plain)(variables)),
        )
        ts = _step(model, None)
        _, metrics = ts(ts.init(variables), (x, y))
        self.assertEqual(
            float(metrics["loss"]), float(jax.jit(plain)(variables))
        )


if __name__ == "__main__":
    absltest.main()
