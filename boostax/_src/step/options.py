# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""`StepOptions`: a train step's settings beyond its model, loss, optimizer,
config and devices, with one home and checked once.

`auto_boost` and `make_train_step` take them as ``options=`` (a
`StepOptions` or a dict of its fields). Before, each took them as keyword
arguments of its own, declared, documented and checked at each layer; those
spellings still work for one release (`with_deprecated`), with a
``DeprecationWarning`` naming the new home.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from boostax._src import user_warnings, validation
from boostax._src.step.builder import check_skip_options

# The fields `make_train_step` cannot apply (it has no gradient freezing,
# DimReduce or MindSpore-placed weight decay), and what to do instead.
_AUTO_BOOST_ONLY = {
    "background_compile": "gradient freezing's (`auto_boost`)",
    "freeze_warmup_steps": "gradient freezing's (`auto_boost`)",
    "pca_matrix": "DimReduce's (`auto_boost`)",
    "trajectory": "DimReduce's (`auto_boost`)",
    "weight_decay": (
        "`auto_boost`'s (with `make_train_step`, chain "
        "`optax.add_decayed_weights` into the optimizer)"
    ),
    "weight_decay_mask": "`auto_boost`'s, with `weight_decay`",
}


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class StepOptions:
    """How a train step calls the model, how it runs, and what it adds.

    The settings of `auto_boost` and `make_train_step` that are neither the
    model, the loss, the optimizer, the config nor the devices; checked
    once, when made. Pass them as ``options=boostax.StepOptions(...)`` or as
    a dict of the same keys.

    **Calling the model**

    Attributes:
      has_aux: whether the loss returns ``(scalar, metrics_dict)``.
      predict_fn: with a ``loss_fn``, ``predict_fn(params, inputs)``
        (`TrainStep.predict`).
      batch_keys: with a model, ``(inputs key, targets key)`` when batches
        are dicts (``("image", "label")`` in the Flax examples); the inputs
        key may be a tuple of keys, the model's positional inputs (a packed
        language-model batch: ``(("inputs", "inputs_position",
        "inputs_segmentation"), "targets")``), and the targets key may be
        an inputs key (``("inputs", "inputs")``: a model that shifts its
        inputs into targets itself); default: ``(inputs, targets)`` pairs.
      rng_collections: with a Linen model, the RNG streams it draws from in
        training (``self.make_rng(name)``); default ``("dropout",)``. Each
        step gives every stream its own key.
      train_kwargs: with a model, keyword arguments of its call in training
        (default ``{"train": True}`` when a Linen ``__call__`` takes
        ``train``).
      eval_kwargs: the same for `TrainStep.predict` (default
        ``{"train": False}``).
      cast_batch: with a ``loss_fn`` and a half-precision policy, the parts
        of the batch that are inputs, cast to the compute dtype: a pytree of
        bools, a prefix of the batch (``(True, False)`` for an ``(inputs,
        targets)`` pair), or a function of the batch returning one. Targets
        are never cast. ``None``: nothing is (JAX then promotes the float16
        params and float32 inputs to float32).
      donate_state: donate the state a call is given to the step: XLA
        writes the new state into its buffers (half the state's memory, and
        less work per call) and the state given is deleted. Default
        ``False``, like ``jax.jit``: every state stays valid, and the device
        holds two states while a step runs (see `TrainStep`). The variables
        given to `init` (and to `from_flax_train_state`) stay valid: the
        state holds copies of them.
      skip_nonfinite: without a loss scale, skip (params, optimizer and
        model state left exactly as they were) a step whose gradients are
        not finite, as loss scaling does; `metrics` gets ``overflow``.
      max_consecutive_skips: after this many skipped steps in a row (NaN
        data, a dynamic loss scale stuck at its minimum), the call warns
        with a ``RuntimeWarning``; ``None``: never.
      raise_on_skips: raise ``FloatingPointError`` instead of warning.
      background_compile: with gradient freezing (`auto_boost`), compile
        every freeze depth in background threads from the first call on,
        while training runs (default: on, unless the environment variable
        ``BOOSTAX_BACKGROUND_COMPILE`` is ``0``). Off, each depth compiles
        when the sequence first reaches it. So with a sequence-length
        warm-up's lengths or progressive resizing's sizes; ``True`` on a
        step of one program is refused.
      freeze_warmup_steps: with gradient freezing (`auto_boost`), the first
        train steps (positions) run masked programs (every gradient
        computed, the frozen ones zeroed) while the depths' own programs
        compile; later steps run their depth's own program. A step's
        program depends on its position alone, so the results do not
        depend on how fast the machine compiles. 0: every step runs its
        depth's own program. ``None``: 1024.
      weight_decay: (`auto_boost`) L2 weight decay, in MindSpore's place:
        ``weight_decay * params`` is added to the gradient first, then
        gradient centralization (LessBN) and the optimizer see it — the
        gradient of ``weight_decay / 2 * sum(p ** 2)`` added to the loss,
        as the Flax examples do. With accumulation it is added once per
        update, with freezing to the trained leaves only. 0: none.
      weight_decay_mask: the leaves decayed: a pytree of bools like the
        params, or a function of the params returning one (as
        ``optax.add_decayed_weights`` takes); default: leaves with more
        than one dimension (kernels; not biases, normalisation scales or
        the FN head's multiplier), as the Flax ImageNet example decays.
      pca_matrix: (`auto_boost`, with ``dim_reduce``) the
        ``(n_components, n_params)`` PCA matrix of the weight trajectory
        (default: from the config's ``pca_mat_path`` /
        ``weight_load_dir``, or `trajectory`).
      trajectory: (`auto_boost`, with ``dim_reduce``) a `Trajectory` (or an
        array of flattened snapshots) to compute the PCA matrix from.

    Example:
      >>> import boostax
      >>> options = boostax.StepOptions(donate_state=True,
      ...                               batch_keys=("image", "label"))
      >>> options.donate_state, options.skip_nonfinite
      (True, False)
      >>> boostax.StepOptions.of({"skip_nonfinite": True}).skip_nonfinite
      True
    """

    has_aux: bool = False
    predict_fn: Callable[..., Any] | None = None
    batch_keys: tuple[Any, str] | None = None
    rng_collections: Sequence[str] | None = None
    train_kwargs: Mapping[str, Any] | None = None
    eval_kwargs: Mapping[str, Any] | None = None
    cast_batch: Any = None
    donate_state: bool = False
    skip_nonfinite: bool = False
    max_consecutive_skips: int | None = 100
    raise_on_skips: bool = False
    background_compile: bool | None = None
    freeze_warmup_steps: int | None = None
    weight_decay: float = 0.0
    weight_decay_mask: Any = None
    pca_matrix: Any = None
    trajectory: Any = None

    def __post_init__(self):
        # The flags and counts here; the model's settings (batch keys, RNG
        # streams, call keywords) are checked with the model by
        # `make_objective`, which alone knows what it takes.
        validation.check_bool("has_aux", self.has_aux)
        validation.check_bool("donate_state", self.donate_state)
        check_skip_options(
            self.skip_nonfinite, self.max_consecutive_skips, self.raise_on_skips
        )
        validation.check_optional_bool(
            "background_compile", self.background_compile
        )
        validation.check_optional_int(
            "freeze_warmup_steps",
            self.freeze_warmup_steps,
            minimum=0,
            none_means="1024",
        )
        object.__setattr__(
            self,
            "weight_decay",
            validation.check_number(
                "weight_decay", self.weight_decay, minimum=0
            ),
        )
        if self.weight_decay_mask is not None and not self.weight_decay:
            raise ValueError(
                "`weight_decay_mask` is given but `weight_decay` is 0: set "
                "the decay, or drop the mask."
            )

    @classmethod
    def of(cls, options: StepOptions | Mapping[str, Any] | None) -> StepOptions:
        """`options` as a `StepOptions`: ``None`` gives the defaults, a dict
        its keys (an unknown key is a ``TypeError`` naming the known)."""
        if options is None:
            return cls()
        if isinstance(options, StepOptions):
            return options
        if not isinstance(options, Mapping):
            raise TypeError(
                "`options` must be a boostax.StepOptions, a dict of its "
                f"fields or None, {validation.got(options)}."
            )
        unknown = sorted(set(options) - set(field_names()))
        if unknown:
            raise TypeError(
                f"`options` has no key {unknown[0]!r}; its keys are "
                f"{', '.join(field_names())}."
            )
        return cls(**options)

    def replace(self, **changes: Any) -> StepOptions:
        """These options with `changes` (checked again)."""
        return dataclasses.replace(self, **changes)

    def changed(self) -> tuple[str, ...]:
        """The fields set away from their defaults."""
        return tuple(
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not f.default
            and not _equal_default(getattr(self, f.name), f.default)
        )

    def calling(self) -> dict[str, Any]:
        """The fields that say how the model is called (`make_objective`'s
        keyword arguments of the same names)."""
        return {name: getattr(self, name) for name in CALLING}

    def running(self) -> StepOptions:
        """These options' fields that say how the step runs (`TrainStep`'s),
        the others at their defaults."""
        return StepOptions(**{name: getattr(self, name) for name in RUNNING})

    def check_for_train_step(self) -> None:
        """Refuses a field `TrainStep` would not apply: how the model is
        called is its objective's, the rest `auto_boost`'s."""
        for name in self.changed():
            if name in CALLING:
                raise ValueError(
                    f"`options.{name}` says how the model is called, which "
                    "a TrainStep takes from its objective: give it to "
                    "`boostax.make_objective`, or build the step with "
                    "`boostax.make_train_step`."
                )
            if name not in RUNNING:
                raise ValueError(
                    f"`options.{name}` is `auto_boost`'s; a TrainStep would "
                    "ignore it: build the step with `boostax.auto_boost`."
                )

    def check_for_make_train_step(self) -> None:
        """Refuses a field `make_train_step` would not apply."""
        for name in self.changed():
            if name in _AUTO_BOOST_ONLY:
                raise ValueError(
                    f"`options.{name}` is {_AUTO_BOOST_ONLY[name]}; "
                    "`make_train_step` would ignore it: drop it, or build "
                    "the step with `boostax.auto_boost`."
                )


