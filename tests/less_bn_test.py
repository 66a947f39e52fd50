# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.less_bn.api` and `boostax._src.model_graph`."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx
from flax.core import unfreeze as flax_unfreeze

import boostax
from boostax._src import model_graph
from boostax._src.less_bn import patterns as less_bn_patterns
from boostax.examples import models
from tests import _models, _patterns, _utils

X = np.zeros((2, 8, 8, 1), np.float32)
SMALL_RESNET = dict(stage_sizes=(1, 1), widths=(16, 32))

# Expected removals, by structure (layer names differ between models).
CASES = {
    "resnet_linen": (
        lambda: models.ResNet(**SMALL_RESNET),
        [
            "BasicBlock_0/BatchNorm_0",
            "BasicBlock_1/BatchNorm_0",
            "BasicBlock_1/BatchNorm_2",
        ],
        ["BatchNorm_0", "BasicBlock_0/BatchNorm_1", "BasicBlock_1/BatchNorm_1"],
    ),
    "resnet_nnx": (
        lambda: models.NNXResNet(**SMALL_RESNET, rngs=nnx.Rngs(0)),
        ["blocks/0/bn1", "blocks/1/bn1", "blocks/1/shortcut_bn"],
        ["stem_bn", "blocks/0/bn2", "blocks/1/bn2"],
    ),
    "bottleneck_linen": (
        _models.BottleneckNet,
        [
            "first/n_a",
            "first/n_b",
            "first/proj_norm",
            "second/n_a",
            "second/n_b",
        ],
        ["stem_norm", "first/n_c", "second/n_c"],
    ),
    "bottleneck_nnx": (
        lambda: _models.NNXBottleneckNet(rngs=nnx.Rngs(0)),
        [
            "first/n_a",
            "first/n_b",
            "first/proj_norm",
            "second/n_a",
            "second/n_b",
        ],
        ["stem_norm", "first/n_c", "second/n_c"],
    ),
    # The residual block follows the stem's ReLU6, which pattern 7 does not
    # accept (it wants a BN output); the strided block reads a residual add
    # (pattern 8); the head BN goes by pattern 10.
    "mobilenet_linen": (
        _models.MobileNetV2ish,
        ["ir_down/expand_norm", "head_norm"],
        [
            "stem_norm",
            "ir_residual/expand_norm",
            "ir_residual/dw_norm",
            "ir_residual/project_norm",
            "ir_down/dw_norm",
            "ir_down/project_norm",
        ],
    ),
    "mobilenet_nnx": (
        lambda: _models.NNXMobileNetV2ish(rngs=nnx.Rngs(0)),
        ["blocks/1/expand_norm", "head_norm"],
        [
            "stem_norm",
            "blocks/0/expand_norm",
            "blocks/0/dw_norm",
            "blocks/0/project_norm",
            "blocks/1/dw_norm",
            "blocks/1/project_norm",
        ],
    ),
    # The first dense layer's partner in the concatenation is the max pool,
    # not a concatenation: no pattern; the second loses its first BN (12).
    "densenet_linen": (
        _models.DenseNetish,
        ["DenseLayer_1/BatchNorm_0"],
        [
            "DenseLayer_0/BatchNorm_0",
            "DenseLayer_0/BatchNorm_1",
            "DenseLayer_1/BatchNorm_1",
        ],
    ),
}


def _linen_variables(model, train=False):
    return model.init(jax.random.PRNGKey(0), X, train=train)


def _count(tree):
    return sum(math.prod(np.shape(x)) for x in jax.tree.leaves(tree))


def _params_of(model):
    if isinstance(model, nnx.Module):
        return nnx.state(model, nnx.Param)
    return _linen_variables(model)["params"]


