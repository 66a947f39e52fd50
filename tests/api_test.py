# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for the public API of `boostax`."""

from absl.testing import absltest

import boostax


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


if __name__ == "__main__":
    absltest.main()
