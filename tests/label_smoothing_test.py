# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Label smoothing: the targets, the loss, the config section, the step."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn
from flax import nnx

import boostax
from boostax import mindspore as boost
from boostax.examples import models
from tests import _utils

K = 5  # classes
D = 6  # features
B = 8  # examples a batch
LR = 0.5
ALPHA = 0.2


def np_smoothed(labels, k, alpha):
    """float64 ``(1 - alpha) * onehot + alpha / k``."""
    labels = np.asarray(labels)
    if np.issubdtype(labels.dtype, np.integer):
        labels = np.eye(k)[labels]
    return (1 - alpha) * np.asarray(labels, np.float64) + alpha / k


def np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def np_loss_and_step(w, b, x, targets, alpha):
    """float64 smoothed cross-entropy of ``x @ w + b`` and one SGD step."""
    x, w, b = (np.asarray(a, np.float64) for a in (x, w, b))
    q = np_smoothed(targets, w.shape[1], alpha)
    log_p = np_log_softmax(x @ w + b)
    loss = -(q * log_p).sum(-1).mean()
    residual = (np.exp(log_p) - q) / len(x)  # d loss / d logits
    return loss, w - LR * x.T @ residual, b - LR * residual.sum(0)


def data(seed=0, n=B):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    return x, rng.integers(0, K, n).astype(np.int32)


