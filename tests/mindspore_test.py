# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax.mindspore`: OptimizerProcess, ParameterProcess, LessBN.

The other classes are tested beside the functional API they wrap
(`freezing_test`, `loss_scale_test`, `data_parallel_test`, ...)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import nnx

import boostax
from boostax import mindspore as boost
from boostax.examples import models
from tests import _models, _utils

X = np.zeros((2, 8, 8, 1), np.float32)


def _reference_centralize(g):
    g = np.asarray(g, np.float64)
    return g - g.mean(axis=tuple(range(g.ndim - 1)), keepdims=True)


def _params():
    rng = np.random.default_rng(0)
    return {
        "conv": {
            "kernel": jnp.asarray(rng.normal(size=(3, 3, 16, 32)), jnp.float32)
        },
        "head": {
            "kernel": jnp.asarray(rng.normal(size=(32, 10)), jnp.float32),
            "bias": jnp.asarray(rng.normal(size=(10,)), jnp.float32),
        },
    }


class OptimizerProcessTest(parameterized.TestCase):
    def test_single_optimizer(self):
        params = _params()
        grads = jax.tree.map(lambda p: 0.5 * p + 1.0, params)
        process = boost.OptimizerProcess(optax.sgd(0.1), weight_decay=0.01)
        process.add_grad_centralization(params)
        self.assertEqual(
            process.gc_mask,
            {"conv": {"kernel": True}, "head": {"bias": False, "kernel": True}},
        )
        tx = process.generate_new_optimizer()
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        for name in ("conv", "head"):
            decayed = np.asarray(
                grads[name]["kernel"], np.float64
            ) + 0.01 * np.asarray(params[name]["kernel"])
            np.testing.assert_allclose(
                updates[name]["kernel"],
                -0.1 * _reference_centralize(decayed),
                atol=1e-5,
            )
        np.testing.assert_allclose(
            updates["head"]["bias"],
            -0.1
            * (
                np.asarray(grads["head"]["bias"])
                + 0.01 * np.asarray(params["head"]["bias"])
            ),
            rtol=1e-6,
        )

    def test_groups_keep_their_settings(self):
        params = _params()
        grads = jax.tree.map(jnp.ones_like, params)
        labels = {
            "conv": {"kernel": "slow"},
            "head": {"kernel": "fast", "bias": "fast"},
        }
        process = boost.OptimizerProcess(
            {"slow": optax.sgd(0.01), "fast": optax.sgd(1.0)},
            labels,
            weight_decay={"slow": 0.0, "fast": 0.5},
        )
        self.assertIs(process.origin_params, labels)
        process.add_grad_centralization(params)
        tx = process.generate_new_optimizer()
        updates, _ = tx.update(grads, tx.init(params), params)
        # conv: lr 0.01, no decay, centralized ones -> 0.
        np.testing.assert_allclose(updates["conv"]["kernel"], 0.0, atol=1e-7)
        # head bias: lr 1.0, decay 0.5, not centralized (1-D).
        np.testing.assert_allclose(
            updates["head"]["bias"],
            -(1.0 + 0.5 * np.asarray(params["head"]["bias"])),
            rtol=1e-6,
        )

    def test_model_structure_excludes_grouped_convs_and_fn_heads(self):
        model = _models.NNXMobileNetV2ish(rngs=nnx.Rngs(0))
        reduced = boostax.less_bn(model, X, fn_flag=True)
        params_dict = boost.OptimizerProcess.build_params_dict(reduced)
        self.assertEqual(
            params_dict[("blocks", 0, "depthwise")], "grouped_conv"
        )
        self.assertEqual(params_dict[("fc",)], "fn_head")
        process = boost.OptimizerProcess(optax.sgd(0.1))
        process.add_grad_centralization(reduced)
        mask = process.gc_mask(nnx.state(reduced, nnx.Param))
        self.assertFalse(mask["blocks"][0]["depthwise"]["kernel"].get_value())
        self.assertFalse(mask["fc"]["kernel"].get_value())
        self.assertTrue(mask["blocks"][0]["expand"]["kernel"].get_value())
        linen = boost.OptimizerProcess.build_params_dict(
            _models.MobileNetV2ish(), X
        )
        self.assertEqual(linen[("ir_residual", "depthwise")], "grouped_conv")
        with self.assertRaisesRegex(TypeError, "pass `sample_inputs=`"):
            boost.OptimizerProcess.build_params_dict(_models.MobileNetV2ish())

    def test_reduced_linen_model_excludes_fn_head_and_grouped_convs(self):
        # As auto_boost's mask (the LessBN plan's `excluded_from_gc`).
        reduced = boostax.less_bn(
            models.ResNet(stage_sizes=(1, 1), widths=(16, 32)), X, fn_flag=True
        )
        process = boost.OptimizerProcess(optax.sgd(1.0))
        process.add_grad_centralization(reduced, X)
        params = reduced.init(jax.random.PRNGKey(0), X, train=False)["params"]
        grads = jax.tree.map(
            lambda p: jnp.arange(p.size, dtype=p.dtype).reshape(p.shape),
            params,
        )
        tx = process.generate_new_optimizer()
        updates, _ = tx.update(grads, tx.init(params), params)
        np.testing.assert_array_equal(
            updates["Dense_0"]["kernel"], -grads["Dense_0"]["kernel"]
        )
        kernel = ("BasicBlock_0", "Conv_0", "kernel")
        np.testing.assert_allclose(
            updates[kernel[0]][kernel[1]]["kernel"],
            -_reference_centralize(grads[kernel[0]][kernel[1]]["kernel"]),
            atol=1e-3,
        )
        mobilenet = boostax.less_bn(_models.MobileNetV2ish(), X, fn_flag=True)
        params_dict = boost.OptimizerProcess.build_params_dict(mobilenet, X)
        self.assertEqual(
            params_dict[("ir_residual", "depthwise")], "grouped_conv"
        )
        self.assertEqual(params_dict[("fc",)], "fn_head")

    def test_attention_kernels_centralized_over_their_layers_fan_in(self):
        # With sample inputs the fan-in axes come from each kernel's layer:
        # the query kernel (in, heads, head_dim) over `in` only (the rank
        # rule reads `heads` as the fan-in and skips it), the embedding not.
        model = models.NNXTransformer(
            context=8, d_model=32, num_heads=2, num_blocks=1, rngs=nnx.Rngs(0)
        )
        tokens = np.zeros((1, 8), np.int32)
        process = boost.OptimizerProcess(optax.sgd(1.0))
        process.add_grad_centralization(model, tokens)
        params = nnx.state(model, nnx.Param)
        grads = jax.tree.map(
            lambda p: jnp.asarray(
                np.random.default_rng(p.size).normal(size=p.shape), p.dtype
            ),
            params,
        )
        tx = process.generate_new_optimizer()
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        query = grads["blocks"][0]["attention"]["query"]["kernel"].get_value()
        reference = np.asarray(query, np.float64)
        reference = reference - reference.mean(axis=0, keepdims=True)
        np.testing.assert_allclose(
            updates["blocks"][0]["attention"]["query"]["kernel"].get_value(),
            -reference,
            atol=1e-5,
        )
        np.testing.assert_array_equal(
            updates["tokens"]["embedding"].get_value(),
            -grads["tokens"]["embedding"].get_value(),
        )

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "need `param_labels`"):
            boost.OptimizerProcess({"a": optax.sgd(0.1)})
        with self.assertRaisesRegex(ValueError, "goes with a mapping"):
            boost.OptimizerProcess(optax.sgd(0.1), {"w": "a"})
        with self.assertRaisesRegex(TypeError, "`optimizer` must be"):
            boost.OptimizerProcess("sgd")
        with self.assertRaisesRegex(ValueError, "empty parameter list"):
            boost.OptimizerProcess(optax.sgd(0.1)).add_grad_centralization({})


