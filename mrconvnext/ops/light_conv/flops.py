"""FLOP formulas of the DynamicConv operators for ``torch.utils.flop_counter.FlopCounterMode``: 2 flops per
multiply-add of taps that read inside the sequence (taps falling off either end are not computed)."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

from ..late_flops import share_with_active_counters
from . import operators  # noqa: F401 - defines the operators counted here
from .checks import tap_span

__all__ = ['dynamic_conv_flops', 'dynamic_conv_backward_flops', 'register_triton_flops']


def _macs(x4_shape, taps: int, zero_lag: int) -> int:
    B, H, R, L = x4_shape
    span = sum(max(0, t1 - t0) for t0, t1 in (tap_span(k - zero_lag, L) for k in range(taps)))
    return B * H * R * span


@register_flop_formula(torch.ops.mrconvnext.dynamic_conv)
def dynamic_conv_flops(x4_shape, w_t_shape, zero_lag, *args, out_shape=None, **kwargs) -> int:
    """``dynamic_conv(x4 (B, H, R, L), w_t (B, H, K, L), zero_lag)``."""
    return 2 * _macs(x4_shape, w_t_shape[2], zero_lag)


@register_flop_formula(torch.ops.mrconvnext.dynamic_conv_backward)
def dynamic_conv_backward_flops(
    grad_shape, x4_shape, w_t_shape, zero_lag, need_x, need_w, *args, out_shape=None, **kwargs
) -> int:
    """One multiply-add per tap and output for ``grad_x`` and one for ``grad_w``."""
    return 2 * _macs(x4_shape, w_t_shape[2], zero_lag) * (int(need_x) + int(need_w))


def register_triton_flops() -> None:
    """The formulas of the Triton operators (:mod:`.engine_triton`, which calls this once defined): the same
    multiply-adds, x given as ``(B, L, C)`` and the kernels as ``(B, L, H, K)``, or LightConv's as ``(H, K)`` (the
    softmax is not counted)."""

    def channels_first(x_shape):
        B, L, C = x_shape
        return (B, 1, C, L)

    @register_flop_formula(torch.ops.mrconvnext.dynamic_conv_triton)
    def _(x_shape, logits_shape, drop_shape, zero_lag, softmax, *args, out_shape=None, **kwargs) -> int:
        return 2 * _macs(channels_first(x_shape), logits_shape[3], zero_lag)

    @register_flop_formula(torch.ops.mrconvnext.light_conv_triton)
    def _(x_shape, weight_shape, zero_lag, *args, out_shape=None, **kwargs) -> int:
        return 2 * _macs(channels_first(x_shape), weight_shape[1], zero_lag)

    @register_flop_formula(torch.ops.mrconvnext.light_conv_triton_backward)
    def _(grad_shape, x_shape, weight_shape, zero_lag, need_dx, need_dweight, *args, out_shape=None, **kwargs) -> int:
        return 2 * _macs(channels_first(x_shape), weight_shape[1], zero_lag) * (int(need_dx) + int(need_dweight))

    @register_flop_formula(torch.ops.mrconvnext.dynamic_conv_triton_backward)
    def _(grad_shape, x_shape, logits_shape, drop_shape, lse_shape, zero_lag, softmax, need_dx, need_dlogits,
          *args, out_shape=None, **kwargs) -> int:  # fmt: skip
        return 2 * _macs(channels_first(x_shape), logits_shape[3], zero_lag) * (int(need_dx) + int(need_dlogits))

    ops = torch.ops.mrconvnext
    share_with_active_counters(  # defined on first use, maybe under a counter
        [
            ops.dynamic_conv_triton,
            ops.light_conv_triton,
            ops.light_conv_triton_backward,
            ops.dynamic_conv_triton_backward,
        ]
    )
