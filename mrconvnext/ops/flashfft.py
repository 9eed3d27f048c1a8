"""Adapter for the optional CUDA package ``flashfftconv`` (HazyResearch/flash-fft-conv).

Documented contract we rely on: ``FlashFFTConv(seqlen, dtype)`` with ``seqlen`` (the FFT size)
a power of two in ``[256, 4M]`` and ``dtype`` fp16/bf16; ``conv(u, k)`` takes ``u (B, H, L)``
contiguous fp16/bf16 on CUDA and ``k (H, Lk)`` float32 and returns
``irfft(rfft(u, n) * rfft(k, n))[..., :L]`` in ``u.dtype``. ``L`` must be even (divisible by 4
for ``n`` in {512, 2048}). It is a circular convolution, so the caller lays the kernel out on
the circle (:func:`~mrconvnext.ops.long_conv.circular_kernel`) with ``n`` large enough to avoid
wrap-around.

Used automatically only for fp16/bf16 CUDA inputs (where reduced precision was already chosen);
float32 inputs keep the exact float32 ``torch.fft`` path. Instances hold DFT buffers and are
cached here, outside any ``nn.Module``, so they never enter a ``state_dict``.
"""

from __future__ import annotations

import importlib

import torch

from .kernel_layout import circular_kernel

__all__ = ['available', 'supports', 'conv1d', 'fft_size']

_MIN_N, _MAX_N = 256, 4 * 1024 * 1024
_instances: dict[tuple[int, torch.dtype, torch.device], object] = {}
_module = None
_import_failed = False


def _import():
    global _module, _import_failed
    if _module is None and not _import_failed:
        try:
            _module = importlib.import_module('flashfftconv')
        except ImportError:
            _import_failed = True
    return _module


@torch.compiler.assume_constant_result  # fixed per process; the compiler takes the answer instead of the import
def available() -> bool:
    """Whether ``flashfftconv`` is importable."""
    return _import() is not None


def fft_size(required: int) -> int | None:
    """Power-of-two FFT size ``>= required`` that flashfftconv accepts, or ``None``."""
    n = max(_MIN_N, 1 << max(0, required - 1).bit_length())
    return n if n <= _MAX_N else None


def _required(length: int, taps: int, zero_lag: int) -> int:
    return length + max(taps - 1 - zero_lag, zero_lag)


def _on_cuda(x: torch.Tensor) -> bool:
    return x.is_cuda


def supports(x: torch.Tensor, taps: int, zero_lag: int) -> bool:
    """Whether flashfftconv can compute this convolution (package, device, dtype and sizes)."""
    if not available() or not _on_cuda(x):
        return False
    if x.dtype not in (torch.float16, torch.bfloat16):
        return False
    L = x.shape[-1]
    n = fft_size(_required(L, taps, zero_lag))
    if n is None or L % 2:
        return False
    return not (n in (512, 2048) and L % 4)


def _get(n: int, dtype: torch.dtype, device: torch.device):
    key = (n, dtype, device)
    conv = _instances.get(key)
    if conv is None:
        conv = _import().FlashFFTConv(n, dtype=dtype)
        if hasattr(conv, 'to'):
            conv = conv.to(device)
        _instances[key] = conv
    return conv


def conv1d(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``x (B, C, L)`` fp16/bf16, ``kernel (C, K)`` or ``(N, C, K)`` -> ``(B, C, L)`` / ``(B, N, C, L)``.

    Callers check :func:`supports` first; ``long_conv1d`` does.
    """
    n = fft_size(_required(x.shape[-1], kernel.shape[-1], zero_lag))
    conv = _get(n, x.dtype, x.device)
    if hasattr(conv, 'train'):
        conv.train(torch.is_grad_enabled())  # it saves tensors for backward only in training mode
    k = circular_kernel(kernel.float(), zero_lag, n)
    u = x.contiguous()
    if kernel.dim() == 2:
        return conv(u, k.contiguous())
    return torch.stack([conv(u, k_i.contiguous()) for k_i in k.unbind(0)], dim=1)
