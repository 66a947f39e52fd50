# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The bytes a train step moves, with their dtypes.

Two readings that hold on every backend, because they are taken before a
backend compiles (XLA's CPU backend computes half precision in float32, so
its cost analysis and step times say nothing about mixed precision):

- `saved_activations`: the arrays the backward pass keeps from the forward
  pass (JAX's residuals of the differentiated function, the list
  ``jax.ad_checkpoint.print_saved_residuals`` prints), without the
  function's own arguments (the parameters). Their bytes are the
  activation memory of a step before XLA's rematerialisation.
- `collective_bytes` of the *lowered* HLO (``lowered.as_text("hlo")``): the
  collectives as the program asks for them, in their dtypes. On a compiled
  executable it reads what the backend runs.

`read_step_bytes` takes both, and the dtypes of the step's convolutions and
matrix products (`compute_dtypes`), for one traced step;
`boostax.measure.step_bytes` (`train_step_bytes.py`) for one program of a
`TrainStep`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import jax
import numpy as np

from boostax._src import jaxpr_walk, validation

#: The JAX versions `saved_activations` is tested with: it reads a private
#: JAX function, so ``pyproject.toml`` bounds ``jax`` by the same range.
SUPPORTED_JAX = ">=0.10.2,<0.11"

_DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "u16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
}
_COLLECTIVE = re.compile(
    r"=\s*(?P<out>\([^=]*?\)|\w+\[[\d,]*\](?:\{[\d,]*\})?)\s+"
    r"(?P<op>collective-permute|all-gather|all-reduce|reduce-scatter|"
    r"all-to-all)(?:-start)?\("
)


def _shape_bytes(text: str) -> int:
    return sum(
        _DTYPE_BYTES[dtype]
        * int(np.prod([int(d) for d in dims.split(",") if d]))
        for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", text)
        if dtype in _DTYPE_BYTES
    )


_GROUPS = re.compile(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)?\}")
_IOTA = re.compile(
    r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?"
)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


# XLA's SPMD partitioner's spelling: the mesh's axes and sizes, and the
# axes the collective runs over (``mesh['a'=2,'b'=4] {'b'}``).
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")


def _mesh_groups(axes: str, over: str) -> list[list[int]]:
    """The groups of a collective over the axes `over` of a mesh whose
    axes and sizes `axes` lists, device ids in the mesh's row-major order."""
    sizes = {
        name.strip().strip("'"): int(size)
        for name, size in (a.split("=") for a in axes.split(",") if a)
    }
    names = [a.strip().strip("'") for a in over.split(",") if a.strip()]
    ids = np.arange(int(np.prod(list(sizes.values())))).reshape(
        tuple(sizes.values())
    )
    inner = [list(sizes).index(n) for n in names]
    outer = [i for i in range(len(sizes)) if i not in inner]
    group = int(np.prod([ids.shape[i] for i in inner]))
    return ids.transpose(outer + inner).reshape(-1, group).tolist()


def replica_groups(line: str) -> list[list[int]]:
    """The device groups of one HLO collective.

    Reads the three spellings of ``replica_groups``: listed
    (``{{0,1},{2,3}}``), as an iota (``[2,2]<=[4]``,
    ``[2,2]<=[2,2]T(1,0)``: device ids ``0..3`` reshaped, transposed,
    reshaped), and over axes of a mesh, as XLA's SPMD partitioner writes
    them (``mesh['a'=2,'b'=2] {'b'}``: device ids in the mesh's order).

    Args:
      line: one line of HLO text (``compiled.as_text()``).

    Returns:
      The groups, each a list of device ids; ``[]`` when the line lists
      none (a collective over every device).

    Example:
      >>> from boostax.measure import replica_groups
      >>> replica_groups("all-reduce(%g), replica_groups={{0,2},{1,3}}")
      [[0, 2], [1, 3]]
      >>> replica_groups("replica_groups=[2,2]<=[2,2]T(1,0)")
      [[0, 2], [1, 3]]
      >>> replica_groups("replica_groups=mesh['a'=2,'b'=2] {'a'}")
      [[0, 2], [1, 3]]
    """
    m = _MESH_GROUPS.search(line)
    if m:
        return _mesh_groups(m.group(1), m.group(2))
    m = _IOTA.search(line)
    if m:
        ids = np.arange(np.prod(_ints(m.group(2)))).reshape(_ints(m.group(2)))
        if m.group(3):
            ids = ids.transpose(_ints(m.group(3)))
        return ids.reshape(_ints(m.group(1))).tolist()
    m = _GROUPS.search(line)
    if m and m.group(1):
        return [_ints(g) for g in re.findall(r"\{([\d,]*)\}", m.group(1))]
    return []


