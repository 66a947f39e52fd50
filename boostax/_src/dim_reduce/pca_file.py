# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The PCA matrix's ``.npy`` file, shared between processes.

One process computes ``P`` and writes it (`save_pca_matrix`: atomically,
through a temporary file named after its host and process); the others, or
a later run, read it once it is complete (`load_pca_matrix`, waiting at most
a timeout for a non-atomic writer, then `PCAMatrixTimeoutError`).

References:
  MindSpore ``mindspore.boost.DimReduce`` (``_load_local_pca_mat``).
"""

from __future__ import annotations

import math
import os
import re
import socket
import tempfile
import time

import numpy as np
from numpy.lib import format as npy_format

PathLike = str | os.PathLike

# An incomplete file not modified for this long is truncated: its writer
# stopped (killed, disk full). `load_pca_matrix` refuses it at once instead
# of waiting out its timeout (MindSpore's 1800 s) for a file that cannot
# complete. Writers (``np.save``, ``cp``) write a file in one go, so a live
# one modifies it far more often.
STALE_SECONDS = 60.0

# Every .npy file starts with these bytes (numpy.lib.format).
_NPY_MAGIC = npy_format.MAGIC_PREFIX


class PCAMatrixTimeoutError(TimeoutError, RuntimeError):
    """The PCA matrix file did not appear in time.

    A ``TimeoutError``, and a ``RuntimeError`` as in MindSpore.
    """


def _host_tag() -> str:
    """This host's name, reduced to characters safe in a file name."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _temp_prefix(path: str) -> str:
    """The prefix of `save_pca_matrix`'s temporary files for `path`.

    ``.<basename>.<host>.<pid>.``: the writer's host and process id, so a
    later save can tell a dead writer's leftover from a live one's file.
    """
    return f".{os.path.basename(path)}.{_host_tag()}.{os.getpid()}."


def _process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (True when unsure)."""
    if pid <= 0 or os.name != "posix":  # os.kill(pid, 0) is a probe on POSIX
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # e.g. another user's process
        return True
    return True


def _remove_stale_temporaries(path: str) -> list[str]:
    """Removes temporary files of `path` whose writer died on this host.

    A writer killed (``SIGKILL``, out of memory) between creating its
    temporary file and ``os.replace`` leaves it behind. Only files named by
    `_temp_prefix` for this host are considered, and only those whose
    process no longer runs; files of live writers (this process's other
    threads too) and of other hosts are left alone.

    Returns:
      The paths removed.
    """
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(
        rf"\.{re.escape(os.path.basename(path))}\."
        rf"{re.escape(_host_tag())}\.(\d+)\.[a-z0-9_]+\.tmp"
    )
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or _process_alive(int(match.group(1))):
            continue
        stale = os.path.join(directory, name)
        try:
            os.remove(stale)
        except OSError:  # removed by another writer first, or not ours
            continue
        removed.append(stale)
    return removed


def save_pca_matrix(path: PathLike, matrix) -> None:
    """Saves the PCA matrix as ``.npy``, atomically.

    Writes a temporary file in the same directory (created if missing),
    flushes it to disk and renames it over `path` with ``os.replace``, so a
    reader polling for `path` (`load_pca_matrix`) never sees a partial
    file. The temporary file is named
    ``.<basename>.<host>.<pid>.<random>.tmp`` after its writer; temporary
    files of `path` left on this host by writers that no longer run (killed
    before their rename) are removed first.

    Args:
      path: the destination file, written exactly there (no ``.npy`` is
        appended).
      matrix: the array to save.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix=_temp_prefix(path), suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.asarray(matrix))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def check_timeout(name: str, value, *, positive: bool = False) -> float:
    """`value` as a float: a number of seconds >= 0 (> 0 if `positive`).

    ``inf`` waits forever. A wrong type is a ``ValueError`` too, as it has
    always been here.
    """
    ok = isinstance(value, int | float | np.integer | np.floating) and not (
        isinstance(value, bool)
    )
    if ok:
        value = float(value)
        ok = not math.isnan(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"`{name}` must be a number {bound}, got {value!r}.")
    return value


