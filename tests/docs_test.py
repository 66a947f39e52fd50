# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The documentation site builds without a warning and documents the API.

One build (`sphinx-build -W --keep-going`, the command of docs/conf.py) into
a temporary directory, then checks on its HTML: every name of
`boostax.__all__` and of `boostax.mindspore.__all__` has an entry with its
docstring on an API page, and every method card and notebook is a page of
the site.

Without Sphinx, the sources: the README stays a front door (short, its links
resolve, no page merely includes it), docs/design.md names every module,
docs/results.md lists every benchmark, and every page with a `>>>` example
is run as a doctest.
"""

import glob
import os
import re
import subprocess
import sys
import tempfile
import tomllib

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
        names = (
            [f"boostax.{n}" for n in boostax.__all__]
            + [f"boostax.measure.{n}" for n in boostax.measure.__all__]
            + [f"boostax.config.{n}" for n in boostax.config.__all__]
            + [f"boostax.step.{n}" for n in boostax.step.__all__]
            + [f"boostax.mindspore.{n}" for n in boostax.mindspore.__all__]
        )
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


README_MAX_LINES = 250


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _outside_code(text):
    """The lines of a Markdown text outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(text):
    """The heading anchors of a Markdown page, as GitHub and MyST make them."""
    anchors = set()
    for line in _outside_code(text):
        heading = re.match(r"#+ (.+)", line)
        if heading:
            title = heading.group(1).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _doc_pages():
    """docs/**/*.md written by hand (not the build, not the notebook copies)."""
    pages = glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)
    skip = (os.path.join(DOCS, "_build"), os.path.join(DOCS, "notebooks"))
    return sorted(
        os.path.relpath(p, ROOT) for p in pages if not p.startswith(skip)
    )


class DocsSourcesTest(absltest.TestCase):
    def test_readme_is_short(self):
        lines = _read("README.md").splitlines()
        self.assertLessEqual(
            len(lines),
            README_MAX_LINES,
            "README.md is the front door: guides and results go to docs/",
        )

    def test_readme_links_resolve(self):
        readme = _read("README.md")
        links = re.findall(r"\]\(([^)\s]+)\)", "\n".join(_outside_code(readme)))
        relative = [link for link in links if "://" not in link]
        self.assertGreaterEqual(len(relative), 10)
        for link in relative:
            path, _, anchor = link.partition("#")
            target = os.path.join(ROOT, path) if path else None
            if path:
                self.assertTrue(os.path.exists(target), f"README links {link}")
            if anchor:
                page = _read(path) if path else readme
                self.assertIn(anchor, _anchors(page), f"README links {link}")

    def test_no_page_includes_the_readme(self):
        for page in _doc_pages():
            self.assertNotRegex(
                _read(page), r"\{include\}\s+\S*README\.md", page
            )

    def test_design_names_every_module(self):
        design = _read(os.path.join("docs", "design.md"))
        # The layout block under "## Layers": the one layout description.
        layers = design.split("## Layers", 1)[1].split("```text", 1)[1]
        layers = layers.split("```", 1)[0]
        src = os.path.join(ROOT, "boostax", "_src")
        # Each package's modules are named after its folder's line.
        folders = [(src, layers)] + [
            (path, layers.split(f"  {os.path.basename(path)}/", 1)[1])
            for path in sorted(glob.glob(os.path.join(src, "*")))
            if os.path.exists(os.path.join(path, "__init__.py"))
        ]
        for folder, block in folders:
            modules = [
                os.path.basename(p)
                for p in glob.glob(os.path.join(folder, "*.py"))
                if not p.endswith("__init__.py")
            ]
            self.assertNotEmpty(modules)
            for module in modules:
                named = re.search(rf"(?<![\w/]){re.escape(module)}", block)
                self.assertTrue(
                    named, f"docs/design.md's layout does not name {module}"
                )

    def test_results_page_lists_every_benchmark(self):
        results = _read(os.path.join("docs", "results.md"))
        self.assertIn("## Every benchmark", results)
        table = results.split("## Every benchmark", 1)[1]
        for path in glob.glob(os.path.join(ROOT, "benchmarks", "*.py")):
            name = os.path.basename(path)
            if not name.startswith("_"):
                self.assertIn(f"python benchmarks/{name}", table, name)

    def test_every_example_page_is_a_doctest(self):
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            options = tomllib.load(f)["tool"]["pytest"]["ini_options"]
        self.assertIn("--doctest-glob=*.md", options["addopts"].split())
        pages = ["README.md"] + _doc_pages()
        examples = [p for p in pages if re.search(r"^>>> ", _read(p), re.M)]
        self.assertIn("README.md", examples)
        for page in examples:
            self.assertIn(page, options["testpaths"], "not run as a doctest")


if __name__ == "__main__":
    absltest.main()
