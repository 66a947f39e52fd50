# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's ``mindspore.boost`` object API, over boostax's functional core.

One module per MindSpore concept; the public names are re-exported by
`boostax.mindspore`.
"""
