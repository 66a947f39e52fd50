# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for the public API of `boostax` and `boostax.mindspore`."""

import collections
import inspect

from absl.testing import absltest, parameterized

import boostax
from boostax import mindspore as boost

# MindSpore's ``mindspore.boost`` object API, exactly: `boostax.mindspore`.
MINDSPORE_NAMES = (
    "AdaSum",
    "AutoBoost",
    "BoostTrainOneStepCell",
    "BoostTrainOneStepWithLossScaleCell",
    "DimReduce",
    "FreezeCells",
    "FreezeOpt",
    "GradientAccumulation",
    "GradientFreeze",
    "GroupLossScaleManager",
    "LessBN",
    "OptimizerProcess",
    "ParameterProcess",
    "freeze_cell",
)


class ApiTest(absltest.TestCase):
    def test_every_name_in_all_imports(self):
        for name in boostax.__all__:
            self.assertTrue(hasattr(boostax, name), name)
        namespace = {}
        exec("from boostax import *", namespace)  # noqa: S102
        self.assertContainsSubset(boostax.__all__, namespace)

    def test_all_is_sorted_and_unique(self):
        self.assertEqual(list(boostax.__all__), sorted(set(boostax.__all__)))

    def test_private_package_is_not_exported(self):
        self.assertFalse(hasattr(boostax, "_src"))
        for name in boostax.__all__:
            self.assertFalse(name.startswith("_"))

    def test_public_callables_have_docstrings(self):
        for name in boostax.__all__:
            obj = getattr(boostax, name)
            if callable(obj):
                self.assertTrue(obj.__doc__, name)

    def test_version(self):
        self.assertRegex(boostax.__version__, r"^\d+\.\d+\.\d+")

    def test_no_two_names_differ_only_by_case(self):
        # `adasum` and `AdaSum` side by side made a port read ambiguously;
        # the MindSpore classes live in `boostax.mindspore` instead.
        by_folded = collections.defaultdict(list)
        for name in boostax.__all__:
            by_folded[name.casefold()].append(name)
        clashes = [names for names in by_folded.values() if len(names) > 1]
        self.assertEmpty(clashes)


class NamespacesApiTest(parameterized.TestCase):
    """`boostax.measure`, `boostax.config` and `boostax.step`: names that a
    training script rarely writes, apart from the top level."""

    @parameterized.parameters("measure", "config", "step")
    def test_is_an_attribute_of_boostax(self, home):
        namespace = getattr(boostax, home)
        self.assertTrue(inspect.ismodule(namespace))
        self.assertTrue(namespace.__doc__)
        names = namespace.__all__
        self.assertEqual(list(names), sorted(set(names)))
        for name in names:
            self.assertTrue(getattr(namespace, name).__doc__, name)
            self.assertNotIn(name, boostax.__all__)

    @parameterized.parameters(
        ("measure", "cost_report"),
        ("measure", "interleaved_timings"),
        ("measure", "ACCELERATORS"),
        ("config", "LessBNSection"),
        ("config", "WeightAveragingSection"),
        ("step", "StepBuilder"),
        ("step", "PlainRecipe"),
    )
    def test_old_spellings_warn_and_name_the_new_home(self, home, name):
        with self.assertWarnsRegex(
            DeprecationWarning, rf"boostax\.{home}\.{name}"
        ):
            moved = getattr(boostax, name)
        self.assertIs(moved, getattr(getattr(boostax, home), name))

    def test_a_name_never_at_the_top_level_does_not_read_there(self):
        with self.assertRaises(AttributeError):
            boostax.TestTimeFlipsSection  # noqa: B018

    def test_an_unknown_name_is_an_attribute_error(self):
        with self.assertRaisesRegex(AttributeError, "no_such_name"):
            boostax.no_such_name  # noqa: B018

    def test_the_top_level_holds_what_training_uses(self):
        # Issue 46's bound on the top-level namespace, as it stands.
        self.assertLessEqual(len(boostax.__all__), 90)


class MindSporeApiTest(absltest.TestCase):
    def test_is_an_attribute_of_boostax(self):
        self.assertIs(boostax.mindspore, boost)
        self.assertTrue(inspect.ismodule(boost))

    def test_all_names_exactly_the_mindspore_object_api(self):
        self.assertEqual(boost.__all__, MINDSPORE_NAMES)
        for name in boost.__all__:
            self.assertTrue(hasattr(boost, name), name)
            self.assertTrue(getattr(boost, name).__doc__, name)
        namespace = {}
        exec("from boostax.mindspore import *", namespace)  # noqa: S102
        self.assertContainsSubset(boost.__all__, namespace)

    def test_not_in_the_top_level_namespace(self):
        for name in MINDSPORE_NAMES:
            self.assertNotIn(name, boostax.__all__)
            self.assertFalse(hasattr(boostax, name), name)

    def test_private_package_is_not_exported(self):
        self.assertFalse(hasattr(boost, "_src"))
        public = {n for n in vars(boost) if not n.startswith("_")}
        self.assertEqual(public, set(MINDSPORE_NAMES))


if __name__ == "__main__":
    absltest.main()
