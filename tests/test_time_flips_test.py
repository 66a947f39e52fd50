# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Test-time flips (`predict_with_flips`, the ``test_time_flips`` section).

The average over flipped views against a float64 NumPy reference under
``jax.jit``; bad flips and inputs refused naming them; in `auto_boost` at
O1 (LessBN, freezing) with weight averaging: training is bit for bit the
same with the section on, and `predict` averages the (averaged) model's
outputs over the views unless ``flipped=False``.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import linen as nn

import boostax
from tests import _utils

SHAPE = (3, 4, 5, 2)  # (batch, height, width, channels)


def reference(weights, images, flips):
    """float64: the mean over the views of a linear read of every pixel."""
    images = np.asarray(images, np.float64)
    weights = np.asarray(weights, np.float64)
    views = [images]
    for flip in flips:
        views.append(
            images[:, ::-1] if flip == "vertical" else images[:, :, ::-1]
        )
    return np.mean([v.reshape(len(v), -1) @ weights for v in views], axis=0)


class PredictWithFlipsTest(parameterized.TestCase):
    @parameterized.parameters(
        (("horizontal",),),
        (("vertical",),),
        (("horizontal", "vertical"),),
        ("vertical",),
    )
    def test_matches_the_float64_reference(self, flips):
        rng = np.random.default_rng(0)
        images = rng.normal(size=SHAPE).astype(np.float32)
        weights = rng.normal(size=(int(np.prod(SHAPE[1:])), 3))
        weights = weights.astype(np.float32)

        def predict(x):  # reads each pixel: any flip changes it
            return x.reshape(len(x), -1) @ weights

        got = jax.jit(lambda x: boostax.predict_with_flips(predict, x, flips))(
            images
        )
        want = reference(
            weights, images, (flips,) if isinstance(flips, str) else flips
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        self.assertEqual(got.dtype, jnp.float32)

    def test_a_pytree_of_half_outputs_keeps_its_dtype(self):
        x = jnp.arange(8.0).reshape(1, 2, 4, 1)
        out = boostax.predict_with_flips(
            lambda x: {"left": x[:, 0, 0, 0].astype(jnp.bfloat16)}, x
        )
        self.assertEqual(out["left"].dtype, jnp.bfloat16)
        self.assertEqual(float(out["left"][0]), 1.5)  # (0 + 3) / 2

    @parameterized.parameters(
        ("diagonal", ValueError, "must be one of"),
        ((), ValueError, "at least one of"),
        (("horizontal", "horizontal"), ValueError, "names a flip twice"),
        ((1,), TypeError, "a sequence of flips"),
    )
    def test_bad_flips_raise_naming_them(self, flips, error, pattern):
        with self.assertRaisesRegex(error, "`flips`.*" + pattern):
            boostax.predict_with_flips(lambda x: x, jnp.zeros(SHAPE), flips)

    def test_inputs_other_than_images_are_refused(self):
        with self.assertRaisesRegex(ValueError, r"shape \(3, 4\)"):
            boostax.predict_with_flips(lambda x: x, jnp.zeros((3, 4)))


class SectionTest(absltest.TestCase):
    def test_off_by_default_and_lists_become_tuples(self):
        self.assertFalse(boostax.BoostConfig().test_time_flips.enabled)
        config = boostax.boost_config(
            "O0",
            {"test_time_flips": {"enabled": True, "flips": ["vertical"]}},
        )
        self.assertEqual(config.test_time_flips.flips, ("vertical",))

    def test_bad_flips_name_the_key(self):
        with self.assertRaisesRegex(ValueError, "`test_time_flips.flips`"):
            boostax.boost_config("O0", {"test_time_flips": {"flips": "up"}})

    def test_a_setting_while_disabled_warns(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            boostax.boost_config(
                "O0", {"test_time_flips": {"flips": "vertical"}}
            )
        self.assertTrue(
            any("test_time_flips.enabled" in str(w.message) for w in caught)
        )


class TinyNet(nn.Module):
    """A stem and a residual conv with BatchNorms (LessBN removes one), a
    dense head on every position: not flip-invariant, so every view gives
    other logits."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        def norm(name):
            return nn.BatchNorm(use_running_average=not train, name=name)

        x = nn.relu(norm("stem_bn")(nn.Conv(4, (3, 3), name="stem")(x)))
        y = nn.relu(norm("bn_a")(nn.Conv(4, (3, 3), name="conv_a")(x)))
        y = norm("bn_b")(nn.Conv(4, (3, 3), name="conv_b")(y))
        x = nn.relu(x + y)
        return nn.Dense(3, name="head")(x.reshape(len(x), -1))


def batch(i):
    rng = np.random.default_rng(i)
    x = rng.normal(size=(8, 6, 6, 1)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(rng.integers(0, 3, size=8))


def loss(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels
    ).mean()


CONFIG = {
    "less_bn": {"fn_flag": False},
    "grad_freeze": {"param_groups": 2, "total_steps": 8},
    "weight_averaging": {"enabled": True, "decay": 0.5},
}
FLIPS = {"enabled": True, "flips": ["horizontal", "vertical"]}


def train(config):
    ts = boostax.auto_boost(
        "O1",
        config,
        optimizer=optax.sgd(0.05, momentum=0.9),
        model=TinyNet(),
        loss=loss,
        sample_inputs=batch(0)[0],
        options=boostax.StepOptions(background_compile=False),
    )
    variables = TinyNet().init(jax.random.PRNGKey(0), batch(0)[0], False)
    state = ts.init(variables)
    for i in range(4):
        state, _ = ts(state, batch(i))
    return ts, state


class TrainStepTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.plain_ts, cls.plain_state = train(CONFIG)
        cls.ts, cls.state = train({**CONFIG, "test_time_flips": FLIPS})

    def test_training_is_unchanged(self):
        _utils.assert_trees_equal(self.state, self.plain_state)

    def test_predict_averages_the_averaged_model_over_the_views(self):
        x = batch(9)[0]
        views = [x, x[:, :, ::-1], x[:, ::-1]]
        one = [self.ts.predict(self.state, v, flipped=False) for v in views]
        np.testing.assert_allclose(
            self.ts.predict(self.state, x),
            np.mean(np.asarray(one, np.float64), axis=0),
            rtol=1e-5,
            atol=1e-6,
        )
        # flipped=False is the step without the section.
        _utils.assert_trees_equal(
            one[0], self.plain_ts.predict(self.plain_state, x)
        )
        # Each view evaluates the average of the params, not the raw ones.
        self.assertFalse(
            np.allclose(
                one[0],
                self.ts.predict(self.state, x, flipped=False, averaged=False),
            )
        )

    def test_flipped_must_be_a_bool(self):
        with self.assertRaisesRegex(TypeError, "`flipped`"):
            self.ts.predict(self.state, batch(0)[0], flipped=None)


if __name__ == "__main__":
    absltest.main()
