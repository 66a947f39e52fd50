# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The release artefacts: a wheel and an sdist that install and import."""

import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import venv
import zipfile

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A short script run by the installed wheel: the public API is there, typed,
# and trains a step.
SMOKE = """
import os, sys
import boostax, jax.numpy as jnp, optax
package = os.path.dirname(boostax.__file__)
assert package.startswith(sys.prefix), package
assert os.path.exists(os.path.join(package, "py.typed"))
assert all(hasattr(boostax, name) for name in boostax.__all__)
from boostax import mindspore as boost  # a subpackage, shipped too
assert all(hasattr(boost, name) for name in boost.__all__)
ts = boostax.auto_boost(
    "O0", optimizer=optax.sgd(0.1), loss_fn=lambda w, b: jnp.sum((w - b) ** 2)
)
state, metrics = ts(ts.init(jnp.zeros(3)), jnp.ones(3))
assert float(metrics["loss"]) == 3.0
print("ok", boostax.__version__)
"""


class PackageTest(absltest.TestCase):
    def test_wheel_and_sdist_build_install_and_import(self):
        with tempfile.TemporaryDirectory() as tmp:
            dist = os.path.join(tmp, "dist")
            subprocess.run(
                [sys.executable, "-m", "build", "--no-isolation"]
                + ["--sdist", "--wheel", "--outdir", dist, ROOT],
                check=True,
                capture_output=True,
            )
            files = os.listdir(dist)
            (wheel,) = [f for f in files if f.endswith(".whl")]
            (sdist,) = [f for f in files if f.endswith(".tar.gz")]
            with zipfile.ZipFile(os.path.join(dist, wheel)) as z:
                names = z.namelist()
            self.assertIn("boostax/py.typed", names)
            self.assertIn("boostax/examples/demo.py", names)
            with tarfile.open(os.path.join(dist, sdist)) as t:
                members = {m.split("/", 1)[-1] for m in t.getnames()}
            for path in (
                "LICENSE",
                "README.md",
                "CHANGELOG.md",
                "docs/design.md",
            ):
                self.assertIn(path, members)
            self.assertIn("tests/conftest.py", members)

            # A fresh venv gets the wheel; its dependencies come from this
            # environment's site-packages (a path line in a .pth file: the
            # editable install's own .pth there is not processed).
            env_dir = os.path.join(tmp, "venv")
            venv.create(env_dir, with_pip=False)
            python = os.path.join(env_dir, "bin", "python")
            site = subprocess.run(
                [
                    python,
                    "-c",
                    "import sysconfig; print(sysconfig.get_path('purelib'))",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            with open(os.path.join(site, "deps.pth"), "w") as f:
                f.write(sysconfig.get_path("purelib") + "\n")
            subprocess.run(
                [sys.executable, "-m", "pip", "--python", python, "install"]
                + ["--no-deps", "--no-index", "--quiet"]
                + [os.path.join(dist, wheel)],
                check=True,
                capture_output=True,
            )
            out = subprocess.run(
                [python, "-c", SMOKE],
                check=True,
                capture_output=True,
                text=True,
                cwd=tmp,  # not the repository: the installed package
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            ).stdout
            self.assertTrue(out.startswith("ok "), out)


if __name__ == "__main__":
    absltest.main()
