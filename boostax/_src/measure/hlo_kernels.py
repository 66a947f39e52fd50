# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The kernels a compiled program launches, read from its optimized HLO.

Where steps are short, a step's time is set by its kernel launches rather
than its FLOPs or bytes (a GPU pays microseconds per launch), so
`boostax.measure.cost_report` counts them beside FLOPs and bytes. The count is
taken from ``jax.jit(f).lower(...).compile().as_text()``, the program the
backend runs after fusion; see `kernel_counts` for what is one kernel.
"""

from __future__ import annotations

import collections
import itertools
import re

from boostax._src import validation

# Instructions that launch nothing: they name, regroup or order buffers.
_NOT_KERNELS = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "after-all",
        "add-dependency",
        "opt-barrier",
        "partition-id",
        "replica-id",
    }
)
# Instructions whose called computations run as kernels of their own.
_CONTROL_FLOW = frozenset({"call", "conditional", "while"})
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_CALLED = re.compile(
    r"\b(?:to_apply|body|condition|true_computation|false_computation)="
    r"%?([\w.\-]+)|branch_computations=\{([^}]*)\}"
)


def _computations(hlo: str) -> tuple[dict[str, list[str]], str | None]:
    """``({name: instruction lines}, entry name)`` of an HLO module's text."""
    computations: dict[str, list[str]] = {}
    entry: str | None = None
    name = ""
    lines: list[str] | None = None  # the open computation's (None: none)
    for line in hlo.splitlines():
        if lines is None:
            found = _COMPUTATION.match(line)
            if found:
                name, lines = found.group(2), []
                if found.group(1):
                    entry = name
        elif line.startswith("}"):
            computations[name], lines = lines, None
        else:
            lines.append(line)
    return computations, entry


def _opcode(line: str) -> str | None:
    """The opcode of one HLO instruction line (``None``: not one)."""
    found = _INSTRUCTION.match(line)
    if found is None:
        return None
    rest = line[found.end() :]
    if rest.startswith("("):  # a tuple shape: skip to its closing paren
        depth = itertools.accumulate(
            (char == "(") - (char == ")") for char in rest
        )
        rest = rest[next(i for i, d in enumerate(depth) if d == 0) + 1 :]
    else:
        rest = rest.partition(" ")[2]
    opcode = _OPCODE.match(rest)
    return opcode.group(1) if opcode else None


def _called(line: str) -> list[list[str]]:
    """The computations a control-flow instruction runs, as alternatives
    (a conditional's branches) of sequences (a loop's condition and body)."""
    branches, sequence = [], []
    for single, listed in _CALLED.findall(line):
        if listed:
            branches += [[b.strip().lstrip("%")] for b in listed.split(",")]
        else:
            sequence.append(single)
    if "conditional(" in line and sequence:  # true/false computations
        return [[name] for name in sequence]
    return branches or [sequence]


def kernel_counts(hlo: str) -> dict[str, int]:
    """The kernels one run of a compiled program launches, by opcode.

    Read from the optimized HLO (``compiled.as_text()``): every instruction
    of the entry computation is one kernel (a fusion counts once whatever
    it fuses, a custom call once: a cuBLAS, cuDNN or oneDNN call; any other
    unfused operation, e.g. a convolution, dot, copy or collective, once),
    except those that launch nothing (parameter, constant, tuple,
    get-tuple-element, bitcast and the ordering ops after-all,
    add-dependency, opt-barrier, partition-id, replica-id) and the ``-done``
    and ``-update`` halves of asynchronous operations (their ``-start``
    counts). Control flow launches what it calls: a call its computation's
    kernels, a conditional its largest branch's (one branch runs), a while
    loop its condition's and body's once (the count per iteration).

    Args:
      hlo: the text of an optimized HLO module.

    Returns:
      ``{opcode: count}``; ``sum(...values())`` is the kernel count.

    Example:
      >>> import jax, jax.numpy as jnp, boostax
      >>> compiled = jax.jit(lambda x: (x, jnp.sin(x) * 2)).lower(
      ...     jnp.ones(4)).compile()
      >>> boostax.measure.kernel_counts(compiled.as_text())
      {'copy': 1, 'fusion': 1}
    """
    validation.check_str("hlo", hlo)
    computations, entry = _computations(hlo)
    if entry is None:
        raise ValueError(
            "`hlo` must be the text of an HLO module with an ENTRY "
            "computation (compiled.as_text()), got one without."
        )

    def count(name: str, seen: tuple[str, ...]) -> collections.Counter[str]:
        counts: collections.Counter[str] = collections.Counter()
        if name in seen or name not in computations:
            return counts
        for line in computations[name]:
            opcode = _opcode(line)
            if opcode is None or opcode in _NOT_KERNELS:
                continue
            if opcode.endswith(("-done", "-update")):
                continue
            if opcode in _CONTROL_FLOW:
                # The branch with the most kernels (`max` apart from `+=`,
                # whose operand type would be inferred for `c`).
                heaviest: collections.Counter[str] = max(
                    (
                        sum(
                            (count(c, (*seen, name)) for c in sequence),
                            collections.Counter(),
                        )
                        for sequence in _called(line)
                    ),
                    key=lambda c: sum(c.values()),
                    default=collections.Counter(),
                )
                counts += heaviest
            else:
                counts[opcode] += 1
        return counts

    return dict(sorted(count(entry, ()).items()))
