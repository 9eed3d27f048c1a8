"""The ``'native'`` engine of the FFT convolution: the fused C++ CPU kernels of ``kernels/fftconv`` (float32 /
float64; the same arithmetic as :mod:`.engine_torch`, one task per block of channels with its buffers in cache).
They are built and loaded by :mod:`mrconvnext.ops.availability`."""

from __future__ import annotations

from types import ModuleType

import torch

from .. import availability

__all__ = ['extension', 'fused_rows', 'fft_forward', 'fft_backward']


def extension(x: torch.Tensor) -> ModuleType | None:
    """The fused CPU extension for float32 / float64 CPU tensors where it builds, else None."""
    if x.device.type != 'cpu' or x.dtype not in (torch.float32, torch.float64):
        return None
    return availability.load_native(availability.FFTCONV_EXT)


# The fused kernels take the kernels' plain spectra (their inverse transforms divide by n).
SPECTRUM_NORM = 'backward'

# Sequences per task of the fused CPU kernel (kernels/fftconv): at least 32 (batched transforms of a few rows
# were slower at n = 6272), else about 2^15 / n, so a task's buffers stay in the core's L2. On the ConvNeXt-T
# stages (B=16, 2 threads) this was within noise of the best of 2^14..2^18 elements per task at every stage.
FUSED_MIN_ROWS = 32
FUSED_ELEMS = 1 << 15


def fused_rows(n: int) -> int:
    return max(FUSED_MIN_ROWS, FUSED_ELEMS // n)


def fft_forward(
    ext: ModuleType, x: torch.Tensor, k_f: torch.Tensor, n: int, out: torch.Tensor, bias: torch.Tensor | None
) -> None:
    """:func:`.engine_torch.fft_forward` in the extension ``ext``."""
    ext.fft_conv_forward(x, k_f.contiguous(), n, bias, out, fused_rows(n))


def fft_backward(
    ext: ModuleType, grad_y: torch.Tensor, x: torch.Tensor, k_f: torch.Tensor, n: int, need_x: bool, need_k: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """:func:`.engine_torch.fft_backward` in the extension ``ext``."""
    grad_x, grad_k_f = ext.fft_conv_backward(x, k_f, n, grad_y, need_x, need_k, fused_rows(n))
    return grad_x, torch.fft.irfft(grad_k_f, n=n) if need_k else None
