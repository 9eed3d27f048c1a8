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

``light_conv1d_unfold`` / ``dynamic_conv1d_unfold`` are memory-heavy *benchmark baselines*
(fairseq's unfold fallback: an explicit ``(B, C, L, K)`` copy); do not use them in models.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._args import check_int
from ._autocast import autocast_off
from .long_conv import long_conv1d

__all__ = ['light_conv1d', 'dynamic_conv1d', 'light_conv1d_unfold', 'dynamic_conv1d_unfold', 'zero_lag_for']

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def zero_lag_for(kernel_size: int, causal: bool) -> int:
    """Index of the lag-0 tap: ``0`` if causal, else ``(kernel_size - 1) // 2``."""
    return 0 if causal else (kernel_size - 1) // 2


# ----------------------------------------------------------------------------------------------
# input checks


def _check_x(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'{name} expects x to be a torch.Tensor, got {type(x).__name__}')
    if not x.is_floating_point():
        raise TypeError(f'{name} expects a floating-point x, got dtype {x.dtype}')
    if x.ndim != 3:
        raise ValueError(f'{name} expects x of shape (B, C, L), got shape {tuple(x.shape)}')
    return x


def _check_weight_dtype(name: str, x: torch.Tensor, weight: object) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f'{name} expects weight to be a torch.Tensor, got {type(weight).__name__}')
    if not weight.is_floating_point():
        raise TypeError(f'{name} expects a floating-point weight, got dtype {weight.dtype}')
    if weight.device != x.device:
        raise ValueError(f'{name} expects weight on {x.device} like x, got {weight.device}')
    return weight


def _check_bias(name: str, x: torch.Tensor, bias: object) -> None:
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f'{name} expects bias to be a torch.Tensor or None, got {type(bias).__name__}')
    if not bias.is_floating_point():
        raise TypeError(f'{name} expects a floating-point bias, got dtype {bias.dtype}')
    C = x.shape[1]
    if tuple(bias.shape) != (C,):
        raise ValueError(f'{name} expects a bias of shape ({C},), got {tuple(bias.shape)}')


