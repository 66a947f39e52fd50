# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Progressive image resizing: train on smaller images first.

An image model is trained on its batch's images shrunk by a scale that
grows from `initial_scale` to 1, then on the full images for the last
`finetune_fraction` of the run (fast.ai's progressive resizing, Composer's
``ProgressiveResizing``). With ``T`` = `total_steps` optimizer updates,
``d`` = `delay_fraction`, ``f`` = `finetune_fraction` and ``s_0`` =
`initial_scale`, update ``u`` (elapsed fraction ``p = u / T``) has the scale

.. math::

  s(u) = s_0 + (1 - s_0) \\cdot \\min\\Big(1, \\frac{\\max(0, p - d)}
         {1 - f - d}\\Big)

(``s_0`` for the first ``d`` of the run, then a linear ramp, 1 from
``p = 1 - f`` on; with ``d + f = 1`` the ramp is a step at ``d``). The
images' width ``W`` is pinned to a multiple of `size_increment` ``m``,

.. math::

  w(u) = \\min\\big(W, \\max(\\min(m, W),
         m \\cdot \\mathrm{round}(W s(u) / m))\\big),

and their height follows it, ``h(u) = \\lfloor H w(u) / W \\rfloor`` (at
least 1). This is Composer's code (``progressive_resizing.py``: ``round``
is Python's, halves to even; the height ``floor(H * w / W)``, as
``F.interpolate`` computes it) but for the clamp to ``[m, W]``, where
Composer would make an empty image below ``m / 2``, and for the finetune
(``s(u) = 1``), always at ``W``: where ``m`` does not divide ``W``,
Composer's round can give ``W - W mod m`` there (``W`` = 40, ``m`` = 16:
32), so it would never train at full size. Composer's defaults are
kept, ``delay_fraction`` 0.5 included: half the run at ``s_0``;
``delay_fraction=0`` gives the plain ramp ``s_0 + (1 - s_0) min(1, u /
((1 - f) T))``.

