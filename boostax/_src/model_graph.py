# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The layer-level data-flow graph of a Flax model, read from one trace.

LessBN and gradient centralization decide from a model's own structure which
layers to change. This module traces the model once on abstract inputs,
wrapping every module call in a named scope, and rebuilds from the jaxpr a
graph whose nodes are *layers* (convolutions, BatchNorms, dense layers: one
node per call) and the *operations between them* (residual adds, ReLU,
concatenation, pooling), with edges following the data.

Works for Flax Linen (module calls intercepted with ``nn.intercept_methods``)
and Flax NNX (``__call__`` of the module classes wrapped during the trace).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import nnx
from jax.extend import core as jex_core

from boostax._src import tree_diff, validation

_SCOPE = "boostax_call_"
_SCOPE_RE = re.compile(_SCOPE + r"(\d+)")
# Operations traced in this scope belong to no layer, whatever module call
# they happen in (see `no_layer`).
_NO_LAYER = "boostax_no_layer"

# Primitives that only move or relabel data: skipped when following edges.
_PASS_THROUGH = frozenset(
    {
        "reshape",
        "convert_element_type",
        "copy",
        "copy_p",
        "squeeze",
        "expand_dims",
        "broadcast_in_dim",
        "transpose",
        "stop_gradient",
    }
)


def layer_kind(module: Any) -> str | None:
    """The kind of a known layer module, or ``None`` for any other module."""
    if isinstance(module, (nn.Conv, nnx.Conv)):
        groups = getattr(module, "feature_group_count", 1)
        return "grouped_conv" if groups > 1 else "conv"
    if isinstance(module, (nn.BatchNorm, nnx.BatchNorm)):
        return "batch_norm"
    if isinstance(module, (nn.Dense, nnx.Linear)):
        return "dense"
    return getattr(module, "boostax_layer_kind", None)


@dataclasses.dataclass(frozen=True)
class ModuleCall:
    """One call of a module during the trace.

    Attributes:
      index: order of the call.
      path: the module's path (Linen names, NNX attribute keys / indices).
      module: the module object (bound Linen module or NNX module).
      kind: `layer_kind` of the module, ``None`` if it is not a known layer.
    """

    index: int
    path: tuple[Any, ...]
    module: Any
    kind: str | None


@dataclasses.dataclass
class Node:
    """A node of the graph: one layer call or one operation between layers.

    Attributes:
      id: position in `Graph.nodes` (topological order).
      kind: ``"input"``, a layer kind (``"conv"``, ``"grouped_conv"``,
        ``"batch_norm"``, ``"dense"``) or an operation: ``"add"``,
        ``"relu"``, ``"relu6"``, ``"concat"``, ``"max_pool"``, ``"mean"``,
        ``"pass"`` (reshapes and casts) or ``"other"``.
      call: the `ModuleCall` of a layer node.
      inputs: ids of the nodes whose outputs this node reads, in order.
      consumers: ids of the nodes that read this node's outputs.
      shape: shape of the node's (first) data output.
    """

    id: int
    kind: str
    call: ModuleCall | None = None
    inputs: list[int] = dataclasses.field(default_factory=list)
    consumers: list[int] = dataclasses.field(default_factory=list)
    shape: tuple[int, ...] = ()

    @property
    def path(self) -> tuple[Any, ...] | None:
        return None if self.call is None else self.call.path

    @property
    def layer(self) -> ModuleCall:
        """The `ModuleCall` of a layer node (a layer `kind`: ``"conv"``,
        ``"batch_norm"``, ...); a `ValueError` for an operation's node."""
        if self.call is None:
            raise ValueError(f"Node {self.id} ({self.kind}) is not a layer.")
        return self.call


