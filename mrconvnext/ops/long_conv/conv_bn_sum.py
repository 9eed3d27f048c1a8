"""Multi-kernel long convolution + per-branch BatchNorm (batch statistics) + weighted sum, fused for training.

For ``x (B, C, L)`` and kernels ``(N, C, K)`` (lag convention of :func:`~mrconvnext.ops.long_conv1d`)::

    z_i = long_conv1d(x, kernel_i)                                           (B, C, L) each
    y   = sum_i alpha_i * (weight_i * (z_i - mean_i) / sqrt(var_i + eps) + bias_i)

with per-channel ``mean_i`` and biased ``var_i`` over batch and positions: exactly ``nn.BatchNorm1d`` in
training mode on every branch, followed by the alpha-weighted sum (MRConv's training form, paper Eq. 10-12).
The fused CPU kernels (``kernels/fftconv``) compute the statistics while writing ``z`` (per-row two-pass moments in
float64, merged with Chan's pairwise update, so a branch whose mean is large against its spread keeps its
variance: no ``E[z^2] - E[z]^2``), the weighted sum in one pass into a tensor laid out like ``x``, and in the backward fold the BatchNorm gradient into the FFT
backward's gather, so the ``(B, N, C, L)`` gradient of ``z`` is never materialized. Only ``x``, ``z`` and the
kernel spectra are saved. Running statistics are the caller's (it gets ``mean`` and ``var``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import availability
from . import dispatch
from .checks import check_branch_norm
from .engine_native import fused_rows
from .layout import circular_kernel, crop_kernel, fft_length

__all__ = [
    'branch_conv_bn_sum',
    'branch_conv_bn_sum_supported',
    'conv_bn_sum_op',
    'conv_bn_sum_backward_op',
    'clamped_window',
    'ones_response',
]

# Channels per task of the gradient-statistics pass (its tasks own channels, so small blocks keep both
# threads busy on 96-channel stages).
_STATS_ROWS = 8


def branch_conv_bn_sum_supported(x: torch.Tensor) -> bool:
    """Whether :func:`branch_conv_bn_sum` can run on ``x``: float32 / float64 CPU tensors where the fused
    kernels build (builds them on first call; :func:`mrconvnext.ops.long_conv.dispatch.conv_bn_sum_available`)."""
    return dispatch.conv_bn_sum_available(x)


@torch.library.custom_op('mrconvnext::branch_conv_bn_sum', mutates_args=(), device_types='cpu')
def conv_bn_sum_op(
    x: torch.Tensor,
    k_circ: torch.Tensor,
    ones: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    n: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Operator form of :func:`branch_conv_bn_sum` on circular kernels ``k_circ (N, C, n)`` and their responses to a
    constant ``ones (N, C, L)`` (see :func:`ones_response`). Returns ``(y, stats, z, k_f)``: ``y`` laid out like x,
    ``stats (N, C, 2)`` float64 [mean, biased var], and for the backward the branch outputs ``z (B, N, C, L)`` and
    the kernel spectra ``k_f``. CPU only (the fused kernels)."""
    fused = availability.load_native(availability.FFTCONV_EXT)
    B, C, L = x.shape
    N = k_circ.shape[0]
    rows = fused_rows(n)
    k_f = torch.fft.rfft(k_circ).contiguous()
    z = x.new_empty((B, N, C, L))
    # each row of x centred before its transforms (see ones_response)
    stats = fused.fft_conv_forward(x, k_f, n, None, z, rows, True, ones)
    mean, invstd = stats[..., 0].contiguous(), (stats[..., 1] + eps).rsqrt()
    w, b, a = weight.double(), bias.double(), alpha.double()
    # y = sum_i scale_i * (z_i - center_i) + shift, centred on the mean rounded to x's dtype: z_i - center_i
    # is then (nearly) exact where scale_i * z_i + const would cancel for a large mean.
    center = mean.to(x.dtype)
    scale = a * w * invstd
    shift = (a * (b - w * invstd * (mean - center.double()))).sum(0)
    y = torch.empty_like(x)  # laid out like x: a channels-last map stays channels-last
    fused.branch_combine(z, scale.to(x.dtype).contiguous(), center, shift.to(x.dtype).contiguous(), y, rows)
    return y, stats, z, k_f


