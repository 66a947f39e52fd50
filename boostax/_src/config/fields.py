# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The keys of a `BoostConfig` section: their kinds, ranges and checks.

A section is a frozen dataclass deriving from `Section`, each key a
`key(default, kind, allowed)` field: `Section.__post_init__` checks the
type of every key (`coerce`, by its kind) and its range (`check_range`),
and normalizes it (an int list to a tuple, a path to a str).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from boostax._src import validation


@dataclasses.dataclass(frozen=True)
class Range:
    """An allowed interval, with the text used in error messages."""

    text: str
    contains: Callable[[float], bool]


def interval(low, high, *, open_low=False, open_high=False) -> Range:
    left, right = "(" if open_low else "[", ")" if open_high else "]"
    return Range(
        f"in {left}{low}, {high}{right}",
        lambda v: (
            (low < v if open_low else low <= v)
            and (v < high if open_high else v <= high)
        ),
    )


def at_least(low) -> Range:
    return Range(f">= {low}", lambda v: v >= low)


def one_of(*allowed) -> Range:
    return Range(f"one of {list(allowed)}", lambda v: v in allowed)


KIND_TEXT = {
    "bool": "a bool",
    "int": "an int",
    "float": "a finite number",
    "seconds": "a number of seconds (inf: wait forever)",
    "int_list": "a list of ints (or a single int)",
    "path": "a path (str or os.PathLike) or None",
    "optional_int": "an int or None",
    "optional_bool": "a bool or None",
}


def key(default, kind: str, allowed: Range | None = None):
    return dataclasses.field(
        default=default, metadata={"kind": kind, "allowed": allowed}
    )


def coerce(name: str, kind: str, value):
    """Checks the type of `value` and returns it in its canonical form."""
    bad_type = TypeError(
        f"`{name}` must be {KIND_TEXT[kind]}, {validation.got(value)}."
    )
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad_type
        return value
    if kind == "int":
        if not validation.is_int(value):
            raise bad_type
        return int(value)
    if kind in ("float", "seconds"):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise bad_type
        value = float(value)
        if math.isnan(value) or (kind == "float" and math.isinf(value)):
            raise ValueError(
                f"`{name}` must be {KIND_TEXT[kind]}, got {value!r}."
            )
        return value
    if kind == "int_list":
        if validation.is_int(value):
            return (int(value),)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise bad_type
        if not all(validation.is_int(v) for v in value):
            raise bad_type
        return tuple(int(v) for v in value)
    if kind == "optional_bool":
        if value is not None and not isinstance(value, bool):
            raise bad_type
        return value
    if kind == "optional_int":
        if value is None:
            return None
        if not validation.is_int(value):
            raise bad_type
        return int(value)
    if kind == "path":
        if value is None:
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise bad_type
        return os.fspath(value)
    raise AssertionError(f"unknown kind {kind!r}")  # pragma: no cover


def check_range(name: str, allowed: Range | None, value) -> None:
    if allowed is None or value is None:
        return
    values = value if isinstance(value, tuple) else (value,)
    if not all(allowed.contains(v) for v in values):
        raise ValueError(f"`{name}` must be {allowed.text}, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class Section:
    """Validates and normalizes every key of a section dataclass."""

    NAME: ClassVar[str]

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if "kind" not in f.metadata:
                continue
            name = f"{self.NAME}.{f.name}"
            value = coerce(name, f.metadata["kind"], getattr(self, f.name))
            check_range(name, f.metadata["allowed"], value)
            object.__setattr__(self, f.name, value)

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: list(v) if isinstance(v, tuple) else v
            for f in dataclasses.fields(self)
            for v in [getattr(self, f.name)]
        }
