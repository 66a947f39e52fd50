# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.auto_boost` and `boostax.mindspore.AutoBoost`."""

import warnings
from unittest import mock

import jax
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import nnx

import boostax
from boostax import mindspore as boost
from boostax._src import boost_components
from boostax.examples import models
from tests import _utils

OPTIMIZER = optax.sgd(0.1)


def _mlp_auto_boost(level="O0", config=None):
    return boostax.auto_boost(
        level,
        config,
        optimizer=OPTIMIZER,
        model=models.MLP(features=(8,)),
        loss=models.cross_entropy,
    )


class AutoBoostO0Test(parameterized.TestCase):
    @parameterized.parameters(
        (None,),
        ("",),
        ({},),
        ({"boost": {"mode": "auto"}},),
        ({"boost": {"mode": "disable_all"}},),
        ({"boost": {"mode": "manual"}, "grad_freeze": {"total_steps": 10}},),
    )
    def test_o0_is_the_plain_step(self, config):
        digits = _utils.digits(flat=True)
        x, y = digits.x_train[:16], digits.y_train[:16]
        with warnings.catch_warnings():
            # A freezing setting at O0 changes nothing, and says so.
            warnings.filterwarnings("ignore", ".*is ignored: ", UserWarning)
            ts = _mlp_auto_boost("O0", config)
        plain = boostax.make_train_step(
            OPTIMIZER,
            model=models.MLP(features=(8,)),
            loss=models.cross_entropy,
        )
        variables = ts.objective.module.init(jax.random.PRNGKey(0), x)
        state, metrics = ts(ts.init(variables), (x, y))
        expected, expected_metrics = plain(plain.init(variables), (x, y))
        _utils.assert_trees_equal(state, expected)
        np.testing.assert_array_equal(metrics["loss"], expected_metrics["loss"])
        self.assertEqual(ts.config.level, "O0")
        self.assertEqual(ts.config.enabled_algorithms, ())

    def test_disable_all_at_o2_is_plain(self):
        ts = _mlp_auto_boost("O2", {"boost": {"mode": "disable_all"}})
        self.assertEqual(ts.config.enabled_algorithms, ())

    def test_accepts_a_boost_config(self):
        config = boostax.BoostConfig(level="O0")
        self.assertIs(_mlp_auto_boost("O0", config).config, config)

    def test_nnx_model(self):
        model = models.NNXMLP(features=(8,), rngs=nnx.Rngs(0))
        ts = boostax.auto_boost(
            "O0", optimizer=OPTIMIZER, model=model, loss=models.cross_entropy
        )
        digits = _utils.digits(flat=True)
        state, metrics = ts(
            ts.init(model), (digits.x_train[:16], digits.y_train[:16])
        )
        self.assertTrue(np.isfinite(metrics["loss"]))


class RefusalTest(parameterized.TestCase):
    """Nothing is silently off: a missing algorithm or an impossible
    combination raises at build time."""

    def test_a_missing_algorithm_raises(self):
        config = {"boost": {"mode": "manual", "dim_reduce": True}}
        missing = {"dim_reduce": "DimReduce (for this test)"}
        with mock.patch.dict(boost_components.NOT_IMPLEMENTED, missing):
            with self.assertRaises(boostax.AlgorithmNotImplementedError) as cm:
                _mlp_auto_boost("O0", config)
            self.assertEqual(cm.exception.algorithms, ("dim_reduce",))
            self.assertIn("`dim_reduce`: DimReduce", str(cm.exception))
            self.assertIn("Use level 'O0'", str(cm.exception))
            with self.assertRaisesRegex(NotImplementedError, "`dim_reduce`"):
                boost.AutoBoost("O0", config).network_auto_process_train(
                    models.MLP(), OPTIMIZER
                )

    @parameterized.parameters(("grad_freeze",), ("adasum",))
    def test_incompatible_with_dim_reduce(self, other):
        config = {"boost": {"mode": "manual", "dim_reduce": True, other: True}}
        with self.assertRaisesRegex(
            ValueError,
            f"`dim_reduce` and `{other}` cannot be on together: .*"
            f"{{'{other}': False}}",
        ):
            _mlp_auto_boost("O0", config)

    def test_enable_all(self):
        with self.assertRaisesRegex(ValueError, "cannot be on together"):
            _mlp_auto_boost("O0", {"boost": {"mode": "enable_all"}})

    def test_config_errors_come_first(self):
        with self.assertRaisesRegex(ValueError, "`level` must be one of"):
            _mlp_auto_boost("O3")

    def test_level_given_as_the_config(self):
        # Read as a JSON path, it was a bare FileNotFoundError: 'O1'.
        with self.assertRaisesRegex(
            ValueError,
            r"`config` must be a boost config dict, a BoostConfig, the path "
            r"of a JSON file .*; got the level string 'O1'",
        ):
            _mlp_auto_boost("O1", "O1")


