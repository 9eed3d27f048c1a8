"""``min`` / ``max`` of sizes that may be symbolic under ``torch.compile``, without a guard on which is larger."""

from __future__ import annotations

import torch

__all__ = ['sym_max', 'sym_min']


def sym_min(a, b):
    """``torch.sym_min`` for symbolic sizes; plain ``min`` for two ints (torch 2.11's dynamo refused ``torch.sym_min``
    of two ints: "torch.* op returned non-Tensor")."""
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else torch.sym_min(a, b)


def sym_max(a, b):
    """``torch.sym_max`` for symbolic sizes; plain ``max`` for two ints (see :func:`sym_min`)."""
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else torch.sym_max(a, b)
