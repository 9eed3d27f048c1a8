"""DynamicConv's tap loop as ``torch.library`` operators (``mrconvnext::dynamic_conv`` and its backward): one
PyTorch engine for every device, a fake implementation and registered autograd."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import tap_span

__all__ = ['dynamic_conv_op', 'dynamic_conv_backward_op', 'dynamic_conv_decomposition', 'register_conv_autograd']


def register_conv_autograd(op, backward) -> None:
    """Autograd of an operator ``op(x, w, zero_lag) -> y`` from ``backward(grad_y, x, w, zero_lag, need_x, need_w)
    -> (grad_x, grad_w)``: only ``x`` and ``w`` are saved; a gradient not needed is not computed."""

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])
        ctx.zero_lag = inputs[2]

    def grad(ctx, grad_y):
        x, w = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_x, grad_w = backward(grad_y, x, w, ctx.zero_lag, need_x, need_w)
        return (grad_x if need_x else None), (grad_w if need_w else None), None

    op.register_autograd(grad, setup_context=setup)


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
        t0, t1 = tap_span(lag, L)
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
        t0, t1 = tap_span(lag, L)
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


register_conv_autograd(dynamic_conv_op, dynamic_conv_backward_op)


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
