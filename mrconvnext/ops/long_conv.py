"""Depthwise linear long convolution of ``(B, C, L)`` sequences with per-channel kernels.

Convention (used by every layer of the package)
------------------------------------------------
A kernel ``k`` of shape ``(C, K)`` (or ``(N, C, K)`` for ``N`` kernels applied to the same
input) together with an integer ``zero_lag`` describes the lags ``tau = j - zero_lag`` for
``j = 0 .. K-1``; the output is the *linear* (zero-padded, never circular) convolution::

    y[b, c, t] = sum_j k[c, j] * x[b, c, t - (j - zero_lag)],   0 <= t < L

so positive lags look into the past, negative lags into the future. ``zero_lag = 0`` is a
causal kernel; a bidirectional kernel of reach ``R`` has ``K = 2R - 1`` and ``zero_lag = R - 1``
(the centre tap is counted once). Lags with ``|tau| >= L`` cannot reach any output and are
cropped before any work is done.

Backends
--------
- ``'fft'``: real FFTs of a size that guarantees no wrap-around (see :func:`fft_size`); the
  input spectrum is computed once and shared by all ``N`` kernels, and all ``N`` outputs come
  from one batched inverse transform laid out as ``(B, N, C, L)``.
- ``'direct'``: grouped ``F.conv1d``; faster for short kernels (see :func:`choose_backend`).
- ``'flashfft'``: the optional CUDA package ``flashfftconv`` (see :mod:`.flashfft`).
- ``'auto'``: pick among the above.

Under autocast and for fp16 / bf16 inputs the FFT and direct paths compute in float32 and the
result is returned in the input dtype.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import _native, flashfft
from ._autocast import autocast_off
from ._warnings import warn_once
from .kernel_layout import circular_kernel, crop_kernel, fft_length, fft_size

__all__ = [
    'long_conv1d',
    'direct_conv1d',
    'kernel_spectrum',
    'resolve_backend',
    'fft_size',
    'fft_length',
    'choose_backend',
    'crop_kernel',
    'circular_kernel',
]

_BACKENDS = ('auto', 'fft', 'direct', 'flashfft')
# Direct convolution wins on the CPU for kernels of at most ~64 taps (at L=3136: 0.24x the FFT's
# time at 7 taps, 0.63x at 63, 1.28x at 127); measured with ``scripts/bench_mrconv.py --crossover``.
_DIRECT_MAX_TAPS = 64
# On the CPU (oneDNN 3.x) a depthwise conv1d with large built-in zero padding takes a path
# whose time grows with K: at B=16, C=96, L=3136, K=31 it took 33-67 ms vs 18-35 ms for an
# explicit F.pad + unpadded conv (K=63: 128 vs 20 ms, 1 thread). For K <= 13 the built-in
# padding was 10-20% faster (it skips the padded copy); K=15 measured either way.
_CPU_NATIVE_PAD_MAX = 6


def choose_backend(x: torch.Tensor, kernel_taps: int, zero_lag: int) -> str:
    """Backend used by ``backend='auto'`` for an input ``x`` and a (cropped) kernel.

    With sizes that ``torch.compile`` traces symbolically, the direct path is taken only where the taps are provably
    few for every size the graph serves, else the FFT (right for every size): the choice adds no guard, so the graph
    is not recompiled when an input size moves the tap count across the crossover."""
    if flashfft.supports(x, kernel_taps, zero_lag):
        return 'flashfft'
    return 'direct' if statically_known_true(kernel_taps <= _DIRECT_MAX_TAPS) else 'fft'


def _check(
    x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, bias: torch.Tensor | None, name: str = 'long_conv1d'
) -> None:
    if not isinstance(x, torch.Tensor) or not isinstance(kernel, torch.Tensor):
        raise TypeError(f'{name} expects tensors for x and kernel')
    if not x.is_floating_point():
        raise TypeError(f'{name} expects a floating-point input, got dtype {x.dtype}')
    if not kernel.is_floating_point():
        raise TypeError(f'{name} expects a floating-point kernel, got dtype {kernel.dtype}')
    if x.dim() != 3:
        raise ValueError(f'{name} expects x of shape (B, C, L), got shape {tuple(x.shape)}')
    B, C, L = x.shape
    if L == 0:
        raise ValueError(f'{name} got an empty sequence (L = 0)')
    if kernel.dim() not in (2, 3) or kernel.shape[-2] != C or kernel.shape[-1] == 0:
        raise ValueError(
            f'{name} expects a kernel of shape ({C}, K) or (N, {C}, K) with K >= 1 for an input '
            f'with {C} channels, got shape {tuple(kernel.shape)}'
        )
    if not 0 <= zero_lag < kernel.shape[-1]:
        raise ValueError(
            f'{name}: zero_lag must index a tap of the kernel (0 <= zero_lag < {kernel.shape[-1]}), got {zero_lag}'
        )
    if bias is not None and bias.shape != (C,):
        raise ValueError(f'{name} expects a bias of shape ({C},), got {tuple(bias.shape)}')


# Elements (sequences x FFT size) per chunk, so that a chunk's padded input, spectra and output stay in cache;
# whole-tensor transforms and products are memory-bound. Measured on the ConvNeXt-T stages (B=16, 2 threads):
# 2^20 was within a few % of the best of 2^15..2^24 at every stage for inference and training, 2^15 was 2-5x
# slower (per-call overhead) and 2^24 up to 2x slower (memory traffic).
_CHUNK_ELEMS = 1 << 20


def _chunks(x: torch.Tensor, n: int) -> Iterator[tuple[slice, slice]]:
    """``(batch, channel)`` blocks of ``x (B, C, L)`` of about ``_CHUNK_ELEMS / n`` sequences: whole channel ranges
    of several batch items for short sequences, balanced channel ranges of one item for long ones. Off the CPU
    one block (the whole tensor): GPU transforms want large batches, not cache-sized ones."""
    B, C = x.shape[:2]
    rows = max(1, _CHUNK_ELEMS // n) if x.device.type == 'cpu' else B * C
    if rows >= C:
        nb = rows // C
        for b0 in range(0, B, nb):
            yield slice(b0, min(B, b0 + nb)), slice(0, C)
        return
    step = -(-C // -(-C // rows))
    for b in range(B):
        for c0 in range(0, C, step):
            yield slice(b, b + 1), slice(c0, min(C, c0 + step))


# Sequences per task of the fused CPU kernel (kernels/fftconv): at least 32 (batched transforms of a few rows
# were slower at n = 6272), else about 2^15 / n, so a task's buffers stay in the core's L2. On the ConvNeXt-T
# stages (B=16, 2 threads) this was within noise of the best of 2^14..2^18 elements per task at every stage.
_FUSED_MIN_ROWS = 32
_FUSED_ELEMS = 1 << 15


def _fused_rows(n: int) -> int:
    return max(_FUSED_MIN_ROWS, _FUSED_ELEMS // n)


def _fused_kernels(x: torch.Tensor):
    """The fused CPU extension for float32 / float64 CPU tensors where it builds, else None."""
    if x.device.type != 'cpu' or x.dtype not in (torch.float32, torch.float64):
        return None
    return _native.load_fftconv_cpu()


def _conv_chunks(x: torch.Tensor, k_f: torch.Tensor, n: int, out: torch.Tensor, bias: torch.Tensor | None) -> None:
    """``out (B, N, C, L) = crop_L(irfft(rfft(x, n) * k_f))`` (+ ``bias``) chunk by chunk, for ``k_f (N, C, F)``.

    ``out`` may be strided (e.g. a channels-last view): inputs are gathered and outputs scattered per chunk,
    never copied whole. float32 / float64 on the CPU run the fused native kernel (``kernels/fftconv``: the same
    arithmetic, one task per block of channels with its buffers in cache) where it builds; otherwise, and
    for other dtypes and devices, torch.fft chunk by chunk."""
    if (fused := _fused_kernels(x)) is not None:
        fused.fft_conv_forward(x, k_f.contiguous(), n, bias, out, _fused_rows(n))
        return
    L = x.shape[-1]
    N = k_f.shape[0]
    for bs, cs in _chunks(x, n):
        x_f = torch.fft.rfft(x[bs, cs], n=n)
        for i in range(N):
            y_f = x_f.mul_(k_f[i, cs]) if i == N - 1 else x_f * k_f[i, cs]  # the last branch reuses x_f
            y = torch.fft.irfft(y_f, n=n)[..., :L]
            if bias is None:
                out[bs, i, cs] = y
            else:
                torch.add(y, bias[cs, None], out=out[bs, i, cs])


def _conv_backward(
    grad_y: torch.Tensor, x: torch.Tensor, k_f: torch.Tensor, n: int, need_x: bool, need_k: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Gradients of ``crop_L(circular_conv_n(x, k_i))`` (see :func:`fft_conv_backward`), chunk by chunk with torch.fft,
    or in the fused native kernel for float32 / float64 CPU tensors where it builds."""
    if (fused := _fused_kernels(x)) is not None:
        grad_x, grad_k_f = fused.fft_conv_backward(x, k_f, n, grad_y, need_x, need_k, _fused_rows(n))
        return grad_x, torch.fft.irfft(grad_k_f, n=n) if need_k else None
    B, C, L = x.shape
    N = k_f.shape[0]
    grad_x = torch.empty_like(x) if need_x else None
    grad_k_f = torch.zeros_like(k_f) if need_k else None
    k_conj = k_f.conj().resolve_conj()
    for bs, cs in _chunks(x, n):
        x_conj = torch.fft.rfft(x[bs, cs], n=n).conj_physical_() if need_k else None
        acc = None
        for i in range(N):
            g_f = torch.fft.rfft(grad_y[bs, i, cs], n=n)  # (nb, cc, F)
            if need_k:
                grad_k_f[i, cs] += (g_f * x_conj).sum(0)
            if need_x:
                acc = g_f.mul_(k_conj[i, cs]) if acc is None else acc.addcmul_(g_f, k_conj[i, cs])
        if need_x:
            grad_x[bs, cs] = torch.fft.irfft(acc, n=n)[..., :L]
    return grad_x, torch.fft.irfft(grad_k_f, n=n) if need_k else None