@dataclasses.dataclass
class Graph:
    """The layer-level data-flow graph of one forward pass."""

    nodes: list[Node]
    calls: list[ModuleCall]

    def data_inputs(self, node: Node) -> list[Node]:
        """The nodes `node` reads, looking through pass-through ops."""
        found = []
        for i in node.inputs:
            source = self.nodes[i]
            while source.kind == "pass" and source.inputs:
                source = self.nodes[source.inputs[0]]
            found.append(source)
        return found

    def data_consumers(self, node: Node) -> list[Node]:
        """The nodes reading `node`, looking through pass-through ops."""
        found = []
        for i in node.consumers:
            target = self.nodes[i]
            if target.kind == "pass":
                found.extend(self.data_consumers(target))
            else:
                found.append(target)
        return found

    def producer(self, node: Node) -> Node | None:
        """The node feeding `node`'s first data input."""
        inputs = self.data_inputs(node)
        return inputs[0] if inputs else None

    def backward_chain(self, node: Node, limit: int = 64) -> list[Node]:
        """`node` and its producers along first inputs, newest first."""
        chain = [node]
        while len(chain) < limit:
            source = self.producer(chain[-1])
            if source is None:
                break
            chain.append(source)
        return chain

    def layers(self, kind: str) -> Iterator[Node]:
        return (n for n in self.nodes if n.call is not None and n.kind == kind)


# ---------------------------------------------------------------------------
# Recording module calls.
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def _record_linen_calls(calls: list[ModuleCall]):
    def interceptor(next_fun, args, kwargs, context):
        if context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        module = context.module
        index = len(calls)
        calls.append(
            ModuleCall(index, tuple(module.path), module, layer_kind(module))
        )
        with jax.named_scope(f"{_SCOPE}{index}"):
            return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        yield


@contextlib.contextmanager
def _record_nnx_calls(model: nnx.Module, calls: list[ModuleCall]):
    paths = {id(m): tuple(p) for p, m in nnx.iter_modules(model)}
    # Wrap __call__ where it is defined, once per defining class.
    owners = {}
    for _, module in nnx.iter_modules(model):
        for cls in type(module).__mro__:
            if "__call__" in vars(cls):
                owners[cls] = vars(cls)["__call__"]
                break
    active: set[int] = set()

    def wrap(original):
        def __call__(self, *args, **kwargs):  # noqa: N807
            if id(self) not in paths or id(self) in active:
                return original(self, *args, **kwargs)
            index = len(calls)
            calls.append(
                ModuleCall(index, paths[id(self)], self, layer_kind(self))
            )
            active.add(id(self))
            try:
                with jax.named_scope(f"{_SCOPE}{index}"):
                    return original(self, *args, **kwargs)
            finally:
                active.discard(id(self))

        return __call__

    try:
        for cls, original in owners.items():
            setattr(cls, "__call__", wrap(original))  # noqa: B010
        yield
    finally:
        for cls, original in owners.items():
            setattr(cls, "__call__", original)  # noqa: B010


@contextlib.contextmanager
def _on_sample_inputs(inputs: Sequence[Any]) -> Iterator[None]:
    """Re-raises a failure of the model's trace on `inputs`, naming them.

    The model is traced on `sample_inputs` (LessBN, freezing groups): one
    of the wrong rank or shape fails inside Flax or NumPy (a broadcast
    error, a shape error) with no word of where the shapes came from.
    """
    try:
        yield
    except Exception as e:  # noqa: BLE001  (any failure of the model's code)
        shown = inputs[0] if len(inputs) == 1 else inputs
        kind = TypeError if isinstance(e, TypeError) else ValueError
        raise kind(
            "Tracing the model on `sample_inputs` failed: `sample_inputs` "
            "must be one batch of the inputs the model is called with in "
            "training (batch dimension first; a tuple for several "
            f"positional inputs), got {tree_diff.describe_arrays(shown)}. "
            f"The model raised {type(e).__name__}: {e}"
        ) from e


def _abstract(tree):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            jax.numpy.shape(x), jax.numpy.result_type(x)
        ),
        tree,
    )


