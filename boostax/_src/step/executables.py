# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The compiled programs of a train step: one per freeze depth.

`Executables` jits the step function of each key (a freeze depth, or
``None`` without freezing), compiles it ahead of time for the shapes of the
first call, and can compile the keys a freezing sequence will need in
background threads while training runs. The functions come from a
`StepBuilder`; nothing here knows what a step does.

The freezing sequence decides how often each program runs: `sequence_keys`
maps the sequence to the programs (depths training the same leaves share
one), which gives the order they are first needed in (`keys_by_first_use`)
and the share of steps each one runs (`key_shares`, `cost_report`'s
weights).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

import jax
import numpy as np

from boostax._src.freezing import plan as freezing_lib
from boostax._src.step import train_state

# A freeze program: a depth, freezing.MASKED, or None (no freezing).
FreezeKey = int | str | None
# A program: a freeze program; with a sequence-length warm-up, the pair
# (freeze program, length).
Key = FreezeKey | tuple[FreezeKey, int]


def sequence_keys(freezing: freezing_lib.Freezing) -> np.ndarray:
    """The program (canonical depth) of each entry of the freeze sequence."""
    canonical = np.array(
        [freezing.canonical_depth(k) for k in range(len(freezing.groups))]
    )
    return canonical[np.asarray(freezing.sequence)]


def key_shares(freezing: freezing_lib.Freezing | None) -> dict[Key, float]:
    """``{key: fraction of the steps it runs}`` over the freeze sequence."""
    if freezing is None:
        return {None: 1.0}
    keys = sequence_keys(freezing)
    values, counts = np.unique(keys, return_counts=True)
    return {
        int(v): float(c) / len(keys)
        for v, c in zip(values, counts, strict=True)
    }


def keys_by_first_use(
    freezing: freezing_lib.Freezing, position: int
) -> list[FreezeKey]:
    """The programs in the order the sequence, from train step `position`,
    first needs them (wrapping around, unless the sequence does not wrap)."""
    keys = sequence_keys(freezing)
    index = position // freezing.micro_steps
    if freezing.wrap:
        ahead = np.roll(keys, -(index % len(keys)))
    else:
        ahead = keys[min(index, len(keys) - 1) :]
    unique, first = np.unique(ahead, return_index=True)
    return [int(k) for k in unique[np.argsort(first)]]


class HostOutputs(NamedTuple):
    """What the host puts back into a program's outputs (`Executables`).

    Attributes:
      fields: the state's fields the step returns as it was given them.
      constants: ``{name: value}`` of the metrics known when the step is
        traced (NumPy values, not traced arrays).
    """

    fields: tuple[str, ...] = ()
    constants: dict[str, Any] = {}

    def complete(self, state, outputs):
        """`outputs` (``(state, metrics)`` of the program) with the fields
        of the given `state` and the constant metrics put back."""
        new_state, metrics = outputs
        for name in self.fields:
            # The program's state is a new object no one else has seen
            # yet: setting its field costs 0.1 µs, ``replace`` 2.4 µs.
            object.__setattr__(new_state, name, getattr(state, name))
        if self.constants:
            metrics.update(self.constants)
        return new_state, metrics


