"""FLOP formulas of the long-convolution operators for ``torch.utils.flop_counter.FlopCounterMode``.

``FlopCounterMode`` counts an operator through its registered formula only (it does not look inside custom ops), so
without these the mixers of every MRConv model count zero. The formulas count the algorithm each operator runs, on
its concrete sizes (the FFT size the operator picks, after cropping taps that reach no output):

* a real FFT or inverse real FFT of size ``n``: ``2.5 n log2 n`` flops (half the usual ``5 n log2 n`` estimate of a
  complex FFT, the convention of FFTW's benchmarks), whatever radix the library uses;
* a spectral product: 6 flops per frequency bin (``n // 2 + 1`` bins), a product accumulated over branches or the
  batch: 8;
* the kernel spectra are counted on every call (nothing is cached across calls);
* ``branch_conv_bn_sum``: the FFT work above plus 4 flops per branch output for the BatchNorm moments and 3 to
  scale, shift and sum the branches (backward: 2 per branch output for the gradient moments and 5 for the folded
  BatchNorm gradient).
* ``folded_bn_conv``: the branch convolutions once (statistics) and the merged one, by the method they resolve to
  (:func:`conv_flops`), plus 4 flops per branch output (centring, square, sum); backward: the branch convolutions
  twice and their gradients (:func:`conv_vjp_flops`), plus 8 per branch output.

Flops, not MACs: a multiply-add is 2, as for ``aten.mm`` / ``aten.convolution``.
"""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import register_flop_formula

from . import conv_bn_sum, dispatch, fold_bn, operators  # noqa: F401 - defines the operators counted here
from .grid import row_grid
from .layout import fft_length

__all__ = [
    'rfft_flops',
    'conv_flops',
    'conv_vjp_flops',
    'fft_conv_flops',
    'fft_conv_backward_flops',
    'conv_bn_sum_flops',
    'conv_bn_sum_backward_flops',
    'folded_bn_conv_flops',
    'folded_bn_conv_backward_flops',
]


def rfft_flops(n: int) -> float:
    """Flops of one real FFT (or inverse) of size ``n``: ``2.5 n log2 n``."""
    return 2.5 * n * math.log2(n) if n > 1 else 0.0


def _cropped_size(length: int, taps: int, zero_lag: int) -> int:
    """The FFT size :func:`~.layout.kernel_spectrum` uses: taps that reach no output dropped, then no wrap-around."""
    lo = max(0, zero_lag - (length - 1))
    hi = min(taps, zero_lag + length)
    return fft_length(length, hi - lo, zero_lag - lo)


