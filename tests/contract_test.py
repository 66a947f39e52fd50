# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The project's contract: the README's commands, CI and the test devices."""

import os
import re

import jax
from absl.testing import absltest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


def _read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


class ContractTest(absltest.TestCase):
    def test_ci_runs_the_readmes_test_command(self):
        commands = re.findall(r"```bash\n(.+?)\n```", _read("README.md"))
        # The two commands (and the docs build, which names neither).
        (main_job,) = [c for c in commands if "boostax.examples.demo" in c]
        (tests,) = [c for c in commands if "pytest" in c]
        self.assertIn("pip install", main_job)
        ci_lines = _read(".ci", "run").strip().splitlines()
        self.assertEqual(ci_lines[-1], tests)

    def test_eight_simulated_devices(self):
        self.assertLen(jax.devices(), 8)
        self.assertEqual(jax.default_backend(), "cpu")


if __name__ == "__main__":
    absltest.main()