def init_rngs() -> dict[str, jax.Array]:
    """The keys a Linen model is initialised or traced with here.

    ``'params'``, and ``'dropout'``: a model whose dropout is switched by a
    field rather than a call argument (Flax's lm1b: ``deterministic`` in
    its config) draws from it whatever the call, as its training does.
    """
    return {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}


def trace_linen(
    module: nn.Module, inputs: Sequence[Any], apply_kwargs: dict[str, Any]
) -> tuple[jex_core.ClosedJaxpr, list[ModuleCall], int]:
    """Traces ``module.apply(variables, *inputs)`` recording module calls.

    Returns the jaxpr, the calls, and how many of the jaxpr's inputs are
    variables (the rest are the model inputs).
    """
    calls: list[ModuleCall] = []
    rngs = {"dropout": init_rngs()["dropout"]}

    def forward(variables, *x):
        with _record_linen_calls(calls):
            # Mutable, so that training mode (batch statistics) traces too.
            return module.apply(
                variables, *x, mutable=True, rngs=rngs, **apply_kwargs
            )

    with _on_sample_inputs(inputs):
        inputs = _abstract(tuple(inputs))
        variables = jax.eval_shape(
            lambda *x: module.init(init_rngs(), *x, **apply_kwargs),
            *inputs,
        )
        jaxpr = jax.make_jaxpr(forward)(variables, *inputs)
    return jaxpr, calls, len(jax.tree.leaves(variables))


def trace_nnx(
    model: nnx.Module, inputs: Sequence[Any]
) -> tuple[jex_core.ClosedJaxpr, list[ModuleCall], int]:
    """Traces ``model(*inputs)`` (in eval mode, on a copy) recording calls."""
    graphdef, state = nnx.split(model)
    calls: list[ModuleCall] = []

    def forward(state, *x):
        copy = nnx.merge(graphdef, state, copy=True)
        copy.eval()
        with _record_nnx_calls(copy, calls):
            return copy(*x)

    with _on_sample_inputs(inputs):
        inputs = _abstract(tuple(inputs))
        jaxpr = jax.make_jaxpr(forward)(state, *inputs)
    return jaxpr, calls, len(jax.tree.leaves(state))


# ---------------------------------------------------------------------------
# From the jaxpr to the graph.
# ---------------------------------------------------------------------------


