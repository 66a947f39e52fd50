# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`boostax.recipe`: the composition the image benchmark measured best."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest

import boostax
from boostax.examples import models
from tests.progressive_resizing_test import CNN, batches, variables

RESULTS = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results")


def measured_composition():
    """The knobs of the composed arm of `benchmarks/image_methods.py`'s
    recorded run: ``{method: value}`` chosen on validation."""
    with open(os.path.join(RESULTS, "image_methods.json")) as f:
        record = json.load(f)
    selection = record["workloads"]["shapes"]["selection"]
    return selection["plain + methods"]["methods_knobs"]


class RecipeTest(absltest.TestCase):
    def test_is_the_composition_the_benchmark_measured(self):
        knobs = measured_composition()
        flips = knobs["test_time_flips"].split("+")  # the benchmark's form
        config = boostax.recipe(100, flips=flips)
        self.assertEqual(
            sorted(knobs),
            ["label_smoothing", "progressive_resizing", "test_time_flips"],
        )
        self.assertEqual(
            config["label_smoothing"]["alpha"], knobs["label_smoothing"]
        )
        self.assertEqual(
            config["progressive_resizing"]["initial_scale"],
            knobs["progressive_resizing"],
        )
        self.assertEqual(
            "+".join(config["test_time_flips"]["flips"]),
            knobs["test_time_flips"],
        )

    def test_only_the_methods_at_level_o1(self):
        recipe = boostax.BoostConfig.from_dict(boostax.recipe(100), level="O1")
        sections = {
            "label_smoothing": {"enabled": True, "alpha": 0.2},
            "progressive_resizing": {
                "enabled": True,
                "initial_scale": 0.75,
                "total_steps": 100,
            },
            "test_time_flips": {"enabled": True, "flips": ["horizontal"]},
        }
        plain = boostax.BoostConfig.from_dict(sections, level="O0")
        self.assertEqual(recipe.enabled_algorithms, ())
        for name in sections:
            self.assertEqual(getattr(recipe, name), getattr(plain, name))

    def test_without_flips(self):
        config = boostax.recipe(100, flips=None)
        self.assertNotIn("test_time_flips", config)
        self.assertEqual(
            boostax.recipe(100, flips="vertical")["test_time_flips"],
            {"enabled": True, "flips": ["vertical"]},
        )

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "`total_steps`.*got 0"):
            boostax.recipe(0)
        with self.assertRaisesRegex(TypeError, "`total_steps`"):
            boostax.recipe("100")
        with self.assertRaisesRegex(ValueError, "`flips`.*diagonal"):
            boostax.recipe(100, flips="diagonal")
        with self.assertRaisesRegex(ValueError, "`flips`"):
            boostax.recipe(100, flips=[])

    def test_trains_and_predicts_with_the_flips(self):
        # 8 updates of 16x16 images: 12x12 first (0.75 of the size), 16x16
        # for the last ones; predict averages each image with its mirror.
        step = boostax.auto_boost(
            "O1",
            boostax.recipe(8),
            optimizer=optax.sgd(0.05, momentum=0.9),
            model=CNN(),
            loss=models.cross_entropy,
        )
        state = step.init(variables(), trained=False)
        sizes = set()
        for batch in batches(8):
            state, metrics = step(state, batch)
            sizes.add(int(metrics["image_width"]))
            self.assertTrue(np.isfinite(metrics["loss"]))
        self.assertEqual(sizes, {12, 16})
        images = batches(1)[0][0]
        one_view = step.predict(state, images, flipped=False)
        mirrored = step.predict(state, images[:, :, ::-1], flipped=False)
        np.testing.assert_allclose(
            step.predict(state, images),
            (one_view + mirrored) / 2,
            rtol=1e-5,
            atol=1e-6,
        )

    def test_the_loss_is_smoothed(self):
        step = boostax.auto_boost(
            "O1",
            boostax.recipe(8, flips=None),
            optimizer=optax.sgd(0.0),
            model=CNN(),
            loss=models.cross_entropy,
        )
        state = step.init(variables(), trained=False)
        images, labels = batches(1)[0]
        state, metrics = step(state, (images, labels))
        # Update 0 trains on 12x12 images: the model's logits on them.
        small = jax.image.resize(
            jnp.asarray(images), (4, 12, 12, 3), "linear", antialias=True
        )
        logits, _ = CNN().apply(variables(), small, mutable=["batch_stats"])
        targets = optax.smooth_labels(jax.nn.one_hot(labels, 3), 0.2)
        expected = optax.softmax_cross_entropy(logits, targets).mean()
        np.testing.assert_allclose(metrics["loss"], expected, rtol=1e-5)


class RenamedTest(absltest.TestCase):
    def test_the_old_spellings_warn_and_name_the_new_homes(self):
        # Until this release `recipe()` was LessBN + progressive freezing
        # (now `o1_recipe`) and this composition was `image_recipe`.
        with self.assertWarnsRegex(DeprecationWarning, "boostax.recipe`"):
            image_recipe = boostax.image_recipe
        self.assertIs(image_recipe, boostax.recipe)
        self.assertNotIn("image_recipe", boostax.__all__)
        with self.assertWarnsRegex(
            DeprecationWarning, r"boostax.o1_recipe\(\)"
        ):
            config = boostax.recipe()
        self.assertEqual(config, boostax.o1_recipe())
        # The old preset has no flips: given without `total_steps`, they
        # are refused, not dropped.
        with self.assertRaisesRegex(TypeError, "needs `total_steps`"):
            boostax.recipe(flips=None)
        with self.assertRaisesRegex(TypeError, "needs `total_steps`"):
            boostax.recipe(translate=1)

    def test_o1_recipe_is_less_bn_and_progressive_freezing(self):
        config = boostax.BoostConfig.from_dict(
            boostax.o1_recipe(total_steps=1000), level="O1"
        )
        self.assertEqual(config.enabled_algorithms, ("less_bn", "grad_freeze"))
        self.assertFalse(config.less_bn.fn_flag)
        self.assertTrue(config.less_bn.gc_flag)
        self.assertEqual(config.grad_freeze.freeze_type, 2)
        self.assertEqual(config.grad_freeze.total_steps, 1000)


if __name__ == "__main__":
    absltest.main()
