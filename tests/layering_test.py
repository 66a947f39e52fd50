# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The modules of `boostax._src`: one concept each, dependencies down only.

Every module states its one concept in `CONCEPTS` (a new module too): code
of another concept goes to the module of that concept, or to a new one.

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


def _in(package: str, concepts: dict[str, str]) -> dict[str, str]:
    """`concepts` of the modules of `boostax._src`'s subpackage `package`."""
    return {f"{package}.{name}": concept for name, concept in concepts.items()}


# Each module of `boostax._src` and the one concept it holds, by feature: a
# subpackage's modules under its name (``step.builder`` is
# ``boostax/_src/step/builder.py``).
_CONFIG = {
    "boost_config": "BoostConfig: levels, modes, a dict read into its sections",
    "components": "a config's sections turned into a step's components",
    "fields": "a config section's keys: kinds, ranges and checks",
    "recipes": "boostax's named presets: config dicts of measured choices",
    "sections": "a BoostConfig's sections: a frozen dataclass each",
}
_STEP = {
    "attributes": "the attributes a model runs with inside a step",
    "batches": "a model batch: its (inputs, targets), checked on the host",
    "builder": "the pure train step: plan, initial state, function",
    "checks": "checks at a step's boundary: is this state its own?",
    "context": "the traced step's context: precision policy, data axes",
    "evaluation": "Evaluation: what a step's state predicts, its vars",
    "executables": "the compiled programs of a step, one per key",
    "factory": "make_train_step: a TrainStep from a model and optimizer",
    "metrics": "the metrics a step reports beside the loss's own",
    "model_errors": "a model's errors in the step, said in boostax's terms",
    "objective_options": "a step's model/loss options, gathered once",
    "objectives": "model adapters: what a train step differentiates",
    "options": "StepOptions: a step's settings beyond model and config",
    "param_reads": "the dtype a loss function reads each parameter in",
    "plan": "StepPlan: what a step builds once it has seen the params",
    "program_schedule": "which program each step runs, and when others compile",
    "programs": "StepPrograms: a TrainStep's programs named, compiled",
    "skip_watch": "runs of skipped steps, noticed without stalling",
    "train_state": "TrainState: everything a step reads and writes",
    "train_step": "TrainStep: a builder's functions run by its programs",
    "weighted_loss": "a loss as a sum and its weight, over the global batch",
}
_LESS_BN = {
    "api": "LessBN's entry points: plan, apply, report, convert",
    "centralization": "gradient centralization, an Optax transform",
    "fan_in": "each kernel's fan-in axes, read from the layer owning it",
    "fn_head": "LessBN's full-normalization classifier head",
    "linen": "LessBN's plan applied to a Linen model (a wrapper)",
    "nnx": "LessBN's plan applied to an NNX model (a rewrite)",
    "patterns": "MindSpore's LessBN patterns, run on a model's graph",
    "plan": "which BatchNorms LessBN removes, and the report why",
    "weights": "trained weights brought into a LessBN model",
}
_FREEZING = {
    "freeze_out": "FreezeOut's learning-rate annealing, an Optax transform",
    "groups": "gradient freezing's nested groups of parameters",
    "masked_update": "updating a subset of the parameters, one state shared",
    "plan": "the plan of a freezing run: groups, sequence, optimizers",
    "record": "gradient freezing's record: may a state resume here?",
    "sequence": "gradient freezing's sequence: the depth of each step",
}
_DIM_REDUCE = {
    "pca": "the PCA of weight snapshots, and what a valid P is",
    "pca_file": "the PCA matrix's .npy file, shared between processes",
    "quasi_newton": "DimReduce: quasi-Newton steps in the PCA subspace",
    "snapshots": "weight snapshots along a run: in memory or on disk",
    "trajectory": "the PCA matrix of a weight trajectory (for DimReduce)",
}
_DISTRIBUTED = {
    "adasum": "AdaSum's Optax transforms: updates or gradients AdaSum'd",
    "adasum_collective": "AdaSum's rule and its shard_map collectives",
    "boxed_variables": "sharding-annotated variables: refused or unboxed",
    "data_parallel": "data-parallel steps on a mesh: averaging or AdaSum",
    "optimizer_sharding": "optimizer state split over the data axes (ZeRO-1)",
    "partitioning": "where the jit engine places the state: specs by rule",
    "placement": "a data-parallel step's specs and placement",
    "split_walk": "the split axis followed through a traced optimizer update",
}
_METHODS = {
    "label_smoothing": "label smoothing: smoothed class targets for a loss",
    "progressive_resizing": "progressive resizing: smaller images first",
    "seq_len_warmup": "sequence-length warm-up: truncated sequences first",
    "test_time_flips": "outputs averaged over flipped and translated images",
    "weight_averaging": "a moving average of the params in the optimizer state",
}
_MEASURE = {
    "accelerators": "accelerators' peak rates, for roofline projections",
    "cost": "CostReport: a boosted step's costs against the plain step",
    "executable_cost": "what one compiled executable costs, read from XLA",
    "hlo_kernels": "the kernels a compiled program launches",
    "state_bytes": "the bytes of a train state each device holds",
    "step_bytes": "the bytes a traced step moves, with their dtypes",
    "timing": "step-time ratios that survive a noisy machine",
    "train_step_bytes": "step_bytes: the bytes of one program of a TrainStep",
}
_MINDSPORE = {
    "accumulation": "MindSpore's GradientAccumulation",
    "adasum": "MindSpore's AdaSum object",
    "auto_boost": "MindSpore's AutoBoost object",
    "dim_reduce": "MindSpore's DimReduce cell",
    "freeze": "MindSpore's GradientFreeze, FreezeOpt, freeze_cell",
    "less_bn": "MindSpore's LessBN cell",
    "loss_scale": "MindSpore's GroupLossScaleManager",
    "processes": "MindSpore's ParameterProcess and OptimizerProcess",
    "train_one_step": "MindSpore's training cells",
}
CONCEPTS = {
    "accumulation": "gradient accumulation: the inner optimizer every k steps",
    "auto_boost": "auto_boost: a config level turned into one TrainStep",
    "flax_interop": "to and from flax.training's TrainState",
    "groups": "parameter groups as label trees (optax.partition's)",
    "jaxpr_walk": "walking a jaxpr's equations, nested programs included",
    "loss_scale": "loss scaling: static, dynamic and per group of layers",
    "model_graph": "a Flax model's layer-level data-flow graph",
    "precision": "mixed precision: the dtype policy of a train step",
    "tree_diff": "where two pytrees differ, for an error message",
    "tree_utils": "generic pytree helpers: names, optimizer-state lookup",
    "user_warnings": "warnings attributed to the user's line",
    "validation": "argument checks shared by every public function",
    "weight_decay": "MindSpore's decoupled weight decay stage and its mask",
    **_in("config", _CONFIG),
    **_in("step", _STEP),
    **_in("less_bn", _LESS_BN),
    **_in("freezing", _FREEZING),
    **_in("dim_reduce", _DIM_REDUCE),
    **_in("distributed", _DISTRIBUTED),
    **_in("methods", _METHODS),
    **_in("measure", _MEASURE),
    **_in("mindspore", _MINDSPORE),
}
# Past this, a module most likely holds more than one concept.
MAX_LINES = 750

