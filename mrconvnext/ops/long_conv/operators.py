"""The FFT convolution as ``torch.library`` operators: fake implementations give shapes and strides, so
torch.compile, torch.export and the meta device see through them; autograd is registered on the operator.

``mrconvnext::fft_conv(x, kernel, zero_lag, bias) -> y (B, N, C, L)`` dispatches per device, as ATen's FFT does: the
fused native kernels for float32 / float64 CPU tensors (torch.fft, after one warning, where they do not build: the
device's kernel knows what is built, as ATen's do, so an exported program runs wherever it is loaded), torch.fft in
chunks on every other device. ``mrconvnext::fft_conv_torch`` is the torch.fft engine on every device
(``engine='torch'``). Both take the kernel in the lag convention and choose the crop and the FFT size inside, from
the concrete sizes: a traced graph holds no FFT size, so it serves every input length without a recompile. They
compute in the kernel's dtype; ``x`` may be of another floating dtype (a half-precision map under autocast, with a
float32 kernel): the torch.fft engine casts it as it pads it for the transform and casts the output (in ``x``'s
dtype) as it writes it, the same values as a cast before and after, two passes fewer; the native kernels, which
take float32 / float64 alone, get ``x`` cast first.

Backward (``*_backward(grad_y, x, kernel, zero_lag, need_x, need_k) -> (grad_x, grad_kernel)``, an empty tensor for
one not needed; ``grad_x`` in ``grad_y``'s dtype, which is the forward input's): with ``G_i = rfft(grad_y_i, n)``
and ``X = rfft(x, n)`` (real sequences, so these circular identities are exact),
``grad_x = crop_L(irfft(sum_i G_i * conj(K_i)))`` and ``grad_k_i = irfft(sum_b G_bi * conj(X_b))`` read back from
the circle (taps that reach no output get 0). Chunk by chunk, ``X`` and the kernel spectra recomputed rather than
saved; autograd through ``rfft * k -> irfft -> crop`` would materialize two ``(B, N, C, F)`` complex products and a
zero-filled ``(B, N, C, n)`` gradient only to reduce them again.

Saved for the backward: ``x`` and the kernels. Under bfloat16 autocast a float32 ``x`` (with float32 kernels whose
gradient is needed) is saved in bfloat16, as an autocast convolution saves its input: half the bytes a training step keeps per convolution, while the forward
still reads ``x`` in float32. Only the kernels' gradient reads it (``grad_x`` depends on ``grad_y`` and the kernels
alone), and it then carries bfloat16's rounding of ``x``, as every autocast convolution's does. Under float16
autocast ``x`` is kept as it is: float16 would overflow past 65504 where the float32 forward did not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..checks import autocast_dtype
from . import engine_native, engine_torch
from .layout import crop_kernel, kernel_spectrum

__all__ = [
    'fft_conv',
    'fft_conv_backward',
    'fft_conv_torch',
    'fft_conv_torch_backward',
    'fft_conv_on_cpu',
    'fft_conv_backward_on_cpu',
]


def _new_out(x: torch.Tensor, N: int) -> torch.Tensor:
    """``(B, N, C, L)`` output; a single kernel's output is laid out like ``x`` (a channels-last map stays
    channels-last, so the next LayerNorm needs no copy)."""
    B, C, L = x.shape
    return torch.empty_like(x).unsqueeze(1) if N == 1 else x.new_empty((B, N, C, L))


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t.contiguous()``, calling no op where it already is (a small-batch forward is bound by the host)."""
    return t if t.is_contiguous() else t.contiguous()


def _empty(t: torch.Tensor) -> torch.Tensor:
    return t.new_empty(0)


def _torch_engine(x: torch.Tensor) -> tuple[Callable, Callable, str]:
    """``(forward, backward, the normalization of the kernel spectra they take)`` of the torch.fft engine."""
    return engine_torch.fft_forward, engine_torch.fft_backward, engine_torch.SPECTRUM_NORM


def _cpu_engine(x: torch.Tensor) -> tuple[Callable, Callable, str]:
    """:func:`_torch_engine`'s triple of the native engine for ``x`` where it runs, else of the torch.fft engine."""
    ext = engine_native.extension(x)
    if ext is None:
        return _torch_engine(x)
    forward, backward = (functools.partial(f, ext) for f in (engine_native.fft_forward, engine_native.fft_backward))
    return forward, backward, engine_native.SPECTRUM_NORM


def _native(engine: Callable) -> bool:
    return engine is _cpu_engine


def _forward(engine, x, kernel, zero_lag, bias):
    if _native(engine) and x.dtype != kernel.dtype:  # the native kernels take x in the kernel's dtype
        return _forward(engine, x.to(kernel.dtype), kernel, zero_lag, bias).to(x.dtype)
    forward, _, norm = engine(x)
    k_f, n = kernel_spectrum(kernel, zero_lag, x.shape[-1], norm)
    y = _new_out(x, kernel.shape[0])
    forward(x, _contiguous(k_f), n, y, bias)
    return y