class AutoBoostClassTest(parameterized.TestCase):
    def test_defaults(self):
        booster = boost.AutoBoost()
        self.assertEqual(booster.level, "O0")
        self.assertEqual(booster.config, boostax.BoostConfig())

    @parameterized.parameters("linen", "nnx")
    def test_o0_returns_network_and_optimizer_unchanged(self, kind):
        network = (
            models.MLP() if kind == "linen" else models.NNXMLP(rngs=nnx.Rngs(0))
        )
        booster = boost.AutoBoost("O0", {"boost": {"mode": "auto"}})
        new_network, optimizer = booster.network_auto_process_train(
            network, OPTIMIZER
        )
        self.assertIs(new_network, network)
        self.assertIs(optimizer, OPTIMIZER)
        self.assertIs(booster.network_auto_process_eval(network), network)

    def test_o1_eval_applies_less_bn(self):
        x = np.zeros((2, 8, 8, 1), np.float32)
        network = models.ResNet(stage_sizes=(1, 1), widths=(16, 32))
        booster = boost.AutoBoost("O1")
        with self.assertRaisesRegex(TypeError, "pass `sample_inputs=`"):
            booster.network_auto_process_eval(network)
        reduced = booster.network_auto_process_eval(network, sample_inputs=x)
        self.assertIsInstance(reduced, boostax.LinenLessBN)
        self.assertEqual(reduced.fn_head, ("Dense_0",))  # as in training
        # A network LessBN already reduced is returned as is.
        self.assertIs(booster.network_auto_process_eval(reduced), reduced)
        # Without LessBN, evaluation is untouched even at O1.
        booster = boost.AutoBoost(
            "O1", {"boost": {"mode": "manual", "less_bn": False}}
        )
        network = models.MLP()
        self.assertIs(booster.network_auto_process_eval(network), network)

    def test_bad_arguments(self):
        booster = boost.AutoBoost()
        with self.assertRaisesRegex(TypeError, "`network` must be a Flax"):
            booster.network_auto_process_train(lambda x: x, OPTIMIZER)
        with self.assertRaisesRegex(TypeError, "`optimizer` must be an optax"):
            booster.network_auto_process_train(models.MLP(), "sgd")
        with self.assertRaisesRegex(TypeError, "`network` must be a Flax"):
            booster.network_auto_process_eval(None)

    def test_step_options_warn_and_accumulation_wraps(self):
        booster = boost.AutoBoost(
            "O0", {"boost": {"mode": "manual", "adasum": True}}
        )
        with self.assertWarnsRegex(UserWarning, "adasum: applied by the"):
            _, optimizer = booster.network_auto_process_train(
                models.MLP(), OPTIMIZER
            )
        self.assertIs(optimizer, OPTIMIZER)
        booster = boost.AutoBoost(
            "O0",
            {
                "boost": {"mode": "manual", "grad_accumulation": True},
                "grad_accumulation": {"grad_accumulation_step": 3},
            },
        )
        _, optimizer = booster.network_auto_process_train(
            models.MLP(), OPTIMIZER
        )
        self.assertIsInstance(
            optimizer.init(np.zeros(2)), boostax.GradientAccumulationState
        )
        booster = boost.AutoBoost(
            "O0",
            {"boost": {"mode": "manual", "dim_reduce": True, "adasum": True}},
        )
        with self.assertRaisesRegex(ValueError, "cannot be on together"):
            booster.network_auto_process_train(models.MLP(), OPTIMIZER)

    def test_train_step(self):
        booster = boost.AutoBoost("O0")
        ts = booster.train_step(
            optimizer=OPTIMIZER,
            model=models.MLP(features=(8,)),
            loss=models.cross_entropy,
        )
        self.assertIs(ts.config, booster.config)


if __name__ == "__main__":
    absltest.main()
