# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""A model's batch and call in the step: errors said in boostax's terms.

`check_batch_arrays` refuses, before tracing, a batch whose inputs or
targets are not arrays with a batch dimension (a scalar, a string, an empty
batch), which would otherwise fail inside JAX or the loss.

A step traces ``module.apply`` on the batch's inputs with the state's
params. Flax's own errors there (``InvalidRngError``: "needs PRNG for
'noise'", ``ScopeParamShapeError``, ``ScopeParamNotFoundError``) name
neither the argument to fix nor where the state came from; `explained`
re-raises them naming `rng_collections`, `batch_keys` or the params that
differ (LessBN's FN head, another model's). It runs when the step is
traced, never per call.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import flax.errors
import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import tree_diff, validation


def check_batch_arrays(inputs, targets) -> None:
    """Raises unless every leaf of a model batch has a batch dimension.

    Only shapes are read (no device transfer).

    Raises:
      ValueError: a leaf of `inputs` or `targets` is a scalar (a number, a
        string, an object) or holds no values (a 0 in its shape), or the
        inputs hold no array; the message names the entry.
    """
    input_leaves = jax.tree.leaves(inputs)
    leaves = input_leaves + jax.tree.leaves(targets)
    if input_leaves and all(np.size(x) and np.ndim(x) for x in leaves):
        return  # the common case, on every call: no names built
    problem = next(_leaf_problems(inputs, targets), None)
    if problem is None and not input_leaves:
        problem = f"the inputs hold no array, {validation.got(inputs)}"
    if problem is not None:
        raise ValueError(
            "The batch must be (inputs, targets) arrays whose first "
            f"dimension is the batch size (>= 1): {problem}."
        )


def _got(leaf) -> str:
    """`validation.got`, or the type of a traced leaf (the batch is checked
    when the step is traced, where a Python number is a tracer)."""
    if isinstance(leaf, jax.core.Tracer):
        return f"got a traced {jax.typeof(leaf).str_short()}"
    return validation.got(leaf)


