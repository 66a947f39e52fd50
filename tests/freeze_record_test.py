# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.freezing.record`: a state resumed under other
gradient-freezing settings goes on only where its past stays the same."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl.testing import absltest
from flax import serialization

import boostax
from boostax._src.freezing import plan as freezing_lib
from boostax._src.freezing import record as freeze_record
from tests import _utils

# Nine leaves in natural order: three chunks of three, so three groups.
PARAMS = {f"layer_{i}": {"w": jnp.full((2,), 0.1 * (i + 1))} for i in range(9)}
BIG = {f"layer_{i:02d}": {"w": jnp.ones(2)} for i in range(12)}


def loss_fn(params, batch):
    return sum(jnp.sum((p["w"] * batch) ** 2) for p in params.values())


def plan(params=PARAMS, *, micro_steps=1, **settings):
    settings = {
        "groups_number": 3,
        "strategy": 1,
        "freeze_p": 0.7,
        "total_steps": 20,
        **settings,
    }
    return freezing_lib.freezing_factory(micro_steps=micro_steps, **settings)(
        params
    )


def at(freezing, position):
    """The freeze state of a run of `freezing` at `position`."""
    return freezing_lib.FreezeState(
        jnp.int32(position), jnp.asarray(freezing.settings_record)
    )


def first_difference(a, b, updates, wrap=True):
    index = np.arange(updates)
    if wrap:
        da, db = a[index % len(a)], b[index % len(b)]
    else:
        da = a[np.minimum(index, len(a) - 1)]
        db = b[np.minimum(index, len(b) - 1)]
    return int(np.flatnonzero(da != db)[0])


class CheckResumeTest(absltest.TestCase):
    """`check_resume` on freeze states alone (nothing compiled)."""

    def test_the_same_plan_and_position_zero_go_on(self):
        saved = plan(strategy=2, freeze_p=0.5, total_steps=8)
        saved.check_resume(at(saved, 6))
        # Nothing run yet: any plan, any record (init's zeros too).
        other = plan(strategy=0, total_steps=100)
        other.check_resume(at(saved, 0))
        other.check_resume(other.init_state())

    def test_progressive_total_steps_change_is_refused(self):
        # The case: depth 1 from update 4 on, for good; with
        # total_steps 16 it would start at 8, so update 6 thaws group 0.
        saved = plan(strategy=2, freeze_p=0.5, total_steps=8)
        given = plan(strategy=2, freeze_p=0.5, total_steps=16)
        self.assertEqual(saved.depth(5), 1)
        self.assertEqual(given.depth(6), 0)
        with self.assertRaises(ValueError) as raised:
            given.check_resume(at(saved, 6))
        message = str(raised.exception)
        self.assertIn(
            "`grad_freeze.total_steps` was 8, this step's is 16", message
        )
        self.assertIn("saved: [4, 6], this step's: [8, 12]", message)
        self.assertIn("FreezeOut", message)
        self.assertIn(".freezing.stamp(state)", message)
        self.assertIn("trained 6 step(s)", message)
        # Even before any group froze: FreezeOut's horizons moved.
        with self.assertRaisesRegex(ValueError, "total_steps"):
            given.check_resume(at(saved, 2))

    def test_progressive_change_of_nothing_it_reads_goes_on(self):
        # The progressive schedule draws nothing: its seed changes nothing.
        saved = plan(strategy=2, freeze_p=0.5, total_steps=8, seed=0)
        plan(strategy=2, freeze_p=0.5, total_steps=8, seed=3).check_resume(
            at(saved, 7)
        )

    def test_interval_extended_goes_on_until_the_past_differs(self):
        saved = plan(strategy=1, total_steps=10)
        given = plan(strategy=1, total_steps=40)
        # Before the shorter sequence's end the sequences agree.
        np.testing.assert_array_equal(
            saved.sequence, given.sequence[: len(saved.sequence)]
        )
        given.check_resume(at(saved, len(saved.sequence)))
        # Past it the saved run read its sequence again (wrapped): the
        # first update whose depth differs is where the past changes.
        first = first_difference(saved.sequence, given.sequence, 40)
        self.assertGreaterEqual(first, len(saved.sequence))
        given.check_resume(at(saved, first))
        with self.assertRaises(ValueError) as raised:
            given.check_resume(at(saved, first + 1))
        message = str(raised.exception)
        self.assertIn(
            "`grad_freeze.total_steps` was 10, this step's is 40", message
        )
        self.assertIn(f"Update {first}, already run, trained depth", message)

    def test_interval_seed_change_is_refused_once_a_draw_differs(self):
        saved = plan(strategy=1, total_steps=50, seed=0)
        given = plan(strategy=1, total_steps=50, seed=1)
        first = first_difference(saved.sequence, given.sequence, 50)
        given.check_resume(at(saved, first))
        with self.assertRaisesRegex(
            ValueError, "the freeze sequence's `seed` was 0"
        ):
            given.check_resume(at(saved, first + 1))

    def test_accumulation_and_groups_changes_are_refused(self):
        saved = plan(total_steps=20)
        with self.assertRaisesRegex(
            ValueError, "1 micro-step.*grad_accumulation_step.*count 2"
        ):
            plan(total_steps=20, micro_steps=2).check_resume(at(saved, 1))
        big = plan(BIG, total_steps=20)
        with self.assertRaisesRegex(
            ValueError, r"`grad_freeze.param_groups` \(`groups_number`\) was 3"
        ):
            plan(BIG, groups_number=4, total_steps=20).check_resume(at(big, 1))
        # The same settings on another model's leaves.
        with self.assertRaisesRegex(ValueError, "groups' leaves differ"):
            plan(BIG, total_steps=20).check_resume(at(saved, 1))

    def test_a_sequence_given_directly_must_stay_the_same(self):
        groups = ((("a",), ("b",)), (("b",),))
        saved = freezing_lib.Freezing(groups, np.array([0, 1, 0, 1]))
        saved.check_resume(at(saved, 3))
        other = freezing_lib.Freezing(groups, np.array([0, 1, 1, 1]))
        with self.assertRaisesRegex(ValueError, "given directly"):
            other.check_resume(at(saved, 1))

    def test_no_record_and_a_foreign_record_are_refused(self):
        saved = plan()
        zeros = saved.init_state()._replace(position=jnp.int32(5))
        with self.assertRaises(ValueError) as raised:
            saved.check_resume(zeros)
        message = str(raised.exception)
        self.assertIn("at position 5 but records no freezing settings", message)
        self.assertIn("restore_checkpoint", message)
        self.assertIn(".freezing.stamp(state)", message)
        record = np.array(saved.settings_record)
        record[0] = freeze_record.FORMAT + 1
        foreign = freezing_lib.FreezeState(jnp.int32(5), jnp.asarray(record))
        with self.assertRaisesRegex(ValueError, "another format"):
            saved.check_resume(foreign)

    def test_abstract_states_are_not_compared(self):
        saved = plan()
        shapes = jax.eval_shape(lambda: at(saved, 5))
        plan(total_steps=40, seed=9).check_resume(shapes)

    def test_the_record_reads_back(self):
        freezing = plan(strategy=2, freeze_p=0.3, total_steps=1234, seed=7)
        record = freeze_record._read(freezing.settings_record)
        self.assertEqual(record.settings, freezing.settings)
        self.assertEqual(record.micro_steps, 1)
        self.assertFalse(record.wrap)
        self.assertEqual(record.sequence[0], len(freezing.sequence))


