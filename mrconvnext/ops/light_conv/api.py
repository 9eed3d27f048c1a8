"""Lightweight and dynamic convolutions (Wu et al., ICLR 2019) of ``(B, C, L)`` sequences.

Functional ops only: the kernels arrive already normalized (softmax, DropConnect); see
:mod:`mrconvnext.layers.light_conv` for the modules that own parameters.

Heads
-----
``C`` channels are split into ``H`` heads of ``R = C // H`` *consecutive* channels; channel
``c`` uses the kernel of head ``c // R`` (the paper's ``ceil(c H / d)`` in 1-based indexing).

Lag convention (the package's, see :mod:`mrconvnext.ops.long_conv`)
-------------------------------------------------------------------
Tap ``k = 0 .. K-1`` has lag ``tau_k = k - zero_lag``; positive lags look into the past::

    LightConv:    y[b, c, t] = bias[c] + sum_k w[h(c), k]       * x[b, c, t - tau_k]
    DynamicConv:  y[b, c, t] = bias[c] + sum_k w[b, h(c), t, k] * x[b, c, t - tau_k]

with zeros outside ``0 <= t - tau_k < L`` (linear, never circular). ``zero_lag`` is
``(K - 1) // 2`` for bidirectional kernels and ``0`` for causal ones, so

- bidirectional, odd K: lags ``-(K-1)/2 .. +(K-1)/2`` (centred, 'same');
- bidirectional, even K: lags ``-(K/2 - 1) .. +K/2``: the extra tap is on the *past* side
  (positive lag). In ``F.conv1d`` (cross-correlation) terms this is the flipped kernel with
  ``K/2`` zeros of left padding and ``K/2 - 1`` of right padding;
- causal: lags ``0 .. K-1`` (present and past only); ``w[..., 0]`` weighs the present.

Any ``K >= 1`` is accepted, ``K > L`` included: taps with ``|tau| >= L`` reach no output and
are skipped (their gradient is zero).

Precision: fp16 / bf16 inputs are computed in float32 (autocast disabled inside) and the
result is returned in ``promote_types(x.dtype, weight.dtype)``.

``light_conv1d_unfold`` / ``dynamic_conv1d_unfold`` (:mod:`.reference`) are memory-heavy *benchmark baselines*
(fairseq's unfold fallback: an explicit ``(B, C, L, K)`` copy); do not use them in models.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..checks import autocast_dtype, autocast_off
from ..long_conv import long_conv1d
from ..symbolic import known_true, static_size
from . import dispatch
from .checks import add_bias, check_bias, check_heads, check_weight, check_x, compute_dtypes, zero_lag_for
from .engine_onnx import dynamic_conv_onnx, dynamic_mix_onnx
from .operators import dynamic_conv_op

__all__ = [
    'light_conv1d',
    'dynamic_conv1d',
    'dynamic_softmax_conv1d',
    'dynamic_conv_logits',
    'dynamic_conv_kernel',
    'dynamic_mix',
]

# ----------------------------------------------------------------------------------------------
# LightConv


def light_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    num_heads: int,
    causal: bool = False,
    engine: str = 'auto',
) -> torch.Tensor:
    """Depthwise convolution with one kernel per head, shared by the head's ``C // H`` channels.

    x: ``(B, C, L)``; weight: ``(H, K)``, already normalized; bias: ``(C,)`` or None.
    Returns ``(B, C, L)`` in ``promote_types(x.dtype, weight.dtype)``. Lags as in the module docstring. ``engine``
    (:func:`~mrconvnext.ops.light_conv.dispatch.light_conv_engine`; ``'auto'`` is ``'triton'`` on CUDA for batches of
    at least ``LIGHT_TRITON_MIN_BATCH``, ``'torch'`` elsewhere): ``'torch'`` is one grouped ``F.conv1d``, the only
    expansion that of the ``(H, K)`` weights to ``(C, 1, K)``; ``'triton'`` runs DynamicConv's channels-last kernels
    with the weights shared by every position (:func:`.engine_triton.light_conv_triton`: a channels-last map's
    ``(B, C, H*W)`` view read in place, the result channels-last).
    """
    name = 'light_conv1d'
    x = check_x(name, x)
    weight = check_weight(name, x, weight)
    B, C, L = x.shape
    check_heads(name, C, num_heads)
    if weight.ndim != 2 or weight.shape[0] != num_heads or weight.shape[1] < 1:
        raise ValueError(f'{name} expects weight of shape (num_heads={num_heads}, K >= 1), got {tuple(weight.shape)}')
    check_bias(name, x, bias)
    large = known_true(B >= dispatch.LIGHT_TRITON_MIN_BATCH)
    if dispatch.light_conv_engine_constant(x.device.type, engine, large) == 'triton':
        from .engine_triton import light_conv_triton

        y = light_conv_triton(x.transpose(1, 2), weight, zero_lag_for(weight.shape[1], causal))
        return add_bias(y.transpose(1, 2), bias)
    # A depthwise convolution with the head's kernel repeated to its channels (a (C, K) copy of the
    # tiny weight): the package's one direct-convolution implementation does the rest (lag crop,
    # padding, float32 compute for half inputs).
    _, out_dtype = compute_dtypes(x, weight)
    # a traced export (TorchScript's ONNX exporter) gives C as a tensor; its Conv needs a static kernel shape
    kernel = weight.to(out_dtype).repeat_interleave(static_size(C) // num_heads, dim=0)
    zero_lag = zero_lag_for(weight.shape[1], causal)
    return long_conv1d(x.to(out_dtype), kernel, bias, zero_lag=zero_lag, method='direct')


# ----------------------------------------------------------------------------------------------
# DynamicConv


def dynamic_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
    engine: str = 'auto',
) -> torch.Tensor:
    """Convolution with a kernel per position and head (already normalized).

    x: ``(B, C, L)``; weight: ``(B, H, L, K)`` with ``C % H == 0``; bias: ``(C,)`` or None.
    Returns ``(B, C, L)``. Lags as in the module docstring.

    The training engines never materialize ``(B, C, L, K)`` or ``(B*H, L, L)``. ``engine``
    (:func:`~mrconvnext.ops.light_conv.dispatch.dynamic_conv_engine`): ``'torch'`` accumulates the K taps with shifted views of
    x (peak extra memory ``O(B C L + B H L K)`` in forward and backward; ``weight`` given as a transposed view of a
    contiguous ``(B, H, K, L)`` tensor is used without a copy); ``'triton'`` runs the channels-last kernels of
    :mod:`.engine_triton` (the result then has a channels-last layout, ``x.transpose(1, 2)`` contiguous). Autograd
    keeps only x and the weights. ``'onnx'`` (what ``'auto'`` runs while ``torch.onnx.export`` traces, inference
    only) multiplies band matrices over chunks of the sequence (:mod:`.engine_onnx`).
    """
    name = 'dynamic_conv1d'
    x = check_x(name, x)
    weight = check_weight(name, x, weight)
    B, C, L = x.shape
    if weight.ndim != 4:
        raise ValueError(f'{name} expects weight of shape (B, H, L, K), got shape {tuple(weight.shape)}')
    Bw, H, Lw, K = weight.shape
    if Bw != B or Lw != L or K < 1:
        raise ValueError(
            f'{name} expects weight of shape (B={B}, H, L={L}, K >= 1) for x of shape '
            f'{tuple(x.shape)}, got {tuple(weight.shape)}'
        )
    check_heads(name, C, H)
    check_bias(name, x, bias)

    resolved = dispatch.dynamic_conv_engine_constant(x.device.type, engine)
    if resolved == 'triton':
        from .engine_triton import dynamic_conv_triton

        y, _ = dynamic_conv_triton(x.transpose(1, 2), weight.transpose(1, 2), None, zero_lag_for(K, causal), False)
        return add_bias(y.transpose(1, 2), bias)
    compute, out_dtype = compute_dtypes(x, weight)
    with autocast_off(x.device.type):
        if resolved == 'onnx':  # reads x as it lies (a flattened map's transposed view, see engine_onnx)
            y = dynamic_conv_onnx(x.to(compute), weight.to(compute), zero_lag_for(static_size(K), causal))
        else:
            x4 = x.to(compute).reshape(B, H, C // H, L).contiguous()
            y = dynamic_conv_op(x4, weight.to(compute).transpose(2, 3).contiguous(), zero_lag_for(K, causal))
        y = add_bias(y.reshape(B, C, L), bias)
    return y.to(out_dtype)


def dynamic_softmax_conv1d(
    x: torch.Tensor,
    logits: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
    dropconnect: torch.Tensor | None = None,
    engine: str = 'auto',
) -> torch.Tensor:
    """DynamicConv from its kernel logits: ``w = softmax_K(logits) * dropconnect``, then :func:`dynamic_conv1d`.

    x: ``(B, C, L)`` (a channels-last map's ``(B, C, H*W)`` view is read in place by the Triton engine); logits:
    ``(B, L, H, K)``, any strides (the Triton engine wants them contiguous, one GEMM on the ``(B*L, C)`` view of x
    gives that; the PyTorch engine a view of a contiguous ``(B, H, K, L)``); dropconnect: DropConnect multipliers
    of the logits' shape (0 or ``1 / (1 - p)``), or None; bias: ``(C,)`` or None. The softmax is taken in float32
    (float64 for float64 logits). Returns ``(B, C, L)`` in ``promote_types(x.dtype, logits.dtype)``.

    ``engine`` ('auto', 'torch', 'triton', 'onnx'): the Triton engine fuses the softmax, the multipliers and the taps
    into one kernel (forward and backward, nothing of size ``(B, H, L, K)`` saved but the logits themselves) and
    returns a channels-last layout; 'torch' normalizes with ``torch.softmax`` and runs the tap loop, 'onnx' (what
    'auto' runs under ``torch.onnx.export``) the band matrices of :mod:`.engine_onnx`.
    """
    name = 'dynamic_softmax_conv1d'
    x = check_x(name, x)
    logits = check_weight(name, x, logits)
    B, C, L = x.shape
    if logits.ndim != 4 or logits.shape[0] != B or logits.shape[1] != L or logits.shape[3] < 1:
        raise ValueError(
            f'{name} expects logits of shape (B={B}, L={L}, H, K >= 1) for x of shape {tuple(x.shape)}, '
            f'got {tuple(logits.shape)}'
        )
    H, K = logits.shape[2], logits.shape[3]
    check_heads(name, C, H)
    check_bias(name, x, bias)
    if dropconnect is not None:
        dropconnect = check_weight(name, x, dropconnect)
        if dropconnect.shape != logits.shape:
            raise ValueError(
                f"{name} expects dropconnect multipliers of the logits' shape {tuple(logits.shape)}, "
                f'got {tuple(dropconnect.shape)}'
            )
    resolved = dispatch.dynamic_conv_engine_constant(x.device.type, engine)
    if resolved == 'triton':
        from .engine_triton import dynamic_conv_triton

        y, _ = dynamic_conv_triton(x.transpose(1, 2), logits, dropconnect, zero_lag_for(K, causal), True)
        return add_bias(y.transpose(1, 2), bias)
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    with autocast_off(x.device.type):
        w = torch.softmax(logits.to(acc), dim=-1)
        if dropconnect is not None:
            w = w * dropconnect.to(acc)
    y = dynamic_conv1d(x, w.transpose(1, 2), bias, causal=causal, engine=resolved)
    return y.to(torch.promote_types(x.dtype, logits.dtype))


# ----------------------------------------------------------------------------------------------
# DynamicConv from its input: the kernel predictor, then the convolution


def dynamic_conv_logits(
    x: torch.Tensor, weight: torch.Tensor, predictor_bias: torch.Tensor | None, num_heads: int
) -> torch.Tensor:
    """Kernel logits ``(B, L, H, K)`` (contiguous) of the linear predictor ``weight (H K, C)`` (+ ``predictor_bias
    (H K,)``) at every position of ``x (B, C, L)``: one GEMM on the ``(B*L, C)`` view of x."""
    return F.linear(x.transpose(1, 2), weight, predictor_bias).unflatten(-1, (num_heads, -1))


def dynamic_conv_kernel(
    x: torch.Tensor,
    weight: torch.Tensor,
    predictor_bias: torch.Tensor | None,
    num_heads: int,
    weight_dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """Per-position kernels ``(B, H, L, K)``: softmax over the taps of the predictor's logits (``W @ x``, no
    transpose of x), then DropConnect (``F.dropout`` with ``weight_dropout`` while ``training``). A transposed view
    of a contiguous ``(B, H, K, L)`` tensor, the layout :func:`dynamic_conv1d` reads without a copy."""
    B, _, L = x.shape
    logits = torch.matmul(weight, x)  # (B, H*K, L)
    if predictor_bias is not None:
        logits = logits + predictor_bias[:, None]
    w = torch.softmax(logits.view(B, num_heads, -1, L), dim=2)
    return F.dropout(w, weight_dropout, training).transpose(2, 3)


def dynamic_mix(
    x: torch.Tensor,
    weight: torch.Tensor,
    predictor_bias: torch.Tensor | None,
    num_heads: int,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
    weight_dropout: float = 0.0,
    training: bool = False,
    engine: str = 'auto',
) -> torch.Tensor:
    """DynamicConv of ``x (B, C, L)`` with kernels predicted from x itself (``weight (H K, C)``, ``predictor_bias``;
    see :func:`dynamic_conv_kernel`), plus ``bias (C,)``: what the ``DynamicConv`` layers compute. The engine is
    resolved once (:func:`.dispatch.dynamic_conv_engine_constant`). On ``'triton'`` the logits come from one GEMM
    (:func:`dynamic_conv_logits`) and one kernel fuses softmax, DropConnect (float32 multipliers drawn per
    ``(b, t, h, k)``) and taps (:func:`dynamic_softmax_conv1d`; a channels-last output; under autocast x is cast once,
    as the logits' GEMM would, and the output has that dtype); on ``'onnx'`` the whole mixer is
    :func:`.engine_onnx.dynamic_mix_onnx` (the predictor's logits tap-major, the bands); elsewhere the kernels are
    formed and :func:`dynamic_conv1d` runs on the resolved engine."""
    resolved = dispatch.dynamic_conv_engine_constant(x.device.type, engine)
    if resolved == 'onnx':
        name = 'dynamic_mix'
        x = check_x(name, x)
        check_weight(name, x, weight)
        check_heads(name, static_size(weight.shape[0]), num_heads)
        check_bias(name, x, bias)
        compute, out_dtype = compute_dtypes(x, weight)
        zero_lag = zero_lag_for(static_size(weight.shape[0]) // num_heads, causal)
        with autocast_off(x.device.type):
            pb = None if predictor_bias is None else predictor_bias.to(compute)
            y = dynamic_mix_onnx(x.to(compute), weight.to(compute), pb, num_heads, bias, zero_lag,
                                 weight_dropout, training)  # fmt: skip
        return y.to(out_dtype)
    if resolved != 'triton':
        kernel = dynamic_conv_kernel(x, weight, predictor_bias, num_heads, weight_dropout, training)
        return dynamic_conv1d(x, kernel, bias, causal=causal, engine=resolved)
    cast = autocast_dtype(x.device.type)
    if cast is not None and x.dtype == torch.float32:
        x = x.to(cast)
    logits = dynamic_conv_logits(x, weight, predictor_bias, num_heads)
    drop = None
    if training and weight_dropout > 0:
        keep = 1.0 - weight_dropout
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        drop = torch.empty(logits.shape, dtype=dtype, device=x.device).bernoulli_(keep).div_(keep)
    return dynamic_softmax_conv1d(x, logits, bias, causal=causal, dropconnect=drop, engine='triton')
