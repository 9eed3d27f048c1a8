"""DynamicConv for ONNX runtimes: the ``'onnx'`` engine, standard ATen ops that export to a handful of ONNX nodes.

What ``engine='auto'`` resolves to while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`). Lags as in :mod:`mrconvnext.ops.light_conv`.

The engine cuts the sequence into chunks (:func:`.dispatch.dynamic_conv_onnx_chunk`) and writes, per image, head and
chunk of ``T`` positions, a band matrix over the chunk's window of ``T + K - 1`` inputs, row ``t`` holding the
flipped kernel of position ``t`` from column ``t`` on; all of them by one ``Col2Im`` (``F.fold``: the kernel of a
position is the block placed at ``t (T + K)`` of its chunk's flat matrix; no scatter, no gather, no copy). One
batched ``MatMul`` with the windows (the zero-padded input, each chunk with the first ``K - 1`` inputs of the next)
does the rest. It multiplies about ``T / K`` times more than the taps need, but in the runtime's best kernel; the
bands take ``T + K - 1`` values per position and head. The fold reads the kernels tap-major, ``(B, H, K, L)``.

The map is read and written channels-last, ``(B, L, C)``: under export the flattened map of a ConvNeXt block
arrives that way (:func:`~mrconvnext.ops.map_layout.flatten_map`), so its transposes, and the block's after the
mixer, cancel against the form's; inside, one transpose each way moves the heads ahead of the chunks (runs of
``R`` channels). The layers' mixer (:func:`dynamic_mix_onnx`) takes its logits tap-major from the predictor whose
rows are reversed per head, which gives the flipped kernels with no flip in the graph; :func:`dynamic_conv_onnx`
(kernels given) flips them by a product with the ``K x K`` exchange matrix (ONNX Runtime reverses an axis slowly).

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

__all__ = ['dynamic_conv_band', 'dynamic_conv_onnx', 'dynamic_conv_taps', 'dynamic_mix_onnx']


def dynamic_conv_onnx(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``x (B, C, L)``, ``weight (B, H, L, K)`` -> ``(B, C, L)``, head ``h`` the channels ``h R .. h R + R - 1``:
    ``y[b, c, t] = sum_k weight[b, h, t, k] x[b, c, t - (k - zero_lag)]`` (zeros outside the sequence), as band
    matrices over chunks of the sequence (:func:`dynamic_conv_band`)."""
    return dynamic_conv_band(x, weight, zero_lag)