def _check_heads(name: str, channels: int, num_heads: int) -> None:
    check_int(name, 'num_heads', num_heads)
    if channels % num_heads != 0:
        raise ValueError(f'{name}: channels ({channels}) must be divisible by num_heads ({num_heads})')


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(dtype to compute in, dtype to return)."""
    out = torch.promote_types(x.dtype, weight.dtype)
    return (torch.float32 if out in _LOW_PRECISION else out), out


def _add_bias(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return y if bias is None else y + bias.to(y.dtype)[:, None]


def _tap_span(lag: int, length: int) -> tuple[int, int]:
    """Outputs ``t0 <= t < t1`` whose input ``t - lag`` lies inside ``[0, length)``."""
    return max(0, lag), min(length, length + lag)


# ----------------------------------------------------------------------------------------------
# LightConv


def light_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    num_heads: int,
    causal: bool = False,
) -> torch.Tensor:
    """Depthwise convolution with one kernel per head, shared by the head's ``C // H`` channels.

    x: ``(B, C, L)``; weight: ``(H, K)``, already normalized; bias: ``(C,)`` or None.
    Returns ``(B, C, L)``. Lags as in the module docstring. Implemented as one grouped
    ``F.conv1d``; the only expansion is of the ``(H, K)`` weights to ``(C, 1, K)``.
    """
    name = 'light_conv1d'
    x = _check_x(name, x)
    weight = _check_weight_dtype(name, x, weight)
    B, C, L = x.shape
    _check_heads(name, C, num_heads)
    if weight.ndim != 2 or weight.shape[0] != num_heads or weight.shape[1] < 1:
        raise ValueError(f'{name} expects weight of shape (num_heads={num_heads}, K >= 1), got {tuple(weight.shape)}')
    _check_bias(name, x, bias)
    # A depthwise convolution with the head's kernel repeated to its channels (a (C, K) copy of the
    # tiny weight): the package's one direct-convolution implementation does the rest (lag crop,
    # padding, float32 compute for half inputs).
    _, out_dtype = _compute_dtype(x, weight)
    kernel = weight.to(out_dtype).repeat_interleave(C // num_heads, dim=0)
    zero_lag = zero_lag_for(weight.shape[1], causal)
    return long_conv1d(x.to(out_dtype), kernel, bias, zero_lag=zero_lag, backend='direct')


def light_conv1d_unfold(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    num_heads: int,
    causal: bool = False,
) -> torch.Tensor:
    """BENCHMARK BASELINE ONLY (memory-heavy): LightConv via an explicit ``(B, C, L, K)`` unfold.

    Same signature and result as :func:`light_conv1d`; mirrors fairseq's unfold fallback.
    """
    x = _check_x('light_conv1d_unfold', x)
    B, C, L = x.shape
    H, K = weight.shape
    R = C // num_heads
    zero_lag = zero_lag_for(K, causal)
    xp = F.pad(x, (K - 1 - zero_lag, zero_lag))
    # (B, C, L, K) window view -> materialized copy (the K-fold expansion this baseline measures).
    xu = xp.unfold(2, K, 1).reshape(B, H, R * L, K)
    y = torch.matmul(xu, weight.flip(-1).reshape(1, H, K, 1)).reshape(B, C, L)
    return _add_bias(y, bias)


# ----------------------------------------------------------------------------------------------
# DynamicConv


# The tap loop as torch.library operators (opaque to torch.compile / torch.export, with fake implementations and a
# registered backward). x4: ``(B, H, R, L)``; w_t: ``(B, H, K, L)`` (K before L so that the per-tap slices
# ``w_t[:, :, k]`` are contiguous rows); both contiguous. Forward extra memory: the ``(B, C, L)`` output; backward:
# the two gradients plus one reused ``(B, C, L)`` scratch buffer. Autograd saves only the inputs.


@torch.library.custom_op('mrconvnext::dynamic_conv', mutates_args=())
def dynamic_conv_op(x4: torch.Tensor, w_t: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``y[b, h, r, t] = sum_k w_t[b, h, k, t] * x4[b, h, r, t - (k - zero_lag)]`` (zeros outside the sequence)."""
    x4, w_t = x4.contiguous(), w_t.contiguous()
    L, K = x4.shape[-1], w_t.shape[2]
    y = torch.zeros_like(x4)
    for k in range(K):
        lag = k - zero_lag
        t0, t1 = _tap_span(lag, L)
        if t0 < t1:
            # In place and broadcast over the head's R channels: no (B, C, L) temporary.
            y[..., t0:t1].addcmul_(x4[..., t0 - lag : t1 - lag], w_t[:, :, k : k + 1, t0:t1])
    return y


@dynamic_conv_op.register_fake
def _(x4, w_t, zero_lag):
    return torch.empty(x4.shape, dtype=x4.dtype, device=x4.device)