def _group_size(line: str) -> int:
    groups = replica_groups(line)
    return len(groups[0]) if groups else 1


def collective_bytes(hlo: str) -> tuple[float, dict[str, int]]:
    """Bytes one device sends in the collectives of compiled HLO, and counts.

    Per collective, with ``g`` devices in its group and ``n`` the bytes of
    its result: collective-permute sends ``n``; all-gather (ring)
    ``n (g - 1) / g``; all-reduce (ring) ``2 n (g - 1) / g``; reduce-scatter
    ``n (g - 1)``; all-to-all ``n``.

    Args:
      hlo: the text of a compiled executable (``compiled.as_text()``).

    Returns:
      ``(bytes sent per device, {collective: count})``.

    Example:
      >>> import boostax
      >>> hlo = ("%ar = f32[256]{0} all-reduce(f32[256]{0} %g), "
      ...        "replica_groups={{0,1,2,3}}, to_apply=%add")
      >>> boostax.measure.collective_bytes(hlo)
      (1536.0, {'all-reduce': 1})
    """
    validation.check_str("hlo", hlo, allow_empty=True)
    total, counts = 0.0, dict[str, int]()
    for line in hlo.splitlines():
        line = re.sub(r"/\*.*?\*/", "", line)  # /*index=5*/ in tuples
        m = _COLLECTIVE.search(line)
        if not m:
            continue
        op, size = m.group("op"), _shape_bytes(m.group("out"))
        counts[op] = counts.get(op, 0) + 1
        g = _group_size(line)
        if op == "all-gather":
            total += size * (g - 1) / g
        elif op == "all-reduce":
            total += 2 * size * (g - 1) / g
        elif op == "reduce-scatter":
            total += size * (g - 1)
        else:  # collective-permute, all-to-all
            total += size
    return total, counts


# --------------------------------------------------------------------------
# Read from the jaxpr: saved activations and compute dtypes.
# --------------------------------------------------------------------------