class Program:
    """A compiled step as `Executables` runs it: ``program(state, batch)``.

    The compiled program (``jax.stages.Compiled``; its attributes, e.g.
    ``as_text``, ``cost_analysis``, are this one's) takes the state's
    leaves as two flat tuples: JAX's dispatch flattens and rebuilds tuples
    of arrays faster than a `TrainState` of nested containers (on a tiny
    MLP, 0.93x against 1.22x a lean step's time per call). ``moving``
    holds the leaves a step changes, donated with `donate_state`, and the
    program returns their new values; ``kept`` the leaves of the fields
    the host puts back (`HostOutputs`: the base key and the fingerprint),
    never donated nor returned. A step that gets back the state it
    returned passes the tuples it kept: nothing is flattened
    (`Executables`).

    Attributes:
      compiled: the ``jax.stages.Compiled`` of ``(moving, kept, batch) ->
        (new moving leaves, metrics)``.
      outputs: what the host puts back into its outputs (`HostOutputs`).
      in_tree: the state's treedef the program was compiled for.
      out_tree: its new state's treedef (the `outputs` fields ``None``).
      kept_positions: the positions of the ``kept`` leaves among the
        state's (``jax.tree.leaves`` order); the others are ``moving``.
    """

    def __init__(
        self,
        compiled: jax.stages.Compiled,
        outputs: HostOutputs,
        in_tree: jax.tree_util.PyTreeDef,
        out_tree: jax.tree_util.PyTreeDef,
        kept_positions: tuple[int, ...],
    ):
        self.compiled = compiled
        self.outputs = outputs
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.kept_positions = kept_positions
        self.moving_positions = _other_positions(in_tree, kept_positions)
        self._build = train_state.leaves_builder(out_tree)
        # Whether the new state's moving leaves are the program's outputs
        # (each kept field put back); else it is flattened when it returns.
        self._outputs_move = out_tree.num_leaves == len(self.moving_positions)

    def split(self, state) -> tuple[tuple, tuple]:
        """``(moving, kept)``: `state`'s leaves as the program takes them
        (ValueError or TypeError for a state of another structure)."""
        leaves = self.in_tree.flatten_up_to(state)
        return (
            tuple(leaves[i] for i in self.moving_positions),
            tuple(leaves[i] for i in self.kept_positions),
        )

    def __call__(self, state, batch):
        moving, kept = self.split(state)
        out, metrics = self.compiled(moving, kept, batch)
        return self.finish(kept, state, out, metrics)[:2]

    def finish(self, kept: tuple, state, out, metrics):
        """The compiled program's outputs (`out`: the new moving leaves)
        as ``(new state, metrics, its (moving, kept) leaves)``, those None
        where they are not known without flattening it."""
        out = tuple(out)
        new_state, metrics = self.outputs.complete(
            state, (self._build(out), metrics)
        )
        return new_state, metrics, (out, kept) if self._outputs_move else None

    def __getattr__(self, name):
        return getattr(self.compiled, name)


