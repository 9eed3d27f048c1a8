"""Kernel layouts of the lag convention (:mod:`mrconvnext.ops.long_conv`): crop, circular layout, FFT sizes, the
spectrum a convolution multiplies by.

A leaf module (torch only) shared by the operators and engines, so none of them imports another for these helpers.
"""

from __future__ import annotations

import functools

import torch

from ..symbolic import known_true, sym_max, sym_min

__all__ = ['fft_size', 'fft_length', 'crop_kernel', 'circular_kernel', 'kernel_spectrum']


@functools.cache
def fft_size(n: int) -> int:
    """Smallest 7-smooth integer (2^a 3^b 5^c 7^d) that is ``>= n``.

    pocketfft (CPU) and cuFFT both have native radix-2/3/5/7 codelets. On the CPU the next 7-smooth
    size beat the next power of two at the ConvNeXt stage lengths, and sizes with a larger prime
    factor were slower (``python scripts/bench_mrconv.py --fft-sizes --doc``, docs/benchmarks.md).
    """
    if n < 1:
        raise ValueError(f'fft_size expects a positive length, got {n}')
    m = n
    while True:
        r = m
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


def crop_kernel(kernel: torch.Tensor, zero_lag: int, length: int) -> tuple[torch.Tensor, int]:
    """Drop the lags that cannot reach any of ``length`` outputs (``|tau| >= length``).

    Returns the cropped kernel and its new ``zero_lag``.
    """
    K = kernel.shape[-1]
    lo = sym_max(0, zero_lag - (length - 1))
    hi = sym_min(K, zero_lag + length)
    # sizes traced by torch.compile: slice without guarding on whether anything is cut (plain ints: exact test)
    if known_true(lo == 0) and known_true(hi == K):
        return kernel, zero_lag
    return kernel[..., lo:hi], zero_lag - lo


def circular_kernel(kernel: torch.Tensor, zero_lag: int, n: int) -> torch.Tensor:
    """Lay a kernel out on a circle of size ``n``: lag ``tau`` goes to index ``tau mod n``.

    ``kernel`` is ``(..., K)`` with ``K <= n``; returns ``(..., n)``.
    """
    K = kernel.shape[-1]
    if K > n:
        raise ValueError(f'kernel of {K} taps does not fit a circle of size {n}')
    pad = kernel.new_zeros(*kernel.shape[:-1], n - K)
    return torch.cat([kernel[..., zero_lag:], pad, kernel[..., :zero_lag]], dim=-1)


def fft_length(length: int, taps: int, zero_lag: int) -> int:
    """FFT size for ``length`` outputs of a ``taps``-tap kernel: no wrap-around, then :func:`fft_size`.

    Past lags need ``n >= length + (taps - 1 - zero_lag)``, future lags ``n >= length + zero_lag``.
    """
    size = fft_size.__wrapped__ if torch.compiler.is_compiling() else fft_size  # dynamo traces, not caches
    return size(length + max(taps - 1 - zero_lag, zero_lag))


def kernel_spectrum(
    kernel: torch.Tensor, zero_lag: int, length: int, norm: str = 'backward'
) -> tuple[torch.Tensor, int]:
    """``(k_f, n)``: the spectrum ``(..., n // 2 + 1)`` of ``kernel (..., K)`` cropped to what reaches ``length``
    outputs, on the circle of the FFT size ``n`` the convolution of a ``length``-long input uses. Computed in the
    kernel's dtype (what the FFT convolution multiplies the input's spectrum by). ``norm`` as torch.fft's:
    ``'backward'`` the plain DFT, ``'forward'`` divided by ``n`` (for an engine whose inverse transforms leave out
    the ``1 / n``)."""
    kernel, zero_lag = crop_kernel(kernel, zero_lag, length)
    n = fft_length(length, kernel.shape[-1], zero_lag)
    return torch.fft.rfft(circular_kernel(kernel, zero_lag, n), n=n, norm=norm), n