def auto_step(**grad_freeze):
    config = {
        "boost": {"mode": "manual", "less_bn": False},
        "grad_freeze": {"param_groups": 3, **grad_freeze},
    }
    return boostax.auto_boost(
        "O1", config, optimizer=optax.sgd(0.1), loss_fn=loss_fn
    )


def train(ts, state, positions):
    depths = []
    for i in positions:
        state, metrics = ts(state, jnp.float32(1 + 0.1 * i))
        depths.append(int(metrics["frozen_groups"]))
    return state, depths


class ResumeTest(absltest.TestCase):
    """The train step's check, through a checkpoint's restore."""

    def test_progressive_resume_with_another_total_steps_raises(self):
        short = auto_step(freeze_type=2, freeze_p=0.5, total_steps=8)
        saved, depths = train(short, short.init(PARAMS), range(6))
        self.assertEqual(depths, [0, 0, 0, 0, 1, 1])  # group 0 frozen
        longer = auto_step(freeze_type=2, freeze_p=0.5, total_steps=16)
        template = longer.init(PARAMS)
        restored = _utils.orbax_round_trip(saved, template)
        with self.assertRaisesRegex(
            ValueError, "`grad_freeze.total_steps` was 8, this step's is 16"
        ):
            longer(restored, jnp.float32(1.6))
        # Flax's restore into the template: the same refusal.
        restored = serialization.from_bytes(
            template, serialization.to_bytes(saved)
        )
        with self.assertRaisesRegex(ValueError, "total_steps"):
            longer(restored, jnp.float32(1.6))
        # Adopting the new schedule on purpose: position 6 trains depth 0
        # again (the thaw the check warns of), and the record is the new
        # plan's.
        adopted = longer.plan(restored.params).freezing.stamp(restored)
        new, depths = train(longer, adopted, [6])
        self.assertEqual(depths, [0])
        np.testing.assert_array_equal(
            new.algorithms.freeze.settings,
            longer.freezing.settings_record,
        )

    def test_interval_extended_resumes_as_the_uninterrupted_run(self):
        longer = auto_step(freeze_type=1, total_steps=40)
        uninterrupted, depths = train(longer, longer.init(PARAMS), range(9))
        self.assertGreater(max(depths), 0)  # some steps froze
        short = auto_step(freeze_type=1, total_steps=20)
        saved, _ = train(short, short.init(PARAMS), range(5))
        restored = _utils.orbax_round_trip(saved, longer.init(PARAMS))
        resumed, rest = train(longer, restored, range(5, 9))
        self.assertEqual(rest, depths[5:])
        _utils.assert_trees_equal(resumed, uninterrupted)

        # A checkpoint without the record (saved before boostax wrote it):
        # the restore keeps the template's zeros, and the step asks.
        legacy = serialization.to_state_dict(saved)
        template = longer.init(PARAMS)
        legacy["algorithms"]["freeze"]["settings"] = np.asarray(
            template.algorithms.freeze.settings
        )
        restored = serialization.from_state_dict(template, legacy)
        with self.assertRaisesRegex(ValueError, "records no freezing settings"):
            longer(restored, jnp.float32(1.5))
        # Told it ran this plan (its past is the same): it goes on as the
        # uninterrupted run.
        stamped = longer.freezing.stamp(restored)
        resumed, _ = train(longer, stamped, range(5, 9))
        _utils.assert_trees_equal(resumed, uninterrupted)


if __name__ == "__main__":
    absltest.main()