TRANSFORMS = (
    "accumulation",
    "distributed.adasum",
    "distributed.adasum_collective",
    "less_bn.centralization",
    "dim_reduce.quasi_newton",
    "freezing.groups",
    "freezing.freeze_out",
    "freezing.plan",
    "loss_scale",
    "freezing.masked_update",
    "methods.weight_averaging",
)
STEP_LAYER = frozenset(
    {
        "auto_boost",
        "step.batches",
        "config.boost_config",
        "config.sections",
        "measure.cost",
        "distributed.data_parallel",
        "distributed.placement",
        "step.executables",
        "mindspore",
        "step.objectives",
        "step.builder",
        "step.evaluation",
        "step.factory",
        "step.programs",
        "step.plan",
        "step.train_state",
        "step.train_step",
        "measure.train_step_bytes",
    }
)
# A namedtuple's own methods start with an underscore but are public.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})
# Modules every other one may use: they import nothing from boostax.
LEAVES = (
    "tree_utils",
    "validation",
    "dim_reduce.pca_file",
    "step.context",
    "jaxpr_walk",
)


def _sources() -> list[str]:
    """Every Python file of `boostax._src`, subpackages included."""
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(SRC)
        for name in names
        if name.endswith(".py")
    )


def _concept_modules() -> dict[str, str]:
    """``{name in CONCEPTS: path}`` of every module of `boostax._src`
    (``mindspore.x`` for its subpackage's), package files aside."""
    found = {}
    for path in _sources():
        if os.path.basename(path) == "__init__.py":
            continue
        name = os.path.relpath(path, SRC)[: -len(".py")]
        found[name.replace(os.sep, ".")] = path
    return found


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _parse(path: str) -> ast.Module:
    return ast.parse(_read(path))


def _imports(module: str) -> set[str]:
    """The `boostax._src` modules `module` imports (at any depth of code),
    dotted below `boostax._src` (``"step.builder"``)."""
    tree = _parse(os.path.join(SRC, *module.split(".")) + ".py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module.removeprefix("boostax._src").lstrip(".")
            if base == node.module:  # not from boostax._src
                continue
            for alias in node.names:
                name = f"{base}.{alias.name}".lstrip(".")
                found.add(name if _is_module(name) else base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("boostax._src."):
                    found.add(alias.name.removeprefix("boostax._src."))
    return found


def _is_module(name: str) -> bool:
    return os.path.exists(os.path.join(SRC, *name.split(".")) + ".py")


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
        step_layer = {
            name
            for name in _closure(module)
            if name in STEP_LAYER or name.split(".")[0] in STEP_LAYER
        }
        self.assertEmpty(step_layer)

    @parameterized.parameters(*LEAVES)
    def test_leaf_imports_nothing_from_boostax(self, module):
        self.assertEmpty(_imports(module))

    def test_no_import_cycle(self):
        # Library, MindSpore layer and examples: each module can be read
        # (and imported) after the ones it uses, never in a loop.
        graph = _import_graph()
        self.assertIn(
            "boostax._src.validation", graph["boostax._src.measure.cost"]
        )
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

    def test_every_module_states_its_concept(self):
        modules = _concept_modules()
        for module in sorted(set(modules) - set(CONCEPTS)):
            self.fail(
                f"boostax/_src/{os.path.relpath(modules[module], SRC)} "
                "states no concept: add its one concept to CONCEPTS in "
                "tests/layering_test.py (one concept per module)."
            )
        self.assertEmpty(
            sorted(set(CONCEPTS) - set(modules)),
            "CONCEPTS names modules that do not exist",
        )
        for module, concept in CONCEPTS.items():
            self.assertTrue(
                concept.strip() and "\n" not in concept,
                f"{module}'s concept must be one line",
            )

    def test_no_module_outgrows_its_concept(self):
        for module, path in _concept_modules().items():
            with open(path) as f:
                lines = sum(1 for _ in f)
            self.assertLessEqual(
                lines,
                MAX_LINES,
                f"{module} ({CONCEPTS.get(module)!r}) has {lines} lines: "
                "more than one concept? Move each other concept to a "
                "module of its own, stated in CONCEPTS.",
            )

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
