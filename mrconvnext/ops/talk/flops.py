"""FLOP formulas of the TaLK operators for ``torch.utils.flop_counter.FlopCounterMode`` (every engine's operator
counts alike: the arithmetic of the algorithm in ``kernels/talk/talk_math.h``, not of one implementation).

Counted on data values, per element of ``x`` (B, C, ...) and per position of a head (offsets are shared by the
head's channels); index, clamp and edge-case arithmetic is not counted. Flops (a multiply-add is 2).

* 1-D forward: the prefix table, 1 per element; per output two interpolated prefix reads (2 each), their
  difference and the normalization, 6; per head position the two boundaries ``i -/+ o * m``, 4.
* 2-D forward: the integral image, 2 per element; per output four bilinear reads of it (9 each), the box sum (3)
  and the normalization, 40; per head pixel the four boundaries (8) and the interpolation weights ``1 - f`` (4).
* ``dx`` is the adjoint of the forward (scatter, then suffix table): what the forward costs, per element.
* ``d offsets``: 1-D, per output the two slopes times the gradient, accumulated over the head's channels, 4; per
  head position the boundaries again and the ``m * inv_norm`` factors, 8. 2-D, per output eight bilinear
  derivatives (5 each), four differences, four products with the gradient and four accumulations, 52; per head
  pixel the boundaries and factors, 16.
"""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import register_flop_formula

from ..late_flops import share_with_active_counters

__all__ = ['talk1d_flops', 'talk1d_backward_flops', 'talk2d_flops', 'talk2d_backward_flops', 'register_talk_flops']


def talk1d_flops(x_shape, offsets_shape, *args, out_shape=None, **kwargs) -> int:
    """``talk1d(x (B, C, L), offsets (B, heads, L, 2), ...)``."""
    B, heads, L, _ = offsets_shape
    return 7 * math.prod(x_shape) + 4 * B * heads * L


def talk1d_backward_flops(grad_shape, x_shape, offsets_shape, ml, mr, need_dx, need_doff, *args, **kwargs) -> int:
    """``talk1d_backward(grad_y, x (B, C, L), offsets (B, heads, L, 2), ..., need_dx, need_doff)``."""
    B, heads, L, _ = offsets_shape
    total = talk1d_flops(x_shape, offsets_shape) if need_dx else 0
    return total + ((4 * math.prod(x_shape) + 8 * B * heads * L) if need_doff else 0)


def talk2d_flops(x_shape, offsets_shape, *args, out_shape=None, **kwargs) -> int:
    """``talk2d(x (B, C, H, W), offsets (B, heads, H, W, 4), ...)``."""
    B, heads, H, W, _ = offsets_shape
    return 42 * math.prod(x_shape) + 12 * B * heads * H * W


def talk2d_backward_flops(grad_shape, P_shape, offsets_shape, *args, **kwargs) -> int:
    """``talk2d_backward(grad_y (B, C, H, W), P, offsets (B, heads, H, W, 4), ml, mr, mt, mb, need_dx, need_doff)``."""
    need_dx, need_doff = args[4], args[5]
    B, heads, H, W, _ = offsets_shape
    total = talk2d_flops(grad_shape, offsets_shape) if need_dx else 0
    return total + ((52 * math.prod(grad_shape) + 16 * B * heads * H * W) if need_doff else 0)


def register_talk_flops(suffix: str) -> None:
    """Register the formulas for ``mrconvnext::talk1d{suffix}``, ``talk2d{suffix}`` and their backwards (called
    where those operators are defined: ``operators`` for ``''`` and ``'_torch'``, ``engine_triton``)."""
    ops = torch.ops.mrconvnext
    registered = []
    for name, formula in (
        ('talk1d', talk1d_flops),
        ('talk1d_backward', talk1d_backward_flops),
        ('talk2d', talk2d_flops),
        ('talk2d_backward', talk2d_backward_flops),
    ):
        stem, _, rest = name.partition('_')
        registered.append(getattr(ops, stem + suffix + (f'_{rest}' if rest else '')))
        register_flop_formula(registered[-1])(formula)
    share_with_active_counters(registered)  # the Triton operators are defined on first use, maybe under a counter