`mode` ``"resize"`` resamples bilinearly with antialiasing
(``jax.image.resize(..., "linear", antialias=True)``, a triangle filter
widened by the shrink factor, so a shrunk image averages every pixel;
Composer's code resamples by nearest neighbour, which its docstring calls
bilinear), ``"crop"`` keeps the centre ``h x w`` window (deterministic;
Composer's crop is at a random place).

As with the sequence-length warm-up (`seq_len_warmup.py`, whose machinery
this reuses: `Sizes` is a `seq_len_warmup.Lengths`), the schedule counts
optimizer updates (train step ``i`` is update ``i // k`` with gradient
accumulation over k micro-steps, so one update sees one size), the size
of a step is a function of its position alone, so a resumed run continues
bit for bit, and each width is its own compiled program
(`program_schedule.ProgramSchedule`), later ones compiled in background
threads. The model must accept images of any size and give outputs of one
shape (global average pooling before the classifier): the step checks
that at the smallest size when it is built (`Sizes.check_model`).

References:
  Howard and Gugger, "Deep Learning for Coders with fastai and PyTorch",
  2020, ch. 7 "Progressive resizing" (fastbook ``07_sizing_and_tta``).
  MosaicML Composer, ``ProgressiveResizing``
  (``composer/algorithms/progressive_resizing/progressive_resizing.py``:
  ``mode="resize"``, ``initial_scale`` 0.5, ``finetune_fraction`` 0.2,
  ``delay_fraction`` 0.5, ``size_increment`` 4). Touvron, Vedaldi, Douze
  and Jegou, "Fixing the train-test resolution discrepancy", NeurIPS 2019
  (arXiv:1906.06423): why the last updates train at the test size.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import validation
from boostax._src.methods import seq_len_warmup as seq_len_warmup_lib
from boostax._src.step import batches as batches_lib

PyTree = Any
Key = str | int

MODES = ("resize", "crop")

_WAY_OUT = (
    "name the entries that hold (batch, height, width, channels) images "
    "with `keys` (boostax.progressive_resizing(..., keys='image'), or the "
    "config's `progressive_resizing.keys`), or switch progressive resizing "
    "off"
)


@dataclasses.dataclass(frozen=True)
class ProgressiveResizing:
    """A progressive-resizing schedule (`progressive_resizing` builds one).

    Attributes:
      total_steps: the run's length in optimizer updates.
      initial_scale: the first scale of the images' sides, in (0, 1].
      finetune_fraction: the last fraction of the run at full size.
      delay_fraction: the first fraction of the run at `initial_scale`.
      size_increment: the width is a multiple of this.
      mode: ``"resize"`` (bilinear, antialiased) or ``"crop"`` (centre).
      keys: the batch entries that hold images (dict keys or tuple
        indices); ``None``: the rank-4 leaves of the step's inputs entry,
        or of the whole batch.
    """

    total_steps: int
    initial_scale: float = 0.5
    finetune_fraction: float = 0.2
    delay_fraction: float = 0.5
    size_increment: int = 4
    mode: str = "resize"
    keys: tuple[Key, ...] | None = None

    def __post_init__(self):
        validation.check_int("total_steps", self.total_steps, minimum=1)
        for name, low_open in (
            ("initial_scale", True),
            ("finetune_fraction", False),
            ("delay_fraction", False),
        ):
            value = validation.check_number(
                name, getattr(self, name), minimum=0, maximum=1,
                open_minimum=low_open,
            )  # fmt: skip
            object.__setattr__(self, name, float(value))
        check_fractions(self.delay_fraction, self.finetune_fraction)
        validation.check_int("size_increment", self.size_increment, minimum=1)
        check_mode(self.mode)
        object.__setattr__(
            self, "keys", seq_len_warmup_lib.check_keys(self.keys)
        )

    def scale(self, update: int) -> float:
        """Composer's (unpinned) scale of update `update`."""
        elapsed = update / self.total_steps
        ramp = 1.0 - self.finetune_fraction - self.delay_fraction
        if elapsed < self.delay_fraction:
            done = 0.0
        elif ramp <= 0:
            done = 1.0  # the ramp is a step at `delay_fraction`
        else:
            done = min((elapsed - self.delay_fraction) / ramp, 1.0)
        return self.initial_scale + (1.0 - self.initial_scale) * done

    def widths(self, width: int) -> np.ndarray:
        """The width of every update before the first at full `width`.

        Returns:
          ``int`` array: entry ``u`` is update ``u``'s width (a multiple of
          `size_increment`, or `width`); every later update trains at
          `width`.

        Raises:
          ValueError: every update is at full size (nothing to resize).
        """
        full = validation.check_int("width", width, minimum=1)
        step = self.size_increment
        table = []
        for update in range(self.total_steps):
            scale = self.scale(update)
            if scale >= 1:  # the finetune: full size, even where `step`
                break  # does not divide `full` (Composer's round may not)
            pinned = round(full * scale / step) * step
            pinned = min(full, max(min(step, full), pinned))
            if pinned == full:  # the scale never falls: full from here on
                break
            table.append(pinned)
        if not table:
            raise ValueError(
                f"progressive_resizing: images {full} wide are at full size "
                f"from the first update (`initial_scale` {self.initial_scale}"
                f", `size_increment` {step}): nothing to resize. Lower "
                "`initial_scale` or `size_increment`, or switch it off."
            )
        return np.asarray(table, np.int64)

    def bind(
        self, height: int, width: int, micro_steps: int = 1, *, batch_keys=None
    ) -> Sizes:
        """The `Sizes` of a run on images of ``height x width`` whose
        updates take `micro_steps` train steps each."""
        scope = seq_len_warmup_lib.Scope.of(self.keys, batch_keys)
        return Sizes(
            self, self.widths(width), (height, width), micro_steps, scope
        )

    def bind_batch(
        self, batch: PyTree, micro_steps: int = 1, *, batch_keys=None
    ) -> Sizes:
        """`bind` to the images of `batch` (those of `keys`, else the
        rank-4 leaves of the step's `batch_keys` inputs entry, else of the
        whole batch; they must agree on their height and width)."""
        scope = seq_len_warmup_lib.Scope.of(self.keys, batch_keys)
        height, width = _find_images(batch, scope)[1]
        return self.bind(height, width, micro_steps, batch_keys=batch_keys)


def check_mode(mode: Any, name: str = "mode") -> str:
    """Raises unless `mode` is one of `MODES`."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(
            f"`{name}` must be one of {list(MODES)}, {validation.got(mode)}."
        )
    return mode


def check_fractions(delay: float, finetune: float, prefix: str = "") -> None:
    """Raises unless ``delay + finetune <= 1`` (Composer's check)."""
    if delay + finetune > 1:
        raise ValueError(
            f"`{prefix}delay_fraction` + `{prefix}finetune_fraction` must be "
            f"at most 1 (the ramp between them cannot be negative), got "
            f"{delay} + {finetune} = {delay + finetune}."
        )


def progressive_resizing(
    total_steps: int,
    *,
    initial_scale: float = 0.5,
    finetune_fraction: float = 0.2,
    delay_fraction: float = 0.5,
    size_increment: int = 4,
    mode: str = "resize",
    keys: Key | Sequence[Key] | None = None,
) -> ProgressiveResizing:
    """Progressive image resizing, for `boostax.make_train_step`.

    Update ``u`` trains on the batch's NHWC images shrunk to ``h(u) x
    w(u)``: the scale is `initial_scale` for the first `delay_fraction` of
    `total_steps`, grows linearly to 1 by ``1 - finetune_fraction`` and
    stays there; the width is pinned to a multiple of `size_increment` and
    the height follows it (the module's docstring has the formula, which
    is Composer's). Each width is its own compiled program; the programs
    of later widths compile in the background. Pass it as the step's
    `seq_len_warmup` (the slot of a schedule of the batch's shape), or
    enable the config's ``progressive_resizing`` section.

    Args:
      total_steps: the run's length in optimizer updates.
      initial_scale: the first scale of the sides, in (0, 1] (Composer's
        0.5).
      finetune_fraction: the last fraction of the run at full size, in
        [0, 1] (Composer's 0.2).
      delay_fraction: the first fraction of the run at `initial_scale`, in
        [0, 1] with `delay_fraction` + `finetune_fraction` <= 1 (Composer's
        0.5; 0 starts the ramp at once).
      size_increment: the width is a multiple of it (Composer's 4).
      mode: ``"resize"`` (bilinear, antialiased; default) or ``"crop"``
        (the centre window).
      keys: the batch entries that hold images, dict keys (``"image"``) or
        tuple indices; every leaf under them must be a (batch, height,
        width, channels) array. ``None``: the rank-4 leaves of the step's
        inputs entry (`batch_keys`), else of the whole batch (an
        ``(images, labels)`` pair's images).

    Returns:
      A `ProgressiveResizing`.

    Raises:
      ValueError, TypeError: a setting out of its range or of another type
        (the message names it).

    Example:
      >>> import boostax
      >>> resizing = boostax.progressive_resizing(10, delay_fraction=0.0)
      >>> [int(w) for w in resizing.widths(32)]  # 32 wide from update 7 on
      [16, 16, 20, 24, 24, 24, 28]
      >>> composers = boostax.progressive_resizing(100)  # delay 0.5
      >>> widths = composers.widths(224)
      >>> [int(w) for w in widths[::10]], len(widths)
      ([112, 112, 112, 112, 112, 112, 148, 188], 80)
    """
    return ProgressiveResizing(
        total_steps,
        initial_scale,
        finetune_fraction,
        delay_fraction,
        size_increment,
        mode,
        seq_len_warmup_lib.check_keys(keys),
    )


def resize_images(
    images: jax.Array, height: int, width: int, mode: str = "resize"
) -> jax.Array:
    """NHWC `images` at ``height x width``.

    ``"resize"``: ``jax.image.resize`` with the triangle (bilinear) filter,
    antialiased (widened by the shrink factor); ``"crop"``: the centre
    window, starting at ``((H - height) // 2, (W - width) // 2)``. Integer
    images are rounded back to their dtype; float ones keep theirs.

    Args:
      images: a ``(batch, H, W, channels)`` array.
      height, width: the size wanted, at most ``H`` and ``W``.
      mode: ``"resize"`` or ``"crop"``.

    Returns:
      A ``(batch, height, width, channels)`` array of `images`' dtype.

    Example:
      >>> import jax.numpy as jnp, boostax
      >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
      >>> y = boostax.resize_images(x, 2, 2)[0, :, :, 0]
      >>> [[round(float(v), 2) for v in row] for row in y]
      [[3.57, 5.14], [9.86, 11.43]]
      >>> boostax.resize_images(x, 2, 2, "crop")[0, :, :, 0].tolist()
      [[5.0, 6.0], [9.0, 10.0]]
    """
    check_mode(mode)
    if np.ndim(images) != 4:
        raise ValueError(
            "`images` must be (batch, height, width, channels), got shape "
            f"{np.shape(images)}."
        )
    n, full_h, full_w, c = np.shape(images)
    validation.check_int_in("height", height, 1, full_h)
    validation.check_int_in("width", width, 1, full_w)
    if (height, width) == (full_h, full_w):
        return images
    if mode == "crop":
        top, left = (full_h - height) // 2, (full_w - width) // 2
        return jax.lax.slice(
            images, (0, top, left, 0), (n, top + height, left + width, c)
        )
    dtype = images.dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        images = images.astype(jnp.float32)
    out = jax.image.resize(
        images, (n, height, width, c), "linear", antialias=True
    )
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        out = jnp.clip(jnp.round(out), info.min, info.max)
    return out.astype(dtype)


class Sizes(seq_len_warmup_lib.Lengths):
    """A `ProgressiveResizing` bound to a run: the size of every step.

    A `seq_len_warmup.Lengths` whose "length" is the images' width (the
    key of each compiled program); `size` gives the height with it.

    Attributes:
      warmup: the `ProgressiveResizing`.
      table: the width of each update before the first at full size.
      full_length: the images' full width.
      full_size: ``(height, width)`` of the batch's images.
      micro_steps: train steps per update.
      end: the first train step at full size.
    """

    __slots__ = ("full_size",)
    # What the int of a program's ``(depth, width)`` key is, in reports.
    unit = "width"

    def __init__(self, resizing, table, full_size, micro_steps, scope):
        super().__init__(resizing, table, full_size[1], micro_steps, scope)
        self.full_size = (int(full_size[0]), int(full_size[1]))

    def size(self, width: int) -> tuple[int, int]:
        """``(height, width)`` of the images at `width`: ``floor(H *
        width / W)``, at least 1."""
        full_h, full_w = self.full_size
        return max(1, full_h * int(width) // full_w), int(width)

    def sizes(self) -> list[tuple[int, int]]:
        """Every distinct size of the run, smallest first (one compiled
        program each; with freezing, each with each depth)."""
        widths = sorted({*self._at, self.full_length})
        return [self.size(w) for w in widths]

    def truncate(self, length: int) -> Callable[[PyTree], PyTree]:
        """``batch -> batch`` with its images at width `length` (the
        height following it)."""
        height, width = self.size(length)
        scope, full, mode = self._scope, self.full_size, self.warmup.mode

        def resized(batch):
            indices, found = _find_images(batch, scope)
            if found != full:
                raise ValueError(
                    f"The batch's images are {found[0]}x{found[1]}, and this "
                    f"progressive resizing was bound to {full[0]}x{full[1]} "
                    "(the first batch's): it takes images of that size only."
                )
            leaves, treedef = jax.tree_util.tree_flatten(batch)
            for i in indices:
                leaves[i] = resize_images(leaves[i], height, width, mode)
            return jax.tree_util.tree_unflatten(treedef, leaves)

        return resized

    def cut_step(self, step: Callable, length: int) -> Callable:
        """``step(state, batch)`` run on the batch's images at width
        `length`; its metrics get ``image_height`` and ``image_width``.

        A step that fails at the smaller size but not at the full one fails
        because of the size (a model whose parameters fix it: a flatten
        before a dense layer instead of global pooling): the error says so.
        """
        resize = self.truncate(length)
        height, width = self.size(length)

        @functools.wraps(step)
        def on_resized_batch(state, batch):
            small = resize(batch)
            if length == self.full_length:
                return self._with_size(step(state, small), height, width)
            try:
                outputs = step(state, small)
            except Exception as error:
                if not seq_len_warmup_lib.traces(step, state, batch):
                    raise  # the full batch fails too: not the resizing's
                raise self.size_error(height, width, error) from error
            return self._with_size(outputs, height, width)

        return on_resized_batch

    @staticmethod
    def _with_size(outputs, height: int, width: int):
        new_state, metrics = outputs
        return new_state, {
            **metrics,
            "image_height": jnp.asarray(height, jnp.int32),
            "image_width": jnp.asarray(width, jnp.int32),
        }

    def size_error(self, height, width, error, what="step") -> ValueError:
        full_h, full_w = self.full_size
        return ValueError(
            f"progressive_resizing: the {what} fails on the batch's images "
            f"resized from {full_h}x{full_w} to {height}x{width}, and runs "
            "at full size: the model's parameters or outputs fix the image "
            "size (a flatten before a dense layer). Progressive resizing "
            "needs a model that takes images of any size and gives outputs "
            "of one shape (global average pooling before the classifier): "
            f"change the model, or {_WAY_OUT}. The error at "
            f"{height}x{width}: {type(error).__name__}: {error}"
        )

    def check_model(self, objective, state, batch) -> None:
        """Raises unless the model traces at the smallest size and gives
        outputs of the shape it gives at full size (shapes only, nothing
        compiles). Checked where the objective can predict (a model, or a
        loss function with a `predict_fn`).

        Raises:
          ValueError: the model fails at the smallest size, or its outputs
            there differ in shape from those at full size.
        """
        smallest = self.truncate(min(self._at))(batch)
        keys = getattr(objective, "batch_keys", None)

        def outputs(images_batch):
            inputs = batches_lib.inputs_and_targets(images_batch, keys)[0]
            return jax.eval_shape(
                objective.predict, state.params, state.model_state, inputs
            )

        try:
            full = outputs(batch)
        except Exception:  # noqa: BLE001  (no prediction to compare)
            return
        height, width = self.size(min(self._at))
        try:
            small = outputs(smallest)
        except Exception as error:
            raise self.size_error(height, width, error, "model") from error
        shapes = [jax.tree.map(np.shape, o) for o in (full, small)]
        if shapes[0] != shapes[1]:
            raise ValueError(
                "progressive_resizing: the model's outputs change shape with "
                f"the image size: {shapes[0]} at {self.full_size[0]}x"
                f"{self.full_size[1]}, {shapes[1]} at {height}x{width}. It "
                "needs outputs of one shape (global average pooling before "
                f"the classifier): change the model, or {_WAY_OUT}."
            )


def _find_images(batch, scope) -> tuple[list[int], tuple[int, int]]:
    """``(indices of the image leaves, in jax.tree order; (H, W))``.

    Raises:
      ValueError: no leaf is a rank-4 array, a leaf of a named entry is
        not one, or the images disagree on their height and width.
    """
    describe = seq_len_warmup_lib.describe_leaves
    leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
    indices = list(range(len(leaves)))
    if scope.keys is not None:
        entries = [
            (entry,)
            for entry in seq_len_warmup_lib.entry_paths(
                batch, scope, "progressive_resizing"
            )
        ]
        indices = [i for i in indices if leaves[i][0][:1] in entries]
    flat = [leaves[i] for i in indices]
    found = [i for i in indices if np.ndim(leaves[i][1]) == 4]
    if scope.strict and (len(found) < len(indices) or not flat):
        raise ValueError(
            f"progressive_resizing: {scope.source} names the entries that "
            "hold images, which must be (batch, height, width, channels) "
            f"arrays; their leaves: [{describe(flat)}]."
        )
    if not found:
        raise ValueError(
            "Progressive resizing needs (batch, height, width, channels) "
            f"images in the batch; with {scope.source}, the leaves it looks "
            f"at have shapes [{describe(flat)}]. Pass "
            f"NHWC images, {_WAY_OUT}."
        )
    sizes = {tuple(int(d) for d in np.shape(leaves[i][1])[1:3]) for i in found}
    if len(sizes) > 1:
        raise ValueError(
            "progressive_resizing cannot tell the images' size: with "
            f"{scope.source}, these rank-4 leaves disagree on it: "
            f"[{describe([leaves[i] for i in found])}]. "
            f"To resize only the images, {_WAY_OUT}."
        )
    return found, sizes.pop()  # type: ignore[return-value]


def from_config(section) -> ProgressiveResizing | None:
    """The `ProgressiveResizing` of a config's ``progressive_resizing``
    section (`config_sections.ProgressiveResizingSection`), ``None`` when not
    ``enabled``."""
    if not section.enabled:
        return None
    return ProgressiveResizing(
        section.total_steps,
        section.initial_scale,
        section.finetune_fraction,
        section.delay_fraction,
        section.size_increment,
        section.mode,
        section.keys,
    )


def shape_schedule(config) -> Any:
    """The schedule of the batch's shape a `BoostConfig` enables: its
    ``seq_len_warmup`` (`SeqLenWarmup`) or ``progressive_resizing``
    (`ProgressiveResizing`) section's, or ``None``.

    Raises:
      ValueError: both are enabled (a step has one such schedule).
    """
    warmup = seq_len_warmup_lib.from_config(config.seq_len_warmup)
    resizing = from_config(config.progressive_resizing)
    if warmup is not None and resizing is not None:
        raise ValueError(
            "`seq_len_warmup.enabled` and `progressive_resizing.enabled` are "
            "both True: a step follows one schedule of the batch's shape "
            "(sequences of a language model, or images of a vision model). "
            "Switch one off."
        )
    return warmup or resizing