@conv_bn_sum_op.register_fake
def _(x, k_circ, ones, weight, bias, alpha, n, eps):
    B, C, L = x.shape
    N = k_circ.shape[0]
    stats = x.new_empty((N, C, 2), dtype=torch.float64)
    k_f = k_circ.new_empty((N, C, n // 2 + 1), dtype=k_circ.dtype.to_complex())
    return torch.empty_like(x), stats, x.new_empty((B, N, C, L)), k_f


@torch.library.custom_op('mrconvnext::branch_conv_bn_sum_backward', mutates_args=(), device_types='cpu')
def conv_bn_sum_backward_op(
    g: torch.Tensor,
    x: torch.Tensor,
    k_f: torch.Tensor,
    z: torch.Tensor,
    stats: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    n: int,
    eps: float,
    need_x: bool,
    need_k: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_k_circ, grad_weight, grad_bias, grad_alpha)`` of :func:`conv_bn_sum_op` (``grad_x`` / ``grad_k``
    empty when not needed); the BatchNorm backward is folded into the FFT backward's gather."""
    fused = availability.load_native(availability.FFTCONV_EXT)
    B, C, L = x.shape
    M = B * L
    mean, invstd = stats[..., 0].contiguous(), (stats[..., 1] + eps).rsqrt()
    sums = fused.branch_grad_stats(g, z, mean, _STATS_ROWS)  # (N + 1, C) float64
    s_g = sums[0]
    p = invstd * sums[1:]  # sum over (b, t) of g * z_hat_i
    w, b, a = weight.double(), bias.double(), alpha.double()
    scale = a * w * invstd
    # BatchNorm backward, dz_i = scale_i * (g - mean(g) - z_hat_i * mean(g * z_hat_i)), written as
    # coef0 g + coef1 (z_i - center_i) + coef2 with the centre the mean in x's dtype (see the forward)
    center = mean.to(x.dtype)
    c1 = -scale * invstd * p / M
    c2 = -scale * s_g / M + c1 * (center.double() - mean)
    coef = torch.stack([scale, c1, c2, center.double()]).to(x.dtype)
    # g is read through its strides (a channels-last gradient needs no copy)
    grad_x, grad_k_f = fused.fft_conv_backward(x, k_f, n, g, need_x, need_k, fused_rows(n), z, coef)
    grad_k = torch.fft.irfft(grad_k_f, n=n) if need_k else x.new_empty(0)
    return (
        grad_x if need_x else x.new_empty(0),
        grad_k,
        (a * p).to(weight.dtype),
        (a * s_g).to(bias.dtype),
        (w * p + b * s_g).to(alpha.dtype),
    )


@conv_bn_sum_backward_op.register_fake
def _(g, x, k_f, z, stats, weight, bias, alpha, n, eps, need_x, need_k):
    N, C = k_f.shape[:2]
    return (
        torch.empty_like(x) if need_x else x.new_empty(0),
        x.new_empty((N, C, n)) if need_k else x.new_empty(0),
        torch.empty_like(weight),
        torch.empty_like(bias),
        torch.empty_like(alpha),
    )


def _setup(ctx, inputs, output):
    x, _k_circ, _ones, weight, bias, alpha, n, eps = inputs
    _y, stats, z, k_f = output
    ctx.save_for_backward(x, k_f, z, stats, weight, bias, alpha)
    ctx.n, ctx.eps = n, eps


def _backward(ctx, g, _grad_stats, _grad_z, _grad_k_f):
    x, k_f, z, stats, weight, bias, alpha = ctx.saved_tensors
    need_x, need_k, _, need_w, need_b, need_a = ctx.needs_input_grad[:6]
    gx, gk, gw, gb, ga = conv_bn_sum_backward_op(
        g, x, k_f, z, stats, weight, bias, alpha, ctx.n, ctx.eps, need_x, need_k
    )
    return (
        gx if need_x else None,
        gk if need_k else None,
        None,
        gw if need_w else None,
        gb if need_b else None,
        ga if need_a else None,
        None,
        None,
    )


conv_bn_sum_op.register_autograd(_backward, setup_context=_setup)


def branch_conv_bn_sum(
    x: torch.Tensor,
    kernels: torch.Tensor,
    zero_lag: int,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """See the module docstring. ``x (B, C, L)``, ``kernels (N, C, K)``, ``weight``/``bias``/``alpha (N, C)``.

    Returns ``y`` (laid out like ``x``), and the batch ``mean`` and biased ``var`` ``(N, C)`` (no gradient) for
    the caller's running statistics. Raises ValueError where BatchNorm would (one value per channel) and
    RuntimeError where :func:`branch_conv_bn_sum_supported` is False.
    """
    check_branch_norm('branch_conv_bn_sum', x, kernels, zero_lag, weight, bias, alpha)
    L = x.shape[-1]
    if not branch_conv_bn_sum_supported(x):
        raise RuntimeError('branch_conv_bn_sum needs float32/float64 CPU tensors and the fused CPU extension')
    kernels, zero_lag = crop_kernel(kernels, zero_lag, L)
    n = fft_length(L, kernels.shape[-1], zero_lag)
    kernels = kernels.to(x.dtype)
    k_circ = circular_kernel(kernels, zero_lag, n)
    ones = ones_response(kernels.detach(), zero_lag, L).to(x.dtype)
    y, stats, _, _ = conv_bn_sum_op(x, k_circ, ones, weight, bias, alpha, n, float(eps))
    return y, stats[..., 0].to(x.dtype).detach(), stats[..., 1].to(x.dtype).detach()  # statistics: no gradient


def clamped_window(p: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """``p[..., clamp(start + i, 0, M - 1)]`` for ``i < count`` (``M = p.shape[-1]``): a slice of ``p`` with its first
    or last entry repeated where the window runs past an end. Slices and one ``cat``, not index arithmetic and a
    gather: on a GPU each of those ops is a launch, and these windows are taken for every mixer in every step."""
    M = p.shape[-1]
    left = min(max(-start, 0), count)
    lo, hi = min(max(start, 0), M), min(max(start + count, 0), M)
    right = count - left - (hi - lo)
    parts = [p[..., :1].expand(*p.shape[:-1], left)] if left else []
    parts.append(p[..., lo:hi])
    if right:
        parts.append(p[..., M - 1 :].expand(*p.shape[:-1], right))
    return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


def ones_response(kernels: torch.Tensor, zero_lag: int, length: int) -> torch.Tensor:
    """``long_conv1d(ones(1, C, length), kernels)`` exactly, from prefix sums of the taps in float64:
    ``(..., C, K) -> (..., C, length)``, entry ``t`` the sum of the taps whose lag reaches inside ``[0, length)``:
    ``P[min(t + zero_lag + 1, K)] - P[max(t + zero_lag + 1 - length, 0)]`` with ``P[j]`` the sum of the first ``j``."""
    P = F.pad(kernels.double().cumsum(-1), (1, 0))
    return clamped_window(P, zero_lag + 1, length) - clamped_window(P, zero_lag + 1 - length, length)