class Executables:
    """The jitted and compiled programs of a step, one per key.

    Args:
      function: ``function(key) -> step(state, batch)``, the (unjitted)
        step of each key.
      donate_state: donate the state's buffers to the step.
      given_fields: for a step ``(state, batch) -> (state, metrics dict)``
        with a dataclass state (`TrainState`), the names of the state's
        fields it may return as given (``("rng",)``). Where it does, and
        for the metrics that are constants when traced (NumPy values), the
        compiled program does not return them and each call puts them back
        (`HostOutputs`): a program's output that is an input or a constant
        is a copy kernel and a new buffer on every call (donated, an
        aliased output still to be dispatched). Their leaves are passed
        apart, never donated (`Program`'s ``kept``). Default ``()``: the
        outputs are the step's.

    Attributes:
      compile_seconds: ``{key: seconds}`` spent tracing and compiling each
        executable.
      compile_wait_seconds: how long calls have waited for compilation in
        all: compiling on the spot, or waiting for a background compile.
    """

    def __init__(
        self,
        function: Callable[[Key], Callable],
        *,
        donate_state: bool = False,
        given_fields: Sequence[str] = (),
    ):
        self._function = function
        self._donate = (0,) if donate_state else ()
        self._given_fields = tuple(given_fields)
        # `HostOutputs` of each key, found when its step is traced (None:
        # the step's outputs are the program's).
        self._outputs: dict[Key, HostOutputs | None] = {}
        self._jitted: dict[Key, Any] = {}
        self._programs: dict[Key, Any] = {}
        # ``(key, state treedef) -> (jitted flat program, what its trace
        # found: the new state's treedef, the moving and kept positions,
        # the HostOutputs)``
        self._flat: dict[tuple[Key, Any], tuple[Any, dict[str, Any]]] = {}
        self._compiled: dict[Key, Program] = {}
        # The state the last call returned (weakly) and its (moving, kept)
        # leaves: passed back, it is not flattened again.
        self._last: tuple[weakref.ref, tuple[tuple, tuple]] | None = None
        self._pending: dict[Key, Future] = {}
        self._pool: _CompilePool | None = None
        # Tracing runs one at a time (it holds the GIL anyway); XLA's
        # compilation, which releases it, runs in parallel.
        self._trace_lock = threading.Lock()
        self.compile_seconds: dict[Key, float] = {}
        self.compile_wait_seconds = 0.0

    def jitted(self, key: Key):
        """The ``jax.jit`` of `key`'s step (it compiles for any shapes):
        its outputs are the step's (traceable: it runs inside another
        ``jax.jit``). `trace` and `lower` read it."""
        if key not in self._jitted:
            self._jitted[key] = jax.jit(
                self._function(key), donate_argnums=self._donate
            )
        return self._jitted[key]

    def program(self, key: Key):
        """The ``jax.jit`` of the program that calls of `key` run: the step
        without the outputs the host puts back (`given_fields`); without
        those, the same as `jitted`."""
        if not self._given_fields:
            return self.jitted(key)
        if key not in self._programs:
            self._programs[key] = jax.jit(
                self._program_function(key), donate_argnums=self._donate
            )
        return self._programs[key]

    def _program_function(
        self,
        key: Key,
        fields: tuple[str, ...] | None = None,
        traced: dict[Key, HostOutputs | None] | None = None,
    ) -> Callable:
        """`key`'s step without the outputs the host puts back: of
        `fields` (default: the given fields, none if the whole state is
        donated), those it returns as given, and the constant metrics;
        tracing it records its `HostOutputs` in `traced` (default: those
        of `program`'s calls)."""
        step = self._function(key)
        if fields is None:
            fields = () if self._donate else self._given_fields
        if traced is None:
            traced = self._outputs

        def program(state, batch):
            new_state, metrics = step(state, batch)
            outputs = HostOutputs(
                # Returned as given: the very tracer of the input.
                tuple(f for f in fields if _same(new_state, state, f)),
                {
                    name: value
                    for name, value in metrics.items()
                    if isinstance(value, np.ndarray | np.generic)
                },
            )
            traced[key] = outputs
            new_state = new_state.replace(**dict.fromkeys(outputs.fields))
            metrics = {
                k: v for k, v in metrics.items() if k not in outputs.constants
            }
            return new_state, metrics

        return program

    def _complete(self, key: Key, state, outputs):
        host = self._outputs.get(key)
        return outputs if host is None else host.complete(state, outputs)

    def trace(self, key: Key, state, batch) -> jax.stages.Traced:
        """Traces `key`'s step for `state` and `batch` (placed batch)."""
        return self.jitted(key).trace(state, batch)

    def lower(self, key: Key, state, batch) -> jax.stages.Lowered:
        """Lowers `key`'s step for `state` and `batch` (placed batch)."""
        return self.jitted(key).lower(state, batch)

    def __call__(self, key: Key, state, batch):
        """Runs `key`'s step: its executable, compiled on first use.

        Per call, a dict lookup and a weak reference: the state this
        object last returned comes back as the leaves it kept, the
        executable's own call (JAX's C++ dispatch) checks the arguments
        against what it was compiled for, and arguments it refuses (other
        shapes, say a smaller last batch; a state of another structure) go
        to ``jax.jit``, which traces them once.
        """
        program = self._compiled.get(key)
        if program is None:
            program = self.executable(key, state, batch)
        last = self._last
        # (A dead weak reference gives None, which must not pass for it.)
        if last is not None and state is not None and last[0]() is state:
            moving, kept = last[1]
        else:
            try:
                moving, kept = program.split(state)
            except (TypeError, ValueError):  # another structure: jit's
                return self._run_jitted(key, state, batch)
        try:
            out, metrics = program.compiled(moving, kept, batch)
        except TypeError:  # not the compiled shapes: jit handles them
            return self._run_jitted(key, state, batch)
        new_state, metrics, leaves = program.finish(kept, state, out, metrics)
        self._last = (
            None if leaves is None else (weakref.ref(new_state), leaves)
        )
        return new_state, metrics

    def _run_jitted(self, key: Key, state, batch):
        self._last = None
        return self._complete(key, state, self.program(key)(state, batch))

    def executable(self, key: Key, state, batch) -> Program:
        """`key`'s compiled step, compiling it or waiting for it."""
        if key in self._compiled:
            return self._compiled[key]
        start = time.perf_counter()
        future = self._pending.pop(key, None)
        if future is not None and not future.cancelled():
            compiled = future.result()
        else:  # not queued, or cancelled at exit: compile it here
            compiled = self._compile(key, abstract((state, batch)))
        self.compile_wait_seconds += time.perf_counter() - start
        self._compiled[key] = compiled
        return compiled

    def compiled(self) -> dict[Key, Program]:
        """The executables compiled so far, by key, as `Program` s (called,
        each returns what the step function does)."""
        return dict(self._compiled)

    def compile_ahead(self, keys: Sequence[Key], state, batch) -> None:
        """Starts compiling the steps of `keys`, in order, in background
        threads (`workers`)."""
        if self._pool is None:
            self._pool = _CompilePool(workers())
            # Queued compiles are dropped with the step that wanted them.
            weakref.finalize(self, self._pool.shutdown)
        args = abstract((state, batch))
        for key in keys:
            if key not in self._compiled and key not in self._pending:
                self.program(key)  # created here: workers only read it
                self._pending[key] = self._pool.submit(
                    _compile_if_alive, weakref.ref(self), key, args
                )

    @property
    def started_background(self) -> bool:
        return self._pool is not None

    @property
    def pending_compiles(self) -> int:
        """How many executables are still compiling in the background."""
        return sum(not f.done() for f in self._pending.values())

    def _flat_program(self, key: Key, in_tree) -> tuple[Any, dict[str, Any]]:
        """The ``jax.jit`` of `key`'s program on the state's leaves (two
        flat tuples, `Program`'s ``moving`` and ``kept``; `in_tree`
        rebuilds the state) and a dict of the moving and kept positions
        (``"moving"``, ``"kept"``) its trace adds the new state's treedef
        to (``"out"``) and its `HostOutputs` (``"outputs"``)."""
        if (key, in_tree) not in self._flat:
            kept_at = train_state.field_leaves(in_tree, self._given_fields)
            traced: dict[Key, HostOutputs | None] = {}
            if not self._given_fields:
                kept_at, step = (), self._function(key)
            elif kept_at is None:  # not a TrainState: nothing kept apart
                kept_at = ()
                step = self._program_function(key, traced=traced)
            else:  # the given fields are never donated: never returned
                step = self._program_function(
                    key, self._given_fields, traced=traced
                )
            moving_at = _other_positions(in_tree, kept_at)
            trees: dict[str, Any] = {
                "moving": moving_at,
                "kept": kept_at,
                "outputs": traced,
            }

            # (The parameters' names are the HLO's: moving_<i>, kept_<i>.)
            def program(moving, kept, batch):
                leaves = [None] * in_tree.num_leaves
                for i, leaf in zip(moving_at, moving, strict=True):
                    leaves[i] = leaf
                for i, leaf in zip(kept_at, kept, strict=True):
                    leaves[i] = leaf
                new_state, metrics = step(in_tree.unflatten(leaves), batch)
                out, trees["out"] = jax.tree.flatten(new_state)
                return tuple(out), metrics

            program.__name__ = getattr(step, "__name__", "program")
            self._flat[key, in_tree] = (
                jax.jit(program, donate_argnums=self._donate),
                trees,
            )
        return self._flat[key, in_tree]

    def _compile(self, key: Key, args) -> Program:
        """Traces and compiles `key`'s program for abstract `args`."""
        state, batch = args
        leaves, in_tree = jax.tree.flatten(state)
        with self._trace_lock:
            jitted, trees = self._flat_program(key, in_tree)
            start = time.perf_counter()
            lowered = jitted.lower(
                tuple(leaves[i] for i in trees["moving"]),
                tuple(leaves[i] for i in trees["kept"]),
                batch,
            )
            seconds = time.perf_counter() - start
        start = time.perf_counter()
        compiled = lowered.compile()
        self.compile_seconds[key] = seconds + time.perf_counter() - start
        return Program(
            compiled,
            trees["outputs"].get(key) or HostOutputs(),
            in_tree,
            trees["out"],
            trees["kept"],
        )


