# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Every benchmark runs in its --quick mode, so none can rot."""

import glob
import json
import os
import re
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

    def test_device_script_runs_existing_benchmarks(self):
        # benchmarks/device.sh runs on an accelerator host only: check that
        # it parses and that every script and flag it uses exists.
        script = os.path.join(BENCHMARKS, "device.sh")
        subprocess.run(["bash", "-n", script], check=True)
        with open(script, encoding="utf-8") as f:
            commands = [
                line
                for line in f.read().replace("\\\n", " ").splitlines()
                if line.startswith("timeout ")
            ]
        used = {}
        for command in commands:
            name = re.search(r"benchmarks/(\w+)\.py", command).group(1)
            used[name] = set(re.findall(r"(--[a-z][a-z-]*)", command))
        self.assertEqual(set(used), {"speedup", "less_bn", "grad_freeze"})
        for name, flags in used.items():
            helped = subprocess.run(
                [sys.executable, os.path.join(BENCHMARKS, f"{name}.py"), "-h"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            for flag in flags:
                self.assertIn(flag, helped, name)

    @parameterized.named_parameters(
        (os.path.basename(path)[:-3], path) for path in SCRIPTS
    )
    def test_quick_mode(self, script):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            env = dict(os.environ)
            env.pop("XLA_FLAGS", None)  # benchmarks choose their devices
            # The suite's cache (tests/conftest.py): other tests compile
            # some of the same steps.
            cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
            subprocess.run(
                [
                    sys.executable,
                    script,
                    "--quick",
                    "--out",
                    out,
                    "--compilation-cache",
                    cache,
                ],
                check=True,
                env=env,
                timeout=600,
            )
            with open(out, encoding="utf-8") as f:
                result = json.load(f)
        self.assertTrue(result["quick"])
        self.assertIn("environment", result)
        self.assertIn("command", result)
        self.assertEqual(result["compilation_cache_dir"], cache)


if __name__ == "__main__":
    absltest.main()
