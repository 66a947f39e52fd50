# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Test-time flips: a classifier's outputs averaged over flipped images.

At evaluation, the model sees the images and their mirror images, and its
outputs (logits) are averaged over the views:

.. math::

  \\bar f(x) = \\frac{1}{1 + |F|} \\Big( f(x) + \\sum_{k \\in F} f(M_k x)
  \\Big),

with ``M_k`` the flip along the images' height (``"vertical"``) or width
(``"horizontal"``) and ``F`` the flips chosen. With a translation ``t > 0``
(airbench's "mirror and translate"), the images shifted by ``t`` pixels
down and right and by ``t`` up and left (``T_{+t} x``, ``T_{-t} x``: the
image reflected at its border to fill the gap) are seen too, each with
its flips, and the mean runs over the ``3 (1 + |F|)`` views. A label that
does not change under a flip (a horizontal flip of a natural image, any
flip of a rotation-invariant shape) or a small shift makes every view an
estimate of the same class, so the average is a small ensemble for free:
the trained weights are unchanged, and only evaluation costs one forward
pass per view. airbench evaluates CIFAR-10 this way; `TrainStep.predict`
does it when the config's ``test_time_flips`` section is enabled.

The training run is not touched, so a run's time to an accuracy counts the
training steps only (the benchmarks report the evaluation's extra passes
apart). A flip that changes the label (a vertical flip of digits, text)
costs accuracy: choose the flips on a validation split.

References:
  Krizhevsky, Sutskever and Hinton, "ImageNet Classification with Deep
  Convolutional Neural Networks", NeurIPS 2012 (averaging over flipped
  views at test time). Keller Jordan, "94% on CIFAR-10 in 3.29 Seconds on
  a Single GPU", arXiv:2404.00498, 2024 (airbench: "test-time
  augmentation" with horizontal flips, and with 1-pixel translations of
  the images and their mirrors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from boostax._src import validation

#: The flips, and the axis of an NHWC batch each reverses.
FLIP_AXES = {"vertical": 1, "horizontal": 2}
FLIPS = tuple(FLIP_AXES)


def check_flips(
    flips: str | Sequence[str], name: str = "flips", allow_empty: bool = False
) -> tuple:
    """`flips` as a tuple of distinct names of `FLIPS`.

    Raises:
      TypeError: not a str or a sequence of str.
      ValueError: empty (unless `allow_empty`), an unknown flip, or one
        named twice.
    """
    if isinstance(flips, str):
        flips = (flips,)
    if not isinstance(flips, Sequence) or not all(
        isinstance(f, str) for f in flips
    ):
        raise TypeError(
            f"`{name}` must be a flip or a sequence of flips of {FLIPS}, "
            f"got {flips!r}."
        )
    flips = tuple(flips)
    if not flips and not allow_empty:
        raise ValueError(
            f"`{name}` must name at least one of {FLIPS} (no flip: only "
            "with a translation)."
        )
    for flip in flips:
        validation.check_one_of(name, flip, FLIPS)
    if len(set(flips)) != len(flips):
        raise ValueError(f"`{name}` names a flip twice: {flips!r}.")
    return flips


def check_translate(
    translate: int,
    images_shape: Sequence[int] | None = None,
    name: str = "translate",
) -> int:
    """`translate` as pixels: an int >= 0, and below the images' height and
    width when their shape is given (reflection needs that many pixels)."""
    translate = validation.check_int(name, translate, minimum=0)
    if images_shape is not None and translate >= min(images_shape[1:3]):
        raise ValueError(
            f"`{name}` must be below the images' height and width "
            f"{tuple(images_shape[1:3])}; got {translate}."
        )
    return translate


def translated(images: jax.Array, shift: int) -> jax.Array:
    """`images` moved by `shift` pixels down and right (up and left when
    negative), the gap filled by reflecting them at their border."""
    pad = abs(shift)
    padded = jnp.pad(
        images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect"
    )
    height, width = images.shape[1:3]
    start = pad - shift
    return padded[:, start : start + height, start : start + width, :]


def flipped_views(
    images: jax.Array, flips: Sequence[str], translate: int = 0
) -> list[Any]:
    """The images, then the images flipped by each of `flips` in turn; with
    `translate`, the same for the images moved by ``+translate`` then by
    ``-translate`` pixels (`translated`) after them.

    Args:
      images: a batch of images, ``(batch, height, width, channels)``.
      flips: names of `FLIPS` (none: only with `translate`).
      translate: pixels; 0: no translated views.

    Returns:
      ``(1 + len(flips)) * (3 if translate else 1)`` arrays of the images'
      shape and dtype.
    """
    if np.ndim(images) != 4:
        raise ValueError(
            "Test-time flips take a batch of images (batch, height, width, "
            f"channels); got inputs of shape {np.shape(images)}. Give "
            "predict the images alone, or disable `test_time_flips`."
        )
    translate = check_translate(translate, np.shape(images))
    flips = check_flips(flips, allow_empty=translate > 0)
    shifts = (0, translate, -translate) if translate else (0,)
    views = []
    for shift in shifts:  # airbench's order: translate, then mirror
        moved = translated(images, shift) if shift else images
        views += [moved] + [jnp.flip(moved, FLIP_AXES[f]) for f in flips]
    return views


def predict_with_flips(
    predict: Callable[[Any], Any],
    images: jax.Array,
    flips: str | Sequence[str] = ("horizontal",),
    translate: int = 0,
) -> Any:
    """`predict`'s outputs averaged over the images and their flips.

    Args:
      predict: ``predict(images) -> outputs`` (a pytree of logits).
      images: a batch of images, ``(batch, height, width, channels)``.
      flips: the flips besides the images as given: ``"horizontal"``
        (mirror the width), ``"vertical"`` (mirror the height), or both;
        none (``()``) only with a translation.
      translate: pixels (airbench's 1); each view is also seen moved by
        ``+translate`` and ``-translate`` pixels along both the height and
        the width, reflected at the border. 0: no translated views.

    Returns:
      The outputs' mean over the ``(1 + len(flips))`` views (three times
      as many with a translation), leaf by leaf, in the outputs' dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> import boostax
      >>> x = jnp.arange(4.0).reshape(1, 1, 4, 1)
      >>> left = lambda x: x[:, 0, 0, :]  # reads the leftmost pixel
      >>> boostax.predict_with_flips(left, x).tolist()  # (0 + 3) / 2
      [[1.5]]
    """
    views = flipped_views(images, flips, translate)
    outputs = [predict(view) for view in views]
    return jax.tree_util.tree_map(
        lambda *leaves: (
            sum(leaf.astype(jnp.float32) for leaf in leaves) / len(leaves)
        ).astype(leaves[0].dtype),
        *outputs,
    )
