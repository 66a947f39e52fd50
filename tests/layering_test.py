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
        "compat",
        "config",
        "cost",
        "data_parallel",
        "objectives",
        "train_step",
    }
)
# Modules every other one may use: they import nothing from boostax.
LEAVES = ("tree_utils", "validation", "pca_file")


def _imports(module: str) -> set[str]:
    """The `boostax._src` modules `module` imports (at any depth of code)."""
    with open(os.path.join(SRC, module + ".py")) as f:
        tree = ast.parse(f.read())
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
        # One concept per module. The step builder and the MindSpore API
        # are still over the limit (issue 21 splits them next).
        exempt = {"compat.py", "train_step.py"}
        for name in sorted(os.listdir(SRC)):
            if not name.endswith(".py") or name in exempt:
                continue
            with open(os.path.join(SRC, name)) as f:
                lines = sum(1 for _ in f)
            self.assertLessEqual(lines, 750, name)


if __name__ == "__main__":
    absltest.main()
