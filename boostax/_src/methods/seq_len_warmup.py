# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Sequence-length warm-up: train on truncated sequences first.

A language model is trained on the first ``L`` positions of each sequence,
``L`` growing from `min_seq_length` to the batch's full length over the
first `duration` of training, in steps of `step_size` (Composer's
``SeqLengthWarmup``, which measured about 1.5x less time to the same loss
on GPT-2 125M). With ``W = int(total_steps * duration)`` warm-up updates,
``n = ceil((full - min) / step_size)`` length increments (the last one
clipped to the full length when `step_size` does not divide the range)
and ``e = W // n`` updates per length, update ``u`` trains on

.. math::

  L(u) = \\min(\\text{full}, \\text{step\\_size} \\cdot \\lfloor u / e
         \\rfloor + \\text{min})

positions: the full length first at update ``n * e = W - (W mod n)``,
never after ``W``. Where `step_size` divides ``full - min`` this is
Composer's formula update for update (its ``max_seq_length`` the batch's
length). Where it does not, Composer counts ``(full - min) // step_size``
increments and gives the clipped last one ``e`` updates of its own, so its
full length arrives at ``(n + 1) * e``, up to ``2 W`` (60% of the run for a
30% `duration`); boostax counts that increment among the ``n``.

In boostax the schedule counts optimizer updates: train step ``i`` is
update ``i // k`` with gradient accumulation over k micro-steps, so every
micro-step of an update sees the same length. The length of a step is a
function of its position alone (the state's counter mirrored on the
host), never of time, so a resumed run continues bit for bit. Each length
is its own compiled program (shapes are static under XLA): the batch is
truncated inside it (`Lengths.cut_step`), and the programs of the lengths
to come compile in background threads while training runs
(`program_schedule.ProgramSchedule`).

