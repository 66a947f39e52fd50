# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.less_bn.centralization`."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx

import boostax
from boostax._src.config import boost_config as config_lib
from boostax._src.config import components as boost_components
from boostax._src.tree_utils import path_names
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


# ---------------------------------------------------------------------------
# Centralization by each leaf's layer.
# ---------------------------------------------------------------------------

VOCAB, LENGTH, WIDTH, HEADS = 64, 8, 32, 2
TOKENS = jnp.zeros((2, LENGTH), jnp.int32)


class LinenLayers(nn.Module):
    """Every layer type with a fan-in rule, as a tiny language model."""

    @nn.compact
    def __call__(self, tokens):
        h = nn.Embed(VOCAB, WIDTH, name="embed")(tokens)
        h = h + nn.MultiHeadDotProductAttention(
            HEADS, deterministic=True, name="attention"
        )(h)
        h = nn.Conv(WIDTH, (3,), name="conv")(h)
        e = nn.Einsum(
            (WIDTH, HEADS, WIDTH // HEADS), "btd,dhk->bthk", name="einsum"
        )(h)
        h = nn.DenseGeneral(WIDTH, axis=(-2, -1), name="general")(e)
        h = nn.relu(nn.Dense(2 * WIDTH, name="mlp")(h))
        return nn.Dense(VOCAB, name="head")(h)


class NNXLayers(nnx.Module):
    """`LinenLayers` in NNX."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(
            HEADS, WIDTH, decode=False, deterministic=True, rngs=rngs
        )
        self.conv = nnx.Conv(WIDTH, WIDTH, (3,), rngs=rngs)
        self.einsum = nnx.Einsum(
            "btd,dhk->bthk", (WIDTH, HEADS, WIDTH // HEADS), rngs=rngs
        )
        self.general = nnx.LinearGeneral(
            (HEADS, WIDTH // HEADS), WIDTH, axis=(-2, -1), rngs=rngs
        )
        self.mlp = nnx.Linear(WIDTH, 2 * WIDTH, rngs=rngs)
        self.head = nnx.Linear(2 * WIDTH, VOCAB, rngs=rngs)

    def __call__(self, tokens):
        h = self.embed(tokens)
        h = h + self.attention(h)
        h = self.general(self.einsum(self.conv(h)))
        return self.head(nnx.relu(self.mlp(h)))


# Each kernel's fan-in axes, by layer. The rank rule (every axis but the
# last, fan-in shape[-2]) skips query/key/value (shape[-2] = heads = 2),
# averages the output projection and the einsum over heads, and centralizes
# the embedding (a mean over the vocabulary) and the head.
LAYER_AXES = {
    ("embed", "embedding"): None,  # (VOCAB, WIDTH)
    ("attention", "query", "kernel"): (0,),  # (WIDTH, HEADS, 16)
    ("attention", "key", "kernel"): (0,),
    ("attention", "value", "kernel"): (0,),
    ("attention", "out", "kernel"): (0, 1),  # (HEADS, 16, WIDTH)
    ("conv", "kernel"): (0, 1),  # (3, WIDTH, WIDTH)
    ("einsum", "kernel"): (0,),  # (WIDTH, HEADS, 16)
    ("general", "kernel"): (0, 1),  # (HEADS, 16, WIDTH)
    ("mlp", "kernel"): (0,),  # (WIDTH, 2 WIDTH)
    ("head", "kernel"): None,  # (2 WIDTH, VOCAB): per position over VOCAB
}


def _layer_params(kind):
    if kind == "linen":
        model = LinenLayers()
        return model, model.init(jax.random.PRNGKey(0), TOKENS)["params"]
    model = NNXLayers(nnx.Rngs(0))
    return model, nnx.state(model, nnx.Param)


def _by_path(tree):
    """Leaf path -> leaf; an axes entry (a tuple or None) is one leaf."""
    return {
        path_names(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(
            tree, is_leaf=lambda x: x is None or isinstance(x, tuple)
        )[0]
    }


def reference_centralize_axes(g, axes):
    """float64 NumPy: subtract the mean over the fan-in axes."""
    g = np.asarray(g, np.float64)
    return g - g.mean(axis=axes, keepdims=True)


class LayerAxesTest(parameterized.TestCase):
    @parameterized.parameters(("linen",), ("nnx",))
    def test_axes_of_each_layer(self, kind):
        model, params = _layer_params(kind)
        axes = _by_path(boostax.gradient_centralization_axes(model, TOKENS))
        for path, expected in LAYER_AXES.items():
            self.assertEqual(axes[path], expected, path)
        for path, entry in axes.items():
            if path[-1] in ("bias", "scale"):
                self.assertIsNone(entry, path)
        self.assertLen(axes, len(_by_path(params)))

    @parameterized.parameters(("linen",), ("nnx",))
    def test_update_matches_float64_reference(self, kind):
        model, params = _layer_params(kind)
        axes = boostax.gradient_centralization_axes(model, TOKENS, params)
        leaves, treedef = jax.tree.flatten(params)
        grads = treedef.unflatten(
            [_random(jnp.shape(x), seed=i) for i, x in enumerate(leaves)]
        )
        tx = boostax.centralize_gradients(axes=axes)
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        got, given = _by_path(updates), _by_path(grads)
        for path, g in given.items():
            expected_axes = LAYER_AXES.get(path)
            expected = (
                np.asarray(g, np.float64)
                if expected_axes is None
                else reference_centralize_axes(g, expected_axes)
            )
            np.testing.assert_allclose(
                got[path], expected, atol=1e-6, err_msg=str(path)
            )
            if expected_axes is not None:  # each output unit: mean 0
                np.testing.assert_allclose(
                    np.asarray(got[path], np.float64).mean(axis=expected_axes),
                    0,
                    atol=1e-6,
                )

    def test_tied_head_and_classifier_head(self):
        class Tied(nnx.Module):
            def __init__(self, rngs):
                self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
                self.mlp = nnx.Linear(WIDTH, WIDTH, rngs=rngs)

            def __call__(self, tokens):
                return self.embed.attend(self.mlp(self.embed(tokens)))

        axes = boostax.gradient_centralization_axes(Tied(nnx.Rngs(0)), TOKENS)
        self.assertIsNone(axes["embed"]["embedding"].get_value())
        self.assertEqual(axes["mlp"]["kernel"].get_value(), (0,))
        # A classifier's head (one output per example) is centralized, even
        # with as many classes as the vocabulary.
        head = nnx.Linear(WIDTH, VOCAB, rngs=nnx.Rngs(0))
        axes = boostax.gradient_centralization_axes(head, jnp.zeros((2, WIDTH)))
        self.assertEqual(axes["kernel"].get_value(), (0,))

    def test_unknown_layer_falls_back_to_the_rank_rule(self):
        class Custom(nn.Module):
            @nn.compact
            def __call__(self, x):
                w = self.param("w", nn.initializers.ones, (2, 16, 32))
                return jnp.einsum("bi,aio->bo", x, w)

        axes = boostax.gradient_centralization_axes(
            Custom(), jnp.zeros((1, 16))
        )
        self.assertEqual(axes, {"w": (0, 1)})

        # A Dense kernel stacked by nn.scan, (layers, in, out), is not of
        # Dense's rank: the rank rule, too (the bias stays out).
        class Block(nn.Module):
            @nn.compact
            def __call__(self, carry, _):
                return nn.Dense(16)(carry), None

        class Stack(nn.Module):
            @nn.compact
            def __call__(self, x):
                scan = nn.scan(
                    Block,
                    variable_axes={"params": 0},
                    split_rngs={"params": True},
                    length=3,
                )
                return scan()(x, None)[0]

        axes = boostax.gradient_centralization_axes(Stack(), jnp.zeros((1, 16)))
        self.assertEqual(
            axes["ScanBlock_0"]["Dense_0"], {"kernel": (0, 1), "bias": None}
        )

    def test_mask_applies_mindspore_rules_to_the_true_fan_in(self):
        # Query (16, 4, 8): fan-in 16 (the rank rule reads 4 heads).
        # Out (4, 8, 16): fan-in 32. Out (2, 4, 16): fan-in 8, skipped.
        params = {
            "q": jnp.zeros((16, 4, 8)),
            "out": jnp.zeros((4, 8, 16)),
            "small": jnp.zeros((2, 4, 16)),
            "embed": jnp.zeros((32, 16)),
            "gamma": jnp.zeros((16, 16)),
        }
        axes = {"q": (0,), "out": (0, 1), "small": (0, 1), "embed": None}
        axes["gamma"] = (0,)
        mask = boostax.gradient_centralization_mask(params, axes=axes)
        self.assertEqual(
            mask,
            {
                "q": True,
                "out": True,
                "small": False,
                "embed": False,
                "gamma": False,
            },
        )
        old = boostax.gradient_centralization_mask(params)
        self.assertFalse(old["q"])
        self.assertTrue(old["embed"])
        callable_mask = boostax.gradient_centralization_mask(
            params, axes=lambda p: axes
        )
        self.assertEqual(callable_mask, mask)

    def test_bad_axes(self):
        g = {"w": jnp.ones((16, 4, 8))}
        with self.assertRaisesRegex(TypeError, "`axes` must be None, a pytr"):
            boostax.centralize_gradients(axes={"w": "in"})
        with self.assertRaisesRegex(TypeError, "`axes` must be None, a pytr"):
            boostax.gradient_centralization_mask(g, axes={"w": 0.5})
        for bad, problem in (
            ((3,), "out of range"),
            ((0, 0), "repeated"),
            ((0, 1, 2), "no output axis"),
            ((), "no axis"),
        ):
            tx = boostax.centralize_gradients(axes={"w": bad})
            with self.assertRaisesRegex(ValueError, f"w .*{problem}"):
                tx.update(g, None)
        tx = boostax.centralize_gradients(axes={"v": (0,)})
        with self.assertRaisesRegex(ValueError, "structure of the params"):
            tx.update(g, None)
        with self.assertRaisesRegex(ValueError, "drop `layout`"):
            boostax.centralize_gradients(
                axes={"w": (0,)}, layout="output_first"
            )
        tx = boostax.centralize_gradients({"w": True}, axes={"w": None})
        with self.assertRaisesRegex(ValueError, "`mask` selects w"):
            tx.update(g, None)
        with self.assertRaisesRegex(TypeError, "`model` must be"):
            boostax.gradient_centralization_axes(optax.sgd(1.0), TOKENS)

    def test_with_gradient_centralization_passes_axes(self):
        params = {"q": _random((16, 4, 8), seed=4)}
        grads = {"q": _random((16, 4, 8), seed=5)}
        tx = boostax.with_gradient_centralization(
            optax.sgd(1.0), weight_decay=0.1, axes={"q": (0,)}
        )
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        expected = -reference_centralize_axes(
            np.asarray(grads["q"], np.float64)
            + 0.1 * np.asarray(params["q"], np.float64),
            (0,),
        )
        np.testing.assert_allclose(updates["q"], expected, atol=1e-5)


def _transformer():
    return models.NNXTransformer(
        context=LENGTH, d_model=32, num_blocks=2, rngs=nnx.Rngs(0)
    )


class BundledModelsTest(absltest.TestCase):
    def test_transformer_every_projection_kernel_and_no_embedding(self):
        # Through LessBN's wiring (what O1 runs): one SGD step at lr 1 is
        # minus the centralized gradient.
        model = _transformer()
        config = config_lib.boost_config(
            "O1",
            {
                "boost": {"mode": "manual", "grad_freeze": False},
                "less_bn": {"fn_flag": False},
            },
        )
        with self.assertWarnsRegex(UserWarning, "no BatchNorm"):
            reduced, tx, _, _ = boost_components.apply_less_bn(
                model, optax.sgd(1.0), config, TOKENS
            )
        params = nnx.state(reduced, nnx.Param)
        leaves, treedef = jax.tree.flatten(params)
        grads = treedef.unflatten(
            [_random(jnp.shape(x), seed=i) for i, x in enumerate(leaves)]
        )
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        got, centralized = _by_path(updates), {}
        for path, g in _by_path(grads).items():
            axes = next(
                (
                    a
                    for pattern, a in TRANSFORMER_AXES.items()
                    if re.fullmatch(pattern, "/".join(path))
                ),
                None,
            )
            expected = (
                np.asarray(g, np.float64)
                if axes is None
                else reference_centralize_axes(g, axes)
            )
            np.testing.assert_allclose(
                -np.asarray(got[path]), expected, atol=1e-5, err_msg=str(path)
            )
            centralized["/".join(path)] = axes
        on = sorted(p for p, a in centralized.items() if a is not None)
        self.assertLen(on, 2 * 6)  # q, k, v, out, mlp_in, mlp_out per block
        self.assertEmpty([p for p in on if "embedding" in p or "head" in p])

    def test_resnets_mask_unchanged(self):
        # The bundled ResNets: the layers' axes give today's rank-rule mask.
        for model, x in (
            (models.ResNet(), jnp.zeros((1, 8, 8, 1))),
            (models.BottleneckResNet(), jnp.zeros((1, 32, 32, 3))),
            (models.NNXResNet(rngs=nnx.Rngs(0)), jnp.zeros((1, 8, 8, 1))),
        ):
            if isinstance(model, nnx.Module):
                params = nnx.state(model, nnx.Param)
            else:
                params = jax.eval_shape(
                    lambda m=model, x=x: m.init(
                        jax.random.PRNGKey(0), x, train=False
                    )
                )["params"]
            axes = boostax.gradient_centralization_axes(model, x, params)
            self.assertEqual(
                boostax.gradient_centralization_mask(params, axes=axes),
                boostax.gradient_centralization_mask(params),
                type(model).__name__,
            )
            # ... over the same axes: every axis but the last.
            for path, entry in _by_path(axes).items():
                if entry is not None:
                    self.assertEqual(entry, tuple(range(len(entry))), path)


# The bundled transformer's kernels: leaf path pattern -> fan-in axes.
TRANSFORMER_AXES = {
    r"blocks/\d+/attention/(query|key|value)/kernel": (0,),
    r"blocks/\d+/attention/out/kernel": (0, 1),
    r"blocks/\d+/mlp_(in|out)/kernel": (0,),
}

DOCS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "docs",
    "methods",
    "less_bn.md",
)


def bundled_tables() -> dict[str, str]:
    """The report tables the docs list, by model."""
    return {
        "models.NNXTransformer()": boostax.gradient_centralization_report(
            models.NNXTransformer(rngs=nnx.Rngs(0)),
            jnp.zeros((1, 64), jnp.int32),
        ).table(),
        "models.ResNet()": boostax.gradient_centralization_report(
            models.ResNet(), jnp.zeros((1, 8, 8, 1))
        ).table(),
        "models.BottleneckResNet()": boostax.gradient_centralization_report(
            models.BottleneckResNet(), jnp.zeros((1, 32, 32, 3))
        ).table(),
    }


class DocsTableTest(absltest.TestCase):
    def test_docs_list_what_the_code_centralizes(self):
        with open(DOCS) as f:
            text = f.read()
        for name, table in bundled_tables().items():
            # assertTrue, not assertIn: the message shows the table, not the
            # whole page.
            self.assertTrue(
                f"`{name}`" in text, f"docs/methods/less_bn.md lacks {name}"
            )
            section = text.split(f"`{name}`", 1)[1]
            self.assertTrue(
                table in section,
                f"docs/methods/less_bn.md's table for {name} is stale; "
                f"the code gives:\n{table}",
            )


if __name__ == "__main__":
    absltest.main()
