# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.centralization`."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import nnx

import boostax
from boostax.examples import models


def reference_centralize(g, layout="flax"):
    """float64 NumPy: subtract the mean over every axis but the output's."""
    g = np.asarray(g, np.float64)
    if g.ndim < 2:
        return g
    axes = (
        tuple(range(g.ndim - 1))
        if layout == "flax"
        else tuple(range(1, g.ndim))
    )
    return g - g.mean(axis=axes, keepdims=True)


def _random(shape, seed=0):
    return jnp.asarray(
        np.random.default_rng(seed).normal(size=shape), jnp.float32
    )


class CentralizeTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("conv_flax", (3, 3, 16, 32), "flax"),
        ("dense_flax", (64, 128), "flax"),
        ("conv_output_first", (32, 16, 3, 3), "output_first"),
        ("dense_output_first", (128, 64), "output_first"),
    )
    def test_matches_float64_reference(self, shape, layout):
        g = {"w": _random(shape)}
        tx = boostax.centralize_gradients(layout=layout)
        updates, _ = jax.jit(tx.update)(g, tx.init(g))
        np.testing.assert_allclose(
            updates["w"], reference_centralize(g["w"], layout), atol=1e-6
        )
        output_axis = -1 if layout == "flax" else 0
        axes = tuple(
            a for a in range(len(shape)) if a != output_axis % len(shape)
        )
        np.testing.assert_allclose(
            np.asarray(updates["w"], np.float64).mean(axis=axes), 0, atol=1e-6
        )

    def test_optax_centralize_is_wrong_for_flax_kernels(self):
        # optax.centralize averages over every axis but the first: right for
        # (out, in, kh, kw), wrong for Flax's (kh, kw, in, out).
        g = {"conv": {"kernel": _random((3, 3, 16, 32), seed=1)}}
        ours, _ = boostax.centralize_gradients().update(g, None)
        theirs, _ = optax.centralize().update(g, None)
        per_output = lambda u: np.abs(  # noqa: E731
            np.asarray(u["conv"]["kernel"]).mean(axis=(0, 1, 2))
        ).max()
        self.assertLess(per_output(ours), 1e-6)
        self.assertGreater(per_output(theirs), 1e-2)
        self.assertFalse(
            np.allclose(ours["conv"]["kernel"], theirs["conv"]["kernel"])
        )
        # In output-first layout the two agree.
        t = {"w": jnp.transpose(g["conv"]["kernel"], (3, 2, 0, 1))}
        ours_t, _ = boostax.centralize_gradients(layout="output_first").update(
            t, None
        )
        theirs_t, _ = optax.centralize().update(t, None)
        np.testing.assert_allclose(ours_t["w"], theirs_t["w"], atol=1e-6)

    def test_dtype_is_kept(self):
        g = {"w": _random((16, 8)).astype(jnp.bfloat16)}
        updates, _ = boostax.centralize_gradients().update(g, None)
        self.assertEqual(updates["w"].dtype, jnp.bfloat16)
        np.testing.assert_allclose(
            np.asarray(updates["w"], np.float32),
            reference_centralize(g["w"].astype(jnp.float32)),
            atol=2e-2,
        )


