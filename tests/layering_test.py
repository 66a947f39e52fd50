# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The import graph of `boostax._src`: dependencies point down only.

The Optax transforms sit at the bottom: nothing they import, directly or
through another module, may come from the step layer (the train step, the
configuration, the MindSpore API), so they can be read, tested and changed
alone.
"""

import ast
import glob
import json
import os

from absl.testing import absltest, parameterized

PACKAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "boostax"
)
SRC = os.path.join(PACKAGE, "_src")

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
        "train_step_bytes",
    }
)
# A namedtuple's own methods start with an underscore but are public.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})
# Modules every other one may use: they import nothing from boostax.
LEAVES = ("tree_utils", "validation", "pca_file", "step_context")


def _sources() -> list[str]:
    """Every Python file of `boostax._src`, subpackages included."""
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(SRC)
        for name in names
        if name.endswith(".py")
    )


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _parse(path: str) -> ast.Module:
    return ast.parse(_read(path))


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


def _module_names() -> dict[str, str]:
    """``{dotted name: path}`` of every module of the `boostax` package
    (the library, its MindSpore layer and the examples)."""
    found = {}
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, os.path.dirname(PACKAGE))
            parts = parts[: -len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _import_graph() -> dict[str, set[str]]:
    """``{module: the boostax modules it imports}``, imports inside
    functions included (a deferred import still closes a cycle)."""
    modules = _module_names()
    graph = {}
    for module, path in modules.items():
        is_package = path.endswith("__init__.py")
        package = module if is_package else module.rpartition(".")[0]
        edges = set()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    name = f"{base}.{alias.name}"
                    if name in modules:
                        edges.add(name)
                    elif base in modules:
                        edges.add(base)
        edges.discard(module)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


class LayeringTest(parameterized.TestCase):
    @parameterized.parameters(*TRANSFORMS)
    def test_transform_imports_nothing_from_the_step_layer(self, module):
        self.assertEmpty(_closure(module) & STEP_LAYER)

    @parameterized.parameters(*LEAVES)
    def test_leaf_imports_nothing_from_boostax(self, module):
        self.assertEmpty(_imports(module))

    def test_no_import_cycle(self):
        # Library, MindSpore layer and examples: each module can be read
        # (and imported) after the ones it uses, never in a loop.
        graph = _import_graph()
        self.assertIn("boostax._src.validation", graph["boostax._src.cost"])
        self.assertEqual(_cycles(graph), [])

    def test_benchmarks_examples_and_notebooks_use_the_public_api(self):
        root = os.path.dirname(PACKAGE)
        sources = {
            path: _read(path)
            for pattern in ("benchmarks/*.py", "boostax/examples/*.py")
            for path in glob.glob(os.path.join(root, pattern))
        }
        for path in glob.glob(os.path.join(root, "notebooks", "*.ipynb")):
            with open(path, encoding="utf-8") as f:
                cells = json.load(f)["cells"]
            sources[path] = "\n".join(
                "".join(c["source"]) for c in cells if c["cell_type"] == "code"
            )
        self.assertGreater(len(sources), 20)
        for path, text in sources.items():
            # A short message: the file's name, not its text.
            self.assertFalse(
                "boostax._src" in text,
                f"{os.path.relpath(path, root)} imports boostax._src",
            )

    def test_cycle_finder_reports_a_loop(self):
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
        self.assertEqual(_cycles(graph), [["a", "b", "c"]])

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