# ------------------------------------------------------------------------------------------------- operators
# The FFT path as PyTorch operators (torch.library): fake implementations give shapes and strides, so
# torch.compile, torch.export and the meta device see through them; autograd is registered on the operator.
# The operators take the kernel in the lag convention and choose the crop and the FFT size inside, from the
# concrete sizes: a traced graph holds no FFT size, so it serves every input length without a recompile.


def _new_out(x: torch.Tensor, N: int) -> torch.Tensor:
    """``(B, N, C, L)`` output; a single kernel's output is laid out like ``x`` (a channels-last map stays
    channels-last, so the next LayerNorm needs no copy)."""
    B, C, L = x.shape
    return torch.empty_like(x).unsqueeze(1) if N == 1 else x.new_empty((B, N, C, L))


def _empty(t: torch.Tensor) -> torch.Tensor:
    return t.new_empty(0)


def kernel_spectrum(kernel: torch.Tensor, zero_lag: int, length: int) -> tuple[torch.Tensor, int]:
    """``(k_f, n)``: the spectrum ``(..., n // 2 + 1)`` of ``kernel (..., K)`` cropped to what reaches ``length``
    outputs, on the circle of the FFT size ``n`` the convolution of a ``length``-long input uses. Computed in the
    kernel's dtype (what :func:`fft_conv` multiplies the input's spectrum by)."""
    kernel, zero_lag = crop_kernel(kernel, zero_lag, length)
    n = fft_length(length, kernel.shape[-1], zero_lag)
    return torch.fft.rfft(circular_kernel(kernel, zero_lag, n), n=n), n


