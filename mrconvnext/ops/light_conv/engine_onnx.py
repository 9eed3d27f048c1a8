"""DynamicConv for ONNX runtimes: the ``'onnx'`` engine, standard ATen ops that export to a handful of ONNX nodes.

What ``engine='auto'`` resolves to while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`). Lags as in :mod:`mrconvnext.ops.light_conv`.

The engine cuts the sequence into chunks (:func:`.dispatch.dynamic_conv_onnx_chunk`) and writes, per image, head and
chunk of ``T`` positions, a band matrix over the chunk's window of ``T + K - 1`` inputs, row ``t`` holding the
flipped kernel of position ``t`` from column ``t`` on; all of them by one ``Col2Im`` (``F.fold``: the kernel of a
position is the block placed at ``t (T + K)`` of its chunk's flat matrix; no scatter, no gather, no copy). One
batched ``MatMul`` with the windows (the zero-padded input, each chunk with the first ``K - 1`` inputs of the next)
does the rest. It multiplies about ``T / K`` times more than the taps need, but in the runtime's best kernel; the
bands take ``T + K - 1`` values per position and head. The fold reads the kernels tap-major, ``(B, H, K, L)``, the
layout the layers' softmax writes, so the transposes around the operator cancel in the exported graph; the flip is a
product with the ``K x K`` exchange matrix (ONNX Runtime reverses an axis slowly).

:func:`dynamic_conv_taps`, the form it replaced on long sequences, is kept as the benchmark's alternative: a
depthwise ``Conv`` with one-hot taps (a constant bank) writes every tap's input, ``(B, C K, L)``, and one ``Mul`` and
one ``ReduceSum`` weigh and add them (the specification's tap loop, :func:`.operators.dynamic_conv_decomposition`,
exports three nodes per tap; a ``Gather`` with an ``(L, K)`` index lost to it by far). ``python
scripts/bench_onnx_forms.py --ops dynamic_conv --doc`` times the three.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..symbolic import static_size
from .dispatch import dynamic_conv_onnx_chunk

__all__ = ['dynamic_conv_band', 'dynamic_conv_onnx', 'dynamic_conv_taps']


def dynamic_conv_onnx(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``x (B, H, R, L)``, ``weight (B, H, L, K)`` -> ``(B, H, R, L)``:
    ``y[b, h, r, t] = sum_k weight[b, h, t, k] x[b, h, r, t - (k - zero_lag)]`` (zeros outside the sequence), as
    band matrices over chunks of the sequence (:func:`dynamic_conv_band`)."""
    return dynamic_conv_band(x, weight, zero_lag)


def dynamic_conv_band(x: torch.Tensor, weight: torch.Tensor, zero_lag: int, chunk: int | None = None) -> torch.Tensor:
    """:func:`dynamic_conv_onnx` per chunk of ``chunk`` positions (default: :func:`.dispatch.dynamic_conv_onnx_chunk`;
    at least ``K - 1`` unless it holds the whole sequence) as ``windows A^T``, ``A[t, t + j] = weight[t, K - 1 - j]``
    of ``chunk`` rows by ``chunk + K - 1`` columns, the windows the input zero-padded by ``K - 1 - zero_lag`` before
    it."""
    B, H, R, L = x.shape
    H, R, L, K = static_size(H), static_size(R), static_size(L), static_size(weight.shape[-1])
    T = min(L, dynamic_conv_onnx_chunk(L, K) if chunk is None else chunk)
    n = -(-L // T)
    if n > 1 and T < K - 1:
        raise ValueError(
            f'dynamic_conv_band: chunks of {T} positions cannot hold the {K - 1} next inputs a window reads'
        )
    W, left = T + K - 1, K - 1 - zero_lag
    exchange = torch.eye(K, dtype=weight.dtype, device=weight.device).flip(0)
    taps = torch.matmul(exchange, weight.transpose(2, 3))  # (B, H, K, L): the flipped kernels, tap-major
    if n * T > L:
        taps = F.pad(taps, (0, n * T - L))
    # block (c, i) of the fold, position c T + i, at row c, column i (W + 1) of an (n, T W) image: row i, columns
    # i .. i + K - 1 of chunk c's (T, W) band. No padding (the TorchScript exporter writes Col2Im's pads in the wrong
    # order): the input is padded instead
    band = F.fold(taps.reshape(-1, K, n * T), (n, T * W), (1, K), stride=(1, W + 1)).view(B, H, n, T, W)
    if n == 1:
        return torch.matmul(F.pad(x, (left, zero_lag)), band[:, :, 0].transpose(-1, -2))
    xp = F.pad(x, (left, (n + 1) * T - L - left)).view(B, H, R, n + 1, T).transpose(2, 3)  # (B, H, n + 1, R, T)
    windows = torch.cat([xp[:, :, :n], xp[:, :, 1:, :, : K - 1]], -1)  # (B, H, n, R, W)
    y = torch.matmul(windows, band.transpose(-1, -2))  # (B, H, n, R, T)
    return y.transpose(2, 3).reshape(B, H, R, n * T)[..., :L]


def dynamic_conv_taps(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """:func:`dynamic_conv_onnx` through a one-hot depthwise ``Conv`` writing every tap's input."""
    B, H, R, L = x.shape
    K, C = static_size(weight.shape[-1]), static_size(H) * static_size(R)  # TorchScript's trace: sizes as tensors
    # output channel c K + k of the one-hot bank reads xp[t + K - 1 - k] = x[t - (k - zero_lag)]
    bank = torch.eye(K, dtype=x.dtype, device=x.device).flip(-1).repeat(C, 1).unsqueeze(1)  # (C K, 1, K)
    taps = F.conv1d(F.pad(x.reshape(B, C, L), (K - 1 - zero_lag, zero_lag)), bank, groups=C)
    return (taps.unflatten(1, (H, R, K)) * weight.transpose(2, 3).unsqueeze(2)).sum(3)