def _other_positions(tree, positions: Sequence[int]) -> tuple[int, ...]:
    """The leaf positions of `tree` not in `positions` (the ``moving``
    leaves, `positions` the ``kept`` ones), in order."""
    kept = set(positions)
    return tuple(i for i in range(tree.num_leaves) if i not in kept)


def _same(new_state, state, field: str) -> bool:
    return getattr(new_state, field) is getattr(state, field)


def workers() -> int:
    """Background compile threads: one core is left to the training steps
    (XLA's compiler and the steps both use every core they get)."""
    return max(1, (os.cpu_count() or 1) - 1)


def abstract(tree):
    """Shapes, dtypes and shardings of `tree`'s arrays (what compiling needs).

    Compiling from these instead of the arrays lets a background thread
    compile after the arrays were donated to a step.
    """

    def leaf(x):
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(
                x.shape,
                x.dtype,
                sharding=x.sharding,
                weak_type=x.aval.weak_type,
            )
        if isinstance(x, np.ndarray | np.generic):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    return jax.tree.map(leaf, tree)


def _compile_if_alive(executables_ref: weakref.ref, key, args):
    # A queued compile holds its step weakly, so a step that is no longer
    # used is collected, and its queued compiles cancelled (`finalize`).
    executables = executables_ref()
    if executables is None:
        raise RuntimeError("The train step was garbage collected.")
    return executables._compile(key, args)