class RulesTest(parameterized.TestCase):
    @parameterized.named_parameters(
        *((name,) + case for name, case in CASES.items())
    )
    def test_the_right_batch_norms_go(self, make, removed, kept):
        model = make()
        report = boostax.less_bn_report(model, X)
        self.assertEqual([r.path for r in report.removed], removed)
        self.assertEqual(sorted(report.kept), sorted(kept))
        self.assertIsNone(report.fn_head)
        reduced = boostax.less_bn(model, X)
        # The parameter count drops by exactly the removed BNs' parameters.
        self.assertEqual(
            _count(_params_of(model)) - _count(_params_of(reduced)),
            report.removed_parameters,
        )
        bn_params = sum(
            2 * n.shape[-1]
            for n in _graph(model).layers("batch_norm")
            if model_graph_path(n) in removed
        )
        self.assertEqual(report.removed_parameters, bn_params)
        # The reduced model has exactly the kept BNs, in train and in eval.
        for train in (False, True):
            graph = _graph(reduced, train)
            self.assertEqual(
                sorted(model_graph_path(n) for n in graph.layers("batch_norm")),
                sorted(kept),
            )
        if isinstance(model, nn.Module):
            outputs = reduced.apply(
                _linen_variables(reduced), X + 1.0, train=False
            )
        else:
            outputs = reduced(X + 1.0)
        self.assertTrue(np.all(np.isfinite(outputs)))
        self.assertEqual(outputs.shape, (2, 10))

    def test_rules_ignore_names(self):
        # The same structure under other names gives the same removals.
        linen = boostax.less_bn_report(models.ResNet(**SMALL_RESNET), X)
        nnx_model = boostax.less_bn_report(
            models.NNXResNet(**SMALL_RESNET, rngs=nnx.Rngs(0)), X
        )
        self.assertEqual(
            [r.reason for r in linen.removed],
            [r.reason for r in nnx_model.removed],
        )

    def test_no_pattern_returns_model_unchanged_with_a_warning(self):
        model = _models.PlainBNMLP()
        with self.assertWarnsRegex(UserWarning, "returned unchanged"):
            reduced = boostax.less_bn(model, np.zeros((2, 64), np.float32))
        self.assertIs(reduced, model)

    def test_report_text(self):
        text = str(
            boostax.less_bn_report(
                models.ResNet(**SMALL_RESNET), X, fn_flag=True
            )
        )
        self.assertIn("3 of 6 BatchNorms removed", text)
        self.assertIn(
            "BasicBlock_1/BatchNorm_2: ResNet basic block, projection "
            "shortcut, BN of the projection shortcut (pattern 4)",
            text,
        )
        self.assertIn("= BasicBlock_0/BatchNorm_1: kept", text)
        self.assertIn("FN head replaces dense layer Dense_0", text)

    def test_bad_model(self):
        with self.assertRaisesRegex(TypeError, "`model` must be a Flax"):
            boostax.less_bn(lambda x: x, X)


def _graph(model, train=False):
    if isinstance(model, nnx.Module):
        copy = nnx.clone(model)
        copy.train() if train else copy.eval()
        return (
            model_graph.nnx_graph(copy, (X,))
            if not train
            else (_nnx_train_graph(copy))
        )
    return model_graph.linen_graph(model, (X,), {"train": train})


def _nnx_train_graph(model):
    # model_graph traces NNX models in eval mode; trace train mode by hand.
    graphdef, state = nnx.split(model)
    calls = []

    def forward(state, x):
        copy = nnx.merge(graphdef, state, copy=True)
        copy.train()
        with model_graph._record_nnx_calls(copy, calls):
            return copy(x)

    jaxpr = jax.make_jaxpr(forward)(state, X)
    return model_graph.build_graph(jaxpr, calls, len(jax.tree.leaves(state)))


def model_graph_path(node):
    return "/".join(str(p) for p in node.path)


def reference_fn_head(x, kernel, multiplier, eps=1e-4):
    x = np.asarray(x, np.float64)
    kernel = np.asarray(kernel, np.float64)
    xn = x / np.sqrt(np.maximum((x**2).sum(-1, keepdims=True), eps))
    kn = kernel / np.sqrt(np.maximum((kernel**2).sum(0, keepdims=True), eps))
    return float(multiplier) * xn @ kn


def _pattern_cases(cases):
    for name, case in cases.items():
        for framework in ("linen", "nnx"):
            yield f"{name}_{framework}", case, framework


def _count_batch_norms(model, x):
    return len(list(model_graph.model_graph(model, x).layers("batch_norm")))


def _as_identity(variables, removed, epsilon=1e-5):
    """Linen variables in which the `removed` BNs compute the identity."""
    variables = jax.tree.map(np.asarray, flax_unfreeze(variables))
    for name in removed:
        scale = variables["params"][name]["scale"]
        variables["params"][name] = {
            "scale": np.ones_like(scale),
            "bias": np.zeros_like(scale),
        }
        variables["batch_stats"][name] = {
            "mean": np.zeros_like(scale),
            "var": np.full_like(scale, 1.0 - epsilon),
        }
    return variables


