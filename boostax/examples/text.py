# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""Bytes of Python's own standard library: a text corpus with no download.

Every Python installation ships the source of its standard library, so a
language model can train on it anywhere. The corpus is the ``*.py`` files
of the top-level ``stdlib`` directory (``sysconfig.get_paths()["stdlib"]``,
no packages), sorted by name, so it is the same on every machine with the
same Python minor version; `TextCorpus.source` records which one. Tokens
are bytes (a vocabulary of 256: no tokenizer to install). The split is by
file (every `VALIDATION_EVERY`-th file is validation), so no file is in
both, and validation measures how well the model predicts code it has never
seen.
"""

from __future__ import annotations

import glob
import os
import platform
import sysconfig
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

VOCAB_SIZE = 256  # bytes
VALIDATION_EVERY = 10  # files 0, 10, 20, ... of the sorted list
# Bytes read from each file: the start of every file rather than the whole
# of a few large ones, and a corpus that loads in milliseconds (~2.5 MB).
MAX_FILE_BYTES = 32 * 1024


class CorpusSource(NamedTuple):
    """Where a `TextCorpus` came from, for the results.

    Attributes:
      python: the Python version whose standard library it is.
      directory: the standard library's directory.
      files: ``*.py`` files found there (top level only).
      train_files, validation_files: their names, in each split.
      train_bytes, validation_bytes: bytes read into each split.
      max_file_bytes: bytes read from each file at most (``None``: whole
        files).
    """

    python: str
    directory: str
    files: int
    train_files: tuple[str, ...]
    validation_files: tuple[str, ...]
    train_bytes: int
    validation_bytes: int
    max_file_bytes: int | None


class TextCorpus(NamedTuple):
    """Byte tokens of the standard library, split by file.

    Attributes:
      train, validation: ``uint8`` arrays, the split's files concatenated
        (each file's bytes followed by a newline).
      source: what was read (`CorpusSource`).
    """

    train: np.ndarray
    validation: np.ndarray
    source: CorpusSource


def stdlib_files(directory: str | None = None) -> list[str]:
    """The ``*.py`` files of the standard library's top level, sorted.

    Args:
      directory: default ``sysconfig.get_paths()["stdlib"]``.
    """
    directory = directory or sysconfig.get_paths()["stdlib"]
    paths = glob.glob(os.path.join(directory, "*.py"))
    return sorted(paths, key=os.path.basename)


def load_stdlib(
    *,
    max_file_bytes: int | None = MAX_FILE_BYTES,
    validation_every: int = VALIDATION_EVERY,
    directory: str | None = None,
) -> TextCorpus:
    """Reads the standard library's source as byte tokens, split by file.

    Args:
      max_file_bytes: bytes read from the start of each file at most (keeps
        the corpus small and every file represented); ``None``: whole files
        (4.7 MB for Python 3.11; with `validation_every` 5, 1.1 MB of it
        validation).
      validation_every: file ``i`` of the sorted list is validation when
        ``i % validation_every == 0``, training otherwise.
      directory: where to read ``*.py`` files (default: this Python's
        standard library).

    Returns:
      A `TextCorpus`.

    Example:
      >>> from boostax.examples import text
      >>> corpus = text.load_stdlib()
      >>> corpus.train.dtype, corpus.source.files > 100
      (dtype('uint8'), True)
      >>> set(corpus.source.train_files) & set(corpus.source.validation_files)
      set()
    """
    if (
        max_file_bytes is not None and max_file_bytes < 1
    ) or validation_every < 2:
        raise ValueError(
            "`max_file_bytes` must be None or at least 1 and "
            f"`validation_every` at least 2, got {max_file_bytes} and "
            f"{validation_every}."
        )
    directory = directory or sysconfig.get_paths()["stdlib"]
    paths = stdlib_files(directory)
    if len(paths) < validation_every:
        raise ValueError(
            f"{directory} has {len(paths)} *.py files; a split needs at "
            f"least {validation_every}."
        )
    splits: dict[bool, list[bytes]] = {True: [], False: []}
    names: dict[bool, list[str]] = {True: [], False: []}
    for i, path in enumerate(paths):
        with open(path, "rb") as f:
            content = f.read(-1 if max_file_bytes is None else max_file_bytes)
        is_validation = i % validation_every == 0
        splits[is_validation].append(content + b"\n")
        names[is_validation].append(os.path.basename(path))

    def tokens(chunks):
        return np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()

    train, validation = tokens(splits[False]), tokens(splits[True])
    source = CorpusSource(
        python=platform.python_version(),
        directory=directory,
        files=len(paths),
        train_files=tuple(names[False]),
        validation_files=tuple(names[True]),
        train_bytes=int(train.size),
        validation_bytes=int(validation.size),
        max_file_bytes=max_file_bytes,
    )
    return TextCorpus(train, validation, source)


def windows(
    tokens: np.ndarray, count: int, length: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` random windows of `tokens`: ``(inputs, targets)``.

    Each window is ``length + 1`` consecutive bytes; the inputs are its
    first `length`, the targets the last `length` (the next byte of each
    input position). ``int32``, shape ``(count, length)``.
    """
    if not 1 <= length < tokens.size:
        raise ValueError(
            f"`length` must be in [1, {tokens.size - 1}], got {length}."
        )
    starts = rng.integers(0, tokens.size - length, size=count)
    index = starts[:, None] + np.arange(length + 1)
    chunk = tokens[index].astype(np.int32)
    return chunk[:, :-1], chunk[:, 1:]


def tiled_windows(
    tokens: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """`tokens` cut into consecutive windows: ``(inputs, targets)``.

    Window ``i`` holds bytes ``i * length`` to ``(i + 1) * length`` (its
    targets one byte further on), so every byte but the last partial window
    is predicted exactly once: a deterministic validation set that covers
    the whole split, for a mean loss with no sampling of windows. ``int32``,
    shape ``(count, length)`` with ``count = (tokens.size - 1) // length``.
    """
    if not 1 <= length < tokens.size:
        raise ValueError(
            f"`length` must be in [1, {tokens.size - 1}], got {length}."
        )
    count = (tokens.size - 1) // length
    chunk = tokens[: count * length + 1].astype(np.int32)
    return (
        chunk[:-1].reshape(count, length),
        chunk[1:].reshape(count, length),
    )


def batches(
    tokens: np.ndarray,
    batch_size: int,
    length: int,
    *,
    seed: int,
    steps: int,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`steps` training batches of random windows (`windows`).

    The windows depend only on `seed` (a seeded `np.random.Generator`), so
    every arm of a comparison sees the same bytes in the same order.
    """
    rng = np.random.default_rng([seed, 0x7E47])
    for _ in range(steps):
        yield windows(tokens, batch_size, length, rng)


def validation_set(
    corpus: TextCorpus, count: int | None, length: int, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A fixed set of `count` validation windows (the same for every run);
    ``None``: the whole validation split, tiled (`tiled_windows`)."""
    if count is None:
        return tiled_windows(corpus.validation, length)
    return windows(
        corpus.validation, count, length, np.random.default_rng(seed)
    )
