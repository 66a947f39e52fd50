# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for the freezing warm-up's segments (`program_schedule.
warmup_segments`): programs that differentiate a suffix group alone."""

import itertools
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest

import boostax
from boostax._src.freezing import plan as freezing
from boostax._src.step import program_schedule
from boostax.examples import models
from tests import _utils

GROUPS = 3
# Progressive freezing over 100 updates, everything trained for 70% of
# them: depth 0 at positions 0-69 (the lead: its own program), depth 1 at
# 70-84, depth 2 from 85 on. A lead of 70 positions leaves time for one
# program: one from group 1, for depths 1 and 2.
CONFIG = {
    "boost": {"mode": "manual", "grad_freeze": True},
    "grad_freeze": {
        "param_groups": GROUPS,
        "total_steps": 100,
        "freeze_type": 2,
        "freeze_p": 0.7,
    },
}
LEAD = 70
STEPS = 96
FROM_1 = freezing.warmup_key(1)


def _step(background):
    digits = _utils.digits(flat=True)
    model = models.MLP(features=(16,) * 5)
    ts = boostax.auto_boost(
        "O1",
        CONFIG,
        optimizer=optax.adam(1e-2),
        model=model,
        loss=models.cross_entropy,
        sample_inputs=digits.x_train[:1],
        options=boostax.StepOptions(background_compile=background),
    )
    variables = model.init(jax.random.PRNGKey(0), digits.x_train[:1])
    return ts, ts.init(variables)


def _batches():
    digits = _utils.digits(flat=True)
    x, y = digits.x_train, digits.y_train
    batches = len(x) // 32
    return [
        (x[i * 32 : (i + 1) * 32], y[i * 32 : (i + 1) * 32])
        for i in (j % batches for j in range(STEPS))
    ]


def _slow_compiles(ts, seconds):
    """Makes every compile of `ts` take `seconds` longer (a slow machine)."""
    compile_ = ts.executables._compile

    def slow(key, args):
        time.sleep(seconds)
        return compile_(key, args)

    ts.executables._compile = slow


class SegmentedWarmupStepTest(absltest.TestCase):
    """One reference run (every program compiled on the spot), shared."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.batches = _batches()
        cls.ts, state = _step(background=False)
        cls.states = [state]  # the state before each position
        cls.frozen = []
        for batch in cls.batches:
            state, metrics = cls.ts(state, batch)
            cls.states.append(state)
            cls.frozen.append(int(metrics["frozen_groups"]))
        # What the run compiled (other tests compile more on the same step).
        cls.compiled = set(cls.ts.compile_seconds)

    def test_the_programs_of_the_run(self):
        ts = self.ts
        self.assertEqual(ts.freeze_warmup_steps, 1024)
        programs = [ts.program_at(p) for p in range(STEPS)]
        self.assertEqual(programs, [0] * LEAD + [FROM_1] * (STEPS - LEAD))
        np.testing.assert_array_equal(self.frozen, ts.freezing.sequence[:STEPS])
        self.assertEqual(set(self.frozen[LEAD:]), {1, 2})  # both depths ran
        # Compiled on first use: the lead's program and the segment's.
        self.assertEqual(self.compiled, {0, FROM_1})
        # Past the planned run (101 updates) depth 2 runs on its own.
        self.assertEqual(ts.program_at(101), 2)

    def test_same_bits_whether_programs_were_ready_or_waited_for(self):
        slow, state = _step(background=True)
        _slow_compiles(slow, seconds=1.0)
        for batch in self.batches:
            state, _ = slow(state, batch)
        _utils.assert_trees_equal(state, self.states[-1])
        self.assertGreater(slow.compile_wait_seconds, 1.0)

    def test_resumes_exactly_at_and_inside_the_segment(self):
        fresh, _ = _step(background=True)
        for position in (LEAD, LEAD + 10):  # its first step, and inside
            restored = jax.tree.map(
                jnp.asarray, jax.device_get(self.states[position])
            )
            for batch in self.batches[position:]:
                restored, _ = fresh(restored, batch)
            _utils.assert_trees_equal(restored, self.states[-1])

    def test_trains_like_the_depths_own(self):
        ts = self.ts
        for position in (LEAD, 90):  # depth 1, then depth 2
            state, batch = self.states[position], self.batches[position]
            depth = ts.freezing.depth(position)
            own, _ = ts.at_depth(depth)(state, batch)
            trained = ts.freezing.mask(state.params, depth)
            for old, new, expected, t in zip(
                jax.tree.leaves(state.params),
                jax.tree.leaves(self.states[position + 1].params),
                jax.tree.leaves(own.params),
                jax.tree.leaves(trained),
                strict=True,
            ):
                if t:
                    np.testing.assert_allclose(
                        new, expected, rtol=1e-5, atol=1e-6
                    )
                else:  # frozen: bit for bit
                    np.testing.assert_array_equal(new, old)

    def test_skips_the_backward_of_the_common_frozen_prefix(self):
        ts, state, batch = self.ts, self.states[0], self.batches[0]

        def flops(key):
            compiled = ts.lower(state, batch, depth=key).compile()
            return boostax.measure.executable_cost(compiled).flops

        masked, from_1, own_1 = flops(freezing.MASKED), flops(FROM_1), flops(1)
        # The first layer's weight gradient (32 x 64 x 16 multiply-adds)
        # is not computed: most of what depth 1's own program saves over
        # the masked one (451k, 309k, 283k FLOPs; the rest is the mask's
        # elementwise work and the optimizer on every leaf, large beside
        # this MLP's small matmuls).
        self.assertLess(from_1, masked - 2 * 32 * 64 * 16)
        self.assertGreater(masked - from_1, 0.75 * (masked - own_1))

    def test_cost_report_weighs_the_segment(self):
        report = boostax.measure.cost_report(
            self.ts, self.states[0], self.batches[0]
        )
        # The planned run: 101 updates, the lead's 70 and the segment's 31.
        self.assertEqual(
            report.shares,
            {"warm-up from depth 1": 31 / 101, "depth 0": 70 / 101},
        )
        segment = report.executables["warm-up from depth 1"]
        self.assertLess(segment.flops, report.executables["depth 0"].flops)

    def test_a_warmup_program_of_a_group_the_plan_lacks_is_refused(self):
        with self.assertRaisesRegex(ValueError, r"\[0, 3\).*group 7"):
            self.ts.trace(
                self.states[0], self.batches[0], freezing.warmup_key(7)
            )


# Nested suffix groups of four depths, sizes 4, 3, 2, 1.
_GROUPS = [("a", "b", "c", "d"), ("b", "c", "d"), ("c", "d"), ("d",)]


def _plan(sequence, *, wrap=False, groups=_GROUPS):
    """A stand-in freezing plan (each depth its own program)."""
    return types.SimpleNamespace(
        can_mask=True,
        micro_steps=1,
        wrap=wrap,
        sequence=np.array(sequence),
        groups=groups,
        canonical_depth=lambda k: k,
        depth=lambda p: int(
            sequence[p % len(sequence) if wrap else min(p, len(sequence) - 1)]
        ),
    )


def _valid(schedule, plan, positions):
    """Whether each position's program trains its depth's leaves: its own,
    or a warm-up program of a group holding them."""
    for p in positions:
        key, depth = schedule.program_at(p), plan.depth(p)
        cut = freezing.warmup_cut(key)
        if cut is None:
            if key != depth:
                return False
        elif not set(plan.groups[depth]) <= set(plan.groups[cut]):
            return False
    return True


class WarmupSegmentsTest(absltest.TestCase):
    def test_budget_one_program_per_min_lead_steps(self):
        budget = program_schedule.warmup_programs_budget
        step = program_schedule.MIN_LEAD_STEPS
        self.assertEqual([budget(0), budget(step - 1), budget(step)], [1, 1, 1])
        self.assertEqual([budget(2 * step), budget(5 * step + 3)], [2, 5])

    def test_own_programs_when_the_lead_leaves_time_for_them(self):
        sequence = [0] * 200 + [1] * 20 + [2] * 20 + [3] * 20
        schedule = program_schedule.ProgramSchedule(_plan(sequence), 1024)
        self.assertEqual(schedule.lead, 200)
        self.assertEqual(
            program_schedule.warmup_segments(_plan(sequence), 200, 1024),
            [(200, 1), (220, 2), (240, 3)],
        )
        self.assertEqual(
            [schedule.program_at(p) for p in (199, 200, 239, 240, 2000)],
            [0, 1, 2, 3, 3],
        )
        self.assertNotIn(freezing.MASKED, schedule.shares())
        self.assertTrue(_valid(schedule, _plan(sequence), range(1100)))

    def test_fewer_programs_than_depths_cut_where_it_saves_most(self):
        # Two programs for three depths: {1, 2} from group 1 and 3 alone
        # cost 40 x 3 + 30 x 1 = 150 leaf-steps, against 30 x 3 + 40 x 2 =
        # 170 for 1 alone and {2, 3} from group 2.
        sequence = [0] * 130 + [1] * 30 + [2] * 10 + [3] * 30
        plan = _plan(sequence)
        schedule = program_schedule.ProgramSchedule(plan, 1024)
        self.assertEqual(schedule.lead, 130)
        self.assertEqual(
            program_schedule.warmup_segments(plan, 130, 1024),
            [(130, freezing.warmup_key(1)), (170, 3)],
        )
        self.assertEqual(
            schedule.warmup_programs(0), [0, freezing.warmup_key(1), 3]
        )
        self.assertEqual(
            program_schedule.program_names(schedule.shares()),
            {
                "masked from 1": "warm-up from depth 1",
                0: "depth 0",
                3: "depth 3",
            },
        )
        self.assertTrue(_valid(schedule, plan, range(1100)))

    def test_recurring_depth_zero_runs_one_masked_program(self):
        # MindSpore's interval strategy: depth 0 between the frozen steps.
        sequence = [0] * 100 + [0, 1, 0, 3, 0, 2] * 40
        plan = _plan(sequence, wrap=True)
        schedule = program_schedule.ProgramSchedule(plan, 300)
        self.assertEqual(
            program_schedule.warmup_segments(plan, schedule.lead, 300),
            [(101, freezing.MASKED)],
        )
        self.assertTrue(_valid(schedule, plan, range(400)))

    def test_past_the_planned_run_compiled_only_when_reached(self):
        # Wrapping, the sequence starts again with depth 0 after its end:
        # a program of every leaf, which a run of the plan never runs.
        sequence = [0] * 200 + [1] * 20 + [2] * 20
        plan = _plan(sequence, wrap=True)
        schedule = program_schedule.ProgramSchedule(plan, 1024)
        self.assertEqual(schedule.program_at(240), freezing.MASKED)
        self.assertEqual(schedule.warmup_programs(0), [0, 1, 2])
        self.assertNotIn(freezing.MASKED, schedule.shares())
        self.assertIn(freezing.MASKED, schedule.warmup_programs(240))
        self.assertTrue(_valid(schedule, plan, range(1100)))

    def test_groups_not_nested_run_the_masked_program(self):
        groups = [("a", "b", "c"), ("b",), ("c",)]
        sequence = [0] * 70 + [1] * 20 + [2] * 20
        plan = _plan(sequence, groups=groups)
        self.assertEqual(
            program_schedule.warmup_segments(plan, 70, 110),
            [(70, freezing.MASKED)],
        )

    def test_the_cut_is_the_cheapest_within_the_budget(self):
        # Against every way to cut the runs into at most `budget` segments.
        rng = np.random.default_rng(0)
        for _ in range(20):
            runs = rng.integers(0, 4, size=int(rng.integers(2, 7)))
            runs = [int(r) for r, _ in itertools.groupby(runs)]
            lengths = rng.integers(1, 30, size=len(runs))
            sequence = [0] * 128 + [
                d for d, n in zip(runs, lengths, strict=True) for _ in range(n)
            ]
            plan = _plan(sequence)
            end = len(sequence)
            segments = program_schedule.warmup_segments(plan, 128, end)
            self.assertLessEqual(len(segments), 2)

            def cost(bounds, sequence=sequence):
                total = 0.0
                for i, j in itertools.pairwise(bounds):
                    depths = set(sequence[i:j])
                    union = set().union(*(_GROUPS[d] for d in depths))
                    total += (j - i) * len(union) / 4
                return total

            starts = [128] + [
                128 + int(np.sum(lengths[:k])) for k in range(1, len(runs))
            ]
            best = min(
                cost([128, *cut, end])
                for m in (0, 1)
                for cut in itertools.combinations(starts[1:], m)
            )
            got = cost([s for s, _ in segments] + [end])
            self.assertAlmostEqual(got, best)


if __name__ == "__main__":
    absltest.main()
