"""TaLK for ONNX runtimes: the ``'onnx'`` engine, standard ATen ops chosen for what ONNX Runtime runs fast.

What ``engine='auto'`` resolves to while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`); inference only. Conventions are those of :mod:`mrconvnext.ops.talk`,
results the specification's (:mod:`.reference`) up to float32 rounding.

1-D: the prefix table ``P`` and ``x`` are laid out position-major, rows of the ``R`` channels of a head, and a window
end at ``u = k + f`` reads ``P(u) = P[k] + f x[k]`` (the identity ``P[k + 1] - P[k] = x[k]``: no cancellation in a
long prefix sum), so the four lookups of a window are ``Gather``s of whole rows along axis 0 with ``(B, heads, L)``
indices. The specification gathers single elements (``GatherElements``), which needs its indices broadcast to the
full ``(B, C, L)`` shape first (an ``Expand`` of int64 indices per lookup). Two transposes of ``x``'s size are the
price.
2-D: the specification itself. The row-gather form needs sixteen full-size lookups per box and measured slower in
ONNX Runtime (so did a one-gather form reading four tables, for both 1-D and 2-D). ``python
scripts/bench_onnx_forms.py --ops talk --doc`` times the forms kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import acc_dtype, check_inputs, check_maxima
from .reference import talk2d_reference, window_edges

__all__ = ['talk1d_onnx', 'talk2d_onnx']


def talk1d_onnx(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
    """TaLK 1-D, ``(B, C, L) -> (B, C, L)``, with row gathers from a position-major prefix table."""
    heads = check_inputs(x, offsets, 1)
    max_left, max_right = check_maxima(max_left, max_right)
    B, C, L = x.shape
    R = C // heads
    acc = acc_dtype(x.dtype)
    xt = x.to(acc).reshape(B, heads, R, L).transpose(2, 3)  # (B, heads, L, R)
    prefix = F.pad(xt.cumsum(2), (0, 0, 1, 0)).reshape(-1, R)  # row (b, h, t): P[t] = sum_{j<t} x[j]
    values = xt.reshape(-1, R)  # row (b, h, t): x[t] = P[t + 1] - P[t], exact where the difference would cancel
    off = offsets.to(acc)
    pos = torch.arange(L, device=x.device, dtype=acc)
    start, end = window_edges(pos, off[..., 0] * max_left, off[..., 1] * max_right, L)
    bh = torch.arange(B * heads, device=x.device).view(B, heads, 1)

    def interp(edge):  # P(u) = P[k] + (u - k) x[k]
        u, k = edge
        k = k.long()
        p = prefix.index_select(0, (bh * (L + 1) + k).reshape(-1)).view(B, heads, L, R)
        v = values.index_select(0, (bh * L + k).reshape(-1)).view(B, heads, L, R)
        return p + (u - k).unsqueeze(-1) * v

    y = (interp(end) - interp(start)) / (max_left + max_right + 1)
    return y.transpose(2, 3).reshape(B, C, L).to(x.dtype)


def talk2d_onnx(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> torch.Tensor:
    """TaLK 2-D box op, ``(B, C, H, W) -> (B, C, H, W)``: the specification (see the module docstring)."""
    return talk2d_reference(x, offsets, max_left, max_right, max_top, max_bottom)
