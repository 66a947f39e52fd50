# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Tests for `boostax._src.dim_reduce.trajectory` and the modules under it."""

import io
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax.flatten_util import ravel_pytree

from boostax._src.dim_reduce import pca, pca_file, trajectory
from boostax._src.dim_reduce import snapshots as snapshots_lib

# Subspace tolerances: the randomized SVD with one power iteration and
# k + 10 random vectors is exact to ~1e-5 when S <= k + 10; the looser bound
# leaves room for the general case.
_EXACT_TOL = 1e-5
_RANDOMIZED_TOL = 1e-3


class _Fields(NamedTuple):
    z: jax.Array
    a: jax.Array


def _params(shift=0.0):
    return {
        "dense": {"kernel": jnp.full((3, 2), shift), "bias": jnp.arange(2.0)},
        "scale": jnp.asarray([1.0 + shift], jnp.bfloat16),
    }


def _low_rank(n_samples=40, n_features=300, rank=5, noise=1e-3, seed=0):
    """Snapshots on a rank-`rank` affine subspace plus small noise."""
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(n_features, rank)))
    scales = np.geomspace(10.0, 1.0, rank)
    coords = rng.normal(size=(n_samples, rank)) * scales
    offset = rng.normal(size=n_features)
    data = offset + coords @ basis.T
    return data + noise * rng.normal(size=data.shape)


def _reference_components(data, k):
    """Top-k right singular vectors of the centered data (float64)."""
    x = np.asarray(data, np.float64)
    x = x - x.mean(axis=0)
    return np.linalg.svd(x, full_matrices=False)[2][:k]


