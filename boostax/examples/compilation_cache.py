# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""JAX's persistent compilation cache for the demo, benchmarks and notebooks.

A second run of the same step reads its executable from disk instead of
compiling it again (the ten freeze depths of the example ResNet: tens of
seconds cold, about one warm). In your own scripts, one JAX setting turns
it on::

    jax.config.update("jax_compilation_cache_dir", "/path/to/cache")

(or the environment variable ``JAX_COMPILATION_CACHE_DIR``). `enable` also
caches programs that compile in under a second, which JAX skips by default.
"""

from __future__ import annotations

import argparse
import os

import jax

# JAX's own setting if the environment gives one, else a user cache folder.
DEFAULT_DIRECTORY = os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
    "boostax",
    "jax_compilation_cache",
)


def enable(directory: str | os.PathLike | None = None) -> str:
    """Turns JAX's persistent compilation cache on; returns its directory.

    Args:
      directory: where executables are stored; default
        ``$JAX_COMPILATION_CACHE_DIR`` if set, else
        ``$XDG_CACHE_HOME/boostax/jax_compilation_cache`` (``~/.cache``).
    """
    directory = os.fspath(DEFAULT_DIRECTORY if directory is None else directory)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--compilation-cache DIR`` and ``--no-compilation-cache``."""
    parser.add_argument(
        "--compilation-cache",
        metavar="DIR",
        default=DEFAULT_DIRECTORY,
        help="JAX's persistent compilation cache (default: %(default)s)",
    )
    parser.add_argument(
        "--no-compilation-cache",
        action="store_true",
        help="compile everything afresh (no persistent cache)",
    )


def from_arguments(args: argparse.Namespace) -> str | None:
    """Enables the cache the parsed arguments ask for; returns its directory
    (``None`` when it is off)."""
    if args.no_compilation_cache:
        return None
    return enable(args.compilation_cache)
