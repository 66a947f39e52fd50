# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The data-parallel step across 2 processes x 4 CPU devices (jax.distributed)
gives the params of one process with 8 devices: AdaSum on a flat and a node
mesh, and the sharded optimizer state (ZeRO-1), with and without gradient
accumulation."""

import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
from absl.testing import absltest

from tests import _multihost_worker, conftest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MultiHostTest(absltest.TestCase):
    def test_two_processes_match_one(self):
        env = dict(os.environ)
        # The suite's compile flags, so that both sides compute alike.
        env["XLA_FLAGS"] = " ".join(
            ["--xla_force_host_platform_device_count=4"]
            + list(conftest.COMPILE_FAST_FLAGS)
        )
        env["PYTHONPATH"] = os.path.abspath(ROOT)
        address = f"127.0.0.1:{_free_port()}"
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "params.npz")
            workers = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests._multihost_worker",
                        address,
                        "2",
                        str(i),
                        out,
                    ],
                    env=env,
                    cwd=os.path.abspath(ROOT),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for i in range(2)
            ]
            logs = [w.communicate(timeout=300)[0] for w in workers]
            for worker, log in zip(workers, logs, strict=True):
                self.assertEqual(worker.returncode, 0, log)
            result = dict(np.load(out))
        # Process 0's devices come first: its half of the batch is the first.
        np.testing.assert_array_equal(
            result["flat:processes"], [[0, 0, 0, 0, 1, 1, 1, 1]]
        )
        # One node per process: AdaSum runs across the processes.
        np.testing.assert_array_equal(
            result["nodes:processes"], [[0, 0, 0, 0], [1, 1, 1, 1]]
        )
        # The same training in this one process with 8 devices.
        expected = _multihost_worker.train(4, slice(None))
        self.assertEqual(set(result), set(expected))
        self.assertIn("sharded_accumulation:loss", expected)
        for key, value in expected.items():
            if key.endswith(":processes"):
                continue
            if key.endswith(":loss"):
                np.testing.assert_allclose(result[key], value, rtol=1e-6)
            else:
                np.testing.assert_allclose(
                    result[key], value, rtol=1e-6, atol=1e-7, err_msg=key
                )


if __name__ == "__main__":
    absltest.main()
