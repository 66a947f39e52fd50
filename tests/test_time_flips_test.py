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
from boostax._src.methods import test_time_flips
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


def shifted(images, shift):
    """NumPy: `images` moved by `shift` pixels down and right, the gap
    filled with their reflection at the border, pixel by pixel."""
    _, height, width, _ = images.shape

    def reflect(i, n):  # numpy's "reflect": the border pixel not repeated
        i = abs(i)
        return 2 * (n - 1) - i if i >= n else i

    rows = [reflect(r - shift, height) for r in range(height)]
    cols = [reflect(c - shift, width) for c in range(width)]
    return images[:, rows][:, :, cols]


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

    @parameterized.parameters(
        (("horizontal",), 1), (("horizontal", "vertical"), 2), ((), 1)
    )
    def test_translations_match_the_float64_reference(self, flips, pixels):
        rng = np.random.default_rng(1)
        images = rng.normal(size=SHAPE).astype(np.float32)
        weights = rng.normal(size=(int(np.prod(SHAPE[1:])), 3))
        weights = weights.astype(np.float32)

        def predict(x):
            return x.reshape(len(x), -1) @ weights

        got = jax.jit(
            lambda x: boostax.predict_with_flips(predict, x, flips, pixels)
        )(images)
        want = np.mean(
            [
                reference(weights, shifted(images, shift), flips)
                for shift in (0, pixels, -pixels)
            ],
            axis=0,
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    def test_a_translation_moves_the_content(self):
        x = jnp.arange(16.0).reshape(1, 4, 4, 1)
        moved = test_time_flips.translated(x, 1)[0, :, :, 0]
        np.testing.assert_array_equal(moved[1:, 1:], x[0, :3, :3, 0])
        np.testing.assert_array_equal(
            test_time_flips.translated(x, -1)[0, :3, :3, 0], x[0, 1:, 1:, 0]
        )

    @parameterized.parameters(
        (-1, ValueError, ">= 0"),
        (1.5, TypeError, "an int"),
        (4, ValueError, r"below the images' height and width \(4, 5\)"),
    )
    def test_bad_translations_raise_naming_them(self, pixels, error, pattern):
        with self.assertRaisesRegex(error, "`translate`.*" + pattern):
            boostax.predict_with_flips(
                lambda x: x, jnp.zeros(SHAPE), "horizontal", pixels
            )

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

    def test_no_flip_only_with_a_translation(self):
        config = boostax.boost_config(
            "O0",
            {"test_time_flips": {"enabled": True, "flips": [], "translate": 1}},
        )
        self.assertEqual(config.test_time_flips.flips, ())
        with self.assertRaisesRegex(ValueError, "`test_time_flips.flips`"):
            boostax.boost_config(
                "O0", {"test_time_flips": {"enabled": True, "flips": []}}
            )
        with self.assertRaisesRegex(ValueError, "`test_time_flips.translate`"):
            boostax.boost_config("O0", {"test_time_flips": {"translate": -1}})

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

    def test_predict_averages_the_translated_views_too(self):
        ts = boostax.auto_boost(
            "O0",
            {"test_time_flips": {**FLIPS, "translate": 1}},
            optimizer=optax.sgd(0.05),
            model=TinyNet(),
            loss=loss,
        )
        state = ts.init(
            TinyNet().init(jax.random.PRNGKey(1), batch(0)[0], False)
        )
        views = []
        for shift in (0, 1, -1):  # moved, then mirrored
            x = shifted(np.asarray(batch(9)[0]), shift)
            views += [x, x[:, :, ::-1], x[:, ::-1]]
        x = batch(9)[0]
        one = [ts.predict(state, v, flipped=False) for v in views]
        np.testing.assert_allclose(
            ts.predict(state, x),
            np.mean(np.asarray(one, np.float64), axis=0),
            rtol=1e-5,
            atol=1e-6,
        )

    def test_flipped_must_be_a_bool(self):
        with self.assertRaisesRegex(TypeError, "`flipped`"):
            self.ts.predict(self.state, batch(0)[0], flipped=None)


if __name__ == "__main__":
    absltest.main()
