# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The budget protocol's arithmetic and schedule (`boostax.examples.budgets`,
`boostax.examples.schedules`)."""

import math
from unittest import mock

import numpy as np
from absl.testing import absltest

from boostax.examples import budgets, schedules


class ScheduleTest(absltest.TestCase):
    def test_warmup_then_cosine_to_zero(self):
        peak, warmup, horizon = 0.1, 5.0, 100.0
        values = [
            float(schedules.warmup_cosine(c, peak, warmup, horizon))
            for c in range(101)
        ]
        np.testing.assert_allclose(values[:5], [0.02, 0.04, 0.06, 0.08, 0.1])
        self.assertAlmostEqual(values[5], peak, places=6)
        mid = 5 + (horizon - warmup) / 2
        np.testing.assert_allclose(
            float(schedules.warmup_cosine(mid, peak, warmup, horizon)), peak / 2
        )
        self.assertAlmostEqual(values[100], 0.0, places=7)
        self.assertTrue(np.all(np.diff(values[5:]) <= 1e-9))

    def test_horizon_lives_in_the_state(self):
        # Two budgets, one program: the horizon is a hyper-parameter.
        short = schedules.scheduled_sgd(0.1, 100)
        long = schedules.scheduled_sgd(0.1, 400)
        params = {"w": np.zeros(2, np.float32)}
        s, l_ = short.init(params), long.init(params)
        self.assertEqual(float(s.hyperparams["horizon"]), 100.0)
        self.assertEqual(float(l_.hyperparams["horizon"]), 400.0)
        self.assertEqual(float(l_.hyperparams["warmup"]), 20.0)


class CurveTest(absltest.TestCase):
    def test_time_to_reach_interpolates_between_budgets(self):
        curve = [(10.0, 0.90), (20.0, 0.94), (40.0, 0.96)]
        self.assertAlmostEqual(budgets.time_to_reach(curve, 0.95), 30.0)
        self.assertAlmostEqual(budgets.time_to_reach(curve, 0.94), 20.0)
        # Reached at the smallest budget: that budget's time (a bound).
        self.assertAlmostEqual(budgets.time_to_reach(curve, 0.8), 10.0)
        self.assertIsNone(budgets.time_to_reach(curve, 0.97))
        # Order of the points does not matter; a dip does not hide the
        # first crossing.
        dip = [(40.0, 0.95), (10.0, 0.96), (20.0, 0.93)]
        self.assertAlmostEqual(budgets.time_to_reach(dip, 0.955), 10.0)

    def test_time_to_reach_past_the_full_budget(self):
        # Budgets 1/4, 1/2, 1 and 1.5: the crossing between 1x and 1.5x is
        # interpolated there; a curve that stays short is a miss.
        curve = [(25.0, 0.90), (50.0, 0.93), (100.0, 0.95), (150.0, 0.97)]
        self.assertAlmostEqual(budgets.time_to_reach(curve, 0.96), 125.0)
        self.assertIsNone(budgets.time_to_reach(curve, 0.98))

    def test_time_to_reach_a_loss_goes_down(self):
        curve = [(25.0, 2.0), (50.0, 1.8), (100.0, 1.6), (150.0, 1.5)]
        loss = budgets.LOSS
        self.assertAlmostEqual(budgets.time_to_reach(curve, 1.7, loss), 75.0)
        self.assertAlmostEqual(budgets.time_to_reach(curve, 1.55, loss), 125.0)
        self.assertAlmostEqual(budgets.time_to_reach(curve, 2.5, loss), 25.0)
        self.assertIsNone(budgets.time_to_reach(curve, 1.4, loss))
        # Read as accuracy, the same curve reaches 1.7 at once.
        self.assertAlmostEqual(budgets.time_to_reach(curve, 1.7), 25.0)

    def test_run_seconds_follow_the_depths(self):
        costs = {0: 1.0, 3: 0.5}
        run = budgets.BudgetRun(1.0, 0, 4, 0.9, [0, 0, 3, 3], 0.0)
        self.assertAlmostEqual(budgets.run_seconds(run, costs, 2.0), 6.0)
        plain = budgets.BudgetRun(1.0, 0, 4, 0.9, None, 0.0)
        self.assertAlmostEqual(
            budgets.run_seconds(plain, {None: 0.8}, 2.0), 6.4
        )

    def test_summarize_needs_the_runs_seconds(self):
        plain = [budgets.BudgetRun(1.0, 0, 1, 0.9, None, 0.0)]
        with self.assertRaisesRegex(ValueError, "seed 0 has no `seconds`"):
            budgets.summarize({"plain": plain}, (1.0,))

    def test_summarize(self):
        def run(fraction, seed, accuracy, seconds):
            r = budgets.BudgetRun(fraction, seed, 1, accuracy, None, 0.0)
            r.seconds = seconds
            return r

        fractions = (0.5, 1.0)
        plain = [run(0.5, s, 0.90, 50.0) for s in range(2)] + [
            run(1.0, s, a, 100.0) for s, a in enumerate([0.95, 0.96, 0.95])
        ]
        fast = [run(0.5, s, 0.95, 40.0) for s in range(2)] + [
            run(1.0, s, 0.97, 80.0) for s in range(3)
        ]
        slow = [run(0.5, s, 0.80, 60.0) for s in range(2)] + [
            run(1.0, s, a, 120.0) for s, a in enumerate([0.949, 0.94, 0.96])
        ]
        summary = budgets.summarize(
            {"plain": plain, "fast": fast, "slow": slow}, fractions
        )
        self.assertAlmostEqual(summary["target_accuracy"], 0.95)
        self.assertAlmostEqual(summary["plain_full_budget_seconds"], 100.0)
        arms = summary["arms"]
        # Plain's seed 1 ends above the median: it gets there earlier.
        self.assertAlmostEqual(arms["plain"]["speedup"][0], 1.0)
        self.assertAlmostEqual(
            arms["plain"]["speedup"][1], 100.0 / (50.0 + 50.0 * 5 / 6)
        )
        self.assertEqual(arms["fast"]["speedup"], {0: 2.5, 1: 2.5})
        # Seed 0 of "slow" misses by 0.1 point: a miss, but within 0.2.
        self.assertEqual(arms["slow"]["speedup"], {0: None, 1: None})
        self.assertEqual(arms["slow"]["misses"], 2)
        reached = 60.0 + (0.948 - 0.80) / (0.949 - 0.80) * 60.0
        # Plain's median curve reaches 0.948 at 98 s.
        self.assertAlmostEqual(
            summary["plain_seconds_to_target_within_tolerance"], 98.0
        )
        self.assertAlmostEqual(
            arms["slow"]["speedup_within_tolerance"][0], 98.0 / reached
        )
        # A miss counts as the slowest seed: the median of two is a miss.
        self.assertIsNone(arms["slow"]["speedup_within_tolerance_median"])
        self.assertEqual(arms["slow"]["misses_within_tolerance"], 1)
        self.assertIsNone(arms["slow"]["speedup_within_tolerance_worst"])
        self.assertTrue(
            math.isclose(arms["fast"]["full_budget_accuracy_delta"], 0.02)
        )
        text = budgets.format_summary(summary)
        self.assertIn("fast", text)

    def test_plain_that_plateaus_early_is_its_own_reference(self):
        def run(fraction, seed, accuracy, seconds):
            r = budgets.BudgetRun(fraction, seed, 1, accuracy, None, 0.0)
            r.seconds = seconds
            return r

        # Plain is done at half its budget; "level" reaches the same
        # accuracy only at its full budget, in 80% of plain's full time.
        plain = [run(0.5, s, 0.99, 50.0) for s in range(3)] + [
            run(1.0, s, 0.99, 100.0) for s in range(3)
        ]
        level = [run(0.5, s, 0.98, 40.0) for s in range(3)] + [
            run(1.0, s, 0.99, 80.0) for s in range(3)
        ]
        summary = budgets.summarize(
            {"plain": plain, "level": level}, (0.5, 1.0)
        )
        self.assertAlmostEqual(summary["plain_seconds_to_target"], 50.0)
        arms = summary["arms"]
        self.assertAlmostEqual(arms["plain"]["speedup_median"], 1.0)
        self.assertAlmostEqual(arms["level"]["speedup_median"], 50.0 / 80.0)
        # Over plain's whole full budget both would look faster.
        self.assertAlmostEqual(
            arms["plain"]["speedup_vs_full_budget_median"], 2.0
        )
        self.assertAlmostEqual(
            arms["level"]["speedup_vs_full_budget_median"], 100.0 / 80.0
        )

    def test_past_the_full_budget_credits_the_time_needed(self):
        def run(fraction, seed, loss, seconds):
            r = budgets.BudgetRun(fraction, seed, 1, loss, None, 0.0)
            r.seconds = seconds
            return r

        fractions = (0.5, 1.0, 1.5)

        def arm(losses, seconds):
            return [
                run(f, s, loss, t * (1 + s / 100))
                for f, loss, t in zip(fractions, losses, seconds, strict=True)
                for s in range(3)
            ]

        # Plain keeps improving past its full budget; its time to its own
        # full-budget loss is still its full budget, not a point past it.
        plain = arm([2.0, 1.6, 1.5], [50.0, 100.0, 150.0])
        # Cheaper steps, slower progress: plain's 1.6 between 1x and 1.5x.
        late = arm([2.2, 1.8, 1.4], [40.0, 80.0, 120.0])
        # Never gets there, even at 1.5x: a miss, not a slow arm (within
        # the tolerance, at 1.5x).
        short = arm([2.2, 1.9, 1.605], [40.0, 80.0, 120.0])
        summary = budgets.summarize(
            {"plain": plain, "late": late, "short": short},
            fractions,
            budgets.LOSS,
        )
        self.assertEqual(summary["metric"]["higher_is_better"], False)
        self.assertAlmostEqual(summary["target_accuracy"], 1.6)
        self.assertAlmostEqual(summary["plain_full_budget_seconds"], 101.0)
        self.assertAlmostEqual(summary["plain_seconds_to_target"], 101.0)
        arms = summary["arms"]
        self.assertAlmostEqual(arms["plain"]["speedup"][0], 101.0 / 100.0)
        for seed in range(3):
            scale = 1 + seed / 100
            self.assertAlmostEqual(
                arms["late"]["speedup"][seed], 101.0 / (100.0 * scale)
            )
        self.assertEqual(arms["late"]["misses"], 0)
        self.assertEqual(arms["short"]["speedup"], {0: None, 1: None, 2: None})
        self.assertEqual(arms["short"]["misses"], 3)
        self.assertIsNone(arms["short"]["speedup_median"])
        # Lower is better: the tolerance is above the target.
        reference = summary["plain_seconds_to_target_within_tolerance"]
        self.assertAlmostEqual(reference, 50.5 + (2.0 - 1.61) / 0.4 * 50.5)
        self.assertAlmostEqual(
            arms["short"]["speedup_within_tolerance"][0],
            reference / (80.0 + (1.9 - 1.61) / (1.9 - 1.605) * 40.0),
        )
        self.assertLess(arms["late"]["full_budget_accuracy_delta"], 0.3)
        text = budgets.format_summary(summary)
        self.assertIn("loss@1.5", text)
        self.assertIn("validation loss", text)

    def test_budgets_must_hold_the_full_one(self):
        with self.assertRaisesRegex(ValueError, r"include it \(1.0\)"):
            budgets.summarize({"plain": []}, (0.5, 1.5))
        with self.assertRaisesRegex(ValueError, "positive"):
            budgets.check_budgets((0.0, 1.0))

    def test_format_time_to_target(self):
        def run(fraction, seed, accuracy, seconds):
            r = budgets.BudgetRun(fraction, seed, 1, accuracy, None, 0.0)
            r.seconds = seconds
            return r

        def arm(accuracies, seconds):
            return [
                run(f, s, accuracies[f][s], seconds[f])
                for f in (0.5, 1.0)
                for s in range(2)
            ]

        plain = arm({0.5: [0.90, 0.90], 1.0: [0.95, 0.95]}, {0.5: 50, 1.0: 100})
        # Seed 0 reaches 0.95 at its first budget (4x), seed 1 between its
        # two (at 37.5: 2.67x).
        fast = arm({0.5: [0.95, 0.90], 1.0: [0.97, 1.0]}, {0.5: 25, 1.0: 50})
        # One seed misses: the median of two is a miss.
        half = arm({0.5: [0.95, 0.80], 1.0: [0.96, 0.90]}, {0.5: 25, 1.0: 50})
        summary = budgets.summarize(
            {"plain optax": plain, "fast": fast, "half": half}, (0.5, 1.0)
        )
        spread = budgets.speedup_spread(summary["arms"]["fast"])
        self.assertEqual(spread.seeds, 2)
        self.assertEqual(spread.misses, 0)
        self.assertAlmostEqual(spread.max, 4.0)
        self.assertAlmostEqual(spread.min, 100 / 37.5)
        self.assertEqual(
            budgets.speedup_spread(summary["arms"]["half"]),
            budgets.Spread(None, 4.0, 4.0, 1, 2),
        )
        text = budgets.format_time_to_target(
            summary,
            labels=["1 epoch", "2 epochs"],
            compile_waits={"plain optax": 1.0, "fast": 2.5, "half": 12.3},
        )
        lines = text.splitlines()
        self.assertIn("1 epoch", lines[0])
        self.assertIn("to plain's 95.00%", lines[0])
        self.assertRegex(lines[2], r"^plain optax +90\.00% +0\.50 +95\.00%")
        self.assertRegex(
            lines[3], r"^fast .* 3\.33x \(2\.67-4\.00\) +0 of 2 +2\.5 s$"
        )
        self.assertRegex(lines[4], r"^half .* not reached +1 of 2 +12\.3 s$")
        self.assertIn("misses: seeds that never reach it", text)
        # Without labels and waits: the fractions and the summary's waits.
        default = budgets.format_time_to_target(summary)
        self.assertIn("0.5x", default.splitlines()[0])
        self.assertRegex(default.splitlines()[3], r" 0\.0 s$")
        with self.assertRaisesRegex(ValueError, "one heading per budget"):
            budgets.format_time_to_target(summary, labels=["1 epoch"])

    def test_median_counts_misses_as_slowest(self):
        self.assertEqual(budgets._median([1.0, None, 3.0]), 1.0)
        self.assertIsNone(budgets._median([1.0, None, None]))
        self.assertEqual(budgets._median([2.0, 4.0]), 3.0)
        self.assertIsNone(budgets._median([]))


class MakersTest(absltest.TestCase):
    def test_rows_become_makers(self):
        makers = budgets.makers(
            budgets.ROWS + (("FN s=4", "fn_head", {"fn_scale": 4.0}),)
        )
        self.assertEqual(
            [m.name for m in makers],
            ["plain optax", "O1", "O1 recipe", "FN s=4"],
        )
        with (
            mock.patch.object(budgets.speedup, "fn_head_arm") as fn_head,
            mock.patch.object(budgets.speedup, "level_arm") as level,
        ):
            makers[2].make("workload")
            makers[3].make("workload")
        level.assert_called_once_with(
            "workload", "O1", budgets.ROWS[1][2], name="O1 recipe"
        )
        fn_head.assert_called_once_with("workload", "FN s=4", fn_scale=4.0)


class ProgramsTest(absltest.TestCase):
    def test_only_the_programs_the_runs_ran_are_compiled(self):
        lowered = []

        class TrainStep:
            freezing = mock.Mock(
                sequence=[3, 1, 3], canonical_depth=lambda d: d
            )

            def program_shares(self):
                return {"masked": 0.5, 3: 0.25, 1: 0.25}

            def lower(self, state, batch, depth):
                lowered.append(depth)
                return mock.Mock(compile=lambda: f"program {depth}")

        arm = mock.Mock(train_step=TrainStep())
        runs = [
            budgets.BudgetRun(0.5, 0, 2, 0.9, ["masked", "masked"], 0.0),
            budgets.BudgetRun(1.0, 0, 3, 0.9, ["masked", "masked", 3], 0.0),
        ]
        ran = budgets.programs_run(runs)
        self.assertEqual(ran, {"masked", 3})
        self.assertEqual(
            budgets._compiled_depths(arm, None, None, ran),
            {3: "program 3", "masked": "program masked"},
        )
        self.assertEqual(lowered, [3, "masked"])
        # Without `programs`: the planned run's and every depth's.
        self.assertEqual(
            list(budgets._compiled_depths(arm, None, None)), ["masked", 3, 1]
        )
        self.assertEqual(budgets.programs_run(runs[:0]), set())
        plain = budgets.BudgetRun(1.0, 0, 3, 0.9, None, 0.0)
        self.assertEqual(budgets.programs_run([plain]), {None})


class ReuseTest(absltest.TestCase):
    def test_reused_runs_are_not_trained_and_are_timed_anew(self):
        class Arm:
            def __init__(self, name):
                self.name = name

        makers = [
            budgets.Maker(name, lambda workload, name=name: Arm(name))
            for name in ("plain optax", "level")
        ]
        earlier = budgets.BudgetRun(1.0, 0, 7, 0.5, None, 3.0, seconds=99.0)
        trained = []

        def train(arm, workload, fraction, seed):
            trained.append((arm.name, fraction, seed))
            return budgets.BudgetRun(fraction, seed, 10, 0.9, None, 0.0)

        costs = (2.0, {"plain optax": {None: 1.0}, "level": {None: 0.5}})
        with (
            mock.patch.object(budgets, "budget", lambda w, f: w),
            mock.patch.object(budgets, "train_budget", train),
            mock.patch.object(
                budgets, "depth_step_costs", return_value=costs
            ) as step_costs,
        ):
            runs, summary = budgets.measure(
                makers,
                workload=mock.Mock(epochs=4),
                budgets=(1.0,),
                full_budget_seeds=1,
                progress=lambda line: None,
                reuse={"plain optax": [earlier]},
            )
        self.assertEqual(trained, [("level", 1.0, 0)])
        # Only the programs the runs ran are timed.
        self.assertEqual(
            step_costs.call_args.kwargs["programs"],
            {"plain optax": {None}, "level": {None}},
        )
        (plain,) = runs["plain optax"]
        self.assertEqual((plain.steps, plain.final_accuracy), (7, 0.5))
        self.assertEqual(plain.seconds, 7 * 2.0)  # this run's step cost
        self.assertEqual(runs["level"][0].seconds, 10 * 0.5 * 2.0)
        self.assertEqual(earlier.seconds, 99.0)  # the input is left alone


if __name__ == "__main__":
    absltest.main()
