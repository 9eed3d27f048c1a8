"""DynamicConv for ONNX runtimes: the ``'onnx'`` engine, standard ATen ops that export to a handful of ONNX nodes.

What ``engine='auto'`` resolves to while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`). Lags as in :mod:`mrconvnext.ops.light_conv`. A depthwise ``Conv``
with one-hot taps (a constant bank) writes every tap's input, ``(B, C K, L)``; one ``Mul`` and one ``ReduceSum``
weigh and add them, where the specification's tap loop (:func:`.operators.dynamic_conv_decomposition`) exports three
nodes per tap. The unfolded input is the price: ``K`` times the input's size, transient. (A ``Gather`` with an
``(L, K)`` index reads the same taps, but ONNX Runtime gathers single elements slowly: it lost to the tap loop by
far. ``python scripts/bench_onnx_forms.py --ops dynamic_conv --doc`` times the loop against this form.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..symbolic import static_size

__all__ = ['dynamic_conv_onnx']


def dynamic_conv_onnx(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``x (B, H, R, L)``, ``weight (B, H, L, K)`` -> ``(B, H, R, L)``:
    ``y[b, h, r, t] = sum_k weight[b, h, t, k] x[b, h, r, t - (k - zero_lag)]`` (zeros outside the sequence)."""
    B, H, R, L = x.shape
    K, C = static_size(weight.shape[-1]), static_size(H) * static_size(R)  # TorchScript's trace: sizes as tensors
    # output channel c K + k of the one-hot bank reads xp[t + K - 1 - k] = x[t - (k - zero_lag)]
    bank = torch.eye(K, dtype=x.dtype, device=x.device).flip(-1).repeat(C, 1).unsqueeze(1)  # (C K, 1, K)
    taps = F.conv1d(F.pad(x.reshape(B, C, L), (K - 1 - zero_lag, zero_lag)), bank, groups=C)
    return (taps.unflatten(1, (H, R, K)) * weight.transpose(2, 3).unsqueeze(2)).sum(3)
