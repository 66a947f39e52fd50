# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax.examples`: data, models and the demo (main job)."""

import functools

import jax
import numpy as np
from absl.testing import absltest, parameterized
from flax import nnx

from boostax.examples import data, demo, models
from tests import _utils


class DataTest(parameterized.TestCase):
    def test_fixed_stratified_standardized_split(self):
        digits = _utils.digits()
        again = data.load_digits()
        for a, b in zip(digits, again, strict=True):
            np.testing.assert_array_equal(a, b)
        self.assertEqual(digits.x_train.shape, (1347, 8, 8, 1))
        self.assertEqual(digits.x_test.shape, (450, 8, 8, 1))
        self.assertEqual(digits.x_train.dtype, np.float32)
        self.assertEqual(digits.y_train.dtype, np.int32)
        self.assertAlmostEqual(float(digits.x_train.mean()), 0.0, places=5)
        self.assertAlmostEqual(float(digits.x_train.std()), 1.0, places=5)
        np.testing.assert_array_equal(
            np.bincount(digits.y_test) >= 43, True
        )  # every class is in the test set (stratified)
        flat = data.load_digits(flat=True)
        np.testing.assert_array_equal(
            flat.x_train, digits.x_train.reshape(-1, 64)
        )

    def test_batches(self):
        digits = _utils.digits()
        epoch0 = list(
            data.batches(digits.x_train, digits.y_train, 100, seed=0, epoch=0)
        )
        self.assertLen(epoch0, data.steps_per_epoch(1347, 100))
        self.assertTrue(all(len(x) == 100 for x, _ in epoch0))
        again = list(
            data.batches(digits.x_train, digits.y_train, 100, seed=0, epoch=0)
        )
        other = next(
            data.batches(digits.x_train, digits.y_train, 100, seed=0, epoch=1)
        )
        np.testing.assert_array_equal(epoch0[0][1], again[0][1])
        self.assertFalse(np.array_equal(epoch0[0][1], other[1]))
        with self.assertRaisesRegex(ValueError, "`batch_size` must be in"):
            next(
                data.batches(digits.x_train, digits.y_train, 0, seed=0, epoch=0)
            )


class ModelsTest(parameterized.TestCase):
    def test_resnet_structure(self):
        model = models.ResNet()
        variables = jax.eval_shape(
            functools.partial(model.init, train=False),
            jax.random.PRNGKey(0),
            np.zeros((1, 8, 8, 1)),
        )
        params = variables["params"]
        # 6 basic blocks, 2 with a projection shortcut (conv + BN).
        blocks = [k for k in params if k.startswith("BasicBlock")]
        self.assertLen(blocks, 6)
        with_projection = [b for b in blocks if "Conv_2" in params[b]]
        self.assertLen(with_projection, 2)
        self.assertIn("batch_stats", variables)
        out = model.apply(
            model.init(
                jax.random.PRNGKey(0), np.zeros((2, 8, 8, 1)), train=False
            ),
            np.zeros((2, 8, 8, 1)),
            train=False,
        )
        self.assertEqual(out.shape, (2, 10))

    def test_nnx_models(self):
        resnet = models.NNXResNet(rngs=nnx.Rngs(0))
        self.assertLen(resnet.blocks, 6)
        self.assertEqual(resnet(np.zeros((2, 8, 8, 1))).shape, (2, 10))
        mlp = models.NNXMLP(rngs=nnx.Rngs(0))
        self.assertEqual(mlp(np.zeros((2, 64))).shape, (2, 10))


class DemoTest(absltest.TestCase):
    def test_quick_demo_prints_the_table(self):
        # The README's main job, in its smoke-test size.
        results = demo.main(["--quick", "--target", "0.5", "--devices", "2"])
        names = [r.name for r in results]
        self.assertEqual(
            names,
            [
                "plain optax",
                "O0",
                "O1",
                "O2",
                "O1 less_bn",
                "O1 freeze",
                "O2 adasum",
            ],
        )
        plain, o0 = results[0], results[1]
        self.assertEqual(plain.accuracies, o0.accuracies)  # same bits
        self.assertGreater(plain.final_accuracy, 0.5)
        self.assertIsNotNone(o0.time_to_target)
        for r in results[2:]:
            self.assertFalse(r.note)
            self.assertTrue(np.isfinite(r.final_accuracy))
        table = demo.format_table(results, 0.5)
        self.assertIn("time to 50%", table)
        self.assertIn("speed-up", table)


if __name__ == "__main__":
    absltest.main()