def _nnx_as_identity(model, removed, epsilon=1e-5):
    model = nnx.clone(model)
    for name in removed:
        bn = getattr(model, name)
        bn.scale[...] = jnp.ones_like(bn.scale[...])
        bn.bias[...] = jnp.zeros_like(bn.bias[...])
        bn.mean[...] = jnp.zeros_like(bn.mean[...])
        bn.var[...] = jnp.full_like(bn.var[...], 1.0 - epsilon)
    return model


class PatternsTest(parameterized.TestCase):
    """Each of MindSpore's 16 patterns, and models mixing them."""

    @parameterized.named_parameters(
        *_pattern_cases({**_patterns.CASES, **_patterns.MIXED})
    )
    def test_removes_what_mindspore_removes(self, case, framework):
        x = _patterns.sample()
        model = _patterns.build(case, framework, x, abstract=True)
        report = boostax.less_bn_report(model, x)
        self.assertEqual(
            {r.path: r.pattern for r in report.removed}, case.removed
        )
        self.assertLen(
            report.kept, _count_batch_norms(model, x) - len(case.removed)
        )
        if not case.removed:
            with self.assertWarnsRegex(UserWarning, "returned unchanged"):
                self.assertIs(boostax.less_bn(model, x), model)

    @parameterized.named_parameters(*_pattern_cases(_patterns.MIXED))
    def test_removed_batch_norms_act_as_the_identity(self, case, framework):
        # The reduced model computes what the original computes with the
        # removed BNs set to the identity (scale 1, shift 0, statistics
        # 0 and 1 - eps).
        x = np.random.default_rng(0).normal(size=_patterns.sample().shape)
        x = x.astype(np.float32)
        model = _patterns.build(case, framework, x)
        if framework == "nnx":
            # Built by a training-mode call, which moved the statistics: put
            # every BN back at Flax's initial values, so the model is fresh
            # (trained ones are folded, or refused: less_bn_weights_test.py).
            batch_norms = [
                path[0]
                for path, m in nnx.iter_modules(model)
                if isinstance(m, nnx.BatchNorm)
            ]
            model = _nnx_as_identity(model, batch_norms, epsilon=0.0)
        reduced = boostax.less_bn(model, x)
        if framework == "linen":
            variables = model.init(jax.random.PRNGKey(0), x, train=False)
            expected = model.apply(
                _as_identity(variables, case.removed), x, train=False
            )
            got = reduced.apply(
                reduced.convert_variables(variables), x, train=False
            )
        else:
            model.eval()
            expected = _nnx_as_identity(model, case.removed)(x)
            reduced.eval()
            got = reduced(x)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    @parameterized.parameters(1, 3)
    def test_convolutions_of_any_rank(self, rank):
        x = _patterns.sample(rank=rank, size=8)
        for name, case in {**_patterns.CASES, **_patterns.MIXED}.items():
            report = boostax.less_bn_report(
                _patterns.build(case, "linen", x), x
            )
            self.assertEqual(
                {r.path: r.pattern for r in report.removed},
                case.removed,
                name,
            )

    def test_every_reachable_pattern_is_tested(self):
        seen = {
            p
            for case in {**_patterns.CASES, **_patterns.MIXED}.values()
            for p in case.removed.values()
        }
        # 14 and 15 are unreachable in MindSpore (pattern 13 matches first).
        self.assertEqual(seen, set(range(1, 17)) - {14, 15})
        self.assertEqual(
            [p.number for p in less_bn_patterns.PATTERNS], list(range(1, 17))
        )

    def test_fn_head_starts_no_match(self):
        # MindSpore's FN head reads L2Normalize, so pattern 10 cannot match
        # from it and the head BN stays.
        x = _patterns.sample()
        model = _patterns.linen(_patterns.p10)
        report = boostax.less_bn_report(model, x, fn_flag=True)
        self.assertEqual(report.removed, ())
        self.assertEqual(report.fn_head, "fc")
        self.assertIn("last_bn", report.kept)


