# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""mypy over the whole package, as configured in pyproject.toml, is clean.

A test rather than a separate CI step, so that the README's test command,
which `.ci/run` runs, is the one place the checks are listed.
"""

import os
import re
import subprocess
import sys

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _package_files() -> int:
    return sum(
        name.endswith(".py")
        for _, _, names in os.walk(os.path.join(ROOT, "boostax"))
        for name in names
    )


class TypeCheckTest(absltest.TestCase):
    def test_mypy_is_clean_over_every_module(self):
        done = subprocess.run(
            [sys.executable, "-m", "mypy"],  # `files` from pyproject.toml
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        checked = re.search(
            r"no issues found in (\d+) source files", done.stdout
        )
        self.assertIsNotNone(checked, done.stdout)
        self.assertEqual(int(checked.group(1)), _package_files())


if __name__ == "__main__":
    absltest.main()