def _npy_state(path: str) -> tuple[str, str]:
    """Whether the ``.npy`` file at `path` is there and complete.

    Complete: its header parses (``numpy.lib.format``) and its size is the
    header's plus ``prod(shape) * itemsize``, as `np.save` writes it. A
    non-atomic writer (``np.save`` to the path, ``cp``) makes the file
    appear before it is complete; it writes the magic string first, so a
    file starting with other bytes is not a ``.npy`` file and never will be.

    Returns:
      ``("missing", why)``, ``("incomplete", what was seen)``,
      ``("invalid", what was seen)`` or ``("ready", "")``.

    Raises:
      OSError: the file exists but cannot be opened (e.g. permissions);
        the message names the path.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return "missing", "no file at that path"
    except IsADirectoryError:
        return "missing", "a directory is at that path, not a file"
    with f:
        size = os.fstat(f.fileno()).st_size
        start = f.read(len(_NPY_MAGIC))
        if not _NPY_MAGIC.startswith(start):
            return "invalid", (
                f"{size} bytes starting with {start!r}, not the .npy magic "
                f"string {_NPY_MAGIC!r}"
            )
        f.seek(0)
        try:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = npy_format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = npy_format.read_array_header_2_0(f)
            else:  # a newer format: np.load judges it
                return "ready", ""
        except (ValueError, EOFError) as e:
            return "incomplete", (
                f"{size} bytes whose .npy header does not parse ({e})"
            )
        if dtype.hasobject:  # no fixed size; np.load refuses it
            return "ready", ""
        header = f.tell()
    expected = header + math.prod(shape) * dtype.itemsize
    if size > expected:
        return "invalid", (
            f"{size} bytes where its header ({header} bytes: shape {shape}, "
            f"dtype {dtype}) needs {expected}"
        )
    if size != expected:
        return "incomplete", (
            f"{size} bytes where its header ({header} bytes: shape {shape}, "
            f"dtype {dtype}) needs {expected}"
        )
    return "ready", ""


def _unchanged_for(path: str) -> float:
    """Seconds since the file at `path` was last modified (0 if gone)."""
    try:
        return max(0.0, time.time() - os.stat(path).st_mtime)
    except OSError:
        return 0.0


def _invalid_file_error(path: str, seen: str) -> ValueError:
    return ValueError(
        f"The PCA matrix {path!r} is not a valid .npy file and cannot become "
        f"one: {seen}. Delete it so that boostax computes P again "
        "(boostax.pca_matrix), or write it with boostax.save_pca_matrix "
        "(atomic)."
    )


def _load_error(path: str, error: Exception) -> Exception:
    """`error` from ``np.load``, re-raised naming the file."""
    message = (
        f"Could not load the PCA matrix {path!r}: {type(error).__name__}: "
        f"{error}. It must be a .npy file of a (n_components, n_params) "
        "float array, as boostax.save_pca_matrix writes."
    )
    if isinstance(error, OSError):
        return type(error)(message)
    return ValueError(message)


def load_pca_matrix(
    path: PathLike, *, timeout: float = 1800.0, poll_interval: float = 1.0
) -> np.ndarray:
    """Loads the PCA matrix, waiting for another process to write it.

    The file is read once it is complete: its ``.npy`` header parses and
    its size is the header's plus the data's. Until then (no file yet, or
    one still being written by a non-atomic writer such as ``np.save``
    straight to `path` or ``cp``) it checks every `poll_interval` seconds.
    `save_pca_matrix` writes atomically, so its file is complete as soon as
    it appears.

    Args:
      path: the ``.npy`` file.
      timeout: seconds to wait (>= 0; ``math.inf`` waits forever). MindSpore
        waits 1800 s. With 0, a missing or incomplete file is an error at
        once.
      poll_interval: seconds between checks (> 0).

    Returns:
      The array.

    Raises:
      PCAMatrixTimeoutError: (a ``TimeoutError`` and ``RuntimeError``) the
        file did not appear, or stayed incomplete or unreadable, within
        `timeout` seconds; the message names the path and what was seen
        (the size against the size its header implies).
      ValueError: the complete file cannot be loaded as an array (e.g. it
        holds Python objects); or, at once rather than after `timeout`,
        the file cannot become a valid one: it does not start with the
        ``.npy`` magic string, is longer than its header says, or is
        incomplete and unchanged for `STALE_SECONDS` (a writer that
        stopped left it truncated). The message names the path and what
        was seen.
      OSError: the file cannot be read (e.g. permissions).

    Example:
      >>> import os, tempfile, numpy as np
      >>> from boostax import load_pca_matrix, save_pca_matrix
      >>> path = os.path.join(tempfile.mkdtemp(), "pca.npy")
      >>> save_pca_matrix(path, np.eye(2, 3, dtype=np.float32))
      >>> load_pca_matrix(path, timeout=0).shape
      (2, 3)
    """
    path = os.fspath(path)
    timeout = check_timeout("timeout", timeout)
    poll_interval = check_timeout("poll_interval", poll_interval, positive=True)
    deadline = time.monotonic() + timeout
    while True:
        state, seen = _npy_state(path)
        if state == "ready":
            try:
                return np.load(path, allow_pickle=False)
            except (OSError, ValueError, EOFError, TypeError) as e:
                # A writer may have started to rewrite it since the check.
                state, seen = _npy_state(path)
                if state == "ready":
                    raise _load_error(path, e) from e
        if state == "invalid":
            raise _invalid_file_error(path, seen)
        age = _unchanged_for(path) if state == "incomplete" else 0.0
        if age >= STALE_SECONDS:
            raise _invalid_file_error(
                path,
                f"{seen}, unchanged for {age:.0f} s (>= {STALE_SECONDS:g} s): "
                "its writer stopped and left it truncated",
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(poll_interval, remaining))
    if state == "missing":
        raise PCAMatrixTimeoutError(
            f"Waited {timeout:g} s for the PCA matrix {path!r}, and it "
            f"did not appear ({seen}; the time of waiting to load the pca "
            f"mat is larger than {timeout:g} second)."
        )
    raise PCAMatrixTimeoutError(
        f"Waited {timeout:g} s for the PCA matrix {path!r} to be complete, "
        f"and it stayed incomplete or unreadable: the last check saw {seen}. "
        "Write it with boostax.save_pca_matrix (atomic), or make sure its "
        "writer finished; delete a truncated file to compute it again."
    )