class _CompilePool:
    """Threads running queued compiles in submission order.

    Not a ``ThreadPoolExecutor``: its threads are joined when the
    interpreter exits after running everything queued, so a script that
    ends while depths it will never use are queued would wait for all of
    them. Nor daemon threads: the interpreter tears those down mid-compile,
    and XLA aborts the process (SIGABRT). Here the threads are ordinary
    ones, and when the main thread ends (`_shutdown_at_exit`) every pool
    cancels what is still queued: the interpreter then waits only for the
    compiles already running, at most one per thread.
    """

    def __init__(self, workers: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"boostax-compile-{i}")
            for i in range(workers)
        ]
        _shutdown_at_exit(self)
        for thread in self._threads:
            thread.start()

    def submit(self, fn, *args) -> Future:
        """Queues ``fn(*args)``; after `shutdown`, a cancelled future (the
        caller compiles on the spot)."""
        future: Future = Future()
        if self._closed:
            future.cancel()
        else:
            self._queue.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        """Cancels the queued compiles and stops the threads (a compile
        already running finishes)."""
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # noqa: BLE001 (handed to caller)
                future.set_exception(error)


# The pools to shut down when the main thread ends, and the thread that
# waits for that.
_live_pools: weakref.WeakSet[_CompilePool] = weakref.WeakSet()
_exit_watcher: threading.Thread | None = None
_exit_lock = threading.Lock()


def _shutdown_at_exit(pool: _CompilePool) -> None:
    """Cancels `pool`'s queued compiles when the main thread ends.

    A (non-daemon) thread joins the main thread: the interpreter's shutdown
    marks the main thread finished before it joins the other threads, so
    the watcher wakes then, cancels the queued compiles and lets the pools'
    threads end, which the interpreter joins. (``atexit`` functions run
    only after those joins, too late to cancel anything.)
    """
    global _exit_watcher
    with _exit_lock:
        _live_pools.add(pool)
        if _exit_watcher is None or not _exit_watcher.is_alive():
            _exit_watcher = threading.Thread(
                target=_watch_main_thread, name="boostax-compile-exit"
            )
            _exit_watcher.start()


def _watch_main_thread() -> None:
    threading.main_thread().join()
    with _exit_lock:
        pools = list(_live_pools)
    for pool in pools:
        pool.shutdown()