class Linear(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(K)(x)


def dense_cross_entropy(logits, q):
    return optax.softmax_cross_entropy(logits, q).mean()


def integer_only(logits, labels):
    """An integer-label loss boostax does not know: indexes by `labels`."""
    log_p = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(log_p, labels[:, None], axis=-1).mean()


def five_classes_integer_only(logits, labels):
    """`integer_only` for K classes only: the build-time probe (3 classes)
    cannot tell whether it takes dense targets."""
    if logits.shape[-1] != K:
        raise ValueError(f"{K} classes only")
    return integer_only(logits, labels)


def smoothing(alpha=ALPHA, **sections):
    return {"label_smoothing": {"enabled": True, "alpha": alpha}, **sections}


@functools.cache
def linen_variables():
    return Linear().init(jax.random.PRNGKey(0), jnp.zeros((1, D)))


class SmoothLabelsTest(parameterized.TestCase):
    @parameterized.parameters(0.0, 0.1, 0.5)
    def test_integer_and_one_hot_labels_match_numpy(self, alpha):
        labels = np.array([[0, 4], [2, 1]], np.int32)
        smooth = jax.jit(boostax.smooth_labels, static_argnums=(1, 2))
        q = smooth(labels, K, alpha)
        self.assertEqual(q.dtype, jnp.float32)
        np.testing.assert_allclose(q, np_smoothed(labels, K, alpha), rtol=1e-6)
        one_hot = np.eye(K, dtype=np.float32)[labels]
        np.testing.assert_array_equal(smooth(one_hot, K, alpha), q)
        np.testing.assert_allclose(q.sum(-1), 1.0, rtol=1e-6)

    def test_half_precision_targets_are_smoothed_in_float32(self):
        one_hot = jnp.eye(K, dtype=jnp.bfloat16)[jnp.array([1, 3])]
        q = boostax.smooth_labels(one_hot, K, 0.1)
        self.assertEqual(q.dtype, jnp.float32)
        np.testing.assert_allclose(q, np_smoothed([1, 3], K, 0.1), rtol=1e-6)

    @parameterized.named_parameters(
        (
            "alpha_one",
            dict(alpha=1.0),
            ValueError,
            r"`alpha` must be .*\[0, 1\)",
        ),
        ("alpha_negative", dict(alpha=-0.1), ValueError, "got -0.1"),
        ("alpha_str", dict(alpha="0.1"), TypeError, "`alpha` must be"),
        ("classes_zero", dict(num_classes=0), ValueError, "`num_classes`"),
        ("classes_float", dict(num_classes=5.0), TypeError, "`num_classes`"),
        (
            "wrong_class_axis",
            dict(labels=np.ones((2, 4), np.float32)),
            ValueError,
            r"shape \(\.\.\., 5\).*got shape \(2, 4\)",
        ),
        ("bool_labels", dict(labels=np.ones((2, 5), bool)), TypeError, "bool"),
    )
    def test_refused(self, change, error, message):
        args = dict(labels=np.array([0, 1]), num_classes=K, alpha=0.1)
        args.update(change)
        with self.assertRaisesRegex(error, message):
            boostax.smooth_labels(**args)


class LossTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(1)
        self.logits = (3 * rng.normal(size=(16, K))).astype(np.float32)
        self.labels = rng.integers(0, K, 16).astype(np.int32)

    def value_and_grad(self, loss, targets):
        return jax.jit(jax.value_and_grad(loss))(self.logits, targets)

    @parameterized.parameters(0.1, 0.3)
    def test_known_cross_entropy_matches_numpy_and_optax(self, alpha):
        loss = boostax.label_smoothing_loss(models.cross_entropy, alpha)
        value, grad = self.value_and_grad(loss, self.labels)
        q = np_smoothed(self.labels, K, alpha)
        log_p = np_log_softmax(self.logits.astype(np.float64))
        np.testing.assert_allclose(value, -(q * log_p).sum(-1).mean(), 1e-6)
        np.testing.assert_allclose(
            grad, (np.exp(log_p) - q) / len(q), rtol=1e-5, atol=1e-7
        )
        # The same as optax's dense cross-entropy on the smoothed targets.
        dense = boostax.smooth_labels(self.labels, K, alpha)
        want = self.value_and_grad(dense_cross_entropy, dense)
        np.testing.assert_allclose(value, want[0], rtol=1e-6)
        np.testing.assert_allclose(grad, want[1], rtol=1e-5, atol=1e-8)

    def test_known_cross_entropy_at_alpha_zero_is_the_integer_one(self):
        for plain in (
            models.cross_entropy,
            optax.softmax_cross_entropy_with_integer_labels,
        ):
            smoothed = boostax.label_smoothing_loss(plain, 0.0)
            for reduce in (jnp.mean, jnp.sum):

                def reduced(f, logits, y, reduce=reduce):
                    return reduce(f(logits, y))

                got = self.value_and_grad(
                    functools.partial(reduced, smoothed), self.labels
                )
                want = self.value_and_grad(
                    functools.partial(reduced, plain), self.labels
                )
                _utils.assert_trees_equal(got, want)

    def test_optax_per_example_loss_stays_per_example(self):
        loss = boostax.label_smoothing_loss(
            optax.softmax_cross_entropy_with_integer_labels, ALPHA
        )
        per_example = jax.jit(loss)(self.logits, self.labels)
        q = np_smoothed(self.labels, K, ALPHA)
        log_p = np_log_softmax(self.logits.astype(np.float64))
        np.testing.assert_allclose(per_example, -(q * log_p).sum(-1), 1e-6)

    @parameterized.parameters(models.cross_entropy, dense_cross_entropy)
    def test_one_hot_targets_are_smoothed_too(self, plain):
        loss = boostax.label_smoothing_loss(plain, ALPHA)
        one_hot = np.eye(K, dtype=np.float32)[self.labels]
        value, grad = self.value_and_grad(loss, one_hot)
        want = self.value_and_grad(
            boostax.label_smoothing_loss(dense_cross_entropy, ALPHA),
            self.labels,
        )
        np.testing.assert_allclose(value, want[0], rtol=1e-6)
        np.testing.assert_allclose(grad, want[1], rtol=1e-6)

    def test_other_loss_gets_the_smoothed_targets(self):
        seen = []

        def mse(logits, q):
            seen.append(q)
            return jnp.mean((jax.nn.softmax(logits) - q) ** 2)

        value = jax.jit(boostax.label_smoothing_loss(mse, ALPHA))(
            self.logits, self.labels
        )
        self.assertEqual(seen[-1].dtype, jnp.float32)
        q = np_smoothed(self.labels, K, ALPHA)
        p = np.exp(np_log_softmax(self.logits.astype(np.float64)))
        np.testing.assert_allclose(value, np.mean((p - q) ** 2), rtol=1e-5)

    def test_aux_metrics_pass_through(self):
        def with_metrics(logits, q):
            return dense_cross_entropy(logits, q), {"mass": q.sum()}

        loss = boostax.label_smoothing_loss(with_metrics, ALPHA)
        value, metrics = jax.jit(loss)(self.logits, self.labels)
        np.testing.assert_allclose(metrics["mass"], 16.0, rtol=1e-6)
        self.assertEqual(value.shape, ())

    def test_loss_that_cannot_take_dense_targets_is_refused_when_built(self):
        with self.assertRaisesRegex(
            ValueError,
            r"label_smoothing: the loss .*integer_only cannot take dense "
            r"\(probability\) targets.*\(2, 3\); it runs on integer targets "
            r"\(int32 of shape \(2,\); tried when built\).*"
            r"optax.softmax_cross_entropy",
        ):
            boostax.label_smoothing_loss(integer_only, ALPHA)

    def test_loss_the_probe_cannot_tell_is_refused_when_called(self):
        loss = boostax.label_smoothing_loss(five_classes_integer_only, ALPHA)
        with self.assertRaisesRegex(
            ValueError,
            r"the loss .*five_classes_integer_only cannot take dense .*"
            r"\(16, 5\); it runs on integer targets \(int32 of shape "
            r"\(16,\); the step's batch\)",
        ):
            jax.jit(loss)(self.logits, self.labels)

    def test_a_broken_loss_keeps_its_own_error(self):
        def broken(logits, labels):
            raise RuntimeError("the user's own bug")

        loss = boostax.label_smoothing_loss(broken, ALPHA)
        with self.assertRaisesRegex(RuntimeError, "the user's own bug"):
            loss(self.logits, self.labels)

    @parameterized.named_parameters(
        (
            "tuple_outputs",
            lambda x: (x, x),
            np.zeros(16, np.int32),
            "one array of class scores .*tuple",
        ),
        (
            "labels_of_another_shape",
            lambda x: x,
            np.zeros((16, 2), np.int32),
            r"integer class targets of shape \(16,\).*\(16, 5\); got int32 "
            r"targets of shape \(16, 2\)",
        ),
        (
            "float_labels_without_class_axis",
            lambda x: x,
            np.zeros(16, np.float32),
            r"got float32 targets of shape \(16,\)",
        ),
    )
    def test_outputs_and_targets_refused(self, outputs, targets, message):
        loss = boostax.label_smoothing_loss(models.cross_entropy, ALPHA)
        with self.assertRaisesRegex(ValueError, message):
            loss(outputs(jnp.asarray(self.logits)), targets)

    def test_arguments_refused(self):
        with self.assertRaisesRegex(TypeError, "`loss` must be a callable"):
            boostax.label_smoothing_loss("xent", 0.1)
        with self.assertRaisesRegex(ValueError, r"`alpha` must be .*got 1.0"):
            boostax.label_smoothing_loss(models.cross_entropy, 1.0)


class ConfigTest(parameterized.TestCase):
    def test_defaults_and_round_trip(self):
        config = boostax.BoostConfig.from_dict(smoothing(0.25))
        self.assertEqual(
            config.label_smoothing,
            boostax.config.LabelSmoothingSection(enabled=True, alpha=0.25),
        )
        self.assertEqual(
            config.to_dict()["label_smoothing"],
            {"enabled": True, "alpha": 0.25},
        )
        again = boostax.BoostConfig.from_dict(config.to_dict())
        self.assertEqual(again, config)
        self.assertFalse(boostax.BoostConfig().label_smoothing.enabled)
        self.assertEqual(boostax.BoostConfig().label_smoothing.alpha, 0.1)

    @parameterized.named_parameters(
        ("alpha_one", {"alpha": 1.0}, ValueError,
         r"`label_smoothing.alpha` must be in \[0, 1\), got 1.0"),
        ("alpha_negative", {"alpha": -0.5}, ValueError, "got -0.5"),
        ("alpha_nan", {"alpha": float("nan")}, ValueError, "finite"),
        ("alpha_str", {"alpha": "0.1"}, TypeError,
         "`label_smoothing.alpha` must be a finite number"),
        ("enabled_int", {"enabled": 1}, TypeError,
         "`label_smoothing.enabled` must be a bool"),
        ("unknown_key", {"smoothing": 0.1}, ValueError,
         r"Unknown key 'smoothing' in section 'label_smoothing'.*"
         r"\['enabled', 'alpha'\]"),
    )  # fmt: skip
    def test_refused(self, section, error, message):
        with self.assertRaisesRegex(error, message):
            boostax.BoostConfig.from_dict({"label_smoothing": section})

    def test_alpha_without_enabled_warns(self):
        with self.assertWarnsRegex(
            UserWarning,
            r"`label_smoothing.alpha=0.3` is ignored: "
            r"`label_smoothing.enabled` is False",
        ):
            boostax.BoostConfig.from_dict({"label_smoothing": {"alpha": 0.3}})

    def test_mindspore_network_processing_warns(self):
        with self.assertWarnsRegex(UserWarning, "label_smoothing: applied to"):
            boost.AutoBoost("O0", smoothing()).network_auto_process_train(
                Linear(), optax.sgd(LR)
            )


class StepTest(parameterized.TestCase):
    """One step of each compiled once: against float64 NumPy, or each other."""

    def test_linen_step_matches_numpy(self):
        step = boostax.auto_boost(
            "O0",
            smoothing(),
            optimizer=optax.sgd(LR),
            model=Linear(),
            loss=models.cross_entropy,
        )
        variables = linen_variables()
        x, y = data()
        state, metrics = step(step.init(variables), (x, y))
        params = variables["params"]["Dense_0"]
        loss, w, b = np_loss_and_step(
            params["kernel"], params["bias"], x, y, ALPHA
        )
        np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-6)
        got = state.params["Dense_0"]
        np.testing.assert_allclose(got["kernel"], w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["bias"], b, rtol=1e-5, atol=1e-6)

    def test_nnx_step_with_one_hot_targets_matches_numpy(self):
        model = nnx.Linear(D, K, rngs=nnx.Rngs(0))
        w0, b0 = np.asarray(model.kernel[...]), np.asarray(model.bias[...])
        step = boostax.auto_boost(
            "O0",
            smoothing(),
            optimizer=optax.sgd(LR),
            model=model,
            loss=dense_cross_entropy,
        )
        x, y = data(1)
        one_hot = np.eye(K, dtype=np.float32)[y]
        state, metrics = step(step.init(model), (x, one_hot))
        loss, w, b = np_loss_and_step(w0, b0, x, y, ALPHA)
        np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-6)
        trained = state.params
        np.testing.assert_allclose(
            trained["kernel"][...], w, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            trained["bias"][...], b, rtol=1e-5, atol=1e-6
        )

    def test_alpha_zero_is_the_unsmoothed_step_bit_for_bit(self):
        def run(config):
            step = boostax.auto_boost(
                "O0",
                config,
                optimizer=optax.sgd(LR, momentum=0.9),
                model=Linear(),
                loss=models.cross_entropy,
            )
            state = step.init(linen_variables())
            for seed in range(3):
                state, metrics = step(state, data(seed))
            return state.params, metrics["loss"]

        _utils.assert_trees_equal(run(smoothing(0.0)), run(None))

    def test_loss_fn_is_refused_when_built(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`label_smoothing.enabled` is True, but the step was given "
            r"`loss_fn=`.*boostax.smooth_labels",
        ):
            boostax.auto_boost(
                "O0",
                smoothing(),
                optimizer=optax.sgd(LR),
                loss_fn=lambda params, batch: jnp.sum(params),
            )

    def test_integer_only_loss_is_refused_when_built(self):
        with self.assertRaisesRegex(
            ValueError, "the loss .*integer_only cannot take dense"
        ):
            boostax.auto_boost(
                "O0",
                smoothing(),
                optimizer=optax.sgd(LR),
                model=Linear(),
                loss=integer_only,
            )

    def test_loss_the_probe_cannot_tell_is_refused_when_traced(self):
        step = boostax.auto_boost(
            "O0",
            smoothing(),
            optimizer=optax.sgd(LR),
            model=Linear(),
            loss=five_classes_integer_only,
        )
        state = step.init(linen_variables())
        with self.assertRaisesRegex(
            ValueError,
            "the loss .*five_classes_integer_only cannot take dense.*"
            "the step's batch",
        ):
            step(state, data())
        self.assertEqual(int(state.step), 0)