def _fwd(B: int, N: int, C: int, L: int, n: int) -> float:
    """rfft of the B*C inputs and N*C kernels, B*N*C spectral products and inverse transforms."""
    return rfft_flops(n) * (B * C + N * C + B * N * C) + 6 * (n // 2 + 1) * B * N * C


def _bwd(B: int, N: int, C: int, n: int, need_x: bool, need_k: bool) -> float:
    """Spectra of the B*N*C output gradients and the N*C kernels; for grad_x products summed over branches and B*C
    inverse transforms, for grad_k the B*C input spectra, products summed over the batch and N*C inverse
    transforms."""
    f = n // 2 + 1
    total = rfft_flops(n) * (B * N * C + N * C)
    if need_x:
        total += 8 * f * B * N * C + rfft_flops(n) * B * C
    if need_k:
        total += rfft_flops(n) * (B * C + N * C) + 8 * f * B * N * C
    return total


@register_flop_formula([torch.ops.mrconvnext.fft_conv, torch.ops.mrconvnext.fft_conv_torch])
def fft_conv_flops(x_shape, kernel_shape, zero_lag, bias_shape=None, *args, out_shape=None, **kwargs) -> int:
    """``fft_conv(x (B, C, L), kernel (N, C, K), zero_lag, bias)``: FFT work plus the bias add."""
    B, C, L = x_shape
    N, _, K = kernel_shape
    n = _cropped_size(L, K, zero_lag)
    return round(_fwd(B, N, C, L, n) + (B * N * C * L if bias_shape is not None else 0))


@register_flop_formula([torch.ops.mrconvnext.fft_conv_backward, torch.ops.mrconvnext.fft_conv_torch_backward])
def fft_conv_backward_flops(
    grad_shape, x_shape, kernel_shape, zero_lag, need_x, need_k, *args, out_shape=None, **kwargs
) -> int:
    """``fft_conv_backward(grad_y (B, N, C, L), x, kernel, zero_lag, need_x, need_k)``."""
    B, N, C, L = grad_shape
    n = _cropped_size(L, kernel_shape[-1], zero_lag)
    return round(_bwd(B, N, C, n, need_x, need_k))


@register_flop_formula(torch.ops.mrconvnext.branch_conv_bn_sum)
def conv_bn_sum_flops(x_shape, k_circ_shape, *args, out_shape=None, **kwargs) -> int:
    """``branch_conv_bn_sum(x (B, C, L), k_circ (N, C, n), ...)``: FFT work, BatchNorm moments, weighted sum."""
    B, C, L = x_shape
    N, _, n = k_circ_shape
    return round(_fwd(B, N, C, L, n) + 7 * B * N * C * L)


@register_flop_formula(torch.ops.mrconvnext.branch_conv_bn_sum_backward)
def conv_bn_sum_backward_flops(
    g_shape, x_shape, k_f_shape, z_shape, stats_shape, w_shape, b_shape, a_shape, n, eps, need_x, need_k,
    *args, out_shape=None, **kwargs,
) -> int:  # fmt: skip
    """``branch_conv_bn_sum_backward(g, x (B, C, L), k_f, z (B, N, C, L), ..., n, eps, need_x, need_k)``."""
    B, N, C, L = z_shape
    return round(_bwd(B, N, C, n, need_x, need_k) + B * C * L + 7 * B * N * C * L)


def _method(
    x: torch.Tensor, L: int, taps: int, zero_lag: int, method: str, engine: str, kernels: int, grad: bool = False
) -> str:
    zero = min(zero_lag, L - 1)
    reach = zero + 1 + min(taps - 1 - zero_lag, L - 1)
    # the folded operators' convolutions run inside them, where no autograd records; their batch is a chunk of x's,
    # counted here as the whole batch (a last chunk small enough for the direct method on CUDA is counted as the
    # whole batch's method), with ``kernels`` kernels each
    channels = x.shape[1] * kernels
    return dispatch.long_conv_plan(
        x.device.type, x.dtype, L, reach, zero, method, engine, x.shape[0], grad, channels
    ).method


def _branch_batch(method: str, B: int, C: int, M: int) -> tuple[int, int]:
    """``(batch, channels)`` the branch convolutions of ``M`` shared filters over ``C`` channels run as: the groups as
    batch items on the matmul methods, the filters expanded to the channels otherwise (:mod:`.api`)."""
    return (B * (C // M), M) if method in dispatch.MATMUL_METHODS else (B, C)


def conv_flops(method: str, B: int, N: int, C: int, L: int, taps: int, zero_lag: int) -> float:
    """Flops of ``long_conv1d`` of ``(B, C, L)`` with ``N`` kernels of ``taps`` on ``method``: the FFT's transforms and
    products, the direct method's multiply-adds, the Toeplitz GEMM (``L x L`` per channel) or the row DFT's three
    GEMMs (:mod:`.grid`)."""
    if method == 'fft':
        return _fwd(B, N, C, L, _cropped_size(L, taps, zero_lag))
    if method == 'direct':
        lo, hi = max(0, zero_lag - (L - 1)), min(taps, zero_lag + L)
        return 2.0 * B * N * C * L * (hi - lo)
    if method == 'toeplitz':
        return 2.0 * N * C * L * L * B
    P, Q = row_grid(L)
    return 2.0 * (B * P * 2 * Q * Q * C + N * Q * C * (2 * P) ** 2 * B + B * N * P * Q * 2 * Q * C)


def conv_vjp_flops(
    method: str, B: int, N: int, C: int, L: int, taps: int, zero_lag: int, need_x: bool = True, need_k: bool = True
) -> float:
    """Flops of ``long_conv1d_vjp`` (the input and kernel gradients asked for): the FFT operators' backward, else a
    product the size of the forward's per gradient."""
    if method == 'fft':
        return _bwd(B, N, C, _cropped_size(L, taps, zero_lag), need_x, need_k)
    return (need_x + need_k) * conv_flops(method, B, N, C, L, taps, zero_lag)


@register_flop_formula(torch.ops.mrconvnext.folded_bn_conv, get_raw=True)
def folded_bn_conv_flops(x, kernels, zero_lag, weight, bias, alpha, eps, method, engine, *args, **kwargs) -> int:
    """``folded_bn_conv(x (B, C, L), kernels (N, M, K), ...)``: the branch convolutions, the merged ``(C, K)`` one and
    the elementwise terms."""
    B, C, L = x.shape
    N, M, K = kernels.shape
    m = _method(x, L, K, zero_lag, method, engine, N)
    Bg, Cg = _branch_batch(m, B, C, M)
    branches = conv_flops(m, Bg, N, Cg, L, K, zero_lag)
    merged = conv_flops(_method(x, L, K, zero_lag, method, engine, 1), B, 1, C, L, K, zero_lag)  # one kernel
    return round(branches + merged + 4 * B * N * C * L)


@register_flop_formula(torch.ops.mrconvnext.folded_bn_conv_backward, get_raw=True)
def folded_bn_conv_backward_flops(g, x, kernels, zero_lag, *rest, **kwargs) -> int:
    """``folded_bn_conv_backward(g, x (B, C, L), kernels (N, M, K), zero_lag, ..., method, engine, sync)``."""
    method, engine = rest[-3], rest[-2]
    B, C, L = x.shape
    N, M, K = kernels.shape
    m = _method(x, L, K, zero_lag, method, engine, N)
    Bg, Cg = _branch_batch(m, B, C, M)
    conv = conv_flops(m, Bg, N, Cg, L, K, zero_lag)
    mv = _method(x, L, K, zero_lag, method, engine, N, grad=True)  # long_conv1d_vjp chooses as for a backward
    Bv, Cv = _branch_batch(mv, B, C, M)
    vjp = conv_vjp_flops(mv, Bv, N, Cv, L, K, zero_lag)
    # the statistics' gradient: one kernel gradient of a (C, K) convolution and its products with the N kernels
    stats = conv_vjp_flops(mv, B, 1, C, L, K, zero_lag, need_x=False) + 2 * N * C * K + 2 * N * C * L
    return round(conv + vjp + stats + 5 * B * N * C * L + 2 * B * C * L)