def _nbytes(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * aval.dtype.itemsize


class SavedActivations(NamedTuple):
    """What a backward pass keeps from its forward pass.

    Attributes:
      bytes: total bytes of the saved arrays (arguments excluded).
      by_dtype: ``{dtype name: bytes}``.
      count: how many arrays.
    """

    bytes: int
    by_dtype: dict[str, int]
    count: int  # type: ignore[assignment]  # shadows `tuple.count`


def _saved_residuals():
    """JAX's ``saved_residuals``, imported here rather than with boostax.

    JAX's public ``jax.ad_checkpoint.print_saved_residuals`` prints this
    list; the function returning it lives in the private ``jax._src``, which
    a JAX release may move: only the functions reading it fail then, not
    ``import boostax``.
    """
    try:
        from jax._src.ad_checkpoint import saved_residuals  # noqa: PLC0415
    except ImportError as e:
        raise ImportError(
            "saved_activations (and step_bytes, cost_report, which use it) "
            "needs jax._src.ad_checkpoint.saved_residuals, a private JAX "
            f"function that JAX {jax.__version__} does not provide; it is "
            f"supported with jax{SUPPORTED_JAX} (boostax's pyproject.toml)."
        ) from e
    return saved_residuals


def saved_activations(fn, *args) -> SavedActivations:
    """The activations ``jax.vjp(fn, *args)`` keeps for the backward pass.

    Residuals that are `fn`'s own arguments (the parameters, read again by
    the backward pass) are not counted: they are held anyway.

    Args:
      fn: the differentiated function.
      *args: its arguments (arrays or ``jax.ShapeDtypeStruct``).

    Returns:
      `SavedActivations`.

    Raises:
      ImportError: this JAX lacks the private function the residuals are
        read with (supported: `SUPPORTED_JAX`).

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> f = lambda w, x: jnp.tanh(x @ w).sum()
      >>> saved = boostax.measure.saved_activations(f, jnp.ones((4, 3)),
      ...                                   jnp.ones((2, 4)))
      >>> saved.by_dtype  # tanh(x @ w) and its derivative, 2 x 3 each
      {'float32': 48}
    """
    by_dtype: dict[str, int] = {}
    count = 0
    for aval, source in _saved_residuals()(fn, *args):
        if source.startswith("from the argument"):
            continue
        name = aval.dtype.name
        by_dtype[name] = by_dtype.get(name, 0) + _nbytes(aval)
        count += 1
    return SavedActivations(sum(by_dtype.values()), by_dtype, count)


COMPUTE_PRIMITIVES = ("conv_general_dilated", "dot_general")


def compute_dtypes(jaxpr) -> dict[str, dict[str, int]]:
    """``{primitive: {operand dtype: count}}`` of the convolutions and
    matrix products of a jaxpr (``jax.make_jaxpr(f)(...)``), sub-jaxprs
    (``jit``, ``shard_map``, ``cond``, custom derivatives) included."""
    found: dict[str, dict[str, int]] = {}
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr_walk.equations(inner):
        name = eqn.primitive.name
        if name in COMPUTE_PRIMITIVES:
            dtype = eqn.invars[0].aval.dtype.name
            counts = found.setdefault(name, {})
            counts[dtype] = counts.get(dtype, 0) + 1
    return found


# --------------------------------------------------------------------------
# A traced step.
# --------------------------------------------------------------------------


class StepBytes(NamedTuple):
    """The dtype-aware bytes of one step (see the module docstring).

    Attributes:
      saved_activation_bytes: activations kept for the backward pass.
      saved_by_dtype: ``{dtype name: bytes}`` of those.
      collective_bytes: bytes one device sends in the collectives of the
        lowered step, in their dtypes (0 on one device).
      compute_dtypes: ``{primitive: {dtype: count}}`` of its convolutions
        and matrix products.
    """

    saved_activation_bytes: int
    saved_by_dtype: dict[str, int]
    collective_bytes: float
    compute_dtypes: dict[str, dict[str, int]]


def read_step_bytes(traced, differentiated, *args) -> StepBytes:
    """`StepBytes` of a traced step, read before anything is compiled.

    Args:
      traced: the step traced for `args` (``jax.jit(step).trace(*args)``):
        its jaxpr gives the compute dtypes, its lowered HLO the collectives.
      differentiated: ``differentiated(*args) -> (fn, primal)``: the
        function the step's backward pass differentiates and its argument
        (traced here, so `args` may be shapes alone).
      *args: the step's arguments (arrays or ``jax.ShapeDtypeStruct``).

    Returns:
      `StepBytes`.
    """
    found: list[SavedActivations] = []

    def read(*args):
        fn, primal = differentiated(*args)
        found.append(saved_activations(fn, primal))

    jax.eval_shape(read, *args)
    (saved,) = found
    sent, _ = collective_bytes(traced.lower().as_text(dialect="hlo"))
    return StepBytes(
        saved.bytes, saved.by_dtype, sent, compute_dtypes(traced.jaxpr)
    )
