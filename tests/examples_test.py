# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax.examples`: data, models and the demo (main job)."""

import contextlib
import functools
import io
import json
import os
import tempfile

import jax
import numpy as np
import optax
from absl.testing import absltest, parameterized
from flax import nnx

import boostax
from boostax.examples import baseline, budgets, data, demo, models, speedup
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

    def test_cifar_shaped_digits_and_random_crops(self):
        digits = _utils.digits()
        big = data.load_digits(image_size=32, channels=3)
        self.assertEqual(big.x_train.shape, (1347, 32, 32, 3))
        self.assertEqual(big.x_train.dtype, np.float32)
        np.testing.assert_array_equal(big.y_train, digits.y_train)
        np.testing.assert_array_equal(big.x_train[..., 0], big.x_train[..., 2])
        with self.assertRaisesRegex(ValueError, "`flat`"):
            data.load_digits(flat=True, image_size=32)
        images = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4, 1) + 1
        crops = data.random_crop(images, np.random.default_rng(0), 1)
        self.assertEqual(crops.shape, images.shape)
        for crop, image in zip(crops, images, strict=True):
            # A shifted window: every pixel is the image's or padding.
            kept = crop[crop > 0]
            self.assertTrue(np.isin(kept, image).all())
            self.assertGreaterEqual(kept.size, 9)
        a, b = (
            list(
                data.batches(
                    big.x_train,
                    big.y_train,
                    64,
                    seed=0,
                    epoch=0,
                    crop_padding=4,
                )
            )[0]
            for _ in range(2)
        )
        np.testing.assert_array_equal(a[0], b[0])  # the seed decides

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

    def test_bottleneck_resnet_less_bn(self):
        model = models.BottleneckResNet()
        x = np.zeros((1, 32, 32, 3), np.float32)
        report = boostax.less_bn_report(model, x)
        self.assertLen(report.removed, 15)
        self.assertLen(report.kept, 7)
        variables = jax.eval_shape(
            functools.partial(model.init, train=False), jax.random.PRNGKey(0), x
        )
        self.assertLen(jax.tree.leaves(variables["batch_stats"]), 2 * 22)
        out = jax.eval_shape(
            functools.partial(model.apply, train=False), variables, x
        )
        self.assertEqual(out.shape, (1, 10))

    def test_nnx_models(self):
        resnet = models.NNXResNet(rngs=nnx.Rngs(0))
        self.assertLen(resnet.blocks, 6)
        self.assertEqual(resnet(np.zeros((2, 8, 8, 1))).shape, (2, 10))
        mlp = models.NNXMLP(rngs=nnx.Rngs(0))
        self.assertEqual(mlp(np.zeros((2, 64))).shape, (2, 10))


class BaselineTest(absltest.TestCase):
    def test_the_lean_step_trains_as_the_plain_step(self):
        # Both hand-written steps share one update: the lean one differs
        # only in its state (a tuple, no step counter) and its donation.
        model = models.ResNet(stage_sizes=(1,), widths=(4,))
        x = np.linspace(0, 1, 4 * 64, dtype=np.float32).reshape(4, 8, 8, 1)
        batch = (x, np.arange(4) % 10)
        variables = model.init(jax.random.PRNGKey(0), x[:1], train=False)
        optimizer = optax.sgd(0.1, momentum=0.9)
        plain = baseline.make_plain_step(
            model, optimizer, models.cross_entropy, train=True
        )
        lean = baseline.make_lean_step(
            model, optimizer, models.cross_entropy, train=True
        )
        state = baseline.init_plain_state(variables, optimizer)
        lean_state = baseline.init_lean_state(
            jax.tree.map(np.array, variables), optimizer
        )
        for _ in range(2):
            state, value = plain(state, batch)
            lean_state, lean_value = lean(lean_state, batch)
        self.assertEqual(float(value), float(lean_value))
        _utils.assert_trees_equal(
            lean_state, (state.params, state.model_state, state.opt_state)
        )
        self.assertEqual(int(state.step), 2)


