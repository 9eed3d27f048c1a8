"""How a ``(B, C, H, W)`` map is flattened to the operators' ``(B, C, L)`` and back, so that an exported ONNX graph
holds its transposes next to their inverses.

ONNX has no strides: a graph's layout is its sequence of ``Transpose`` nodes, and a runtime drops a transpose only
where its inverse follows it. The ConvNeXt block transposes the mixer's output to channels-last for its LayerNorm,
and the position-major ONNX forms (TaLK's tables) transpose ``(B, C, L) <-> (B, L, C)`` at their ends. While
``torch.onnx.export`` traces (:func:`~mrconvnext.ops.availability.onnx_exporting`), :func:`flatten_map` and
:func:`unflatten_map` therefore go through the channels-last order ``(B, H, W, C)``: the form's transposes meet
theirs, and the block's meets the last one (ONNX Runtime then keeps one transpose of the map, into channels-last,
where it kept three; with a dynamic batch a ``Reshape`` between two transposes keeps both). Eagerly, and under ``torch.compile``, they are the plain ``reshape`` / ``view``,
which copy nothing.
"""

from __future__ import annotations

import torch

from .availability import onnx_exporting

__all__ = ['flatten_map', 'unflatten_map']


def flatten_map(x: torch.Tensor) -> torch.Tensor:
    """``(B, C, H, W) -> (B, C, H * W)``, row-major positions."""
    B, C, H, W = x.shape
    if onnx_exporting():
        return x.permute(0, 2, 3, 1).reshape(B, H * W, C).transpose(1, 2)
    return x.reshape(B, C, H * W)


def unflatten_map(y: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``(B, C, H * W) -> (B, C, H, W)`` for ``size = (H, W)``, the inverse of :func:`flatten_map`."""
    B, C, _ = y.shape
    H, W = size
    if onnx_exporting():
        return y.transpose(1, 2).reshape(B, H, W, C).permute(0, 3, 1, 2)
    return y.reshape(B, C, H, W)
