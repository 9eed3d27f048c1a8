"""The row-DFT method for ONNX runtimes: the long convolution's ``'onnx'`` engine (standard ATen ops).

What ``engine='auto'`` runs for long maps while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`). Identity 2 of :mod:`.grid`, as :func:`.engine_torch.rowdft_conv`
computes it, in a channels-first layout: CPU runtimes transpose slowly where a copy's innermost run is short, and
the CUDA layout's transposes move runs of ``B`` (the batch, innermost for the block product) or ``C`` values. Here
every transpose moves runs of a row (``P`` or ``Q`` values) or swaps a map's last two axes, and the block product
takes the batch as its ``M`` dimension. The Toeplitz method keeps :func:`.engine_torch.toeplitz_conv`'s layout,
which measured faster in ONNX Runtime than a channels-first one (``python scripts/bench_onnx_forms.py --ops long_conv
--doc`` times the forms).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..symbolic import static_size
from .grid import row_dft, row_grid, row_idft, toeplitz_blocks

__all__ = ['rowdft_conv']


def rowdft_conv(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """Identity 2: ``x (B, C, L)``, ``kernel (N, C, K)`` -> ``(B, N, C, L)``, in ``x``'s dtype."""
    B, C, L = x.shape
    C, L = static_size(C), static_size(L)  # TorchScript's trace: sizes as tensors (the batch stays traced)
    N = kernel.shape[0]
    P, Q = row_grid(L)
    # the blocks (batch f C + c, row 2 h + s, column 2 g + r) reordered to batch c Q + f, rows (s, h), columns (r, g):
    # they depend on the kernel alone (an exported graph folds them)
    blocks = toeplitz_blocks(kernel, zero_lag, P, Q, x.dtype).view(N, Q, C, P, 2, P, 2)
    blocks = blocks.permute(0, 2, 1, 4, 3, 6, 5).reshape(N, C * Q, 2 * P, 2 * P)
    xp = F.pad(x, (0, P * Q - L)) if P * Q > L else x
    cols = xp.view(B, C, P, Q).transpose(2, 3)  # (B, C, Q, P): column w, row g
    spec = torch.matmul(row_dft(Q, x.dtype, x.device), cols)  # (B, C, 2Q, P): (r, f) x g
    spec = spec.view(B, C, 2, Q, P).permute(1, 3, 0, 2, 4).reshape(C * Q, B, 2 * P)  # (c f, b, (r, g))
    out = torch.matmul(spec, blocks.transpose(-1, -2))  # (N, C Q, B, 2P): (s, h)
    out = out.view(N, C, Q, B, 2, P).permute(3, 0, 1, 4, 2, 5).reshape(B, N, C, 2 * Q, P)  # (b, n, c, (s, f), h)
    y = torch.matmul(row_idft(Q, x.dtype, x.device), out)  # (B, N, C, Q, P): column w x row h
    return y.transpose(3, 4).reshape(B, N, C, P * Q)[..., :L]
