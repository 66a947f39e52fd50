# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The deterministic pieces of the image-methods benchmark: the shapes
generator, the validation split, the selection and the bootstrap interval
(no training)."""

import numpy as np
from absl.testing import absltest

from boostax.examples import budgets, data, intervals, selection, shapes


class ShapesTest(absltest.TestCase):
    def test_deterministic_balanced_and_prefix_stable(self):
        x, y = shapes.generate("train", 35, seed=3)
        again, labels = shapes.generate("train", 35, seed=3)
        np.testing.assert_array_equal(x, again)
        np.testing.assert_array_equal(y, labels)
        self.assertEqual(x.shape, (35, 24, 24, 3))
        self.assertEqual(x.dtype, np.float32)
        self.assertEqual(np.bincount(y).tolist(), [4] * 5 + [3] * 5)
        # Image i does not depend on how many are drawn.
        fewer, _ = shapes.generate("train", 12, seed=3)
        np.testing.assert_array_equal(fewer, x[:12])
        # Another seed or split draws other images.
        other, _ = shapes.generate("train", 12, seed=4)
        test, _ = shapes.generate("test", 12, seed=3)
        self.assertFalse(np.allclose(other, fewer))
        self.assertFalse(np.allclose(test, fewer))

    def test_load_standardizes_with_training_statistics(self):
        config = shapes.ShapesConfig(train=50, test=20, size=16)
        digits = shapes.load_shapes(config)
        self.assertEqual(digits.x_train.shape, (50, 16, 16, 3))
        self.assertEqual(digits.x_test.shape, (20, 16, 16, 3))
        np.testing.assert_allclose(
            digits.x_train.mean(axis=(0, 1, 2)), 0, atol=1e-5
        )
        np.testing.assert_allclose(
            digits.x_train.std(axis=(0, 1, 2)), 1, atol=1e-4
        )
        # No test image is a training image.
        train = {row.tobytes() for row in digits.x_train}
        self.assertFalse(any(row.tobytes() in train for row in digits.x_test))

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "`split` must be one of"):
            shapes.generate("validation", 3)
        with self.assertRaisesRegex(ValueError, "`count` must be"):
            shapes.generate("train", 0)


def _digits(n=60, n_test=20):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2, 2, 1)).astype(np.float32)
    x_test = rng.normal(size=(n_test, 2, 2, 1)).astype(np.float32)
    return data.Digits(x, np.arange(n) % 3, x_test, np.arange(n_test) % 3)


class CarveValidationTest(absltest.TestCase):
    def test_disjoint_stratified_and_test_untouched(self):
        digits = _digits()
        splits = selection.carve_validation(digits, 12, seed=1)
        index = splits.validation_index
        self.assertLen(index, 12)
        kept = np.setdiff1d(np.arange(60), index)
        np.testing.assert_array_equal(
            splits.train.x_train, digits.x_train[kept]
        )
        np.testing.assert_array_equal(
            splits.validation.x_test, digits.x_train[index]
        )
        # The selection trains on what the measurement trains on.
        np.testing.assert_array_equal(
            splits.validation.x_train, splits.train.x_train
        )
        # The test set is the original one; no validation image is trained
        # on or is a test image.
        np.testing.assert_array_equal(splits.train.x_test, digits.x_test)
        rows = {r.tobytes() for r in splits.train.x_train}
        rows |= {r.tobytes() for r in digits.x_test}
        self.assertFalse(
            any(r.tobytes() in rows for r in splits.validation.x_test)
        )
        self.assertEqual(
            np.bincount(splits.validation.y_test).tolist(), [4] * 3
        )

    def test_bad_count(self):
        with self.assertRaisesRegex(ValueError, r"`count` .* \[1, 59\]"):
            selection.carve_validation(_digits(), 60)
        with self.assertRaisesRegex(TypeError, "`count` must be an int"):
            selection.carve_validation(_digits(), 0.2)


class SelectTest(absltest.TestCase):
    def test_picks_by_validation_not_test(self):
        # A fake arm whose validation and test accuracies disagree: the
        # procedure is only ever given the validation accuracy.
        validation = {0.1: 0.80, 0.2: 0.90, 0.4: 0.85}
        test = {0.1: 0.95, 0.2: 0.70, 0.4: 0.80}
        calls = []

        def score(settings, seed):
            calls.append((settings["learning_rate"], seed))
            return validation[settings["learning_rate"]] + 0.01 * seed

        chosen = selection.select(
            {"learning_rate": [0.1, 0.2, 0.4]}, score, [0, 1]
        )
        self.assertEqual(chosen.chosen, {"learning_rate": 0.2})
        self.assertNotEqual(
            chosen.chosen["learning_rate"], max(test, key=test.get)
        )
        self.assertAlmostEqual(chosen.chosen_validation_accuracy, 0.905)
        self.assertLen(calls, 6)
        self.assertEqual(
            [p["validation_accuracy"] for p in chosen.points][1], [0.9, 0.91]
        )
        self.assertEqual(chosen.grid, {"learning_rate": [0.1, 0.2, 0.4]})

    def test_widening_moves_an_edge_choice_inside(self):
        # Validation peaks at lr 0.05, below the grid; the other setting's
        # values train at every widened learning rate.
        calls = []

        def score(settings, seed):
            calls.append(dict(settings))
            return -abs(settings["lr"] - 0.05) + 0.001 * settings["alpha"]

        chosen = selection.select(
            {"lr": [0.2, 0.4], "alpha": [0, 1]},
            score,
            [0],
            widen={"lr": 2.0},
            max_widenings=3,
        )
        self.assertEqual(chosen.grid["lr"], [0.025, 0.05, 0.1, 0.2, 0.4])
        self.assertEqual(chosen.chosen, {"lr": 0.05, "alpha": 1})
        self.assertLen(calls, 10)  # 4 grid points + 3 x 2 widened ones
        self.assertLen({tuple(sorted(c.items())) for c in calls}, 10)
        # The cap: an optimum far above stops after max_widenings.
        far = selection.select(
            {"lr": [0.1, 0.2]},
            lambda s, seed: s["lr"],
            [0],
            widen={"lr": 2.0},
            max_widenings=1,
        )
        self.assertEqual(far.grid["lr"], [0.1, 0.2, 0.4])
        self.assertEqual(far.chosen, {"lr": 0.4})
        # Without `widen` the grid is what was asked.
        plain = selection.select(
            {"lr": [0.1, 0.2]}, lambda s, seed: s["lr"], [0]
        )
        self.assertEqual(plain.grid, {"lr": [0.1, 0.2]})

    def test_widening_refuses_bad_settings(self):
        with self.assertRaisesRegex(ValueError, "not a setting of the grid"):
            selection.select(
                {"a": [1]}, lambda s, seed: 0.5, [0], widen={"lr": 2.0}
            )
        with self.assertRaisesRegex(ValueError, "factor > 1"):
            selection.select(
                {"a": [1, 2]}, lambda s, seed: 0.5, [0], widen={"a": 0.5}
            )

    def test_grid_and_ties(self):
        points = selection.grid_points({"a": [1, 2], "b": ["x", "y"]})
        self.assertEqual(
            points,
            [
                {"a": 1, "b": "x"},
                {"a": 1, "b": "y"},
                {"a": 2, "b": "x"},
                {"a": 2, "b": "y"},
            ],
        )
        chosen = selection.select({"a": [1, 2]}, lambda s, seed: 0.5, [0])
        self.assertEqual(chosen.chosen, {"a": 1})  # the first wins a tie
        with self.assertRaisesRegex(ValueError, "non-empty list"):
            selection.grid_points({"a": []})
        with self.assertRaisesRegex(ValueError, "at least one seed"):
            selection.select({"a": [1]}, lambda s, seed: 0.5, [])


def _runs(curves, steps=(50, 100, 150), cost=1.0):
    """BudgetRuns from ``{seed: [accuracy per budget]}`` (0.5, 1, 1.5)."""
    return [
        budgets.BudgetRun(
            fraction,
            seed,
            n,
            accuracy,
            None,
            0.0,
            seconds=n * cost * 0.01,
        )
        for seed, accuracies in curves.items()
        for fraction, n, accuracy in zip(
            (0.5, 1.0, 1.5), steps, accuracies, strict=True
        )
    ]


class BootstrapTest(absltest.TestCase):
    def test_against_numpy_reference(self):
        values = np.array([0.0, 1.3, 0.9, 1.1, 2.0, 1.05, 0.7])
        got = intervals.bootstrap_interval(
            lambda i: float(np.median(values[i])),
            len(values),
            resamples=2000,
            level=0.9,
            seed=7,
        )
        draws = np.random.default_rng(7).integers(0, 7, size=(2000, 7))
        medians = np.median(values.astype(np.float64)[draws], axis=1)
        low, high = np.percentile(medians, [5.0, 95.0])
        self.assertAlmostEqual(got.low, low)
        self.assertAlmostEqual(got.high, high)
        self.assertEqual((got.level, got.resamples), (0.9, 2000))

    def test_speedups_match_the_summary_and_decompose(self):
        plain = _runs(
            {
                0: [0.80, 0.85, 0.86],
                1: [0.81, 0.86, 0.86],
                2: [0.79, 0.84, 0.85],
            }
        )
        # Half plain's step cost; seed 2 never reaches plain's 85%.
        arm = _runs(
            {
                0: [0.84, 0.87, 0.88],
                1: [0.86, 0.88, 0.89],
                2: [0.80, 0.83, 0.84],
            },
            cost=0.5,
        )
        summary = budgets.summarize(
            {"plain": plain, "arm": arm}, (0.5, 1.0, 1.5)
        )
        got = intervals.speedup_interval(plain, arm, resamples=500)
        expected = {
            s: 0.0 if v is None else v
            for s, v in summary["arms"]["arm"]["speedup"].items()
        }
        self.assertEqual(got["seeds"], [0, 1, 2])
        for seed, value in expected.items():
            self.assertAlmostEqual(got["per_seed"][seed], value)
        self.assertAlmostEqual(
            got["median"], summary["arms"]["arm"]["speedup_median"]
        )
        self.assertEqual(got["misses"], 1)
        self.assertLessEqual(got["low"], got["median"])
        self.assertGreaterEqual(got["high"], got["median"])
        parts = intervals.decompose(
            {"plain": plain, "arm": arm}, 0.01, resamples=200
        )
        self.assertAlmostEqual(parts["arm"]["step_cost_ratio"], 0.5)
        # Time speed-up = steps speed-up / step cost.
        self.assertAlmostEqual(parts["arm"]["cost_factor"], 2.0)
        self.assertAlmostEqual(parts["plain"]["step_cost_ratio"], 1.0)

    def test_binomial_standard_error_and_bad_arguments(self):
        self.assertAlmostEqual(
            intervals.binomial_standard_error(0.85, 2000),
            np.sqrt(0.85 * 0.15 / 2000),
        )
        with self.assertRaisesRegex(ValueError, "`level` must be in"):
            intervals.bootstrap_interval(lambda i: 0.0, 3, level=1.0)
        with self.assertRaisesRegex(ValueError, "`count` must be"):
            intervals.bootstrap_interval(lambda i: 0.0, 0)


if __name__ == "__main__":
    absltest.main()
