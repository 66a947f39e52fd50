# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Sphinx configuration for the boostax documentation site.

Build (from the repository root):

    sphinx-build -W --keep-going -b html docs docs/_build/html

Markdown pages are MyST, notebooks are rendered by MyST-NB from their stored
outputs (never executed here), and the API reference (docs/api/) is
documented by autodoc from the docstrings, one page per group of names.
"""

import os
import shutil
import sys

from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
# Document the working tree's boostax even when it is not installed.
sys.path.insert(0, ROOT)

import boostax  # noqa: E402

logger = logging.getLogger(__name__)

project = "boostax"
author = "The boostax Authors"
copyright = "2026, The boostax Authors"  # noqa: A001
release = version = boostax.__version__

extensions = [
    "myst_nb",  # MyST Markdown pages and Jupyter notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",  # the summary table atop each API page
    "sphinx.ext.napoleon",  # the code's Google-style Args:/Returns:
]

# Notebooks live in ../notebooks, outside this source directory; Sphinx
# reads only files under it. They are copied to docs/notebooks (ignored by
# git) at every build rather than linked: a committed symlink is dropped
# from the sdist by flit and becomes a plain text file on checkouts without
# symlink support, and then the notebooks silently vanish from the site.
# A notebook links a page as GitHub resolves it from notebooks/,
# `../docs/methods/x.md`; the copy, in docs/notebooks/, links `../methods/x.md`.
# The copy keeps the modification time, so an incremental build re-reads
# only the notebooks that changed; copies of deleted notebooks are removed.
_NB_SRC = os.path.join(ROOT, "notebooks")
_NB_DST = os.path.join(DOCS, "notebooks")
os.makedirs(_NB_DST, exist_ok=True)
_notebooks = sorted(f for f in os.listdir(_NB_SRC) if f.endswith(".ipynb"))
for _name in set(os.listdir(_NB_DST)) - set(_notebooks):
    os.remove(os.path.join(_NB_DST, _name))
for _name in _notebooks:
    _src, _dst = os.path.join(_NB_SRC, _name), os.path.join(_NB_DST, _name)
    with open(_src, encoding="utf-8") as f:
        _text = f.read().replace("](../docs/", "](../")
    with open(_dst, "w", encoding="utf-8") as f:
        f.write(_text)
    shutil.copystat(_src, _dst)

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# MyST-NB: render the outputs stored in the notebooks; never execute them.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "dollarmath"]
# Anchors for `page.md#a-heading` links between pages.
myst_heading_anchors = 3

# API reference: each name is documented where it is exported, `boostax.X`,
# a class with its public methods (and `__call__`).
autodoc_default_options = {"members": True, "special-members": "__call__"}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "sphinx_book_theme"
html_title = "boostax"
html_theme_options = {
    "repository_url": "https://github.com/boostax/boostax",
    "use_repository_button": True,
    "path_to_docs": "docs",
    "show_toc_level": 2,
}

# Docstrings write `name` for code, as Markdown does: render it as code, and
# link it when it names a documented object.
default_role = "py:obj"


def _constant_doc(app, what, name, obj, options, lines):
    """Documents a constant (LEVELS, ACCELERATORS, ...) by its `#:` comment.

    A tuple or dict has no docstring of its own, so autodoc would show that
    of `tuple` or `dict`; the comment sits above the definition in
    boostax/_src, not in boostax/__init__.py, which only re-exports it.
    """
    if what != "data":
        return
    short = name.rpartition(".")[2]
    lines[:] = []
    for module in list(sys.modules.values()):
        if module.__name__.startswith("boostax._src.") and (
            vars(module).get(short) is obj
        ):
            docs = ModuleAnalyzer.for_module(module.__name__).find_attr_docs()
            # The defining module has the comment; one importing it has not.
            lines[:] = docs.get(("", short), lines)


def _skip_namedtuple_field(app, what, name, obj, skip, options):
    """Skips NamedTuple fields: their class's Attributes: section has them."""
    if (obj.__doc__ or "").startswith("Alias for field number"):
        return True
    return None


def _check_api_complete(app, env):
    """Fails the build (-W) when a public name is undocumented.

    The public names: those of `boostax.__all__`, of
    `boostax.measure.__all__` (measuring a step), `boostax.config.__all__`
    (the config's sections), `boostax.step.__all__` (a step's parts) and
    of `boostax.mindspore.__all__` (MindSpore's object API).
    """
    documented = env.domains["py"].objects
    namespaces = (boostax.measure, boostax.config, boostax.step)
    for module in (boostax, *namespaces, boostax.mindspore):
        prefix = module.__name__
        missing = [
            n for n in module.__all__ if f"{prefix}.{n}" not in documented
        ]
        if missing:
            logger.warning(
                "%s.__all__ names on no page of docs/api/: %s",
                prefix,
                ", ".join(missing),
            )


def setup(app):
    app.connect("env-check-consistency", _check_api_complete)
    app.connect("autodoc-process-docstring", _constant_doc)
    app.connect("autodoc-skip-member", _skip_namedtuple_field)
