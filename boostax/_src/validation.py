# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by every public function of boostax.

Each check names the argument, says what was expected and shows what was
given, and returns the value in its canonical form. Booleans are booleans:
``"False"``, ``0`` or ``np.bool_`` are not accepted where a flag is asked for
(``bool("False")`` is ``True``), and a bool is not accepted where an int or a
number is (``True`` is not the int 1 a user meant).

This module imports nothing from boostax, so the Optax transforms at the
bottom of the package can use it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import optax
from flax import linen as nn
from flax import nnx

_REPR_LIMIT = 80


def _short_repr(value: Any) -> str:
    """``repr(value)``, cut to about 80 characters (arrays, pytrees)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a broken __repr__ must not hide the error)
        text = f"<{type(value).__name__} object>"
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    return text


def _got(value: Any) -> str:
    return f"got {type(value).__name__} ({_short_repr(value)})"


def got(value: Any) -> str:
    """``"got TYPE (VALUE)"``, the end of every message here (shortened)."""
    return _got(value)


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` if it is a Python ``bool``; else raises ``TypeError``."""
    if not isinstance(value, bool):
        raise TypeError(
            f"`{name}` must be a bool (True or False), {_got(value)}."
        )
    return value


def check_optional_bool(name: str, value: Any) -> bool | None:
    """`check_bool`, with ``None`` allowed (a default decided later)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(
            f"`{name}` must be a bool (True or False) or None (decided "
            f"later), {_got(value)}."
        )
    return value


def is_int(value: Any) -> bool:
    """Whether `value` is an integer (a NumPy integer too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(
        value, (bool, _np_bool())
    )


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    or_else: str | None = None,
) -> int:
    """Returns `value` as an ``int``; it must be an integer >= `minimum`.

    Args:
      name: the argument's name, for the message.
      value: the value given.
      minimum: the smallest value accepted (``None``: unbounded).
      or_else: what else the argument accepts, which the caller handled
        before (``"a schedule (step -> int)"``), for the message.

    Raises:
      TypeError: `value` is not an integer (a bool is not one).
      ValueError: `value` is below `minimum`.
    """
    bound = "" if minimum is None else f" >= {minimum}"
    alternative = "" if or_else is None else f" or {or_else}"
    expected = f"`{name}` must be an int{bound}{alternative}"
    if not is_int(value):
        raise TypeError(f"{expected}, {_got(value)}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{expected}, got {value!r}.")
    return int(value)


def check_int_in(name: str, value: Any, low: int, high: int) -> int:
    """Returns `value` as an ``int``; it must be an integer in [low, high].

    Raises:
      TypeError: `value` is not an integer (a bool is not one).
      ValueError: `value` is outside [`low`, `high`].
    """
    expected = f"`{name}` must be an int in [{low}, {high}]"
    if not is_int(value):
        raise TypeError(f"{expected}, {_got(value)}.")
    if not low <= value <= high:
        raise ValueError(f"{expected}, got {value!r}.")
    return int(value)


def check_optional_int(
    name: str, value: Any, *, minimum: int | None = None, none_means: str
) -> int | None:
    """`check_int`, with ``None`` allowed (`none_means` says what it does)."""
    if value is None:
        return None
    return check_int(
        name, value, minimum=minimum, or_else=f"None ({none_means})"
    )


def check_int_code(
    name: str, value: Any, codes: Mapping[int, str], *, context: str = ""
) -> int:
    """Returns `value` as an ``int``; it must be one of the keys of `codes`.

    For MindSpore's integer options whose values stand for names, e.g.
    ``codes={0: "continuous", 1: "interval"}``: the message lists each code
    with its name (``"0 (continuous) or 1 (interval)"``).

    Args:
      name: the argument's name, for the message.
      value: the value given.
      codes: the accepted ints and what each means.
      context: words put before the message (MindSpore's own message).

    Raises:
      TypeError: `value` is not an integer (a bool is not one).
      ValueError: `value` is not one of the codes.
    """
    described = [f"{code} ({meaning})" for code, meaning in codes.items()]
    if len(described) > 1:
        described = [", ".join(described[:-1]), described[-1]]
    expected = f"{context}`{name}` must be {' or '.join(described)}"
    if not is_int(value):
        raise TypeError(f"{expected}, {_got(value)}.")
    if value not in codes:
        raise ValueError(f"{expected}, got {value!r}.")
    return int(value)