def dynamic_mix_onnx(
    x: torch.Tensor,
    weight: torch.Tensor,
    predictor_bias: torch.Tensor | None,
    num_heads: int,
    bias: torch.Tensor | None,
    zero_lag: int,
    weight_dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """DynamicConv with its kernel predictor (:func:`~mrconvnext.ops.light_conv.api.dynamic_mix`, inference):
    ``x (B, C, L)``, predictor ``weight (H K, C)`` and ``predictor_bias (H K,)`` or None, ``bias (C,)`` or None
    -> ``(B, C, L)``; DropConnect (``F.dropout`` of the kernels) while ``training``.

    The logits come tap-major, ``(B, H, K, L)``, the layout the bands' fold reads, with the softmax over the taps
    written out (max, exp, sum, divide: reductions along runs of ``L`` positions; ONNX Runtime 1.32's ``Softmax``
    over a last axis of 7 taps took 1.2 ms where these took 0.44, ``dynconvnext_atto``'s first mixer at batch 8).
    The predictor's rows are reversed within each head (constants of the graph): that gives the flipped kernels the
    bands hold, since a softmax commutes with a permutation of its axis."""
    B, C, L = x.shape
    H = num_heads
    K = static_size(weight.shape[0]) // H
    flip = (torch.arange(H).view(H, 1) * K + torch.arange(K - 1, -1, -1).view(1, K)).view(-1).to(weight.device)
    logits = torch.matmul(weight[flip], x)  # (B, H K, L)
    if predictor_bias is not None:
        logits = logits + predictor_bias[flip, None]
    logits = logits.view(B, H, K, L)
    e = torch.exp(logits - logits.amax(2, keepdim=True))
    taps = F.dropout(e / e.sum(2, keepdim=True), weight_dropout, training)  # (B, H, K, L), each kernel flipped
    y = _band_conv(x.transpose(1, 2), taps, zero_lag)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.transpose(1, 2)


def dynamic_conv_band(x: torch.Tensor, weight: torch.Tensor, zero_lag: int, chunk: int | None = None) -> torch.Tensor:
    """:func:`dynamic_conv_onnx` per chunk of ``chunk`` positions (default: :func:`.dispatch.dynamic_conv_onnx_chunk`;
    at least ``K - 1`` unless it holds the whole sequence) as ``A windows``, ``A[t, t + j] = weight[t, K - 1 - j]``
    of ``chunk`` rows by ``chunk + K - 1`` columns, the windows the input zero-padded by ``K - 1 - zero_lag`` before
    it (:func:`_band_conv`)."""
    K = static_size(weight.shape[-1])
    exchange = torch.eye(K, dtype=weight.dtype, device=weight.device).flip(0)
    taps = torch.matmul(exchange, weight.transpose(2, 3))  # (B, H, K, L): the flipped kernels, tap-major
    return _band_conv(x.transpose(1, 2), taps, zero_lag, chunk).transpose(1, 2)


def _band_conv(xl: torch.Tensor, taps: torch.Tensor, zero_lag: int, chunk: int | None = None) -> torch.Tensor:
    """The bands' product on the channels-last ``xl (B, L, C)`` with the flipped kernels ``taps (B, H, K, L)``
    (tap-major: ``taps[b, h, K - 1 - k, t]`` weighs lag ``k - zero_lag``) -> ``(B, L, C)``.

    Under export ``xl`` is the channels-last map that :func:`~mrconvnext.ops.map_layout.flatten_map` transposes (a
    ConvNeXt block's: the transposes cancel), and so is the output. The map is cut into chunks of positions and its
    heads moved ahead of the chunks (one transpose, moving runs of ``R`` channels), and back at the end. The
    windows are one chunk more than the output needs (each chunk of the padded input with the first ``K - 1`` rows
    of the next one): the padded input is used whole, not copied by a slice first."""
    B, L, C = xl.shape
    H, K = taps.shape[1], taps.shape[2]
    C, L, H, K = static_size(C), static_size(L), static_size(H), static_size(K)
    R = C // H
    T = min(L, dynamic_conv_onnx_chunk(L, K) if chunk is None else chunk)
    n = -(-L // T)
    if n > 1 and T < K - 1:
        raise ValueError(
            f'dynamic_conv_band: chunks of {T} positions cannot hold the {K - 1} next inputs a window reads'
        )
    W, left = T + K - 1, K - 1 - zero_lag
    m = 1 if n == 1 else n + 1  # chunks of the band and of the padded input
    if m * T > L:
        taps = F.pad(taps, (0, m * T - L))
    # block (c, i) of the fold, position c T + i, at row c, column i (W + 1) of an (m, T W) image: row i, columns
    # i .. i + K - 1 of chunk c's (T, W) band. No padding (the TorchScript exporter writes Col2Im's pads in the wrong
    # order): the input is padded instead
    band = F.fold(taps.reshape(-1, K, m * T), (m, T * W), (1, K), stride=(1, W + 1)).view(B, H, m, T, W)
    if n == 1:
        windows = F.pad(xl, (0, 0, left, zero_lag)).view(B, 1, W, H, R).permute(0, 3, 1, 2, 4)
    else:
        xp = F.pad(xl, (0, 0, left, m * T - L - left)).view(B, m, T, H, R).permute(0, 3, 1, 2, 4)  # (B, H, m, T, R)
        # the first K - 1 rows of the next chunk (sliced along the rows first: ONNX Runtime copies at each Slice),
        # none after the last one
        following = F.pad(xp[:, :, :, : K - 1][:, :, 1:], (0, 0, 0, 0, 0, 1))
        windows = torch.cat([xp, following], 3)  # (B, H, m, W, R)
    y = torch.matmul(band, windows)  # (B, H, m, T, R)
    return y.permute(0, 2, 3, 1, 4).reshape(B, m * T, C)[:, :L]


def dynamic_conv_taps(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """:func:`dynamic_conv_onnx` through a one-hot depthwise ``Conv`` writing every tap's input."""
    B, C, L = x.shape
    H, K = static_size(weight.shape[1]), static_size(weight.shape[-1])
    C = static_size(C)  # TorchScript's trace: sizes as tensors
    # output channel c K + k of the one-hot bank reads xp[t + K - 1 - k] = x[t - (k - zero_lag)]
    bank = torch.eye(K, dtype=x.dtype, device=x.device).flip(-1).repeat(C, 1).unsqueeze(1)  # (C K, 1, K)
    taps = F.conv1d(F.pad(x, (K - 1 - zero_lag, zero_lag)), bank, groups=C)
    return (taps.view(B, H, C // H, K, L) * weight.transpose(2, 3).unsqueeze(2)).sum(3).reshape(B, C, L)
