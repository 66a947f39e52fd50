# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The import graph of `boostax._src`: dependencies point down only.

The Optax transforms sit at the bottom: nothing they import, directly or
through another module, may come from the step layer (the train step, the
configuration, the MindSpore API), so they can be read, tested and changed
alone.
"""

import ast
import os

from absl.testing import absltest, parameterized

SRC = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "boostax",
    "_src",
)

TRANSFORMS = (
    "accumulation",
    "adasum",
    "centralization",
    "dim_reduce",
    "freeze_out",
    "freezing",
    "loss_scale",
)
STEP_LAYER = frozenset(
    {
        "auto_boost",
        "config",
        "cost",
        "data_parallel",
        "executables",
        "mindspore",
        "objectives",
        "step_builder",
        "step_factory",
        "train_state",
        "train_step",
    }
)
# A namedtuple's own methods start with an underscore but are public.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})
# Modules every other one may use: they import nothing from boostax.
LEAVES = ("tree_utils", "validation", "pca_file")


def _sources() -> list[str]:
    """Every Python file of `boostax._src`, subpackages included."""
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(SRC)
        for name in names
        if name.endswith(".py")
    )


def _parse(path: str) -> ast.Module:
    with open(path) as f:
        return ast.parse(f.read())


def _imports(module: str) -> set[str]:
    """The `boostax._src` modules `module` imports (at any depth of code)."""
    tree = _parse(os.path.join(SRC, module + ".py"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "boostax._src":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("boostax._src."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("boostax._src."):
                    found.add(alias.name.split(".")[2])
    return found


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for name in _imports(todo.pop()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


class LayeringTest(parameterized.TestCase):
    @parameterized.parameters(*TRANSFORMS)
    def test_transform_imports_nothing_from_the_step_layer(self, module):
        self.assertEmpty(_closure(module) & STEP_LAYER)

    @parameterized.parameters(*LEAVES)
    def test_leaf_imports_nothing_from_boostax(self, module):
        self.assertEmpty(_imports(module))

    def test_no_module_is_too_long(self):
        # One concept per module: none over ~700 lines (adasum.py, the
        # largest, is 710: three reductions and their transform).
        for path in _sources():
            with open(path) as f:
                lines = sum(1 for _ in f)
            self.assertLessEqual(lines, 720, os.path.relpath(path, SRC))

    def test_no_module_uses_another_modules_private_names(self):
        for path in _sources():
            tree = _parse(path)
            modules = set()  # local names bound to boostax modules
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (
                    node.module or ""
                ).startswith("boostax"):
                    for alias in node.names:
                        self.assertFalse(
                            _private(alias.name),
                            f"{path} imports {node.module}.{alias.name}",
                        )
                        modules.add(alias.asname or alias.name)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in modules
                    and _private(node.attr)
                ):
                    self.fail(f"{path} uses {node.value.id}.{node.attr}")


def _private(name: str) -> bool:
    return (
        name.startswith("_")
        and not name.startswith("__")
        and name not in NAMEDTUPLE_API
    )


if __name__ == "__main__":
    absltest.main()