def _allowed_numbers(
    minimum: float | None,
    maximum: float | None,
    open_minimum: bool,
    open_maximum: bool,
    allow_inf: bool,
) -> str:
    """What `check_number` accepts, in words (``"a finite number > 0"``)."""
    number = "a number" if allow_inf else "a finite number"
    if minimum is not None and maximum is not None:
        low = ("(" if open_minimum else "[") + f"{minimum:g}"
        high = f"{maximum:g}" + (")" if open_maximum else "]")
        return f"{number} in {low}, {high}"
    if minimum is not None:
        return f"{number} {'>' if open_minimum else '>='} {minimum:g}"
    if maximum is not None:
        return f"{number} {'<' if open_maximum else '<='} {maximum:g}"
    return number


def _number(
    name: str,
    value: Any,
    allowed: str,  # what follows "`name` must"
    minimum: float | None,
    maximum: float | None,
    open_minimum: bool,
    open_maximum: bool,
    allow_inf: bool,
) -> float:
    if isinstance(value, (bool, _np_bool())) or not isinstance(
        value, numbers.Real
    ):
        raise TypeError(f"`{name}` must {allowed}, {_got(value)}.")
    value = float(value)
    ok = not math.isnan(value) and (allow_inf or math.isfinite(value))
    if minimum is not None:
        ok = ok and (value > minimum if open_minimum else value >= minimum)
    if maximum is not None:
        ok = ok and (value < maximum if open_maximum else value <= maximum)
    if not ok:
        raise ValueError(f"`{name}` must {allowed}, got {value!r}.")
    return value


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
    allow_inf: bool = False,
) -> float:
    """Returns `value` as a ``float``: a finite real number in a range.

    Args:
      name: the argument's name, for the message.
      value: the value given.
      minimum, maximum: the bounds (``None``: unbounded).
      open_minimum, open_maximum: whether the bounds are excluded.
      allow_inf: whether ``inf`` (within the bounds) is accepted; NaN never is.

    Raises:
      TypeError: `value` is not a real number (a bool is not one).
      ValueError: `value` is NaN, infinite (unless `allow_inf`) or out of
        range.
    """
    bounds = (minimum, maximum, open_minimum, open_maximum, allow_inf)
    return _number(name, value, "be " + _allowed_numbers(*bounds), *bounds)


def check_optional_number(
    name: str,
    value: Any,
    *,
    none_means: str,
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
    allow_inf: bool = False,
) -> float | None:
    """`check_number`, with ``None`` allowed (`none_means`: what it does)."""
    if value is None:
        return None
    bounds = (minimum, maximum, open_minimum, open_maximum, allow_inf)
    allowed = f"be {_allowed_numbers(*bounds)} or None ({none_means})"
    return _number(name, value, allowed, *bounds)


def check_numbers(
    name: str,
    values: Any,
    *,
    allow_empty: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
    allow_inf: bool = False,
) -> list[float]:
    """Returns `values` as a list of floats, each a `check_number` number.

    `values` is a list, tuple or 1-D array (not a str, a set or a scalar).
    A bad element is named by its index.
    """
    if hasattr(values, "ndim") and hasattr(values, "tolist"):  # an array
        if values.ndim != 1:
            raise ValueError(
                f"`{name}` must be a 1-D sequence of numbers, got an array "
                f"of shape {tuple(values.shape)}."
            )
        values = values.tolist()
    items = check_sequence(
        name, values, "a list, tuple or 1-D array of numbers"
    )
    if not allow_empty and not items:
        raise ValueError(f"`{name}` must not be empty.")
    bounds = (minimum, maximum, open_minimum, open_maximum, allow_inf)
    plural = _allowed_numbers(*bounds).replace("a ", "", 1)
    plural = plural.replace("number", "numbers", 1)
    allowed = f"hold {plural} only"
    out = []
    for i, item in enumerate(items):
        try:
            out.append(_number(name, item, allowed, *bounds))
        except (TypeError, ValueError) as e:
            raise type(e)(f"{str(e)[:-1]} at index {i}.") from None
    return out


def _same_kind(value: Any, option: Any) -> bool:
    """Whether `value` has the type of `option` (NumPy scalars count)."""
    if isinstance(option, bool):
        return isinstance(value, (bool, _np_bool()))
    if isinstance(option, numbers.Integral):
        return is_int(value)
    if isinstance(option, numbers.Real):
        return isinstance(value, numbers.Real) and not isinstance(
            value, (bool, _np_bool())
        )
    return isinstance(value, type(option))


