# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.step.context`: one context for the traced step."""

import dataclasses

from absl.testing import absltest

import boostax
from boostax._src import precision
from boostax._src.step import attributes as step_attributes
from boostax._src.step import context as step_context


class StepContextTest(absltest.TestCase):
    def test_both_readers_see_the_context_set_and_then_the_default(self):
        policy = boostax.precision_policy("O2", "bfloat16")
        self.assertEqual(step_context.current(), step_context.StepContext())
        with step_context.tracing(policy=policy, data_axes=["data"]) as ctx:
            self.assertIs(step_context.current(), ctx)
            self.assertIs(precision.current(), policy)
            self.assertEqual(step_attributes.map_axis_name("batch"), ("data",))
            with step_context.tracing():  # an inner trace: its own context
                self.assertIsNone(precision.current())
                self.assertEqual(step_attributes.map_axis_name("batch"), ())
            self.assertIs(precision.current(), policy)
        self.assertIsNone(precision.current())
        self.assertEqual(step_attributes.map_axis_name("batch"), ())

    def test_the_context_is_frozen(self):
        with self.assertRaises(dataclasses.FrozenInstanceError):
            step_context.current().data_axes = ("data",)  # type: ignore[misc]


if __name__ == "__main__":
    absltest.main()