def _leaf_problems(inputs, targets) -> Iterator[str]:
    """What is wrong with each leaf of a batch without a batch dimension."""
    for name, tree in (("inputs", inputs), ("targets", targets)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
            shape = np.shape(leaf)
            if shape and 0 not in shape:
                continue
            where = name + jax.tree_util.keystr(path)
            if not shape:
                yield f"{where} is a scalar, {_got(leaf)}"
            else:
                yield f"{where} has shape {shape}, which holds no values"


@contextlib.contextmanager
def explained(objective, params, inputs, *, train: bool) -> Iterator[None]:
    """Re-raises Flax's errors of applying the model to `inputs` with
    `params` as boostax's, naming the argument to fix.

    Runs when the step is traced (never per call): a missing RNG stream
    names `rng_collections`; params the model does not build for these
    inputs name the leaf, and `batch_keys` or the state's origin.

    Args:
      objective: the `LinenObjective` (its module, RNG streams, batch keys
        and call keyword arguments).
      params: the params the model is applied with (the state's).
      inputs: the inputs it is applied to.
      train: whether the call is the training one (else `predict`'s).
    """
    try:
        yield
    except flax.errors.InvalidRngError as e:
        stream = re.search(r'needs PRNG for "([^"]+)"', str(e))
        if stream is None:
            raise
        if not train:
            # Evaluation draws no random numbers: the model's evaluation
            # mode is not what `predict` calls.
            raise ValueError(
                f"In evaluation (`predict`), the model draws from the RNG "
                f"stream {stream.group(1)!r}: it is still in training mode "
                f"with the call arguments `eval_kwargs` "
                f"({objective.eval_kwargs!r}). Pass the arguments that switch "
                "it to evaluation (`boostax.StepOptions(eval_kwargs=...)` "
                "as the step's `options`), or, where a field of the model "
                "does (Flax's lm1b: `deterministic` in its config), the "
                "evaluation model: "
                "`ts.predict(state, inputs, model=eval_model)`."
            ) from e
        raise ValueError(
            f"The model draws from the RNG stream {stream.group(1)!r}, "
            f"which `rng_collections` ({objective.rng_collections!r}) does "
            "not name: build the step with `options=boostax.StepOptions("
            "rng_collections=("
            + "".join(f"{n!r}, " for n in objective.rng_collections)
            + f"{stream.group(1)!r}))`."
        ) from e
    except (
        flax.errors.ScopeParamShapeError,
        flax.errors.ScopeParamNotFoundError,
    ) as e:
        raise _params_error(objective, params, inputs, train, e) from e


def _params_error(objective, params, inputs, train, error) -> ValueError:
    """Where `params` differ from those the model builds for `inputs`."""
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x)),
        inputs,
    )
    kwargs = objective.train_kwargs if train else objective.eval_kwargs
    streams = ("params", *objective.rng_collections)
    key = jax.random.PRNGKey(0)
    # The model's positional inputs (`batches.model_args`): several where
    # `batch_keys` names a tuple of inputs keys.
    keys = objective.batch_keys
    several = keys is not None and isinstance(keys[0], tuple)
    try:
        expected = jax.eval_shape(
            lambda x: objective.module.init(
                dict.fromkeys(streams, key), *(x if several else (x,)), **kwargs
            ),
            abstract,
        )["params"]
    except Exception:  # noqa: BLE001  (then Flax's own words only)
        expected = None
    source, fix = _inputs_source(objective.batch_keys, train)
    fix += (
        ", and that the state was built by this step's `init` for this "
        "model (not for another model, or another level or "
        "`less_bn.fn_flag`, whose LessBN and FN head change the params)"
    )
    inputs_text = tree_diff.describe_arrays(abstract)
    structure = (
        None
        if expected is None
        else tree_diff.first_difference(expected, params, "state.params")
    )
    if structure is not None:
        path, want, got = structure
        return ValueError(
            f"`state.params` does not fit the model: at `{path}` the "
            f"model called on {source}, {inputs_text}, builds {want}, "
            f"the state holds {got}{_fn_head_hint(want, got)}. Check "
            f"{fix}. (Flax: {error})"
        )
    shape = (
        None if expected is None else _first_shape_difference(expected, params)
    )
    detail = (
        f"Flax: {error}"
        if shape is None
        else f"the model builds `{shape[0]}` with shape {shape[1]}, the "
        f"state holds {shape[2]}"
    )
    return ValueError(
        f"The model's params do not fit {source}, {inputs_text}: "
        f"{detail}. Check {fix}."
    )


def _inputs_source(batch_keys, train: bool) -> tuple[str, str]:
    """Where the inputs came from, and what to check about that."""
    if not train:
        return "the inputs given to `predict`", "the inputs' shape"
    if batch_keys is None:
        return (
            "the batch's inputs (the first of its (inputs, targets))",
            "that batches are (inputs, targets) in that order",
        )
    return (
        f"the batch's inputs (its {batch_keys[0]!r} entry, "
        f"`batch_keys`={batch_keys!r})",
        "that `batch_keys` is (inputs key, targets key) in that order",
    )


def _fn_head_hint(want: str, got: str) -> str:
    """Says which side holds LessBN's FN head (its ``multiplier`` param),
    from `tree_diff` descriptions of the params that differ."""
    head = ("'multiplier'", "'log_multiplier'")
    in_want = any(name in want for name in head)
    in_got = any(name in got for name in head)
    if in_got and not in_want:
        return (
            ": the state holds LessBN's FN head there (a step built with "
            "`less_bn.fn_flag` True), and this step's model has none"
        )
    if in_want and not in_got:
        return (
            ": this step's model has LessBN's FN head there "
            "(`less_bn.fn_flag` True), and the state was built without it"
        )
    return ""


def _first_shape_difference(expected, given) -> tuple[str, str, str] | None:
    """``(path, expected shape, given shape)`` of the first leaf whose shape
    differs, for trees of the same structure."""
    pairs = zip(
        jax.tree_util.tree_leaves_with_path(expected),
        jax.tree.leaves(given),
        strict=True,
    )
    for (path, want), got in pairs:
        if tuple(np.shape(want)) != tuple(np.shape(got)):
            where = "state.params" + jax.tree_util.keystr(path)
            return where, str(tuple(np.shape(want))), str(np.shape(got))
    return None
