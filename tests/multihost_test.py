# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The data-parallel step across 2 processes x 4 CPU devices (jax.distributed)
gives the params of one process with 8 devices."""

import os
import socket
import subprocess
import sys
import tempfile

import jax
import numpy as np
import optax
from absl.testing import absltest

import boostax
from tests import conftest
from tests import data_parallel_test as problem

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
        meshes = {
            "flat": (jax.make_mesh((8,), ("data",)), None),
            "nodes": (boostax.node_mesh(4), "local"),
        }
        for name, (mesh, local_axis) in meshes.items():
            ts = boostax.make_train_step(
                optax.adam(1e-2),
                loss_fn=problem.loss_fn,
                data_parallel=boostax.DataParallel(
                    mesh, reduction="adasum", local_axis=local_axis
                ),
            )
            state = ts.init(problem._params())
            for seed in range(3):
                state, metrics = ts(state, problem._batch(seed))
            np.testing.assert_allclose(
                result[f"{name}:loss"], metrics["loss"], rtol=1e-6
            )
            for path, leaf in jax.tree_util.tree_leaves_with_path(state.params):
                key = f"{name}:" + "/".join(k.key for k in path)
                np.testing.assert_allclose(
                    result[key], leaf, rtol=1e-6, atol=1e-7, err_msg=key
                )


if __name__ == "__main__":
    absltest.main()