@torch.library.custom_op('mrconvnext::dynamic_conv_backward', mutates_args=())
def dynamic_conv_backward_op(
    grad_y: torch.Tensor, x4: torch.Tensor, w_t: torch.Tensor, zero_lag: int, need_x: bool, need_w: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x4, grad_w_t)`` of :func:`dynamic_conv_op`; an empty tensor for one not needed."""
    g, x4, w_t = grad_y.contiguous(), x4.contiguous(), w_t.contiguous()
    L, K = x4.shape[-1], w_t.shape[2]
    grad_x = torch.zeros_like(x4) if need_x else x4.new_empty(0)
    grad_w = torch.zeros_like(w_t) if need_w else w_t.new_empty(0)
    prod = torch.empty_like(x4) if need_w else None  # one reusable (B, C, L) scratch buffer
    for k in range(K):
        lag = k - zero_lag
        t0, t1 = _tap_span(lag, L)
        if t0 >= t1:
            continue
        g_k = g[..., t0:t1]
        x_k = x4[..., t0 - lag : t1 - lag]
        if need_x:
            grad_x[..., t0 - lag : t1 - lag].addcmul_(g_k, w_t[:, :, k : k + 1, t0:t1])
        if need_w:
            p_k = torch.mul(g_k, x_k, out=prod[..., : t1 - t0])
            grad_w[:, :, k, t0:t1] = p_k.sum(dim=2)
    return grad_x, grad_w


@dynamic_conv_backward_op.register_fake
def _(grad_y, x4, w_t, zero_lag, need_x, need_w):
    def new(t, need):
        return torch.empty(t.shape, dtype=t.dtype, device=t.device) if need else t.new_empty(0)

    return new(x4, need_x), new(w_t, need_w)


def _dynamic_conv_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.zero_lag = inputs[2]


def _dynamic_conv_grad(ctx, grad_y):
    x4, w_t = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    grad_x, grad_w = dynamic_conv_backward_op(grad_y, x4, w_t, ctx.zero_lag, need_x, need_w)
    return (grad_x if need_x else None), (grad_w if need_w else None), None


dynamic_conv_op.register_autograd(_dynamic_conv_grad, setup_context=_dynamic_conv_setup)


def dynamic_conv_decomposition(x4: torch.Tensor, w_t: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """:func:`dynamic_conv_op` in out-of-place PyTorch ops (zero-padded shifts of x, K multiply-adds): the form
    exporters that cannot call the operator (ONNX) use."""
    L, K = x4.shape[-1], w_t.shape[2]
    xp = F.pad(x4, (K - 1 - zero_lag, zero_lag))  # xp[..., t + (K - 1 - zero_lag) - lag] = x[t - lag]
    y = None
    for k in range(K):
        start = K - 1 - k
        term = xp[..., start : start + L] * w_t[:, :, k : k + 1, :]
        y = term if y is None else y + term
    return y


def dynamic_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
) -> torch.Tensor:
    """Convolution with a kernel per position and head (already normalized).

    x: ``(B, C, L)``; weight: ``(B, H, L, K)`` with ``C % H == 0``; bias: ``(C,)`` or None.
    Returns ``(B, C, L)``. Lags as in the module docstring.

    Never materializes ``(B, C, L, K)`` or ``(B*H, L, L)``: it accumulates the K taps with
    shifted views of x. Peak extra memory ``O(B C L + B H L K)`` in forward and backward;
    autograd keeps only x and the weights. ``weight`` given as a transposed view of a
    contiguous ``(B, H, K, L)`` tensor is used without a copy.
    """
    name = 'dynamic_conv1d'
    x = _check_x(name, x)
    weight = _check_weight_dtype(name, x, weight)
    B, C, L = x.shape
    if weight.ndim != 4:
        raise ValueError(f'{name} expects weight of shape (B, H, L, K), got shape {tuple(weight.shape)}')
    Bw, H, Lw, K = weight.shape
    if Bw != B or Lw != L or K < 1:
        raise ValueError(
            f'{name} expects weight of shape (B={B}, H, L={L}, K >= 1) for x of shape '
            f'{tuple(x.shape)}, got {tuple(weight.shape)}'
        )
    _check_heads(name, C, H)
    _check_bias(name, x, bias)

    compute, out_dtype = _compute_dtype(x, weight)
    with autocast_off(x.device.type):
        x4 = x.to(compute).contiguous().view(B, H, C // H, L)
        w_t = weight.to(compute).transpose(2, 3).contiguous()
        y = dynamic_conv_op(x4, w_t, zero_lag_for(K, causal)).view(B, C, L)
        y = _add_bias(y, bias)
    return y.to(out_dtype)


def dynamic_conv1d_unfold(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
) -> torch.Tensor:
    """BENCHMARK BASELINE ONLY (memory-heavy): DynamicConv via an explicit ``(B, C, L, K)`` unfold.

    Same signature and result as :func:`dynamic_conv1d`; mirrors fairseq's unfold fallback
    (a ``(B*H*L, R, K) @ (B*H*L, K, 1)`` batched matmul).
    """
    x = _check_x('dynamic_conv1d_unfold', x)
    B, C, L = x.shape
    _, H, _, K = weight.shape
    R = C // H
    zero_lag = zero_lag_for(K, causal)
    xp = F.pad(x, (K - 1 - zero_lag, zero_lag))
    xu = xp.unfold(2, K, 1).view(B, H, R, L, K).permute(0, 1, 3, 2, 4).reshape(B * H * L, R, K)
    w = weight.flip(-1).reshape(B * H * L, K, 1)
    y = torch.bmm(xu, w).view(B, H, L, R).permute(0, 1, 3, 2).reshape(B, C, L)
    return _add_bias(y, bias)