class ParameterProcessTest(absltest.TestCase):
    def test_fusion_buckets(self):
        params = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}
        process = boost.ParameterProcess()
        self.assertEqual(
            process.assign_parameter_group(params),
            {"a": 1, "b": 1, "c": 2, "d": 2, "e": 2},
        )
        self.assertEqual(
            process.assign_parameter_group(params, [1, 3]),
            {"a": 1, "b": 2, "c": 2, "d": 3, "e": 3},
        )

    def test_generate_group_params_after_less_bn(self):
        model = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        variables = model.init(jax.random.PRNGKey(0), X, train=False)
        labels = jax.tree_util.tree_map_with_path(
            lambda path, _: (
                "head" if "Dense_0" in jax.tree_util.keystr(path) else "body"
            ),
            variables["params"],
        )
        reduced = boostax.less_bn(model, X, fn_flag=True)
        new_params = reduced.init(jax.random.PRNGKey(0), X, train=False)[
            "params"
        ]
        new_labels = boost.ParameterProcess.generate_group_params(
            new_params, labels
        )
        # The FN multiplier joins its kernel's group; removed BNs are gone.
        self.assertEqual(
            new_labels["Dense_0"], {"kernel": "head", "multiplier": "head"}
        )
        self.assertNotIn("BatchNorm_0", new_labels["BasicBlock_0"])
        self.assertEqual(
            jax.tree.structure(new_labels), jax.tree.structure(new_params)
        )
        optax.partition(
            {"head": optax.sgd(1.0), "body": optax.sgd(0.1)}, new_labels
        ).init(new_params)
        self.assertIsNone(
            boost.ParameterProcess.generate_group_params(new_params, None)
        )