def check_one_of(name: str, value: Any, allowed: tuple[Any, ...]) -> Any:
    """Returns `value` if it is one of `allowed`.

    Raises:
      TypeError: `value` has none of the types of `allowed` (``1`` or
        ``True`` where names are expected).
      ValueError: `value` has the right type but is not in `allowed`.
    """
    expected = f"`{name}` must be one of {list(allowed)}"
    if not any(_same_kind(value, option) for option in allowed):
        raise TypeError(f"{expected}, {_got(value)}.")
    try:
        found = value in allowed
    except TypeError:  # unhashable or uncomparable
        found = False
    if not found:
        raise ValueError(f"{expected}, got {value!r}.")
    return value


def check_callable(name: str, value: Any, what: str = "a callable") -> Any:
    """Returns `value` if it is callable; else raises ``TypeError``."""
    if not callable(value):
        raise TypeError(f"`{name}` must be {what}, {_got(value)}.")
    return value


def check_instance(
    name: str, value: Any, types: type | tuple[type, ...], what: str
) -> Any:
    """Returns `value` if it is an instance of `types`; else ``TypeError``.

    Args:
      name: the argument's name, for the message.
      value: the value given.
      types: the accepted class or classes.
      what: what was expected, in words (``"a jax.sharding.Mesh"``).
    """
    if not isinstance(value, types):
        raise TypeError(f"`{name}` must be {what}, {_got(value)}.")
    return value


def check_optimizer(name: str, value: Any) -> optax.GradientTransformation:
    """Returns `value` if it is an Optax optimizer; else ``TypeError``.

    An ``optax.MultiSteps`` (a wrapper, not a transformation) is named,
    with both ways to accumulate: the common mistake of passing it whole.
    """
    if isinstance(value, optax.MultiSteps):
        raise TypeError(
            f"`{name}` must be an optax.GradientTransformation, got an "
            "optax.MultiSteps, which is a wrapper: pass "
            "`multi_steps.gradient_transformation()`, or pass its inner "
            "optimizer and let boostax accumulate (the `grad_accumulation` "
            "config section, {'boost': {'mode': 'manual', "
            "'grad_accumulation': True}, 'grad_accumulation': "
            "{'grad_accumulation_step': k}}, or "
            "`boostax.gradient_accumulation(inner, k)`), which runs the "
            "inner optimizer once per k micro-steps, not on every one."
        )
    return check_instance(
        name,
        value,
        optax.GradientTransformation,
        "an optax.GradientTransformation (e.g. optax.sgd(0.1))",
    )


def check_flax_module(name: str, value: Any) -> nn.Module | nnx.Module:
    """Returns `value` if it is a Flax Linen or NNX module."""
    return check_instance(
        name, value, (nn.Module, nnx.Module), "a Flax Linen or NNX module"
    )


def check_str(name: str, value: Any, *, allow_empty: bool = False) -> str:
    """Returns `value` if it is a ``str`` (non-empty unless `allow_empty`)."""
    if not isinstance(value, str):
        raise TypeError(f"`{name}` must be a str, {_got(value)}.")
    if not allow_empty and not value:
        raise ValueError(f"`{name}` must be a non-empty str, got ''.")
    return value


def check_sequence(
    name: str, value: Any, what: str = "a list or tuple"
) -> list:
    """Returns `value` as a list; it must be a list or tuple (not a str).

    A str is a sequence of characters, never what a caller meant by a list
    of names, so it is refused.
    """
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"`{name}` must be {what}, {_got(value)}.")
    return list(value)


def check_axis_names(name: str, value: Any) -> tuple[str, ...]:
    """Returns mesh axis names as a tuple: one ``str``, or a tuple of them.

    Raises:
      TypeError: `value` is neither a str nor a non-empty tuple of str.
      ValueError: the tuple repeats a name.
    """
    if isinstance(value, str):
        return (value,)
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(a, str) for a in value)
    ):
        if len(set(value)) != len(value):
            raise ValueError(
                f"`{name}` must not repeat an axis name, got {value!r}."
            )
        return value
    raise TypeError(
        f"`{name}` must be a mesh axis name (str) or a non-empty tuple of "
        f"them, {_got(value)}."
    )


def _np_bool():
    # NumPy is always installed with JAX; imported lazily to keep this module
    # free of heavy imports.
    import numpy as np

    return np.bool_