@torch.library.custom_op('mrconvnext::fft_conv', mutates_args=())
def fft_conv(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``y (B, N, C, L)``: the linear convolution of ``x (B, C, L)`` with each of the kernels ``(N, C, K)`` of x's
    dtype (lag convention of the module docstring, ``0 <= zero_lag < K``), plus ``bias (C,)``; ``y`` with ``N = 1``
    is laid out like x.

    Kernels: the fused native CPU kernels for float32 / float64 where they build, else torch.fft in cache-sized
    chunks (every device). Differentiable in ``x``, ``kernel`` and ``bias`` (:func:`fft_conv_backward`).
    """
    k_f, n = kernel_spectrum(kernel, zero_lag, x.shape[-1])
    y = _new_out(x, kernel.shape[0])
    _conv_chunks(x, k_f.contiguous(), n, y, bias)
    return y


@fft_conv.register_fake
def _(x, kernel, zero_lag, bias=None):
    return _new_out(x, kernel.shape[0])


@torch.library.custom_op('mrconvnext::fft_conv_backward', mutates_args=())
def fft_conv_backward(
    grad_y: torch.Tensor, x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, need_x: bool, need_k: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_kernel)`` of :func:`fft_conv` (an empty tensor for one not needed).

    With ``G_i = rfft(grad_y_i, n)`` and ``X = rfft(x, n)`` (real sequences, so these circular identities are exact):
    ``grad_x = crop_L(irfft(sum_i G_i * conj(K_i)))`` and ``grad_k_i = irfft(sum_b G_bi * conj(X_b))`` read back
    from the circle (taps that reach no output get 0). Chunk by chunk, ``X`` and the kernel spectra recomputed
    rather than saved; autograd through ``rfft * k -> irfft -> crop`` would materialize two ``(B, N, C, F)``
    complex products and a zero-filled ``(B, N, C, n)`` gradient only to reduce them again.
    """
    L = x.shape[-1]
    cropped, z = crop_kernel(kernel, zero_lag, L)
    k_f, n = kernel_spectrum(kernel, zero_lag, L)
    grad_x, grad_circ = _conv_backward(grad_y, x, k_f.contiguous(), n, need_x, need_k)
    grad_k = _empty(x)
    if need_k:
        taps = cropped.shape[-1]
        lo = zero_lag - z  # where the cropped kernel starts in the full one
        grad_k = kernel.new_zeros(kernel.shape)
        grad_k[..., lo : lo + taps] = torch.cat([grad_circ[..., n - z :], grad_circ[..., : taps - z]], dim=-1)
    return (_empty(x) if grad_x is None else grad_x), grad_k


@fft_conv_backward.register_fake
def _(grad_y, x, kernel, zero_lag, need_x, need_k):
    return (torch.empty_like(x) if need_x else _empty(x)), (torch.empty_like(kernel) if need_k else _empty(x))


def _fft_conv_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])  # x and the kernels; inputs holds only the arguments given
    ctx.zero_lag = inputs[2]