class FNHeadTest(parameterized.TestCase):
    def test_matches_float64_reference(self):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(5, 16)).astype(np.float32)
        x[0] = 1e-4  # squared norm below the 1e-4 clamp
        kernel = rng.normal(size=(16, 3)).astype(np.float32)
        out = jax.jit(boostax.full_normalization)(x, kernel, jnp.array([2.5]))
        np.testing.assert_allclose(
            out, reference_fn_head(x, kernel, 2.5), rtol=1e-5, atol=1e-6
        )
        head = boostax.FNHead(3)
        variables = head.init(jax.random.PRNGKey(0), x)
        self.assertEqual(
            jax.tree.map(np.shape, variables["params"]),
            {"kernel": (16, 3), "multiplier": (1,)},
        )
        np.testing.assert_array_equal(variables["params"]["multiplier"], [1.0])

    def test_linen_dense_becomes_fn_head(self):
        model = models.ResNet(**SMALL_RESNET)
        variables = _linen_variables(model)
        reduced = boostax.less_bn(model, X, fn_flag=True)
        converted = reduced.convert_variables(variables)
        head = converted["params"]["Dense_0"]
        self.assertEqual(sorted(head), ["kernel", "multiplier"])
        np.testing.assert_array_equal(
            head["kernel"], variables["params"]["Dense_0"]["kernel"]
        )
        np.testing.assert_array_equal(head["multiplier"], [1.0])
        self.assertEqual(
            jax.tree.structure(converted),
            jax.tree.structure(_linen_variables(reduced)),
        )
        self.assertEqual(  # idempotent
            jax.tree.structure(reduced.convert_variables(converted)),
            jax.tree.structure(converted),
        )
        # The logits are the FN head of the pooled features.
        captured = {}

        def capture(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            if context.method_name == "__call__" and context.module.path == ():
                return out
            if context.module.path == ("BasicBlock_1",):
                captured["features"] = jnp.mean(out, axis=(1, 2))
            return out

        inputs = (
            np.random.default_rng(1).normal(size=X.shape).astype(np.float32)
        )
        with nn.intercept_methods(capture):
            logits = reduced.apply(converted, inputs, train=False)
        np.testing.assert_allclose(
            logits,
            reference_fn_head(captured["features"], head["kernel"], 1.0),
            rtol=1e-4,
            atol=1e-5,
        )

    def test_nnx_linear_becomes_fn_head(self):
        model = models.NNXResNet(**SMALL_RESNET, rngs=nnx.Rngs(0))
        reduced = boostax.less_bn(model, X, fn_flag=True)
        self.assertIsInstance(reduced.head, boostax.NNXFNHead)
        np.testing.assert_array_equal(
            reduced.head.kernel[...], model.head.kernel[...]
        )
        np.testing.assert_array_equal(reduced.head.multiplier[...], [1.0])
        self.assertIsInstance(reduced.blocks[0].bn1, boostax.NNXIdentity)
        self.assertIsInstance(model.blocks[0].bn1, nnx.BatchNorm)  # untouched
        # The kept layers carry the original weights.
        np.testing.assert_array_equal(
            reduced.blocks[0].conv1.kernel[...],
            model.blocks[0].conv1.kernel[...],
        )


class AutoBoostLessBNTest(parameterized.TestCase):
    CONFIG = {
        "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False}
    }

    def _train_step(self, model, lr=0.1, config=None, **kwargs):
        return boostax.auto_boost(
            "O1",
            config or self.CONFIG,
            optimizer=optax.sgd(lr),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=X,
            **kwargs,
        )

    def test_gradient_centralization_is_exact(self):
        # One SGD step equals params - lr * GC(grads of the reduced model),
        # with MindSpore's mask: stem conv (fan-in 1) and FN head left alone.
        model = models.ResNet(**SMALL_RESNET)
        ts = self._train_step(model)
        digits = _utils.digits()
        batch = (digits.x_train[:16], digits.y_train[:16])
        state = ts.init(_linen_variables(model))
        self.assertIn("multiplier", state.params["Dense_0"])

        def loss_fn(params):
            logits, _ = ts.model.apply(
                {"params": params, **state.model_state},
                batch[0],
                train=True,
                mutable=["batch_stats"],
            )
            return models.cross_entropy(logits, batch[1])

        grads = jax.grad(loss_fn)(state.params)
        new_state, metrics = ts(state, batch)
        self.assertTrue(np.isfinite(metrics["loss"]))
        flat_new = dict(
            jax.tree_util.tree_flatten_with_path(new_state.params)[0]
        )
        for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
            name = jax.tree_util.keystr(path)
            old = dict(jax.tree_util.tree_flatten_with_path(state.params)[0])[
                path
            ]
            centralized = (
                g.ndim >= 2 and g.shape[-2] % 16 == 0 and "Dense_0" not in name
            )
            expected_g = (
                _reference_centralize(g)
                if centralized
                else np.asarray(g, np.float64)
            )
            np.testing.assert_allclose(
                flat_new[path],
                np.asarray(old, np.float64) - 0.1 * expected_g,
                rtol=1e-5,
                atol=1e-6,
                err_msg=name,
            )
        self.assertEqual(ts.trace_count, 1)

    @parameterized.named_parameters(
        ("linen", lambda: models.ResNet(**SMALL_RESNET)),
        ("nnx", lambda: models.NNXResNet(**SMALL_RESNET, rngs=nnx.Rngs(0))),
    )
    def test_trains_from_the_original_variables(self, make):
        model = make()
        ts = self._train_step(model, lr=0.05)
        original = (
            _linen_variables(model) if isinstance(model, nn.Module) else model
        )
        state = ts.init(original)
        self.assertEqual(_count(state.params), _count(_params_of(model)) - 169)
        digits = _utils.digits()
        losses = []
        for epoch in range(2):
            for batch in data_batches(digits, epoch):
                state, metrics = ts(state, batch)
                losses.append(float(metrics["loss"]))
        self.assertLess(np.mean(losses[-5:]), np.mean(losses[:5]))
        self.assertEqual(ts.trace_count, 1)
        logits = ts.predict(state, digits.x_test[:8])
        self.assertTrue(np.all(np.isfinite(logits)))

    def test_a_model_mixing_patterns_trains_at_o1(self):
        # Patterns 7-11 in one MobileNetV2-style network (compiling its
        # steps is slow on CPU: one model, Linen, 12 steps).
        case = _patterns.MIXED["mobilenet_v2"]
        model = _patterns.build(case, "linen", X)
        ts = boostax.auto_boost(
            "O1",
            # Two parameter groups: O1's freezing, with fewer depths to
            # compile than its default ten.
            {"boost": {"mode": "auto"}, "grad_freeze": {"param_groups": 2}},
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=model,
            loss=models.cross_entropy,
            sample_inputs=X,
        )
        # The same BNs go; with O1's FN head the last BN goes by pattern 8
        # (it reads a residual add) instead of pattern 10.
        self.assertEqual(
            {r.path for r in ts.less_bn_report.removed}, set(case.removed)
        )
        state = ts.init(_linen_variables(model))
        losses = []
        for batch in itertools.islice(data_batches(_utils.digits(), 0), 12):
            state, metrics = ts(state, batch)
            losses.append(float(metrics["loss"]))
        self.assertTrue(np.all(np.isfinite(losses)))
        self.assertLess(np.mean(losses[-4:]), np.mean(losses[:4]))

    def test_flags(self):
        model = models.ResNet(**SMALL_RESNET)
        config = {
            "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False},
            "less_bn": {"fn_flag": False, "gc_flag": False},
        }
        ts = self._train_step(model, config=config)
        state = ts.init(_linen_variables(model))
        self.assertIn("bias", state.params["Dense_0"])
        self.assertNotIn("BatchNorm_0", state.params["BasicBlock_0"])
        # No GC: a plain SGD step.
        digits = _utils.digits()
        batch = (digits.x_train[:16], digits.y_train[:16])
        new_state, _ = ts(state, batch)
        plain = boostax.make_train_step(
            optax.sgd(0.1), model=ts.model, loss=models.cross_entropy
        )
        expected, _ = plain(plain.init(_linen_variables(ts.model)), batch)
        _utils.assert_trees_equal(
            new_state.params["Conv_0"], expected.params["Conv_0"]
        )

    def test_needs_sample_inputs_and_a_model(self):
        with self.assertRaisesRegex(ValueError, "pass `sample_inputs=`"):
            boostax.auto_boost(
                "O1",
                self.CONFIG,
                optimizer=optax.sgd(0.1),
                model=models.ResNet(),
                loss=models.cross_entropy,
            )
        with self.assertRaisesRegex(ValueError, "pass `model=`"):
            boostax.auto_boost(
                "O1",
                self.CONFIG,
                optimizer=optax.sgd(0.1),
                loss_fn=lambda p, b: jnp.sum(p),
                sample_inputs=X,
            )


def _reference_centralize(g):
    g = np.asarray(g, np.float64)
    return g - g.mean(axis=tuple(range(g.ndim - 1)), keepdims=True)


def data_batches(digits, epoch):
    from boostax.examples import data

    return data.batches(digits.x_train, digits.y_train, 64, seed=0, epoch=epoch)


if __name__ == "__main__":
    absltest.main()
