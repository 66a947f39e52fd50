# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Which axis of each value of a traced optimizer update is the split one.

`optimizer_sharding.split_plan` runs an optimizer on each device's slice of
every leaf; that is correct only if no element's update reads another
element along the split axis. `Walk` follows, for every value of the traced
update, which axis of it is the split one (through elementwise ops,
broadcasts, reshapes, transposes, reductions and contractions over other
axes, nested jaxprs): a partial reduction, contraction, scan or sort over
it is collected in `Walk.moves` (another axis may do for that leaf); a
reduction of a whole leaf or a primitive it cannot follow raises
`Refused`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.extend.core as jax_core

from boostax._src import jaxpr_walk

# Primitives whose every output element reads the same element of each
# operand of the output's shape (rank-0 operands are broadcast scalars).
ELEMENTWISE_PRIMITIVES = frozenset(
    {
        "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan",
        "atan2", "atanh", "bessel_i0e", "bessel_i1e", "cbrt", "ceil",
        "clamp", "clz", "complex", "conj", "convert_element_type", "copy",
        "copy_p", "cos", "cosh", "digamma", "div", "eq", "erf", "erf_inv",
        "erfc", "exp", "exp2", "expm1", "floor", "ge", "gt", "igamma",
        "igammac", "imag", "integer_pow", "is_finite", "le", "lgamma",
        "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg",
        "nextafter", "not", "or", "polygamma", "population_count", "pow",
        "real", "reduce_precision", "rem", "round", "rsqrt", "select_n",
        "shift_left", "shift_right_arithmetic", "shift_right_logical",
        "sign", "sin", "sinh", "sqrt", "square", "stop_gradient", "sub",
        "tan", "tanh", "xor", "zeta",
    }
)  # fmt: skip

REDUCTIONS = frozenset(
    {
        "reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
        "reduce_and", "reduce_or", "reduce_xor", "reduce", "argmax",
        "argmin",
    }
)  # fmt: skip