class SpeedupTest(absltest.TestCase):
    def test_decompose(self):
        parts = speedup.decompose(100, 110, 1.0, 0.8, 2.0, 12.0)
        self.assertAlmostEqual(parts["steps_ratio"], 1.1)
        self.assertAlmostEqual(parts["step_cost_ratio"], 0.8)
        self.assertAlmostEqual(parts["speedup"], 100 / 88)
        self.assertAlmostEqual(parts["speedup_with_compile"], 102 / 100)
        # 2 + n = 12 + 1.1 n 0.8  ->  n = 10 / 0.12
        self.assertAlmostEqual(parts["break_even_steps"], 10 / 0.12)
        never = speedup.decompose(100, 100, 1.0, 1.1, 2.0, 3.0)
        self.assertIsNone(never["break_even_steps"])
        missed = speedup.decompose(100, None, 1.0, 0.5, 0.0, 0.0)
        self.assertEqual(missed["speedup"], 0.0)
        self.assertIsNone(speedup.decompose(None, 5, 1, 1, 0, 0)["speedup"])


def _demo(argv):
    """`demo.main(argv)` with ``--json``: its result, the JSON it wrote
    and what it printed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "demo.json")
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            result = demo.main([*argv, "--json", out])
        with open(out, encoding="utf-8") as f:
            written = json.load(f)
    return result, written, stdout.getvalue()


class DemoTest(absltest.TestCase):
    def test_quick_demo_answers_time_to_plains_accuracy(self):
        # The README's main job, in its smoke-test size: the budgets.
        result, written, text = _demo(["--quick"])
        self.assertEqual(result["mode"], "budgets")
        self.assertEqual(written["summary"].keys(), result["summary"].keys())
        self.assertEqual(result["budgets"], list(demo.QUICK_BUDGETS))
        self.assertEqual(result["epochs"], [1, 2, 3])  # of a 2-epoch budget
        summary = result["summary"]
        arms = summary["arms"]
        self.assertEqual(
            list(arms), ["plain optax", "O1", "O1 recipe", "recipe"]
        )
        for name, runs in result["runs"].items():
            self.assertEqual([r["steps"] for r in runs], [21, 42, 63], name)
            self.assertTrue(all(r["seconds"] > 0 for r in runs), name)
        plain = arms["plain optax"]["budgets"]
        self.assertEqual(
            summary["target_accuracy"], plain["1.0"]["accuracy"][0]
        )
        self.assertEqual(plain["1.0"]["relative_time_median"], 1.0)
        # The first run's wait: plain's ahead-of-time compile, O1's steps.
        for name in arms:
            self.assertGreater(result["compile_wait"][name], 0.0, name)
        self.assertIn(f"to plain's {summary['target_accuracy']:.2%}", text)
        for name, arm in arms.items():
            spread = budgets.speedup_spread(arm)
            (row,) = [
                line
                for line in text.splitlines()
                if line.startswith(f"{name}  ")
            ]
            self.assertIn(f"{spread.misses} of 1", row)
            if spread.median is None:
                self.assertIn("not reached", row)
            else:
                self.assertIn(f"{spread.median:.2f}x", row)
        self.assertIn("Does boost reach plain Optax's", text)

    def test_the_reason_is_read_from_the_runs(self):
        def arm(speedup, accuracies):
            return {
                "speedup_median": speedup,
                "budgets": {
                    f: {"accuracy_median": a}
                    for f, a in zip(("0.5", "1.0"), accuracies, strict=True)
                },
            }

        plain = arm(1.0, (0.9, 0.9))
        summary = {
            "target_accuracy": 0.9,
            "arms": {"plain optax": plain, "recipe": arm(None, (0.8, 0.85))},
        }
        self.assertIn("at 0.5x its budget", demo.why_not(summary))
        summary["arms"]["recipe"]["speedup_median"] = 1.2  # an arm pays
        self.assertIsNone(demo.why_not(summary))
        summary["arms"]["recipe"]["speedup_median"] = 0.9
        plain["budgets"]["0.5"]["accuracy_median"] = 0.8  # plain needs 1x
        self.assertIsNone(demo.why_not(summary))

    def test_quick_steps_to_target_prints_the_decomposition(self):
        # The constant-rate table, behind its flag.
        result, written, text = _demo(
            ["--steps-to-target", "--quick", "--target", "0.5"]
            + ["--devices", "2", "--no-compilation-cache"]
        )
        self.assertEqual(written["rows"].keys(), result["rows"].keys())
        rows, runs = result["rows"], result["runs"]
        self.assertEqual(
            list(rows),
            ["plain optax", "O0", "O1", "O1 recipe", "O2"],
        )
        # O0 trains the same bits as plain Optax: the same evaluations.
        self.assertEqual(
            runs["plain optax"]["evaluations"], runs["O0"]["evaluations"]
        )
        self.assertIsNotNone(rows["O0"]["steps"])
        self.assertEqual(rows["O0"]["steps_ratio"], 1.0)
        self.assertEqual(rows["O0"]["flops_ratio"], 1.0)
        for name, row in rows.items():
            self.assertTrue(np.isfinite(row["final_accuracy"]), name)
            self.assertGreater(row["step_cost_ratio"], 0, name)
        self.assertLess(rows["O1"]["flops_ratio"], 1.0)
        self.assertGreater(runs["O1"]["compile_wait"], 0.0)
        self.assertIn("simulated devices", rows["O2"]["note"])
        for column in (
            "steps to 50%",
            "x step time",
            "break-even",
            "w/ compile",
        ):
            self.assertIn(column, text)

    def test_flags_apply_to_their_mode_only(self):
        for argv, message in (
            (["--target", "0.9"], "--target applies to --steps-to-target"),
            (["--seed", "1"], "--seed applies to --steps-to-target"),
            (["--steps-to-target", "--seeds", "3"], "--seeds applies to the"),
            (["--steps-to-target", "--budgets", "1"], "--budgets applies"),
            (["--budgets", "0.5", "2"], "must be positive fractions"),
            (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        ):
            stderr = io.StringIO()
            with (
                self.subTest(argv=argv),
                contextlib.redirect_stderr(stderr),
                self.assertRaises(SystemExit),
            ):
                demo.main(argv)
            self.assertIn(message, stderr.getvalue())

    def test_answer(self):
        def arm(accuracies, seconds):
            runs = []
            for fraction, per_seed in accuracies.items():
                for seed, accuracy in enumerate(per_seed):
                    run = budgets.BudgetRun(
                        fraction, seed, 1, accuracy, None, 0.0
                    )
                    run.seconds = seconds[fraction]
                    runs.append(run)
            return runs

        times = {0.5: 50.0, 1.0: 100.0}
        summary = budgets.summarize(
            {
                "plain optax": arm({0.5: [0.9, 0.9], 1.0: [0.95, 0.95]}, times),
                "faster": arm({0.5: [0.95, 0.96], 1.0: [0.97, 0.97]}, times),
                "slower": arm(
                    {0.5: [0.8, 0.8], 1.0: [0.95, 0.95]},
                    {0.5: 60.0, 1.0: 125.0},
                ),
                "lost": arm({0.5: [0.8, 0.95], 1.0: [0.9, 0.96]}, times),
                "early": arm(
                    {0.5: [0.95, 0.95, 0.8], 1.0: [0.95, 0.95, 0.9]}, times
                ),
            },
            (0.5, 1.0),
        )
        lines = demo.answer(summary).splitlines()
        self.assertIn("(95.00%)", lines[0])
        self.assertEqual(
            lines[1:],
            [
                "  faster: yes: 2.00x plain's speed (2.00-2.00x over the "
                "seeds that reach it); at the full budget +2.00 points in "
                "1.00x plain's time",
                "  slower: no: 0.80x plain's speed (0.80-0.80x over the seeds "
                "that reach it); at the full budget +0.00 points in 1.25x "
                "plain's time",
                "  lost: no: 1 of 2 seeds never reach it; at the full budget "
                "-2.00 points in 1.00x plain's time",
                "  early: on the median seed only: 2.00x plain's speed "
                "(2.00-2.00x over the seeds that reach it); 1 of 3 seeds "
                "never reach it; at the full budget +0.00 points in 1.00x "
                "plain's time",
            ],
        )


if __name__ == "__main__":
    absltest.main()