Which leaves are cut: those of the entries `keys` names (a dict batch's
keys, a tuple batch's indices), every one of which must have the axis
`seq_axis`; without `keys`, those of the step's `batch_keys` entries, or
of the whole batch, whose rank is above `seq_axis` (tokens and targets of
a ``(tokens, targets)`` batch alike; per-example labels pass). Either way
the cut leaves must agree on their size along `seq_axis`, the full length:
a batch whose leaves disagree (an image-feature array of another length
beside the tokens) is refused, naming the sizes, rather than cut by the
length of whichever leaf comes first.

References:
  Li, Zhang and He, "The Stability-Efficiency Dilemma: Investigating
  Sequence Length Warmup for Training GPT Models", NeurIPS 2022
  (arXiv:2108.06084). MosaicML Composer, ``SeqLengthWarmup``
  (``composer/algorithms/seq_length_warmup/seq_length_warmup.py``:
  ``duration`` 0.3, ``min_seq_length`` 8, ``max_seq_length`` 1024,
  ``step_size`` 8, ``truncate=True``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import accumulation as accumulation_lib
from boostax._src import tree_utils, validation

PyTree = Any
Key = str | int

_WAY_OUT = (
    "name the entries that hold sequences with `keys` "
    "(boostax.seq_len_warmup(..., keys=('inputs', 'targets')), or the "
    "config's `seq_len_warmup.keys`), their axis with `seq_axis`, or switch "
    "the warm-up off"
)


def check_keys(keys: Any, name: str = "keys") -> tuple[Key, ...] | None:
    """Validates `keys`: ``None``, one entry, or distinct entries.

    An entry is a dict batch's key (a str) or a tuple batch's index (an
    int); one entry may be given alone.

    Args:
      keys: the value to check.
      name: the argument's name in messages.

    Returns:
      ``None`` or a tuple of the entries.

    Raises:
      TypeError: `keys` or an entry is of another type.
      ValueError: `keys` is empty or names an entry twice.
    """
    if keys is None:
        return None
    if isinstance(keys, str) or validation.is_int(keys):
        keys = (keys,)
    if isinstance(keys, bytes) or not isinstance(keys, Sequence):
        raise TypeError(
            f"`{name}` must be None, a key or a sequence of keys (the dict "
            "keys, or tuple indices, of the batch entries that hold "
            f"sequences), {validation.got(keys)}."
        )
    for key in keys:
        if not (isinstance(key, str) or validation.is_int(key)):
            raise TypeError(
                f"`{name}` must name batch entries by dict key (str) or tuple "
                f"index (int), got {key!r} ({type(key).__name__}) in {keys!r}."
            )
    keys = tuple(k if isinstance(k, str) else int(k) for k in keys)
    if not keys or len(set(keys)) != len(keys):
        raise ValueError(
            f"`{name}` must name at least one batch entry, each once, got "
            f"{keys!r}; None: every leaf with the sequence axis."
        )
    return keys


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which leaves a warm-up cuts: those of the `keys` entries (all of
    them, when `strict`), else every leaf with the sequence axis."""

    keys: tuple[Key, ...] | None
    strict: bool
    source: str  # where `keys` came from, for messages

    @classmethod
    def of(cls, keys, batch_keys=None) -> Scope:
        if keys is not None:
            return cls(keys, True, f"`keys`={keys!r}")
        if batch_keys is not None:
            batch_keys = tuple(batch_keys)
            source = f"the step's `batch_keys`={batch_keys!r}"
            return cls(batch_keys, False, source)
        return cls(None, False, "no `keys`")


@dataclasses.dataclass(frozen=True)
class SeqLenWarmup:
    """A sequence-length warm-up schedule (`seq_len_warmup` builds one).

    Attributes:
      total_steps: the run's length in optimizer updates (train steps / k
        with gradient accumulation over k micro-steps).
      duration: the fraction of `total_steps` over which the length grows.
      min_seq_length: the first length.
      max_seq_length: the full length: ``None`` reads it from the first
        batch (the size along `seq_axis`); given, the batch's must equal
        it.
      step_size: the length grows by this much at a time.
      seq_axis: the sequence axis of the batch's leaves (axis 0 is the
        batch).
      keys: the batch entries that hold sequences (dict keys or tuple
        indices); ``None``: the step's `batch_keys` entries, or the whole
        batch.
    """

    total_steps: int
    duration: float = 0.3
    min_seq_length: int = 8
    max_seq_length: int | None = None
    step_size: int = 8
    seq_axis: int = 1
    keys: tuple[Key, ...] | None = None

    def __post_init__(self):
        validation.check_int("total_steps", self.total_steps, minimum=1)
        duration = validation.check_number(
            "duration", self.duration, minimum=0, maximum=1, open_minimum=True
        )
        validation.check_int("min_seq_length", self.min_seq_length, minimum=1)
        validation.check_optional_int(
            "max_seq_length",
            self.max_seq_length,
            minimum=1,
            none_means="the batch's length",
        )
        if (
            self.max_seq_length is not None
            and self.max_seq_length <= self.min_seq_length
        ):
            raise ValueError(
                f"`max_seq_length` ({self.max_seq_length}) must be above "
                f"`min_seq_length` ({self.min_seq_length}): nothing to warm up."
            )
        validation.check_int("step_size", self.step_size, minimum=1)
        validation.check_int("seq_axis", self.seq_axis, minimum=1)
        object.__setattr__(self, "duration", float(duration))
        object.__setattr__(self, "keys", check_keys(self.keys))

    def lengths(self, full_length: int) -> np.ndarray:
        """The length of every update until the full one is reached.

        Args:
          full_length: the batch's sequence length.

        Returns:
          ``int`` array: entry ``u`` is update ``u``'s length; every later
          update trains on `full_length`, the first at update
          ``len(lengths)`` = ``n * e`` (the module's docstring), which is
          at most ``int(total_steps * duration)``.

        Raises:
          ValueError: `full_length` differs from a given `max_seq_length`,
            is not above `min_seq_length`, or the warm-up has fewer updates
            than length increments (Composer divides by zero there).
        """
        full = validation.check_int("full_length", full_length, minimum=1)
        if self.max_seq_length is not None and full != self.max_seq_length:
            raise ValueError(
                f"The batch's sequence length (size {full} along `seq_axis` "
                f"{self.seq_axis}) differs from `max_seq_length` "
                f"{self.max_seq_length}: pass batches of that length, or "
                "leave `max_seq_length` out (None: the batch's)."
            )
        if full <= self.min_seq_length:
            raise ValueError(
                f"`min_seq_length` {self.min_seq_length} is not below the "
                f"batch's sequence length {full}: nothing to warm up. Lower "
                "`min_seq_length`, or switch the warm-up off."
            )
        # Ceil: a last increment shorter than `step_size` (clipped to the
        # full length) is one of the `increments`, so the full length
        # arrives within the warm-up (Composer's floor gives it `every`
        # more updates, past `duration`).
        increments = -(-(full - self.min_seq_length) // self.step_size)
        warmup = int(self.total_steps * self.duration)
        every = warmup // increments
        if every < 1:
            raise ValueError(
                f"The warm-up spans int(total_steps * duration) = {warmup} "
                f"update(s), fewer than its {increments} length increments "
                f"(from {self.min_seq_length} to {full} by {self.step_size}): "
                "raise `total_steps`, `duration` or `step_size`."
            )
        updates = np.arange(every * increments)
        return np.minimum(
            self.step_size * (updates // every) + self.min_seq_length, full
        )

    def sequence_length(self, batch: PyTree, batch_keys=None) -> int:
        """The full length of `batch`: the size along `seq_axis` of the
        leaves this warm-up cuts (`keys`, else those of the step's
        `batch_keys` entries or the whole batch; `sequence_length`)."""
        scope = Scope.of(self.keys, batch_keys)
        return _find_sequences(batch, self.seq_axis, scope)[1]

    def bind(
        self, full_length: int, micro_steps: int = 1, *, batch_keys=None
    ) -> Lengths:
        """The `Lengths` of a run on batches of `full_length` whose updates
        take `micro_steps` train steps each, cutting the leaves of `keys`
        (else of the step's `batch_keys` entries, or of the whole batch)."""
        return Lengths(
            self,
            self.lengths(full_length),
            full_length,
            micro_steps,
            Scope.of(self.keys, batch_keys),
        )

    def bind_batch(
        self, batch: PyTree, micro_steps: int = 1, *, batch_keys=None
    ) -> Lengths:
        """`bind` to the full length of `batch` (`sequence_length`)."""
        full = self.sequence_length(batch, batch_keys)
        return self.bind(full, micro_steps, batch_keys=batch_keys)


def seq_len_warmup(
    total_steps: int,
    *,
    duration: float = 0.3,
    min_seq_length: int = 8,
    max_seq_length: int | None = None,
    step_size: int = 8,
    seq_axis: int = 1,
    keys: Key | Sequence[Key] | None = None,
) -> SeqLenWarmup:
    """Sequence-length warm-up, for `boostax.make_train_step` or `TrainStep`.

    Update ``u`` trains on the first ``L(u)`` positions of every sequence
    of its batch: ``L`` grows from `min_seq_length` by `step_size` every
    ``e = int(total_steps * duration) // n`` updates, with ``n =
    ceil((full - min_seq_length) / step_size)`` increments, and is the
    batch's full length from update ``n * e`` on, at the latest from
    ``int(total_steps * duration)`` (Composer's ``SeqLengthWarmup``; see
    the module's docstring for the formula and where it departs from
    Composer's). Each length is its own compiled program; the programs of
    later lengths compile in the background.

    Args:
      total_steps: the run's length in optimizer updates.
      duration: the fraction of `total_steps` the lengths grow over
        (Composer's default 0.3), in (0, 1].
      min_seq_length: the first length (Composer's 8).
      max_seq_length: the full length, ``None``: the first batch's.
        Composer's default is 1024; here the batch's own length, which a
        given value must equal.
      step_size: the growth of the length at a time (Composer's 8: a
        multiple of 8 suits tensor cores).
      seq_axis: the sequence axis of the batch's leaves (default 1:
        ``(batch, length, ...)``).
      keys: the batch entries that hold sequences: keys of a dict batch
        (e.g. ``("inputs", "targets")``) or indices of a tuple batch; every
        leaf under them is cut and must have the axis `seq_axis`, other
        entries pass unchanged. ``None``: the step's `batch_keys` entries
        (with a dict batch), else the whole batch; there the leaves of rank
        above `seq_axis` are cut, and they must agree on its size.

    Returns:
      A `SeqLenWarmup`.

    Raises:
      ValueError, TypeError: a setting out of its range or of another type
        (the message names it).

    Example:
      >>> import boostax
      >>> warmup = boostax.seq_len_warmup(100, min_seq_length=8)
      >>> [int(n) for n in warmup.lengths(32)[::10]]
      [8, 16, 24]
      >>> lengths = boostax.seq_len_warmup(20, duration=0.5).lengths(20)
      >>> [int(n) for n in lengths], len(lengths)  # 20 from update 10 on
      ([8, 8, 8, 8, 8, 16, 16, 16, 16, 16], 10)
    """
    return SeqLenWarmup(
        total_steps,
        duration,
        min_seq_length,
        max_seq_length,
        step_size,
        seq_axis,
        check_keys(keys),
    )


class Lengths:
    """A `SeqLenWarmup` bound to a run: the length of every train step.

    Attributes:
      warmup: the `SeqLenWarmup`.
      table: the length of each update before the full one.
      full_length: the batch's sequence length.
      micro_steps: train steps per update.
      end: the first train step at the full length.
    """

    __slots__ = (
        "warmup",
        "table",
        "full_length",
        "micro_steps",
        "end",
        "_at",
        "_scope",
    )

    def __init__(self, warmup, table, full_length, micro_steps, scope=None):
        self.warmup = warmup
        self.table = np.asarray(table, np.int64)
        self.full_length = int(full_length)
        self.micro_steps = validation.check_int(
            "micro_steps", micro_steps, minimum=1
        )
        self.end = len(self.table) * self.micro_steps
        self._at = [int(n) for n in self.table]  # read on every call
        self._scope = scope or Scope.of(warmup.keys)

    def at(self, position: int) -> int:
        """The length of train step `position`."""
        update = position // self.micro_steps
        table = self._at
        return table[update] if update < len(table) else self.full_length

    def at_positions(self, positions: np.ndarray) -> np.ndarray:
        """`at` of an array of train steps."""
        updates = np.asarray(positions) // self.micro_steps
        inside = updates < len(self.table)
        return np.where(
            inside,
            self.table[np.minimum(updates, max(len(self.table) - 1, 0))],
            self.full_length,
        )

    def truncate(self, length: int) -> Callable[[PyTree], PyTree]:
        """``batch -> batch`` truncated to `length` (traced once)."""
        axis, full, scope = self.warmup.seq_axis, self.full_length, self._scope
        return lambda batch: _cut(batch, length, axis, scope, full)

    def cut_step(self, step: Callable, length: int) -> Callable:
        """``step(state, batch)`` run on the batch cut to `length`.

        A step that fails on the cut batch but not on the full one fails
        because of the cut (a model whose parameters fix the size of the
        axis cut: features, not sequences): the error names the warm-up
        and what it needs, not the model or its state. The full batch is
        tried only then, when the step is traced.

        Args:
          step: ``step(state, batch) -> anything``, traceable.
          length: the positions kept.

        Returns:
          The step on cut batches.
        """
        cut = self.truncate(length)

        @functools.wraps(step)
        def on_cut_batch(state, batch):
            short = cut(batch)  # refusals of the batch itself pass as they are
            if length == self.full_length:
                return self._with_tokens(step(state, short), short, length)
            try:
                outputs = step(state, short)
            except Exception as error:
                if not traces(step, state, batch):
                    raise  # the full batch fails too: not the warm-up's
                raise self._cut_error(batch, length, error) from error
            return self._with_tokens(outputs, short, length)

        return on_cut_batch

    def _with_tokens(self, outputs, short, length: int):
        """A step's ``(state, metrics)`` with the warm-up's metrics added:
        ``sequence_length``, the positions the step trained on, and
        ``tokens``, the batch's sequences times that length (the first leaf
        cut: its sizes up to `seq_axis`), both known when the step is
        traced. A loop that times its steps divides ``tokens`` by the time
        for tokens per second."""
        new_state, metrics = outputs
        indices, _ = _find_sequences(short, self.warmup.seq_axis, self._scope)
        shape = np.shape(jax.tree.leaves(short)[indices[0]])
        tokens = math.prod(shape[: self.warmup.seq_axis + 1])
        return new_state, {
            **metrics,
            "sequence_length": jnp.asarray(length, jnp.int32),
            "tokens": jnp.asarray(tokens, jnp.int32),
        }

    def _cut_error(self, batch, length, error) -> ValueError:
        axis = self.warmup.seq_axis
        indices, _ = _find_sequences(batch, axis, self._scope)
        leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
        cut = describe_leaves([leaves[i] for i in indices])
        return ValueError(
            f"seq_len_warmup: the step fails on the batch cut to its first "
            f"{length} of {self.full_length} positions along `seq_axis` "
            f"{axis} (the leaves cut: {cut}), and runs on the whole batch: "
            "what was cut is not a sequence the model reads position by "
            "position (its parameters fix that size: features, an image). "
            "Sequence-length warm-up needs a model of sequences whose "
            "length may vary (a language model's tokens and targets): "
            f"{_WAY_OUT} (`seq_len_warmup.enabled` False). The step's error "
            f"on the cut batch: {type(error).__name__}: {error}"
        )


def traces(step, state, batch) -> bool:
    """Whether ``step(state, batch)`` traces (shapes only, no compile)."""
    abstract = jax.tree.map(
        lambda x: (
            jax.ShapeDtypeStruct(np.shape(x), x.dtype)
            if hasattr(x, "dtype")
            else x
        ),
        (state, batch),
    )
    try:
        jax.eval_shape(step, *abstract)
    except Exception:  # noqa: BLE001  (any failure: the cut is not the cause)
        return False
    return True


def entry_paths(batch, scope: Scope, who: str = "seq_len_warmup") -> list:
    """The path key (`jax.tree_util`) of each entry `scope.keys` names
    (`who`: the method named in messages)."""
    keys = scope.keys
    assert keys is not None  # a scope without keys names no entry
    children = jax.tree_util.tree_flatten_with_path(
        batch, is_leaf=lambda x: x is not batch
    )[0]
    paths = [path[0] for path, _ in children if path]
    if isinstance(batch, Mapping):
        missing = [k for k in keys if k not in batch]
        if missing:
            raise ValueError(
                f"{who}: {scope.source} names the entry "
                f"{missing[0]!r}, which the batch does not hold: its entries "
                f"are {list(batch)}. Name entries it holds."
            )
        by_key = {getattr(p, "key", None): p for p in paths}
        return [by_key[k] for k in keys if k in by_key]
    if isinstance(batch, (tuple, list)) and len(paths) == len(batch):
        bad = [
            k
            for k in keys
            if not isinstance(k, int) or not -len(batch) <= k < len(batch)
        ]
        if bad:
            raise ValueError(
                f"{who}: {scope.source} names the entry {bad[0]!r} "
                f"of a {type(batch).__name__} batch of {len(batch)} entries: "
                f"name its entries by index, 0 to {len(batch) - 1}."
            )
        return [paths[int(k)] for k in keys]
    raise TypeError(
        f"{who}: {scope.source} names entries of a dict batch (or "
        f"indices of a tuple batch); the batch is a {type(batch).__name__}. "
        "Leave `keys` out (None) to pick the leaves by their rank."
    )


def describe_leaves(leaves, axis=None) -> str:
    """``batch['inputs'] (4, 16), ...`` (sizes along `axis`, when given)."""
    return ", ".join(
        f"batch{jax.tree_util.keystr(path)} "
        + (str(np.shape(x)) if axis is None else str(np.shape(x)[axis]))
        for path, x in leaves
    )


def _find_sequences(batch, seq_axis: int, scope: Scope):
    """``(indices of the leaves to cut, in jax.tree order; their length)``.

    Raises:
      ValueError: no leaf has the axis, a leaf of a named entry lacks it,
        or the leaves to cut disagree on its size.
    """
    leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
    indices = list(range(len(leaves)))
    if scope.keys is not None:
        # A leaf belongs to the entry its path starts with.
        entries = [(entry,) for entry in entry_paths(batch, scope)]
        indices = [i for i in indices if leaves[i][0][:1] in entries]
    flat = [leaves[i] for i in indices]
    if scope.strict:
        short = [(p, x) for p, x in flat if np.ndim(x) <= seq_axis]
        if short or not flat:
            problem = (
                f"{describe_leaves(short)} has rank {seq_axis} or less"
                if short
                else "they hold no array"
            )
            raise ValueError(
                f"seq_len_warmup: {scope.source} names the entries that hold "
                f"sequences, cut along `seq_axis`={seq_axis}, but {problem}. "
                "Name only entries whose leaves are (batch, length, ...) "
                "arrays, or set `seq_axis`."
            )
    found = [i for i in indices if np.ndim(leaves[i][1]) > seq_axis]
    if not found:
        raise ValueError(
            "Sequence-length warm-up (seq_len_warmup) needs batch leaves "
            f"with a sequence axis `seq_axis`={seq_axis} (rank above "
            f"{seq_axis}); with {scope.source}, the leaves it looks at have "
            f"shapes [{describe_leaves(flat)}]: a batch without sequences, "
            "which it cannot shorten. Pass batches of (batch, length, ...) "
            f"sequences, {_WAY_OUT}."
        )
    sizes = {int(np.shape(leaves[i][1])[seq_axis]) for i in found}
    if len(sizes) > 1:
        names = (
            f" (its entries: {list(batch)})"
            if isinstance(batch, Mapping)
            else ""
        )
        raise ValueError(
            "seq_len_warmup cannot tell the batch's sequence length: with "
            f"{scope.source}, it cuts every leaf with an axis "
            f"`seq_axis`={seq_axis}, and these disagree on its size: "
            f"{describe_leaves([leaves[i] for i in found], seq_axis)}{names}. "
            f"To cut only the sequences, {_WAY_OUT}."
        )
    return found, sizes.pop()


def _cut(batch, length, seq_axis: int, scope: Scope, full_length=None):
    """`batch` with the leaves of `scope` cut to `length` positions."""
    indices, full = _find_sequences(batch, seq_axis, scope)
    if full_length is not None and full != full_length:
        raise ValueError(
            f"The batch's sequences have {full} positions along `seq_axis` "
            f"{seq_axis}, and this sequence-length warm-up was bound to "
            f"{full_length} (the first batch's): it takes batches of that "
            "length only."
        )
    validation.check_int_in("length", length, 1, full)
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    for i in indices:
        leaves[i] = jax.lax.slice_in_dim(leaves[i], 0, length, axis=seq_axis)
    return jax.tree_util.tree_unflatten(treedef, leaves)


def sequence_length(batch: PyTree, seq_axis: int = 1, *, keys=None) -> int:
    """The batch's sequence length: the size along `seq_axis` of its
    sequence leaves (those of the `keys` entries, else every leaf of rank
    above `seq_axis`), which must agree.

    Raises:
      ValueError: no leaf has an axis `seq_axis` (a batch without
        sequences: the warm-up would truncate nothing), a leaf of the
        `keys` entries lacks it, or the leaves disagree on its size.
    """
    validation.check_int("seq_axis", seq_axis, minimum=1)
    scope = Scope.of(check_keys(keys))
    return _find_sequences(batch, seq_axis, scope)[1]


def truncate_sequence(
    batch: PyTree,
    length: int,
    *,
    seq_axis: int = 1,
    full_length: int | None = None,
    keys: Key | Sequence[Key] | None = None,
) -> PyTree:
    """`batch` with its sequences cut to their first `length` positions.

    The sequences are the leaves of the entries `keys` names (each must
    have the axis `seq_axis`), else every leaf of rank above `seq_axis`;
    they must agree on their size along it. Each is sliced to ``[...,
    :length, ...]`` on that axis; other leaves pass unchanged. Works on
    NumPy and JAX arrays, under ``jax.jit`` (`length` is static).

    Args:
      batch: a pytree of arrays, e.g. ``(tokens, targets)``.
      length: the positions kept, in [1, the sequences' length].
      seq_axis: the sequence axis (default 1: ``(batch, length, ...)``).
      full_length: the length the sequences must have (a warm-up's,
        bound to its first batch); default: theirs.
      keys: the entries that hold sequences: dict keys, or indices of a
        tuple batch; ``None``: every leaf with the axis.

    Returns:
      The truncated batch, the same tree structure.

    Raises:
      ValueError: no leaf has the sequence axis, a leaf of the `keys`
        entries lacks it, the sequences disagree on its size or differ
        from `full_length`, or `length` is outside [1, their length].
      TypeError: `keys` is not a key or sequence of keys, or names entries
        of a batch that is neither a dict nor a tuple.

    Example:
      >>> import jax.numpy as jnp, numpy as np, boostax
      >>> tokens = jnp.arange(12).reshape(2, 6)
      >>> cut, = boostax.truncate_sequence((tokens,), 4)
      >>> cut.tolist()
      [[0, 1, 2, 3], [6, 7, 8, 9]]
      >>> batch = {"image": np.zeros((2, 5, 3)), "inputs": np.ones((2, 16))}
      >>> cut = boostax.truncate_sequence(batch, 4, keys="inputs")
      >>> cut["inputs"].shape, cut["image"].shape
      ((2, 4), (2, 5, 3))
    """
    validation.check_int("seq_axis", seq_axis, minimum=1)
    if full_length is not None:
        validation.check_int("full_length", full_length, minimum=1)
    scope = Scope.of(check_keys(keys))
    return _cut(batch, length, seq_axis, scope, full_length)


def from_config(section) -> SeqLenWarmup | None:
    """The `SeqLenWarmup` of a config's ``seq_len_warmup`` section
    (`config_sections.SeqLenWarmupSection`), ``None`` when not ``enabled``."""
    if not section.enabled:
        return None
    return SeqLenWarmup(
        section.total_steps,
        section.duration,
        section.min_seq_length,
        section.max_seq_length,
        section.step_size,
        section.seq_axis,
        section.keys,
    )


def micro_steps(optimizer, opt_state, freezing=None) -> int:
    """Train steps per optimizer update: k of gradient accumulation.

    Raises:
      ValueError: the accumulation is not the optimizer's outermost stage
        or takes a schedule of k (its updates cannot be counted from the
        step's position).
    """
    if freezing is not None:
        return freezing.micro_steps  # checked against the optimizer
    if not tree_utils.contains_state(
        opt_state, accumulation_lib.GradientAccumulationState
    ):
        return 1
    k = accumulation_lib.accumulation_steps(optimizer)
    if (
        not isinstance(opt_state, accumulation_lib.GradientAccumulationState)
        or k is None
    ):
        raise ValueError(
            "Sequence-length warm-up (and progressive resizing) counts "
            "optimizer updates as train steps // k, so gradient "
            "accumulation must be the optimizer's "
            "outermost stage with a fixed k (boostax.gradient_accumulation("
            "inner, k), or the config's grad_accumulation); got one nested "
            "inside the optimizer or with a schedule of k."
        )
    return k
