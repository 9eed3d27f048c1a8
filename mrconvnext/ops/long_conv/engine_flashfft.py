"""The ``'flashfft'`` engine: an adapter for the optional CUDA package ``flashfftconv`` (HazyResearch/flash-fft-conv).

Documented contract we rely on: ``FlashFFTConv(seqlen, dtype)`` with ``seqlen`` (the FFT size)
a power of two in ``[256, 4M]`` and ``dtype`` fp16/bf16; ``conv(u, k)`` takes ``u (B, H, L)``
contiguous fp16/bf16 on CUDA and ``k (H, Lk)`` float32 and returns
``irfft(rfft(u, n) * rfft(k, n))[..., :L]`` in ``u.dtype``. ``L`` must be even (divisible by 4
for ``n`` in {512, 2048}). It is a circular convolution, so the caller lays the kernel out on
the circle (:func:`~mrconvnext.ops.long_conv.layout.circular_kernel`) with ``n`` large enough to avoid
wrap-around.

Whether it is installed is :mod:`mrconvnext.ops.availability`'s business, which sizes it takes
:mod:`mrconvnext.ops.long_conv.dispatch`'s. Used automatically only for fp16/bf16 CUDA inputs (where reduced precision was already chosen);
float32 inputs keep the exact float32 ``torch.fft`` path. Instances hold DFT buffers and are
cached here, outside any ``nn.Module``, so they never enter a ``state_dict``.
"""

from __future__ import annotations

import torch

from .. import availability
from . import dispatch
from .layout import circular_kernel

__all__ = ['conv1d', 'instances']

# FlashFFTConv instances per (FFT size, dtype, device): they hold DFT buffers, kept here rather than in a module
instances: dict[tuple[int, torch.dtype, torch.device], object] = {}


def _get(n: int, dtype: torch.dtype, device: torch.device):
    key = (n, dtype, device)
    conv = instances.get(key)
    if conv is None:
        conv = availability.flashfft_module().FlashFFTConv(n, dtype=dtype)
        if hasattr(conv, 'to'):
            conv = conv.to(device)
        instances[key] = conv
    return conv


def conv1d(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``x (B, C, L)`` fp16/bf16, ``kernel (C, K)`` or ``(N, C, K)`` -> ``(B, C, L)`` / ``(B, N, C, L)``.

    Callers check that it runs first; ``long_conv1d`` does (:func:`mrconvnext.ops.long_conv.dispatch.long_conv_plan`).
    """
    n = dispatch.flashfft_fft_size(x.shape[-1], kernel.shape[-1], zero_lag)
    conv = _get(n, x.dtype, x.device)
    if hasattr(conv, 'train'):
        conv.train(torch.is_grad_enabled())  # it saves tensors for backward only in training mode
    k = circular_kernel(kernel.float(), zero_lag, n)
    u = x.contiguous()
    if kernel.dim() == 2:
        return conv(u, k.contiguous())
    return torch.stack([conv(u, k_i.contiguous()) for k_i in k.unbind(0)], dim=1)