#: The fields passed on to `make_objective`.
CALLING = (
    "has_aux",
    "predict_fn",
    "batch_keys",
    "rng_collections",
    "train_kwargs",
    "eval_kwargs",
    "cast_batch",
)


#: The fields `TrainStep` applies: how the step runs.
RUNNING = (
    "donate_state",
    "skip_nonfinite",
    "max_consecutive_skips",
    "raise_on_skips",
    "background_compile",
    "freeze_warmup_steps",
)


def field_names() -> tuple[str, ...]:
    """`StepOptions`' fields, in order."""
    return tuple(f.name for f in dataclasses.fields(StepOptions))


def _equal_default(value: Any, default: Any) -> bool:
    # Scalars only: an array or a function is never its default None.
    return isinstance(value, bool | int | float) and value == default


def with_deprecated(
    options: StepOptions | Mapping[str, Any] | None,
    old: Mapping[str, Any],
    function: str,
) -> StepOptions:
    """`options` with the settings passed the old way, as `function`'s own
    keyword arguments: each warns, naming its new home; one given both ways
    is a ``ValueError``; a name that was never a setting a ``TypeError``.

    Args:
      options: the call's ``options=``.
      old: the other keyword arguments of the call (``**old``).
      function: the public function's name, for the messages.

    Returns:
      The `StepOptions` of the call.
    """
    options = StepOptions.of(options)
    if not old:
        return options
    names = field_names()
    unknown = sorted(set(old) - set(names))
    if unknown:
        raise TypeError(
            f"{function}() got an unexpected keyword argument "
            f"{unknown[0]!r}; the step's other settings are "
            f"`options=boostax.StepOptions(...)`'s: {', '.join(names)}."
        )
    both = sorted(set(old) & set(options.changed()))
    if both:
        raise ValueError(
            f"`{both[0]}` is given twice, as {function}'s argument and in "
            "`options`: keep the one in `options`."
        )
    for name in old:
        user_warnings.warn(
            f"`{function}(..., {name}=...)` moved to "
            f"`{function}(..., options=boostax.StepOptions({name}=...))`; "
            "the old spelling will be removed in the next release.",
            DeprecationWarning,
        )
    return options.replace(**old)
