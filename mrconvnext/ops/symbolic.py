"""Size arithmetic that works on plain ints, on the symbolic sizes of ``torch.compile`` / ``torch.export`` (without
adding a guard) and on the traced sizes of ``torch.jit.trace`` (0-dim tensors: the TorchScript ONNX exporter's)."""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ['known_true', 'static_size', 'sym_max', 'sym_min']


def _traced(*values) -> bool:
    return any(isinstance(v, torch.Tensor) for v in values)


def static_size(size):
    """A traced size (a 0-dim tensor under ``torch.jit.trace``) as the int it had at trace time, which the trace fixes;
    an int or a symbolic size as it is (no guard under ``torch.compile``). For sizes the trace must keep constant
    (a map's height and width, a kernel's taps), never the batch."""
    return int(size) if isinstance(size, torch.Tensor) else size


def known_true(condition) -> bool:
    """``statically_known_true``: a plain bool as it is, a symbolic one True only where it holds for every size the
    graph serves. A traced comparison (a 0-dim tensor) is taken at its trace-time value (the trace fixes the sizes
    it branches on, as it fixes any Python control flow)."""
    if isinstance(condition, torch.Tensor):
        return bool(condition)
    return statically_known_true(condition)


def sym_min(a, b):
    """``torch.sym_min`` for symbolic sizes; plain ``min`` for two ints (torch 2.11's dynamo refused ``torch.sym_min``
    of two ints: "torch.* op returned non-Tensor") and for traced sizes (taken at their trace-time values)."""
    if isinstance(a, int) and isinstance(b, int):  # first: the eager case, several calls per mixer call
        return min(a, b)
    return min(int(a), int(b)) if _traced(a, b) else torch.sym_min(a, b)


def sym_max(a, b):
    """``torch.sym_max`` for symbolic sizes; plain ``max`` for two ints and traced sizes (see :func:`sym_min`)."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return max(int(a), int(b)) if _traced(a, b) else torch.sym_max(a, b)
