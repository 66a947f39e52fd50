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
from boostax._src.config import components as boost_components
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


class LevelOnModelTest(absltest.TestCase):
    """O1 and O2 in mode "auto" on a model without BatchNorm."""

    def test_o1_without_batch_norm_trains_as_o0_and_says_why(self):
        # LessBN and freezing are made for convolutional networks with
        # BatchNorm and cost loss on the transformer: the level leaves both
        # off, names the settings it leaves unused, and trains plain's step.
        digits = _utils.digits(flat=True)
        x, y = digits.x_train[:16], digits.y_train[:16]
        model = models.MLP(features=(8,))
        with self.assertWarnsRegex(
            UserWarning,
            r"Level 'O1' on this model: LessBN found no BatchNorm .*"
            r"neither LessBN nor gradient freezing.*as at level 'O0'\. "
            r"Unused with them: `grad_freeze\.total_steps=10`\. .*"
            r"'mode': 'manual', 'less_bn': True, 'grad_freeze': True",
        ):
            ts = boostax.auto_boost(
                "O1",
                {"grad_freeze": {"total_steps": 10}},
                optimizer=OPTIMIZER,
                model=model,
                loss=models.cross_entropy,
                sample_inputs=x[:1],
            )
        self.assertEqual(ts.config.enabled_algorithms, ())
        self.assertEqual(ts.config.mode, "manual")  # what ran
        self.assertIsNone(ts.builder.freezing)
        self.assertIsNone(ts.less_bn_report)
        plain = boostax.make_train_step(
            OPTIMIZER, model=model, loss=models.cross_entropy
        )
        variables = model.init(jax.random.PRNGKey(0), x)
        state, _ = ts(ts.init(variables), (x, y))
        expected, _ = plain(plain.init(variables), (x, y))
        _utils.assert_trees_equal(state.params, expected.params)

    def test_a_freezing_argument_is_refused_there(self):
        x = _utils.digits(flat=True).x_train[:1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the level's, tested above
            with self.assertRaisesRegex(
                ValueError,
                r"`freeze_warmup_steps` is gradient freezing's, and level "
                r"'O1' in mode 'auto' leaves freezing off on this model",
            ):
                boostax.auto_boost(
                    "O1",
                    optimizer=OPTIMIZER,
                    model=models.MLP(features=(8,)),
                    loss=models.cross_entropy,
                    sample_inputs=x,
                    options=boostax.StepOptions(freeze_warmup_steps=0),
                )

    def test_mindspores_o1_is_kept_where_asked(self):
        # Mode "manual" (the user's switches, the level's for the rest) and
        # the MindSpore layer keep MindSpore's O1 on any model.
        x = _utils.digits(flat=True).x_train[:1]
        options = dict(
            optimizer=OPTIMIZER,
            model=models.MLP(features=(8, 8)),
            loss=models.cross_entropy,
            sample_inputs=x,
        )
        config = {
            "boost": {"mode": "manual"},
            "grad_freeze": {"param_groups": 2, "total_steps": 10},
        }
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # not the level's warning...
            warnings.filterwarnings(  # ... only LessBN's, which finds no BN
                "ignore", ".*returned unchanged", UserWarning
            )
            manual = boostax.auto_boost("O1", config, **options)
            ported = boost.AutoBoost("O1", config).train_step(**options)
            ported_auto = boost.AutoBoost(
                "O1", {"grad_freeze": {"param_groups": 2}}
            ).train_step(**options)
        for ts in (manual, ported, ported_auto):
            self.assertEqual(
                ts.config.enabled_algorithms, ("less_bn", "grad_freeze")
            )
            self.assertIsNotNone(ts.builder.freezing)
            self.assertFalse(ts.less_bn_report.found_batch_norm)

    def test_a_model_with_batch_norm_keeps_the_level(self):
        x = _utils.digits().x_train[:1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ts = boostax.auto_boost(
                "O1",
                {"grad_freeze": {"param_groups": 3}},
                optimizer=OPTIMIZER,
                model=models.ResNet(stage_sizes=(1, 1), widths=(16, 32)),
                loss=models.cross_entropy,
                sample_inputs=x,
            )
        self.assertEqual(ts.config.mode, "auto")
        self.assertEqual(
            ts.config.enabled_algorithms, ("less_bn", "grad_freeze")
        )
        self.assertTrue(ts.less_bn_report.found_batch_norm)

    def test_o2_keeps_adasum(self):
        config = boostax.BoostConfig(level="O2")
        report = boostax.less_bn_report(
            models.MLP(features=(8,)), _utils.digits(flat=True).x_train[:1]
        )
        with self.assertWarnsRegex(
            UserWarning, "The step trains with adasum only"
        ):
            adjusted = boost_components.level_on_model(config, report)
        self.assertEqual(adjusted.enabled_algorithms, ("adasum",))
        self.assertEqual(
            (adjusted.common, adjusted.grad_freeze, adjusted.less_bn),
            (config.common, config.grad_freeze, config.less_bn),
        )


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