def _projector_error(a, b):
    """Spectral norm of the difference of the projectors onto two row spaces."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.linalg.norm(a.T @ a - b.T @ b, ord=2)


class FlattenTest(absltest.TestCase):
    def test_order_matches_ravel_pytree(self):
        params = _params(0.5)
        vector, _ = snapshots_lib.flatten_params(params)
        expected, _ = ravel_pytree(
            jax.tree.map(lambda x: x.astype(jnp.float32), params)
        )
        self.assertEqual(vector.dtype, jnp.float32)
        np.testing.assert_array_equal(vector, expected)

    def test_round_trip_keeps_dtypes(self):
        params = _params(0.5)
        vector, unravel = snapshots_lib.flatten_params(params)
        restored = jax.jit(unravel)(vector)
        self.assertEqual(
            jax.tree.structure(restored), jax.tree.structure(params)
        )
        for got, want in zip(
            jax.tree.leaves(restored), jax.tree.leaves(params), strict=True
        ):
            self.assertEqual(got.dtype, want.dtype)
            np.testing.assert_array_equal(got, want)

    def test_unravel_rejects_wrong_length(self):
        _, unravel = snapshots_lib.flatten_params(_params())
        with self.assertRaisesRegex(ValueError, r"shape \(9,\)"):
            unravel(jnp.zeros(3))


class TrajectoryTest(parameterized.TestCase):
    def test_ring_buffer_keeps_last_in_order(self):
        traj = snapshots_lib.Trajectory(capacity=3)
        self.assertEqual(len(traj), 0)
        self.assertIsNone(traj.size)
        for i in range(5):
            traj.record(_params(float(i)))
        self.assertLen(traj, 3)
        self.assertEqual(traj.size, 9)
        expected = np.stack(
            [
                snapshots_lib.flatten_params(_params(float(i)))[0]
                for i in (2, 3, 4)
            ]
        )
        snapshots = traj.snapshots
        self.assertEqual(snapshots.dtype, np.float32)
        np.testing.assert_array_equal(snapshots, expected)

    def test_partial_buffer(self):
        traj = snapshots_lib.Trajectory(capacity=4)
        traj.record(_params(1.0))
        traj.record(_params(2.0))
        np.testing.assert_array_equal(traj.snapshots[:, 0], [0.0, 0.0])
        np.testing.assert_array_equal(traj.snapshots[:, 2], [1.0, 2.0])

    def test_structure_mismatch_names_both(self):
        traj = snapshots_lib.Trajectory(capacity=2)
        traj.record(_params())
        with self.assertRaisesRegex(ValueError, r"'extra'.*the first was.*"):
            traj.record({**_params(), "extra": jnp.zeros(1)})
        bad_shape = {**_params(), "scale": jnp.ones((1, 1), jnp.bfloat16)}
        with self.assertRaisesRegex(ValueError, r"\(1, 1\).*the first.*\(1,\)"):
            traj.record(bad_shape)

    @parameterized.parameters(
        (0, ValueError),
        (-1, ValueError),
        (2.5, TypeError),
        (True, TypeError),
        (None, TypeError),
    )
    def test_bad_capacity(self, capacity, error):
        with self.assertRaisesRegex(error, "`capacity` must be an int >= 1"):
            snapshots_lib.Trajectory(capacity)


class PCATest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("exact_wide", False, 40, 300, _EXACT_TOL),
        ("randomized_wide", True, 40, 300, _RANDOMIZED_TOL),
        ("exact_tall", False, 60, 30, _EXACT_TOL),
        ("randomized_tall", True, 60, 30, _RANDOMIZED_TOL),
    )
    def test_subspace_matches_svd(self, randomized, n_samples, n_features, tol):
        data = _low_rank(n_samples, n_features).astype(np.float32)
        p = pca.pca_components(data, 5, randomized=randomized)
        self.assertEqual(p.shape, (5, n_features))
        self.assertEqual(p.dtype, np.float32)
        np.testing.assert_allclose(p @ p.T, np.eye(5), atol=1e-5)
        self.assertLess(
            _projector_error(p, _reference_components(data, 5)), tol
        )

    def test_randomized_general_case(self):
        # More snapshots than k + oversampling: the range finder is no
        # longer exact, the power iteration carries it.
        data = _low_rank(80, 200, rank=5, noise=1e-2, seed=3)
        p = pca.pca_components(data, 5, oversampling=3)
        self.assertLess(
            _projector_error(p, _reference_components(data, 5)),
            _RANDOMIZED_TOL,
        )

    def test_deterministic_and_sign_convention(self):
        data = _low_rank()
        a = pca.pca_components(data, 5, seed=7)
        b = pca.pca_components(data, 5, seed=7)
        np.testing.assert_array_equal(a, b)
        exact = pca.pca_components(data, 5, randomized=False)
        rows = np.arange(5)
        for p in (a, exact):
            self.assertTrue((p[rows, np.argmax(np.abs(p), axis=1)] > 0).all())
        # Well-separated directions, same signs: the rows themselves agree.
        np.testing.assert_allclose(a, exact, atol=1e-3)

    def test_trajectory_input_and_full_rank(self):
        traj = snapshots_lib.Trajectory(capacity=4)
        rng = np.random.default_rng(0)
        for _ in range(4):
            traj.record(jnp.asarray(rng.normal(size=10), jnp.float32))
        # k = S: the centered data has rank S - 1; rows stay orthonormal.
        for randomized in (True, False):
            p = pca.pca_components(traj, 4, randomized=randomized)
            np.testing.assert_allclose(p @ p.T, np.eye(4), atol=1e-5)

    def test_too_few_snapshots_names_both_counts(self):
        data = np.zeros((20, 50), np.float32)
        with self.assertRaisesRegex(
            ValueError, "n_components=32 needs at least 32 snapshots, got 20"
        ):
            pca.pca_components(data, 32)

    def test_bad_arguments(self):
        data = _low_rank(10, 8)
        with self.assertRaisesRegex(ValueError, "N=8"):
            pca.pca_components(data, 9)
        with self.assertRaisesRegex(ValueError, "n_components"):
            pca.pca_components(data, 0)
        with self.assertRaisesRegex(ValueError, r"\(S, N\)"):
            pca.pca_components(data[0], 1)
        with self.assertRaisesRegex(ValueError, "non-finite"):
            pca.pca_components(np.full((3, 4), np.nan), 1)

    def test_explained_variance_ratio(self):
        data = _low_rank()
        s = np.linalg.svd(data - data.mean(axis=0), compute_uv=False)
        ratio = pca.explained_variance_ratio(data, 5)
        np.testing.assert_allclose(ratio, s[:5] ** 2 / np.sum(s**2), rtol=1e-8)
        self.assertGreater(ratio.sum(), 0.999)


class OrbaxTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.root = os.path.join(cls._tmp.name, "ckpts")
        # Steps 0, 2, ..., 10: name order would put 10 before 2.
        cls.steps = list(range(0, 12, 2))
        for step in cls.steps:
            snapshots_lib.save_snapshot(cls.root, step, _params(float(step)))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def _expected(self):
        return np.stack(
            [
                snapshots_lib.flatten_params(_params(float(s)))[0]
                for s in self.steps
            ]
        )

    def test_load_in_step_order(self):
        data = snapshots_lib.load_trajectory(self.root)
        self.assertEqual(data.dtype, np.float32)
        np.testing.assert_array_equal(data, self._expected())

    def test_load_with_like(self):
        like = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _params()
        )
        data = snapshots_lib.load_trajectory(self.root, like=like)
        np.testing.assert_array_equal(data, self._expected())

    def test_like_fixes_the_order_of_custom_nodes(self):
        # Without `like` a NamedTuple restores as a dict with sorted keys,
        # which flattens in another order.
        params = _Fields(z=jnp.zeros(2), a=jnp.ones(3))
        root = os.path.join(self._tmp.name, "named")
        snapshots_lib.save_snapshot(root, 0, params)
        vector, _ = snapshots_lib.flatten_params(params)
        np.testing.assert_array_equal(
            snapshots_lib.load_trajectory(root, like=params)[0], vector
        )
        np.testing.assert_array_equal(
            snapshots_lib.load_trajectory(root)[0], [1, 1, 1, 0, 0]
        )

    def test_pca_matrix_from_weight_load_dir(self):
        p = trajectory.pca_matrix(2, weight_load_dir=self.root, like=_params())
        saved = os.path.join(self.root, trajectory.PCA_MAT_TEMP_NAME)
        np.testing.assert_array_equal(np.load(saved), p)
        expected = pca.pca_components(self._expected(), 2)
        np.testing.assert_array_equal(p, expected)

    def test_steps_must_increase(self):
        with self.assertRaisesRegex(ValueError, "Step 4 was not saved"):
            snapshots_lib.save_snapshot(self.root, 4, _params())

    def test_plain_checkpoints_by_name(self):
        import orbax.checkpoint as ocp

        root = os.path.join(self._tmp.name, "plain")
        checkpointer = ocp.StandardCheckpointer()
        for name, shift in (("b", 2.0), ("a", 1.0)):
            checkpointer.save(os.path.join(root, name), _params(shift))
        checkpointer.wait_until_finished()
        checkpointer.close()
        os.makedirs(os.path.join(root, "logs"))  # not a checkpoint: skipped
        data = snapshots_lib.load_trajectory(root)
        np.testing.assert_array_equal(data[:, 2], [1.0, 2.0])

    def test_bad_directory(self):
        empty = os.path.join(self._tmp.name, "empty")
        os.makedirs(empty)
        a_file = os.path.join(self._tmp.name, "file.txt")
        open(a_file, "w").close()
        missing = os.path.join(self._tmp.name, "missing")
        for path in (None, missing, a_file):
            with self.assertRaisesRegex(
                ValueError, f"weight_load_dir: {path!r} is None / not exists"
            ):
                snapshots_lib.load_trajectory(path)
        with self.assertRaisesRegex(ValueError, f"{empty!r} holds no Orbax"):
            snapshots_lib.load_trajectory(empty)


class PCAMatrixFileTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(self.dir, "pca.npy")

    def test_save_then_load(self):
        matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
        pca_file.save_pca_matrix(self.path, matrix)
        self.assertEqual(os.listdir(self.dir), ["pca.npy"])  # no temp file
        loaded = pca_file.load_pca_matrix(self.path, timeout=0)
        np.testing.assert_array_equal(loaded, matrix)
        self.assertEqual(loaded.dtype, np.float32)

    def test_missing_file_times_out(self):
        start = time.monotonic()
        with self.assertRaisesRegex(TimeoutError, r"0\.3 s.*pca\.npy") as cm:
            pca_file.load_pca_matrix(self.path, timeout=0.3, poll_interval=0.05)
        self.assertLess(time.monotonic() - start, 0.3 + 1.0)
        self.assertIsInstance(cm.exception, RuntimeError)  # as MindSpore

    def test_waits_for_a_late_file(self):
        matrix = np.eye(2, 4, dtype=np.float32)

        def write_later():
            time.sleep(0.2)
            pca_file.save_pca_matrix(self.path, matrix)

        writer = threading.Thread(target=write_later)
        writer.start()
        try:
            loaded = pca_file.load_pca_matrix(
                self.path, timeout=5, poll_interval=0.05
            )
        finally:
            writer.join()
        np.testing.assert_array_equal(loaded, matrix)

    @parameterized.parameters(-1.0, math.nan, True, "1")
    def test_bad_timeout(self, timeout):
        with self.assertRaisesRegex(ValueError, "timeout"):
            pca_file.load_pca_matrix(self.path, timeout=timeout)

    def test_pca_matrix_saves_then_loads(self):
        data = _low_rank(12, 30)
        p = trajectory.pca_matrix(4, pca_mat_path=self.path, snapshots=data)
        np.testing.assert_array_equal(p, pca.pca_components(data, 4))
        np.testing.assert_array_equal(np.load(self.path), p)
        again = trajectory.pca_matrix(
            4, pca_mat_path=self.path, like=jnp.zeros(30)
        )
        np.testing.assert_array_equal(again, p)

    def test_pca_matrix_shape_mismatch(self):
        pca_file.save_pca_matrix(self.path, np.zeros((4, 30), np.float32))
        with self.assertRaisesRegex(
            ValueError, r"\(4, 30\), expected \(4, 31\)"
        ):
            trajectory.pca_matrix(4, pca_mat_path=self.path, like=jnp.zeros(31))
        with self.assertRaisesRegex(ValueError, r"expected \(3, N\)"):
            trajectory.pca_matrix(3, pca_mat_path=self.path)

    def test_pca_matrix_needs_a_source(self):
        with self.assertRaisesRegex(ValueError, "snapshots.*weight_load_dir"):
            trajectory.pca_matrix(4)
        with self.assertRaisesRegex(ValueError, "snapshots.*weight_load_dir"):
            trajectory.pca_matrix(4, pca_mat_path=self.path)  # not there
        with self.assertRaisesRegex(ValueError, r"\.npy file"):
            trajectory.pca_matrix(4, pca_mat_path=self.dir, snapshots=[[0.0]])
        with self.assertRaisesRegex(ValueError, "None / not exists"):
            trajectory.pca_matrix(4, weight_load_dir=self.path)

    def _npy_bytes(self, matrix):
        buffer = io.BytesIO()
        np.save(buffer, matrix)
        return buffer.getvalue()

    def _write(self, data, mode="wb"):
        with open(self.path, mode) as f:
            f.write(data)

    @parameterized.named_parameters(
        ("half_the_data", 0.5, r"\d+ bytes where its header \(128 bytes: "),
        ("half_the_header", 0.02, r"\d+ bytes whose \.npy header does not"),
        ("empty", 0.0, r"0 bytes whose \.npy header does not parse"),
    )
    def test_incomplete_file_is_not_read(self, fraction, seen):
        # A non-atomic writer (np.save to the path, cp) makes the file
        # appear before it is complete.
        data = self._npy_bytes(np.eye(4, 30, dtype=np.float32))
        self._write(data[: int(fraction * len(data))])
        with self.assertRaisesRegex(
            pca_file.PCAMatrixTimeoutError,
            f"Waited 0 s for the PCA matrix {self.path!r} to be complete, "
            f"and it stayed incomplete or unreadable: the last check saw "
            f"{seen}",
        ) as cm:
            pca_file.load_pca_matrix(self.path, timeout=0)
        if fraction == 0.5:
            self.assertIn(f"needs {len(data)}", str(cm.exception))
        # pca_matrix (MindSpore's "the file exists: load it") waits too.
        with self.assertRaisesRegex(TimeoutError, "stayed incomplete"):
            trajectory.pca_matrix(4, pca_mat_path=self.path, timeout=0)

    def test_waits_for_a_non_atomic_writer(self):
        matrix = pca.pca_components(_low_rank(12, 300), 4)
        data = self._npy_bytes(matrix)
        self._write(data[:200])  # the header and a few entries

        def finish_later():
            time.sleep(0.2)
            self._write(data[200:], mode="ab")

        writer = threading.Thread(target=finish_later)
        writer.start()
        try:
            loaded = pca_file.load_pca_matrix(
                self.path, timeout=5, poll_interval=0.02
            )
        finally:
            writer.join()
        np.testing.assert_array_equal(loaded, matrix)

    def test_a_file_that_is_not_npy_fails_at_once(self):
        # A writer writes the .npy magic string first: a file starting with
        # other bytes, or longer than its header says, never completes.
        self._write(b"not a .npy file at all")
        start = time.monotonic()
        with self.assertRaisesRegex(
            ValueError,
            r"pca\.npy' is not a valid \.npy file and cannot become one: 22 "
            r"bytes starting with b'not a ', not the \.npy magic string",
        ):
            pca_file.load_pca_matrix(self.path, timeout=30)
        self.assertLess(time.monotonic() - start, 5)
        self._write(self._npy_bytes(np.eye(4, 30, dtype=np.float32)) + b"xx")
        with self.assertRaisesRegex(ValueError, r"610 bytes .* needs 608"):
            pca_file.load_pca_matrix(self.path, timeout=30)

    def test_truncated_file_fails_at_once_not_after_the_timeout(self):
        # A writer killed mid-write leaves a file that never completes:
        # unchanged for STALE_SECONDS, it is refused without waiting out
        # MindSpore's 1800 s.
        data = self._npy_bytes(np.eye(4, 30, dtype=np.float32))
        self._write(data[:300])
        old = time.time() - pca_file.STALE_SECONDS - 5
        os.utime(self.path, (old, old))
        start = time.monotonic()
        with self.assertRaisesRegex(
            ValueError,
            r"cannot become one: 300 bytes where its header \(128 bytes: "
            r"shape \(4, 30\), dtype float32\) needs 608, unchanged for "
            r"6[0-9] s \(>= 60 s\): its writer stopped",
        ):
            pca_file.load_pca_matrix(self.path, timeout=1800)
        self.assertLess(time.monotonic() - start, 5)
        # One the writer is still writing (modified just now) is waited for.
        self._write(data[:300])
        with self.assertRaisesRegex(
            pca_file.PCAMatrixTimeoutError, "stayed incomplete"
        ):
            pca_file.load_pca_matrix(self.path, timeout=0.1, poll_interval=0.02)

    def test_numpy_errors_name_the_path(self):
        np.save(self.path, np.array([1.0, None]), allow_pickle=True)
        with self.assertRaisesRegex(
            ValueError,
            f"Could not load the PCA matrix {self.path!r}: ValueError: "
            "Object arrays cannot be loaded when allow_pickle=False",
        ):
            pca_file.load_pca_matrix(self.path, timeout=0)

    def test_missing_file_says_it_never_appeared(self):
        with self.assertRaisesRegex(
            pca_file.PCAMatrixTimeoutError,
            r"and it did not appear \(no file at that path",
        ):
            pca_file.load_pca_matrix(self.path, timeout=0)

    @parameterized.named_parameters(
        ("nan", "nan", r"must be finite, but rows \[1\] \(1 of 4\)"),
        ("zero_row", "zero", r"must have unit rows, but rows \[3\]"),
        (
            "scaled",
            "scaled",
            r"must have orthonormal rows .* = 3 > 0\.001 \(row 0",
        ),
    )
    def test_pca_matrix_refuses_a_bad_file(self, kind, message):
        p = pca.pca_components(_low_rank(12, 30), 4)
        if kind == "nan":
            p[1, 5] = np.nan
        elif kind == "zero":
            p[3] = 0.0
        else:
            p[0] *= 2.0
        pca_file.save_pca_matrix(self.path, p)
        with self.assertRaisesRegex(
            ValueError, f"^The PCA matrix {self.path!r} {message}"
        ) as cm:
            trajectory.pca_matrix(4, pca_mat_path=self.path, like=jnp.zeros(30))
        if kind != "nan":
            self.assertIn("Delete the file", str(cm.exception))

    def test_save_removes_temporaries_of_dead_writers(self):
        # A writer killed (SIGKILL) between creating its temporary file and
        # the rename leaves the file behind.
        script = (
            "import os, signal, sys\n"
            "import numpy as np\n"
            "from boostax._src.dim_reduce import pca_file\n"
            "def save_and_die(f, array):\n"
            "    f.write(b'\\x93NUMPY')\n"
            "    f.flush()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "np.save = save_and_die\n"
            "pca_file.save_pca_matrix(sys.argv[1], np.eye(2, 3))\n"
        )
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        proc = subprocess.Popen(
            [sys.executable, "-c", script, self.path],
            cwd=root,
            env=env,
            stderr=subprocess.PIPE,
        )
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, -signal.SIGKILL, stderr)
        (left,) = os.listdir(self.dir)
        self.assertRegex(left, rf"^\.pca\.npy\..+\.{proc.pid}\.\w+\.tmp$")
        # Kept: this live process's file (another thread may be writing
        # it), another host's, another destination's, one without a pid.
        live = pca_file._temp_prefix(self.path) + "live1234.tmp"
        kept = [
            live,
            f".pca.npy.elsewhere.{proc.pid}.abcd1234.tmp",
            left.replace(".pca.npy.", ".other.npy.", 1),
            ".pca.npy.abcd1234.tmp",
        ]
        for name in kept:
            open(os.path.join(self.dir, name), "wb").close()
        matrix = np.eye(2, 3, dtype=np.float32)
        pca_file.save_pca_matrix(self.path, matrix)
        self.assertCountEqual(os.listdir(self.dir), ["pca.npy", *kept])
        np.testing.assert_array_equal(
            pca_file.load_pca_matrix(self.path, timeout=0), matrix
        )

    def test_other_processes_wait_for_process_zero(self):
        data = _low_rank(12, 30)
        expected = pca.pca_components(data, 4)

        def write_later():
            time.sleep(0.2)
            pca_file.save_pca_matrix(self.path, expected)

        with (
            mock.patch.object(jax, "process_count", return_value=2),
            mock.patch.object(jax, "process_index", return_value=1),
        ):
            with self.assertRaises(TimeoutError):
                trajectory.pca_matrix(
                    4, pca_mat_path=self.path, snapshots=data, timeout=0.1
                )
            writer = threading.Thread(target=write_later)
            writer.start()
            try:
                got = trajectory.pca_matrix(
                    4, pca_mat_path=self.path, snapshots=data, timeout=5
                )
            finally:
                writer.join()
        np.testing.assert_array_equal(got, expected)


if __name__ == "__main__":
    absltest.main()
