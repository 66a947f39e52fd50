# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""docs/checkpointing.md's save-failure patterns report the error and exit.

A process whose checkpoint directory stops being writable between saves
(tests/_checkpoint_failure_worker.py) must end with the save's error and
exit status 1, promptly: with Orbax's plain asynchronous pattern it never
exits (see the worker's docstring), so each run has a timeout.
"""

import os
import subprocess
import sys
import tempfile

from absl.testing import absltest, parameterized

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 120  # s: the worker takes 3-10 s; the plain pattern hangs 20 min


class CheckpointFailureTest(parameterized.TestCase):
    @parameterized.parameters("async", "sync", "snapshot")
    def test_a_failed_save_is_reported_and_the_process_exits(self, saves):
        ckpt = os.path.join(tempfile.mkdtemp(), "ckpt")
        env = {**os.environ, "PYTHONPATH": ROOT}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tests._checkpoint_failure_worker"]
                + ["--ckpt", ckpt, "--saves", saves],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
        except subprocess.TimeoutExpired as e:
            self.fail(f"the process did not exit in {TIMEOUT} s: {e.stderr}")
        self.assertIn("saved 2", done.stdout)
        self.assertNotIn("finished", done.stdout)
        self.assertEqual(done.returncode, 1, done.stderr[-2000:])
        self.assertIn("NotADirectoryError", done.stderr)


if __name__ == "__main__":
    absltest.main()