def _backward(engine, grad_y, x, kernel, zero_lag, need_x, need_k):
    if _native(engine) and (x.dtype, grad_y.dtype) != (kernel.dtype,) * 2:
        grad_x, grad_k = _backward(
            engine, grad_y.to(kernel.dtype), x.to(kernel.dtype), kernel, zero_lag, need_x, need_k
        )
        return (grad_x.to(grad_y.dtype) if need_x else _empty(x)), (grad_k if need_k else _empty(x))
    L = x.shape[-1]
    cropped, z = crop_kernel(kernel, zero_lag, L)
    _, backward, norm = engine(x)
    k_f, n = kernel_spectrum(kernel, zero_lag, L, norm)
    grad_x, grad_circ = backward(grad_y, x, _contiguous(k_f), n, need_x, need_k)
    grad_k = _empty(x)
    if need_k:
        taps = cropped.shape[-1]
        lo = zero_lag - z  # where the cropped kernel starts in the full one
        grad_k = kernel.new_zeros(kernel.shape)
        grad_k[..., lo : lo + taps] = torch.cat([grad_circ[..., n - z :], grad_circ[..., : taps - z]], dim=-1)
    return (_empty(x) if grad_x is None else grad_x), grad_k


def _saved_input(x: torch.Tensor, kernel: torch.Tensor, need_k: bool) -> torch.Tensor:
    """``x`` as the backward keeps it: in bfloat16 under bfloat16 autocast where it and the kernels are float32 and
    the kernels' gradient, which alone reads it, is needed (module docstring)."""
    if need_k and x.dtype == kernel.dtype == torch.float32 and autocast_dtype(x.device.type) == torch.bfloat16:
        return x.to(torch.bfloat16)
    return x


def _setup(ctx, inputs, output):
    x, kernel = inputs[0], inputs[1]  # inputs holds only the arguments given
    ctx.save_for_backward(_saved_input(x, kernel, ctx.needs_input_grad[1]), kernel)
    ctx.zero_lag = inputs[2]
    # the bias's gradient in its own dtype (the kernels'), summed from an output gradient that may be half precision
    ctx.bias_dtype = inputs[3].dtype if len(inputs) > 3 and inputs[3] is not None else None


def _define(name: str, engine: Callable):
    """``mrconvnext::{name}`` and its backward running ``engine(x) -> (forward, backward)``, with fake
    implementations and autograd."""

    def forward(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, bias: torch.Tensor | None = None) -> torch.Tensor:
        return _forward(engine, x, kernel, zero_lag, bias)

    def backward(
        grad_y: torch.Tensor, x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, need_x: bool, need_k: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _backward(engine, grad_y, x, kernel, zero_lag, need_x, need_k)

    fwd = torch.library.custom_op(f'mrconvnext::{name}', forward, mutates_args=())
    bwd = torch.library.custom_op(f'mrconvnext::{name}_backward', backward, mutates_args=())
    fwd.register_fake(lambda x, kernel, zero_lag, bias=None: _new_out(x, kernel.shape[0]))

    @bwd.register_fake
    def _(grad_y, x, kernel, zero_lag, need_x, need_k):
        grad_x = torch.empty_like(x, dtype=grad_y.dtype) if need_x else _empty(x)
        return grad_x, (torch.empty_like(kernel) if need_k else _empty(x))

    def grad(ctx, grad_y):
        x, kernel = ctx.saved_tensors
        need = ctx.needs_input_grad  # one entry per argument given (no bias entry when the default None is used)
        need_x, need_k, need_b = need[0], need[1], len(need) > 3 and need[3]
        grad_x, grad_k = bwd(grad_y, x, kernel, ctx.zero_lag, need_x, need_k)
        grad_b = grad_y.sum((0, 1, 3), dtype=ctx.bias_dtype) if need_b else None
        return (grad_x if need_x else None), (grad_k if need_k else None), None, grad_b

    fwd.register_autograd(grad, setup_context=_setup)
    return fwd, bwd


fft_conv, fft_conv_backward = _define('fft_conv', _torch_engine)
fft_conv_torch, fft_conv_torch_backward = _define('fft_conv_torch', _torch_engine)


def fft_conv_on_cpu(x, kernel, zero_lag, bias=None):
    """``mrconvnext::fft_conv`` on the CPU: the fused native kernels for float32 / float64 where they build."""
    return _forward(_cpu_engine, x, kernel, zero_lag, bias)


def fft_conv_backward_on_cpu(grad_y, x, kernel, zero_lag, need_x, need_k):
    """``mrconvnext::fft_conv_backward`` on the CPU."""
    return _backward(_cpu_engine, grad_y, x, kernel, zero_lag, need_x, need_k)


fft_conv.register_kernel('cpu')(fft_conv_on_cpu)
fft_conv_backward.register_kernel('cpu')(fft_conv_backward_on_cpu)