def _inner_names(eqn) -> list[str]:
    """Names of the jitted functions nested in a call-like equation."""
    names = []
    if "name" in eqn.params:
        names.append(str(eqn.params["name"]))
    for key in ("call_jaxpr", "jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(key)
        inner = getattr(inner, "jaxpr", inner)
        for sub in getattr(inner, "eqns", ()):
            names.extend(_inner_names(sub))
    return names


def _is_zero_literal(atom) -> bool:
    return isinstance(atom, jex_core.Literal) and atom.val == 0


def _op_kind(eqn, n_data_inputs: int) -> str:
    name = eqn.primitive.name
    if name in _PASS_THROUGH:
        return "pass"
    if name in ("custom_jvp_call", "jit", "pjit", "closed_call"):
        inner = _inner_names(eqn)
        for activation in ("relu6", "relu"):
            if activation in inner:
                return activation
        return "other"
    if name == "max" and any(_is_zero_literal(a) for a in eqn.invars):
        return "relu"
    if name == "add" and n_data_inputs == 2:
        return "add"
    if name in ("add", "sub", "mul", "div") and n_data_inputs == 1:
        return "pass"  # scaling or shifting by a constant
    if name == "concatenate":
        return "concat"
    if name == "reduce_window_max":
        return "max_pool"
    if name in ("reduce_sum", "reduce_mean"):
        return "mean"
    return "other"


def no_layer():
    """A context in which the operations a module traces are not its layer's.

    A module call that only stands in for a layer it replaces (a BatchNorm
    LessBN removed, applying a fixed per-channel map) is not that layer in
    the graph: its operations are the plain ones (a shift is ``"pass"``).
    """
    return jax.named_scope(_NO_LAYER)


def _owner(eqn, calls: list[ModuleCall]) -> ModuleCall | None:
    """The outermost known layer whose call produced `eqn`, if any."""
    name_stack = str(eqn.source_info.name_stack)
    if _NO_LAYER in name_stack:
        return None
    for index in _SCOPE_RE.findall(name_stack):
        call = calls[int(index)]
        if call.kind is not None:
            return call
    return None


def build_graph(
    closed_jaxpr: jex_core.ClosedJaxpr, calls: list[ModuleCall], n_params: int
) -> Graph:
    """The layer-level graph of a traced forward pass.

    Args:
      closed_jaxpr: the trace; its first `n_params` inputs are variables, the
        rest are the model's inputs.
      calls: the module calls recorded during the trace.
      n_params: how many jaxpr inputs are variables.
    """
    jaxpr = closed_jaxpr.jaxpr
    data_invars = jaxpr.invars[n_params:]
    nodes = [
        Node(0, "input", shape=tuple(data_invars[0].aval.shape))
        if data_invars
        else Node(0, "input")
    ]
    producer: dict[Any, int] = {}  # data var -> node id
    for var in data_invars:
        producer[var] = 0
    layer_nodes: dict[int, int] = {}  # call index -> node id

    def link(node: Node, var) -> None:
        source = producer[var]
        if source != node.id and source not in node.inputs:
            node.inputs.append(source)
            nodes[source].consumers.append(node.id)

    for eqn in jaxpr.eqns:
        data_in = [
            v
            for v in eqn.invars
            if not isinstance(v, jex_core.Literal) and v in producer
        ]
        if not data_in:
            continue  # parameter or constant arithmetic
        call = _owner(eqn, calls)
        if call is not None and call.index in layer_nodes:
            node = nodes[layer_nodes[call.index]]
        else:
            kind = (call and call.kind) or _op_kind(eqn, len(data_in))
            node = Node(len(nodes), kind, call)
            nodes.append(node)
            if call is not None:
                layer_nodes[call.index] = node.id
        for var in data_in:
            link(node, var)
        for var in eqn.outvars:
            producer[var] = node.id
        if eqn.outvars:
            node.shape = tuple(eqn.outvars[0].aval.shape)
    return Graph(nodes, calls)


def as_inputs(sample_inputs: Any) -> tuple[Any, ...]:
    """Positional model inputs: a tuple as is, anything else as ``(x,)``."""
    if isinstance(sample_inputs, tuple):
        return sample_inputs
    return (sample_inputs,)


def check_sample_inputs(sample_inputs: Any) -> None:
    """Raises, naming `sample_inputs`, unless it is arrays (shapes used)."""
    leaves = jax.tree.leaves(sample_inputs)
    problem = "" if leaves else "it holds no array"
    for leaf in leaves:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            problem = (
                f"a leaf is a {type(leaf).__name__}, not an array (nested "
                "lists are pytrees of scalars: pass np.asarray(...))"
            )
        elif np.dtype(leaf.dtype).kind not in "biufc":
            problem = f"a leaf of dtype {leaf.dtype} is not numeric"
        elif not len(leaf.shape):
            problem = "a leaf is a scalar, without a batch dimension"
        else:
            continue
        break
    if problem:
        raise TypeError(
            "`sample_inputs` must be one batch of model inputs: an array or "
            f"a pytree of arrays (only shapes and dtypes are used); {problem}"
            f", {validation.got(sample_inputs)}."
        )


def input_shapes(sample_inputs: Any) -> Any:
    """`sample_inputs` (checked: `check_sample_inputs`) as shapes alone
    (``jax.ShapeDtypeStruct`` leaves, in the dtypes JAX would give them):
    no array is kept alive. ``None`` stays ``None``."""
    if sample_inputs is None:
        return None
    check_sample_inputs(sample_inputs)
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)),
        sample_inputs,
    )