class LessBNTest(absltest.TestCase):
    def test_needs_sample_inputs(self):
        with self.assertRaisesRegex(TypeError, "pass `sample_inputs=`"):
            boost.LessBN(models.ResNet())
        reduced = boost.LessBN(
            models.ResNet(stage_sizes=(1, 1), widths=(16, 32)),
            fn_flag=True,
            sample_inputs=X,
        )
        self.assertEqual(reduced.fn_head, ("Dense_0",))

    def test_auto_boost_o1_manual_train(self):
        booster = boost.AutoBoost(
            "O1", {"boost": {"mode": "manual", "grad_freeze": False}}
        )
        network, optimizer = booster.network_auto_process_train(
            models.NNXResNet(
                stage_sizes=(1, 1), widths=(16, 32), rngs=nnx.Rngs(0)
            ),
            optax.sgd(0.1),
            sample_inputs=X,
        )
        self.assertIsInstance(network.blocks[0].bn1, boostax.NNXIdentity)
        self.assertIsInstance(network.head, boostax.NNXFNHead)
        params = nnx.state(network, nnx.Param)
        grads = jax.tree.map(jnp.ones_like, params)
        updates, _ = optimizer.update(grads, optimizer.init(params), params)
        # Centralized: conv1 kernel (fan-in 16) gets zero from all-ones grads;
        # the FN head is left alone.
        np.testing.assert_allclose(
            updates["blocks"][0]["conv1"]["kernel"].get_value(), 0.0, atol=1e-7
        )
        np.testing.assert_allclose(
            updates["head"]["kernel"].get_value(), -0.1, rtol=1e-6
        )

    def test_o1_freezing_groups_are_cut_before_less_bn(self):
        # On the reduced example ResNet there are only 8 chunks for the 10
        # default groups (no freezing, with a warning); cut on the network
        # as given, as MindSpore does, every group differs.
        digits = _utils.digits()
        x, y = digits.x_train[:16], digits.y_train[:16]
        network, optimizer = boost.AutoBoost("O1").network_auto_process_train(
            models.ResNet(), optax.sgd(0.05), sample_inputs=x[:1]
        )
        self.assertIsInstance(optimizer, boost.FreezeOpt)
        cell = boost.BoostTrainOneStepCell(
            network,
            optimizer,
            loss=models.cross_entropy,
            variables=network.init(jax.random.PRNGKey(0), x[:1], train=False),
        )
        self.assertTrue(np.isfinite(cell(x, y)))
        groups = cell.train_step.freezing.groups
        self.assertLen(groups, 10)
        self.assertLen({len(g) for g in groups}, 10)


if __name__ == "__main__":
    absltest.main()