def _fft_conv_grad(ctx, grad_y):
    x, kernel = ctx.saved_tensors
    need = ctx.needs_input_grad  # one entry per argument given (no bias entry when the default None is used)
    need_x, need_k, need_b = need[0], need[1], len(need) > 3 and need[3]
    grad_x, grad_k = fft_conv_backward(grad_y, x, kernel, ctx.zero_lag, need_x, need_k)
    grad_b = grad_y.sum((0, 1, 3)) if need_b else None
    return (grad_x if need_x else None), (grad_k if need_k else None), None, grad_b


fft_conv.register_autograd(_fft_conv_grad, setup_context=_fft_conv_setup)


def direct_conv1d(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """The convolution of the module docstring with grouped ``F.conv1d`` (no dtype handling, no crop):
    ``x (B, C, L)``, ``kernel (C, K)`` or ``(N, C, K)`` -> ``(B, C, L)`` or ``(B, N, C, L)``."""
    B, C, L = x.shape
    K = kernel.shape[-1]
    multi = kernel.dim() == 3
    N = kernel.shape[0] if multi else 1
    # conv1d is a cross-correlation: flip the taps; output channel c*N + i is kernel i of channel c.
    w = kernel.flip(-1)
    w = w.transpose(0, 1).reshape(C * N, 1, K) if multi else w.reshape(C, 1, K)
    pad_left, pad_right = K - 1 - zero_lag, zero_lag
    if pad_left == pad_right and (x.device.type != 'cpu' or pad_left <= _CPU_NATIVE_PAD_MAX):
        y = F.conv1d(x, w, padding=pad_left, groups=C)
    else:
        y = F.conv1d(F.pad(x, (pad_left, pad_right)), w, groups=C)
    if multi:
        y = y.view(B, C, N, L).transpose(1, 2)
    return y


def long_conv1d(
    x: torch.Tensor,
    kernel: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    zero_lag: int = 0,
    backend: str = 'auto',
    spectrum_cache: dict | None = None,
) -> torch.Tensor:
    """Depthwise linear convolution (see the module docstring for the lag convention).

    Args:
        x: ``(B, C, L)`` floating-point input.
        kernel: ``(C, K)`` or ``(N, C, K)`` kernels; ``N`` kernels share one input transform.
        bias: optional ``(C,)`` added to every output.
        zero_lag: index of lag 0 in the kernel.
        backend: ``'auto'``, ``'fft'``, ``'direct'`` or ``'flashfft'``.
        spectrum_cache: deprecated and ignored (the function keeps no state, and nothing derived from a kernel is
            kept between calls).

    Returns:
        ``(B, C, L)``, or ``(B, N, C, L)`` for a stacked kernel, in ``x.dtype``.
    """
    if backend not in _BACKENDS:
        raise ValueError(f'backend must be one of {_BACKENDS}, got {backend!r}')
    if spectrum_cache is not None:
        warnings.warn(
            'long_conv1d(spectrum_cache=...) is deprecated and ignored: nothing is cached between calls',
            DeprecationWarning,
            stacklevel=2,
        )
    _check(x, kernel, zero_lag, bias)
    backend = resolve_backend(x, kernel, zero_lag, backend)
    out_dtype = x.dtype
    if backend == 'flashfft':
        kernel, zero_lag = crop_kernel(kernel, zero_lag, x.shape[-1])
        y = flashfft.conv1d(x, kernel, zero_lag)
        return (y if bias is None else y + bias.to(y.dtype).unsqueeze(-1)).to(out_dtype)
    compute = torch.float64 if x.dtype == torch.float64 or kernel.dtype == torch.float64 else torch.float32
    # Inputs are cast to the compute dtype here; the FFT operators compute in the dtype they are given, and the
    # direct path's conv1d runs with autocast off (autocast would cast it back to half).
    xc = x.to(compute)
    b = None if bias is None else bias.to(compute)
    if backend == 'direct':
        kernel, zero_lag = crop_kernel(kernel, zero_lag, x.shape[-1])
        with autocast_off(x.device.type):
            y = direct_conv1d(xc, kernel.to(compute), zero_lag)
        if b is not None:
            y = y + b.unsqueeze(-1)
        return y.to(out_dtype)
    stacked = kernel.dim() == 3
    k = kernel.to(compute)
    y = fft_conv(xc, k if stacked else k.unsqueeze(0), zero_lag, b)
    return (y if stacked else y.squeeze(1)).to(out_dtype)


def resolve_backend(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, backend: str = 'auto') -> str:
    """The backend :func:`long_conv1d` runs for this input and kernel: ``backend`` itself, ``'auto'`` resolved by
    :func:`choose_backend` on the taps that reach ``x``, and ``'flashfft'`` where flashfftconv cannot run it
    replaced by ``'fft'`` (with a one-time warning)."""
    L = x.shape[-1]
    if backend not in ('auto', 'flashfft'):
        return backend
    # the kernel after crop_kernel, without guarding on the sizes under torch.compile
    zero = torch.sym_min(zero_lag, L - 1)
    taps = zero + 1 + torch.sym_min(kernel.shape[-1] - 1 - zero_lag, L - 1)
    if backend == 'auto':
        return choose_backend(x, taps, zero)
    if not flashfft.supports(x, taps, zero):
        warn_once(
            'flashfft-fallback',
            'flashfftconv cannot run this convolution (package missing, not a fp16/bf16 CUDA input, '
            'or an unsupported size); falling back to the torch.fft backend',
        )
        return 'fft'
    return 'flashfft'