def accepts_train(module: nn.Module) -> bool:
    """Whether a Linen module's ``__call__`` takes a ``train`` argument.

    A wrapper whose ``__call__`` forwards ``**kwargs`` to a `network` field
    (like `LinenLessBN`) is looked through.
    """
    try:
        parameters = inspect.signature(type(module).__call__).parameters
    except (TypeError, ValueError):
        return False
    if "train" in parameters:
        return True
    forwards = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    inner = getattr(module, "network", None)
    return forwards and isinstance(inner, nn.Module) and accepts_train(inner)


def linen_eval_kwargs(module: nn.Module) -> dict[str, Any]:
    """``{"train": False}`` if the module's ``__call__`` takes ``train``."""
    return {"train": False} if accepts_train(module) else {}


def model_graph(model: Any, sample_inputs: Any) -> Graph:
    """The graph of a Linen or NNX model in evaluation mode."""
    inputs = as_inputs(sample_inputs)
    if isinstance(model, nn.Module):
        return linen_graph(model, inputs, linen_eval_kwargs(model))
    return nnx_graph(model, inputs)


def trace(
    model: Any, sample_inputs: Any
) -> tuple[jex_core.ClosedJaxpr, list[ModuleCall], int]:
    """`trace_linen` or `trace_nnx` of a model in evaluation mode."""
    inputs = as_inputs(sample_inputs)
    if isinstance(model, nn.Module):
        return trace_linen(model, inputs, linen_eval_kwargs(model))
    return trace_nnx(model, inputs)


def module_calls(model: Any, sample_inputs: Any) -> list[ModuleCall]:
    """The module calls of a Linen or NNX model, in call order."""
    return trace(model, sample_inputs)[1]


def output_calls(
    closed_jaxpr: jex_core.ClosedJaxpr, calls: list[ModuleCall]
) -> list[tuple[tuple[int, ...], tuple[ModuleCall, ...]]]:
    """Which module calls compute each output of a trace.

    The operation producing each output is found looking back through
    pass-through operations (reshapes, casts); the calls are those in whose
    scope it ran, outermost first (the model's own call, then its layers:
    the last one is the layer that produced the output). Outputs that are
    inputs of the trace (a Linen model's unchanged variables) are skipped.

    Returns:
      One ``(shape, calls)`` pair per output computed by the model.
    """
    jaxpr = closed_jaxpr.jaxpr
    producer = {var: eqn for eqn in jaxpr.eqns for var in eqn.outvars}
    found = []
    for var in jaxpr.outvars:
        eqn = producer.get(var)
        while (
            eqn is not None
            and eqn.primitive.name in _PASS_THROUGH
            and eqn.invars
            and not isinstance(eqn.invars[0], jex_core.Literal)
            and eqn.invars[0] in producer
        ):
            eqn = producer[eqn.invars[0]]
        if eqn is None:
            continue
        name_stack = str(eqn.source_info.name_stack)
        owners = tuple(calls[int(i)] for i in _SCOPE_RE.findall(name_stack))
        found.append((tuple(var.aval.shape), owners))
    return found


def param_shapes(model: Any, sample_inputs: Any) -> Any:
    """The parameter tree of a Linen or NNX model (shapes only for Linen)."""
    if isinstance(model, nnx.Module):
        return nnx.state(model, nnx.Param)
    kwargs = linen_eval_kwargs(model)
    inputs = as_inputs(sample_inputs)
    with _on_sample_inputs(inputs):
        inputs = _abstract(inputs)
        variables = jax.eval_shape(
            lambda *x: model.init(init_rngs(), *x, **kwargs),
            *inputs,
        )
    return variables["params"]


def linen_graph(
    module: nn.Module, inputs: Sequence[Any], apply_kwargs: dict[str, Any]
) -> Graph:
    """The graph of a Linen module applied to `inputs` (shapes only)."""
    return build_graph(*trace_linen(module, inputs, apply_kwargs))


def nnx_graph(model: nnx.Module, inputs: Sequence[Any]) -> Graph:
    """The graph of an NNX module applied to `inputs` (shapes only)."""
    return build_graph(*trace_nnx(model, inputs))
