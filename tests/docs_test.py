# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The documentation site builds without a warning and documents the API.

One build (`sphinx-build -W --keep-going`, the command of docs/conf.py) into
a temporary directory, then checks on its HTML: every name of
`boostax.__all__` and of `boostax.mindspore.__all__` has an entry with its
docstring on an API page, and every method card and notebook is a page of
the site.
"""

import glob
import os
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest

import boostax

try:
    import sphinx  # noqa: F401
except ImportError:
    sphinx = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


@absltest.skipIf(
    sphinx is None,
    "sphinx is not installed: pip install -e '.[docs]' (the test extra has it)",
)
class DocsTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.html = os.path.join(cls._tmp.name, "html")
        cls.build = subprocess.run(
            [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q"]
            + ["-j", "1", "-b", "html"]
            + ["-d", os.path.join(cls._tmp.name, "doctrees"), DOCS, cls.html],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def _built(self):
        if self.build.returncode != 0:
            output = self.build.stdout + self.build.stderr
            self.fail("sphinx-build -W failed:\n" + output)

    def test_builds_without_warnings(self):
        self._built()
        self.assertTrue(os.path.exists(os.path.join(self.html, "index.html")))

    def test_every_public_name_is_documented(self):
        self._built()
        api = ""
        for path in glob.glob(os.path.join(self.html, "api", "*.html")):
            with open(path, encoding="utf-8") as f:
                api += f.read()
        names = [f"boostax.{n}" for n in boostax.__all__] + [
            f"boostax.mindspore.{n}" for n in boostax.mindspore.__all__
        ]
        for name in names:
            # The object's entry, then its description: a paragraph of text.
            entry = re.search(
                rf'<dt [^>]*id="{re.escape(name)}">.*?</dt>\s*<dd>\s*<p>\S',
                api,
                re.DOTALL,
            )
            self.assertIsNotNone(entry, f"{name} is not in docs/api/")

    def test_every_method_card_and_notebook_is_a_page(self):
        self._built()
        pages = [
            os.path.join("methods", os.path.basename(p)[: -len(".md")])
            for p in glob.glob(os.path.join(DOCS, "methods", "*.md"))
        ] + [
            os.path.join("notebooks", os.path.basename(p)[: -len(".ipynb")])
            for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))
        ]
        self.assertGreaterEqual(len(pages), 2)
        for page in pages:
            self.assertTrue(
                os.path.exists(os.path.join(self.html, page + ".html")), page
            )


if __name__ == "__main__":
    absltest.main()
