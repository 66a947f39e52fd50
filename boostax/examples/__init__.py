# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""The bundled examples: digits data, a small ResNet and MLP, a baseline step;
bytes of Python's standard library and a small transformer (a language model).

Used by the demo (``python -m boostax.examples.demo``), the benchmarks, the
notebooks and the tests. Needs the ``examples`` extra (scikit-learn, tqdm).
"""
