# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Every benchmark runs in its --quick mode, so none can rot."""

import glob
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest, parameterized

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks")
SCRIPTS = sorted(
    path
    for path in glob.glob(os.path.join(BENCHMARKS, "*.py"))
    if not os.path.basename(path).startswith("_")
)


class BenchmarksTest(parameterized.TestCase):
    def test_there_are_benchmarks(self):
        self.assertNotEmpty(SCRIPTS)

    @parameterized.named_parameters(
        (os.path.basename(path)[:-3], path) for path in SCRIPTS
    )
    def test_quick_mode(self, script):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            env = dict(os.environ)
            env.pop("XLA_FLAGS", None)  # benchmarks choose their devices
            subprocess.run(
                [sys.executable, script, "--quick", "--out", out],
                check=True,
                env=env,
                timeout=600,
            )
            with open(out, encoding="utf-8") as f:
                result = json.load(f)
        self.assertTrue(result["quick"])
        self.assertIn("environment", result)
        self.assertIn("command", result)


if __name__ == "__main__":
    absltest.main()