class MaskTest(parameterized.TestCase):
    def test_mindspore_rules(self):
        params = {
            "stem": {"kernel": jnp.ones((3, 3, 3, 16))},  # fan-in 3
            "conv": {"kernel": jnp.ones((3, 3, 16, 32)), "bias": jnp.ones(32)},
            "norm": {"scale": jnp.ones((16, 16)), "bias": jnp.ones(16)},
            "gamma_weights": jnp.ones((32, 32)),
            "dw": {"kernel": jnp.ones((3, 3, 16, 16))},
            "head": {"kernel": jnp.ones((32, 10))},
        }
        mask = boostax.gradient_centralization_mask(
            params, excluded_modules=[("dw",)]
        )
        self.assertEqual(
            mask,
            {
                "stem": {"kernel": False},
                "conv": {"kernel": True, "bias": False},
                "norm": {"scale": False, "bias": False},
                "gamma_weights": False,
                "dw": {"kernel": False},
                "head": {"kernel": True},
            },
        )
        loose = boostax.gradient_centralization_mask(params, fan_in_multiple=1)
        self.assertTrue(loose["stem"]["kernel"])
        self.assertTrue(loose["dw"]["kernel"])

    def test_rules_skip_leaves(self):
        g = {
            "stem": {"kernel": _random((3, 3, 3, 16))},
            "conv": {"kernel": _random((3, 3, 16, 32)), "bias": _random((32,))},
        }
        updates, _ = jax.jit(boostax.centralize_gradients().update)(g, None)
        np.testing.assert_array_equal(
            updates["stem"]["kernel"], g["stem"]["kernel"]
        )
        np.testing.assert_array_equal(
            updates["conv"]["bias"], g["conv"]["bias"]
        )
        np.testing.assert_allclose(
            updates["conv"]["kernel"],
            reference_centralize(g["conv"]["kernel"]),
            atol=1e-6,
        )

    def test_user_mask_overrides(self):
        g = {"a": _random((3, 5)), "b": _random((16, 4)), "c": _random((4,))}
        mask = {"a": True, "b": False, "c": True}
        updates, _ = boostax.centralize_gradients(mask).update(g, None)
        np.testing.assert_allclose(
            updates["a"], reference_centralize(g["a"]), atol=1e-6
        )  # fan-in 3, centralized anyway
        np.testing.assert_array_equal(updates["b"], g["b"])
        np.testing.assert_array_equal(updates["c"], g["c"])  # 1-D: never
        callable_mask = lambda params: {"a": False, "b": True, "c": False}  # noqa: E731
        updates, _ = boostax.centralize_gradients(callable_mask).update(
            g, None, g
        )
        np.testing.assert_array_equal(updates["a"], g["a"])
        np.testing.assert_allclose(
            updates["b"], reference_centralize(g["b"]), atol=1e-6
        )

    def test_nnx_state(self):
        model = models.NNXMLP(features=(16,), rngs=nnx.Rngs(0))
        _, params, _ = nnx.split(model, nnx.Param, ...)
        mask = boostax.gradient_centralization_mask(params)
        self.assertTrue(mask["hidden"][0]["kernel"].get_value())  # fan-in 64
        self.assertTrue(mask["head"]["kernel"].get_value())  # fan-in 16
        self.assertFalse(mask["head"]["bias"].get_value())
        tx = boostax.centralize_gradients()
        updates, _ = tx.update(params, tx.init(params), params)
        self.assertEqual(
            jax.tree.structure(updates), jax.tree.structure(params)
        )

    @parameterized.parameters(("nchw",), ("",))
    def test_bad_layout(self, layout):
        with self.assertRaisesRegex(ValueError, "`layout` must be one of"):
            boostax.centralize_gradients(layout=layout)

    @parameterized.parameters(
        (0, ValueError), (-16, ValueError), (2.0, TypeError), (True, TypeError)
    )
    def test_bad_fan_in_multiple(self, value, error):
        with self.assertRaisesRegex(error, "`fan_in_multiple` must be"):
            boostax.centralize_gradients(fan_in_multiple=value)


class WithGradientCentralizationTest(absltest.TestCase):
    def test_mindspore_order_decay_then_centralize_then_core(self):
        params = {"w": _random((16, 4), seed=2)}
        grads = {"w": _random((16, 4), seed=3)}
        lr, wd = 0.1, 0.01
        tx = boostax.with_gradient_centralization(
            optax.sgd(lr), weight_decay=wd
        )
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        expected = -lr * reference_centralize(
            np.asarray(grads["w"], np.float64)
            + wd * np.asarray(params["w"], np.float64)
        )
        np.testing.assert_allclose(updates["w"], expected, atol=1e-6)

    def test_errors(self):
        with self.assertRaisesRegex(TypeError, "`optimizer` must be"):
            boostax.with_gradient_centralization(optax.sgd)
        with self.assertRaisesRegex(
            ValueError, "`weight_decay` must be .*>= 0"
        ):
            boostax.with_gradient_centralization(
                optax.sgd(0.1), weight_decay=-1.0
            )
        with self.assertRaisesRegex(TypeError, "`weight_decay` must be a"):
            boostax.with_gradient_centralization(
                optax.sgd(0.1), weight_decay="0.1"
            )


if __name__ == "__main__":
    absltest.main()
