"""DynamicConv for ONNX runtimes: the ``'onnx'`` engine, standard ATen ops that export to a handful of ONNX nodes.

What ``engine='auto'`` resolves to while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`). Lags as in :mod:`mrconvnext.ops.light_conv`. A depthwise ``Conv``
with one-hot taps (a constant bank) writes every tap's input, ``(B, C K, L)``; one ``Mul`` and one ``ReduceSum``
weigh and add them, where the specification's tap loop (:func:`.operators.dynamic_conv_decomposition`) exports three
nodes per tap. The unfolded input is the price: ``K`` times the input's size, transient. (A ``Gather`` with an
``(L, K)`` index reads the same taps, but ONNX Runtime gathers single elements slowly: it lost to the tap loop by
far. ``python scripts/bench_onnx_forms.py --ops dynamic_conv --doc`` times the loop against this form.)

Short sequences (:func:`.dispatch.dynamic_conv_onnx_method`) take a band matrix instead: the per-position kernels
of a head written by one ``Col2Im`` (``F.fold``) into an ``(L, L + K - 1)`` matrix, row ``t`` holding the flipped
kernel of position ``t`` from column ``t`` on (the block placed at ``t (L + K)`` of the flat matrix: no scatter, no
gather, no copy), and one batched ``MatMul`` with the input zero-padded to ``L + K - 1``. It multiplies about
``L / K`` times more than the taps need, but in the runtime's best kernel, and writes no ``K``-fold copy of the input
(the tap bank also pays ``K`` products per tap written). The fold reads the kernels tap-major, ``(B, H, K, L)``, the
layout the layers' softmax writes, so the transposes around the operator cancel in the exported graph; the flip is a
product with the ``K x K`` exchange matrix (ONNX Runtime reverses an axis slowly). It replaced a skew of padded rows
(a ``Pad`` and two ``Slice`` copies of the band): ``python scripts/bench_onnx_forms.py --ops dynamic_conv --doc``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..symbolic import static_size
from .dispatch import dynamic_conv_onnx_method

__all__ = ['dynamic_conv_band', 'dynamic_conv_onnx', 'dynamic_conv_taps']


def dynamic_conv_onnx(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``x (B, H, R, L)``, ``weight (B, H, L, K)`` -> ``(B, H, R, L)``:
    ``y[b, h, r, t] = sum_k weight[b, h, t, k] x[b, h, r, t - (k - zero_lag)]`` (zeros outside the sequence); the band
    form or the tap bank by the sequence's length."""
    if dynamic_conv_onnx_method(static_size(x.shape[-1])) == 'band':
        return dynamic_conv_band(x, weight, zero_lag)
    return dynamic_conv_taps(x, weight, zero_lag)


def dynamic_conv_band(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """:func:`dynamic_conv_onnx` as ``xp A^T`` with the band ``A[t, t + j] = weight[t, K - 1 - j]`` of ``L`` rows by
    ``L + K - 1`` columns and ``xp`` the input zero-padded by ``K - 1 - zero_lag`` and ``zero_lag``."""
    B, H, _, L = x.shape
    L, K = static_size(L), static_size(weight.shape[-1])
    W = L + K - 1
    exchange = torch.eye(K, dtype=weight.dtype, device=weight.device).flip(0)
    taps = torch.matmul(exchange, weight.transpose(2, 3))  # (B, H, K, L): the flipped kernels, tap-major
    # block t of the flat (L, W) band at t (W + 1): row t, columns t .. t + K - 1; no padding (the TorchScript
    # exporter writes Col2Im's pads in the wrong order), so the input is padded instead
    band = F.fold(taps.reshape(-1, K, L), (1, L * W), (1, K), stride=(1, W + 1)).view(B, H, L, W)
    return torch.matmul(F.pad(x, (K - 1 - zero_lag, zero_lag)), band.transpose(-1, -2))


def dynamic_conv_taps(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """:func:`dynamic_conv_onnx` through a one-hot depthwise ``Conv`` writing every tap's input."""
    B, H, R, L = x.shape
    K, C = static_size(weight.shape[-1]), static_size(H) * static_size(R)  # TorchScript's trace: sizes as tensors
    # output channel c K + k of the one-hot bank reads xp[t + K - 1 - k] = x[t - (k - zero_lag)]
    bank = torch.eye(K, dtype=x.dtype, device=x.device).flip(-1).repeat(C, 1).unsqueeze(1)  # (C K, 1, K)
    taps = F.conv1d(F.pad(x.reshape(B, C, L), (K - 1 - zero_lag, zero_lag)), bank, groups=C)
    return (taps.unflatten(1, (H, R, K)) * weight.transpose(2, 3).unsqueeze(2)).sum(3)