class CompositionTest(parameterized.TestCase):
    """Smoothing inside a boosted step equals feeding it targets smoothed by
    hand, with a loss of dense targets and smoothing off."""

    def run_pair(self, level, config, steps=2, **kwargs):
        model = models.ResNet(stage_sizes=(1,), widths=(4,), num_classes=K)
        rng = np.random.default_rng(2)
        x = rng.normal(size=(8, 8, 8, 1)).astype(np.float32)
        y = rng.integers(0, K, 8).astype(np.int32)
        variables = model.init(jax.random.PRNGKey(0), x[:1])
        results = []
        for smoothed_in_step in (True, False):
            sections = dict(config)
            if smoothed_in_step:
                sections.update(smoothing())
                loss, targets = models.cross_entropy, y
            else:
                loss = dense_cross_entropy
                targets = np.asarray(boostax.smooth_labels(y, K, ALPHA))
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=UserWarning)
                step = boostax.auto_boost(
                    level,
                    sections,
                    optimizer=optax.sgd(0.1, momentum=0.9),
                    model=model,
                    loss=loss,
                    sample_inputs=x[:1],
                    **kwargs,
                )
            state = step.init(variables)
            for _ in range(steps):
                state, metrics = step(state, (x, targets))
            results.append((state.params, metrics["loss"]))
        return step, results

    def test_o1_batchnorm_cnn(self):
        config = {"grad_freeze": {"param_groups": 2, "total_steps": 4}}
        step, (got, want) = self.run_pair("O1", config)
        self.assertTrue(step.config.is_enabled("less_bn"))
        self.assertTrue(step.config.is_enabled("grad_freeze"))
        self.assertIsNotNone(step.less_bn_report)
        self.assertTrue(np.isfinite(got[1]))
        _utils.assert_trees_all_close(got, want, rtol=2e-5, atol=2e-6)

    def test_float16_with_a_dynamic_loss_scale(self):
        # MindSpore's amp O2: float16 compute, a dynamic loss scale.
        step, (got, want) = self.run_pair("O0", {}, precision="O2")
        self.assertIsNotNone(step.builder.loss_scale)
        self.assertTrue(np.isfinite(got[1]))
        _utils.assert_trees_all_close(got, want, rtol=2e-3, atol=2e-4)

    def test_o2_on_a_mesh_with_accumulation_and_bfloat16(self):
        config = {
            "boost": {"mode": "manual", "grad_accumulation": True},
            "grad_freeze": {"param_groups": 2, "total_steps": 4},
            "grad_accumulation": {"grad_accumulation_step": 2},
            "common": {"device_number": 1},
        }
        mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
        step, (got, want) = self.run_pair(
            "O2", config, steps=2, mesh=mesh, precision="bfloat16"
        )
        self.assertEqual(
            set(step.config.enabled_algorithms),
            {"less_bn", "grad_freeze", "adasum", "grad_accumulation"},
        )
        _utils.assert_trees_all_close(got, want, rtol=2e-3, atol=2e-4)


if __name__ == "__main__":
    absltest.main()