# Primitives that combine the elements along one axis (``axis`` or
# ``dimension``), leaving the others apart.
ALONG_AXIS = frozenset(
    {"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "sort"}
)


class Split(NamedTuple):
    """A traced value computed from split leaves: `axis` is the split one;
    `leaves` the inputs it comes from (parameter leaf i as i, state leaf k
    as ``-1 - k``)."""

    axis: int
    leaves: frozenset


class Refused(Exception):
    """The update does something to a split value that no plan allows:
    ``Refused(what it does, the leaves of the value)``."""


def _merge(a: Split | None, b: Split | None, what: str) -> Split | None:
    if a is None or b is None:
        return a or b
    if a.axis != b.axis:
        raise Refused(
            f"{what} values split along different axes", a.leaves | b.leaves
        )
    return Split(a.axis, a.leaves | b.leaves)


def _ndim(var) -> int:
    return len(getattr(var.aval, "shape", ()))


def _shape(var) -> tuple[int, ...]:
    return tuple(getattr(var.aval, "shape", ()))


def _reshaped_axis(before, after, axis: int) -> int | None:
    """Where `axis` of `before` lands after a reshape to `after`, if the
    reshape keeps it an axis of its own (same size, same elements
    before it); else ``None``."""
    prefix = math.prod(before[:axis])
    for k, size in enumerate(after):
        if size == before[axis] and math.prod(after[:k]) == prefix:
            return k
    return None


class Walk:
    """Follows the split axis through a jaxpr
    (`optimizer_sharding.split_plan`).

    `moves` collects the leaves read along their split axis by a partial
    reduction, contraction, scan or sort: another axis may do for them.
    What no axis allows raises `Refused`.
    """

    def __init__(self):
        self.moves: set[int] = set()

    def _mixes(self, value: Split) -> None:
        self.moves |= value.leaves

    def run(self, jaxpr, labels: list) -> list:
        env = {v: label for v, label in zip(jaxpr.invars, labels, strict=True)}

        def read(v):
            return env.get(v) if isinstance(v, jax_core.Var) else None

        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            if any(s is not None for s in ins):
                outs = self._equation(eqn, ins)
            else:
                outs = [None] * len(eqn.outvars)
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(v) for v in jaxpr.outvars]

    def _equation(self, eqn, ins: list) -> list:
        name, params = eqn.primitive.name, eqn.params
        n_out = len(eqn.outvars)
        k, first = next((k, s) for k, s in enumerate(ins) if s is not None)
        if name == "optimization_barrier":  # the identity, per operand
            return ins
        if name in ELEMENTWISE_PRIMITIVES | REDUCTIONS | ALONG_AXIS:
            # Several operands (select_n, a variadic reduce or sort) must
            # be split alike.
            for s in ins:
                first = _merge(first, s, f"`{name}` combines")
        if name in ELEMENTWISE_PRIMITIVES:
            return [first] * n_out
        if name in REDUCTIONS:
            reduced = params.get("axes", params.get("dimensions", ()))
            return [self._reduce(eqn, first, k, tuple(reduced))] * n_out
        if name in ALONG_AXIS:
            if params.get("axis", params.get("dimension")) == first.axis:
                self._mixes(first)
                return [None] * n_out
            return [first] * n_out
        if name == "broadcast_in_dim" and k == 0:
            return [
                first._replace(axis=params["broadcast_dimensions"][first.axis])
            ]
        if name == "transpose":
            perm = tuple(params["permutation"])
            return [first._replace(axis=perm.index(first.axis))]
        if name in ("squeeze", "reshape") and k == 0:
            axis = _reshaped_axis(
                _shape(eqn.invars[0]), _shape(eqn.outvars[0]), first.axis
            )
            if axis is None:  # merged with other axes, or cut up
                self._mixes(first)
                return [None]
            return [first._replace(axis=axis)]
        if name == "dot_general":
            return [self._dot(eqn, ins)]
        if name == "cond":
            return self._cond(eqn, ins)
        if name == "while":
            return self._while(eqn, ins)
        subs = jaxpr_walk.sub_jaxprs(eqn)
        if len(subs) == 1 and len(subs[0].invars) == len(ins):
            # jit, remat, custom derivatives: the operands map one to one.
            return self.run(subs[0], ins)
        raise Refused(
            f"applies `{name}`, which the check cannot follow,", first.leaves
        )

    def _reduce(self, eqn, value: Split, k: int, reduced) -> Split | None:
        if value.axis not in reduced:
            return value._replace(
                axis=value.axis - sum(a < value.axis for a in reduced)
            )
        if len(reduced) == _ndim(eqn.invars[k]):
            raise Refused(
                f"applies `{eqn.primitive.name}` over every axis of a "
                "split value (it reads the whole leaf)",
                value.leaves,
            )
        self._mixes(value)
        return None

    def _dot(self, eqn, ins) -> Split | None:
        (contract, batch) = eqn.params["dimension_numbers"]
        out = None
        offset = len(batch[0])
        for side in (0, 1):
            var, value = eqn.invars[side], ins[side]
            free = [
                a
                for a in range(_ndim(var))
                if a not in contract[side] and a not in batch[side]
            ]
            if value is not None:
                if len(contract[side]) == _ndim(var):
                    raise Refused(
                        "contracts every axis of a split value (`dot_general`"
                        ": it reads the whole leaf)",
                        value.leaves,
                    )
                if value.axis not in free or out is not None:
                    self._mixes(value)
                    if out is not None:
                        self._mixes(out)
                    return None
                out = value._replace(axis=offset + free.index(value.axis))
            offset += len(free)
        return out

    def _cond(self, eqn, ins) -> list:
        if ins[0] is not None:
            raise Refused("branches on a split value", ins[0].leaves)
        outs: list = [None] * len(eqn.outvars)
        for branch in eqn.params["branches"]:
            found = self.run(branch.jaxpr, ins[1:])
            outs = [
                _merge(a, b, "`cond` returns")
                for a, b in zip(outs, found, strict=True)
            ]
        return outs

    def _while(self, eqn, ins) -> list:
        n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond_consts = ins[:n_cond]
        body_consts = ins[n_cond : n_cond + n_body]
        carry = ins[n_cond + n_body :]
        for _ in range(len(carry) + 1):  # until the carry's labels settle
            found = self.run(
                eqn.params["body_jaxpr"].jaxpr, body_consts + carry
            )
            merged = [
                _merge(a, b, "`while` carries")
                for a, b in zip(carry, found, strict=True)
            ]
            if merged == carry:
                break
            carry = merged
        found = self.run(eqn.params["cond_jaxpr"].jaxpr, cond_consts + carry)
        if found[0] is not None:
            raise Refused("loops on a split value", found[0].leaves)
        return carry
