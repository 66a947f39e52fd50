# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""boostax and JAX's private modules: none is imported with boostax.

`boostax.measure.saved_activations` (and through it `step_bytes`, `cost_report`)
reads ``jax._src.ad_checkpoint.saved_residuals``; a JAX release that moves
it must break those functions, with a message, not ``import boostax``.
"""

import os
import subprocess
import sys
import tomllib

import jax
from absl.testing import absltest
from packaging.requirements import Requirement

from boostax._src.measure import step_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a fresh interpreter: JAX without the private function, then boostax.
WITHOUT_SAVED_RESIDUALS = """
import jax._src.ad_checkpoint as private
del private.saved_residuals  # as a JAX release that moved it
import jax.numpy as jnp
import boostax
hlo = "%a = f32[4]{0} all-reduce(f32[4]{0} %g), replica_groups={{0,1}}"
assert boostax.measure.collective_bytes(hlo) == (16.0, {"all-reduce": 1})
try:
    boostax.measure.saved_activations(lambda w: jnp.sum(w**2), jnp.ones(3))
except ImportError as e:
    print(e)
else:
    raise AssertionError("saved_activations ran without saved_residuals")
"""


class PrivateApiTest(absltest.TestCase):
    def test_import_works_without_the_private_function(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [ROOT] + [p for p in [env.get("PYTHONPATH")] if p]
        )
        env["JAX_PLATFORMS"] = "cpu"
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_SAVED_RESIDUALS],
            env=env,
            capture_output=True,
            text=True,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        message = done.stdout
        # What is missing, in which JAX, and which JAX versions work.
        self.assertIn("jax._src.ad_checkpoint.saved_residuals", message)
        self.assertIn(f"JAX {jax.__version__}", message)
        self.assertIn(f"jax{step_bytes.SUPPORTED_JAX}", message)

    def test_pyproject_bounds_jax_by_the_supported_range(self):
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            dependencies = tomllib.load(f)["project"]["dependencies"]
        (jax_req,) = [
            Requirement(d) for d in dependencies if Requirement(d).name == "jax"
        ]
        supported = Requirement("jax" + step_bytes.SUPPORTED_JAX).specifier
        self.assertEqual(jax_req.specifier, supported)
        # An upper bound, and the JAX the suite runs on lies inside it.
        self.assertTrue(any(s.operator in ("<", "<=", "==") for s in supported))
        self.assertIn(jax.__version__, supported)


if __name__ == "__main__":
    absltest.main()
