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

Shared filters: a kernel of ``M`` filters for ``C = G M`` channels, ``(M, K)`` / ``(N, M, K)``, gives channel
``g M + m`` filter ``m`` (MRConv's reduced-dimension convolutions). On the matmul methods the ``G`` groups join the
batch, ``(B G, M, L)``, so each filter's Toeplitz matrix (or blocks) is made once and multiplied with ``B G``
columns: the channels become a GEMM dimension. The FFT and direct methods take the filters expanded to the
channels: their per-filter work is small, and the groups-as-batch layout costs a transpose of the output. Both
choices: ``python scripts/bench_mrconv.py --shared --groups 4 --doc`` (docs/benchmarks.md). The gradient of a shared filter is
summed over its channels.

Methods and engines (``method=``, ``engine=``; resolved by :func:`mrconvnext.ops.long_conv.dispatch.long_conv_plan`)
----------------------------------------------------------------------------------------------------------
- ``method='fft'``: real FFTs of a size that guarantees no wrap-around (see :func:`.layout.fft_size`); the
  input spectrum is computed once and shared by all ``N`` kernels. Engines: ``'native'`` (the fused C++ CPU
  kernels, float32 / float64), ``'torch'`` (torch.fft in cache-sized chunks, every device), ``'flashfft'`` (the
  optional CUDA package ``flashfftconv``, fp16 / bf16).
- ``method='direct'``: grouped ``F.conv1d`` (engine ``'torch'``); faster for short kernels. On the ``'onnx'``
  engine, for kernels of more than ``DIRECT_MAX_TAPS`` taps, one depthwise ``conv2d`` of the sequence folded into
  rows (:func:`.engine_onnx.folded_conv2d`).
- ``method='toeplitz'`` / ``'rowdft'``: matrix products, no FFT (engine ``'torch'``, :mod:`.grid` has the
  identities): one ``L x L`` Toeplitz product per channel, or a row DFT of the sequence folded into about
  ``sqrt(L)`` rows, a small Toeplitz product per channel and frequency, and the inverse row DFT.
- engine ``'onnx'`` (:mod:`.engine_onnx`): the row DFT in a channels-first layout, what ``'auto'`` runs for long
  maps while ``torch.onnx.export`` traces, and the direct method as one depthwise ``conv2d`` of the sequence folded
  into rows (short maps); the Toeplitz product runs on the ``'torch'`` engine's form, ``'fft'`` not at all.
- ``'auto'``: ``'direct'`` for at most :data:`~mrconvnext.ops.long_conv.dispatch.DIRECT_MAX_TAPS` taps; for fp16 / bf16
  convolutions on CUDA (half inputs or autocast) where flashfftconv is not installed, in batches of at least
  :data:`~mrconvnext.ops.long_conv.dispatch.TOEPLITZ_MIN_BATCH`, the matmul methods (the Toeplitz product up to
  :data:`~mrconvnext.ops.long_conv.dispatch.TOEPLITZ_MAX_LENGTH`; compiled without a backward to come: Toeplitz, else
  row DFT); else on CUDA without a backward to come ``'direct'`` where it takes at most
  :data:`~mrconvnext.ops.long_conv.dispatch.DIRECT_CUDA_MAX_MACS` multiply-adds (small batches, bound by the host);
  else ``'fft'`` on the device's engine (measured on a GPU: :data:`~mrconvnext.ops.long_conv.dispatch.TOEPLITZ_MIN_BATCH`'s
  comment; the direct rule chosen by the cost model).

Precision. The FFT and direct paths compute in float32 (float64 for float64 inputs) also under autocast and for
fp16 / bf16 inputs, and return the input dtype. The matmul methods compute in the dtype of their products: under
autocast its fp16 / bf16 operands with float32 accumulation, like every autocast convolution, with the result
rounded to that dtype and returned in the input's (on the torch engine; the ONNX engine's stays in the products')
(max |error| / max |y| against float64 at the ConvNeXt-T stage shapes: at most 5.7e-3 in bf16, 8.2e-4 in fp16);
outside autocast the input's dtype (float32 products on CUDA follow ``torch.backends.cuda.matmul.allow_tf32``; ``'auto'`` gives float32
CUDA inputs cuFFT instead).
"""

from __future__ import annotations

import warnings

import torch

from .. import engines
from ..checks import autocast_dtype, autocast_off
from ..symbolic import sym_min
from . import dispatch, engine_flashfft, engine_onnx, engine_torch, operators
from .checks import check_long_conv
from .engine_torch import direct_conv1d
from .layout import crop_kernel

__all__ = ['long_conv1d', 'long_conv1d_vjp']


def _groups_to_batch(t: torch.Tensor, filters: int) -> torch.Tensor:
    """``(B, C, L)`` / ``(B, N, C, L)`` -> ``(B G, M, L)`` / ``(B G, N, M, L)`` for ``M = filters``, ``C = G M``:
    channel ``g M + m`` of item ``b`` becomes channel ``m`` of item ``b G + g``."""
    if t.dim() == 3:
        return t.reshape(-1, filters, t.shape[-1])
    B, N, _, L = t.shape
    return t.unflatten(2, (-1, filters)).transpose(1, 2).reshape(-1, N, filters, L)


def _per_channel(kernel: torch.Tensor, channels: int) -> torch.Tensor:
    """Shared filters ``(..., M, K)`` expanded to ``(..., C, K)``: channel ``g M + m`` takes filter ``m``."""
    return kernel.repeat(*([1] * (kernel.dim() - 2)), channels // kernel.shape[-2], 1)


def _batch_to_groups(t: torch.Tensor, batch: int) -> torch.Tensor:
    """The inverse of :func:`_groups_to_batch` for ``batch`` items."""
    if t.dim() == 3:
        return t.reshape(batch, -1, t.shape[-1])
    _, N, M, L = t.shape
    return t.unflatten(0, (batch, -1)).transpose(1, 2).reshape(batch, N, -1, L)


def _plan(
    x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, method: str, engine: str, grad: bool
) -> tuple[dispatch.LongConvPlan, torch.dtype | None, torch.dtype]:
    """``(plan, autocast dtype or None, compute dtype of the FFT and direct paths)`` for a convolution of ``x`` with
    ``kernel`` (``grad``: a backward to come): the taps that reach the sequence (as :func:`.layout.crop_kernel` keeps
    them, without a guard on the sizes under torch.compile) go to :func:`.dispatch.long_conv_plan`, once per call."""
    L = x.shape[-1]
    zero = sym_min(zero_lag, L - 1)
    taps = zero + 1 + sym_min(kernel.shape[-1] - 1 - zero_lag, L - 1)
    amp = autocast_dtype(x.device.type)
    channels = x.shape[1] * (kernel.shape[0] if kernel.dim() == 3 else 1)  # convolutions per batch item
    plan = dispatch.long_conv_plan(
        x.device.type, amp or x.dtype, L, taps, zero, method, engine, batch=x.shape[0], grad=grad, channels=channels
    )
    compute = torch.float64 if x.dtype == torch.float64 or kernel.dtype == torch.float64 else torch.float32
    return plan, amp, compute


_MATMUL = {
    'toeplitz': engine_torch.toeplitz_conv,
    'rowdft': engine_torch.rowdft_conv,
    'rowdft_onnx': engine_onnx.rowdft_conv,
}
_MATMUL_VJP = {'toeplitz': engine_torch.toeplitz_conv_vjp, 'rowdft': engine_torch.rowdft_conv_vjp}


class _MatmulConv(torch.autograd.Function):
    """A matmul method (``'toeplitz'`` / ``'rowdft'``) whose backward is its own vjp: autograd through the products
    would take the Toeplitz matrices' gather back by an accumulating ``index_put`` over every entry (on a GPU it
    serializes on atomics), and save the matrices. Saved: ``x`` (under autocast the half-precision copy the
    products read, which :func:`long_conv1d` makes before it calls this) and the kernels; the products of the
    backward run in the forward's dtypes (a backward runs outside autocast). ``setup_context`` and a generated
    vmap rule keep it usable under ``torch.func`` transforms, as the plain products were."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, method: str) -> torch.Tensor:
        return _MATMUL[method](x, kernel, zero_lag)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, kernel, zero_lag, method = inputs
        ctx.save_for_backward(x, kernel)
        ctx.zero_lag, ctx.method, ctx.dtypes = zero_lag, method, engine_torch.matmul_dtypes(x)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, kernel = ctx.saved_tensors
        need_x, need_k = ctx.needs_input_grad[:2]
        grad_x, grad_k = _MATMUL_VJP[ctx.method](grad_y, x, kernel, ctx.zero_lag, ctx.dtypes, need_x, need_k)
        return grad_x, grad_k, None, None


def long_conv1d(
    x: torch.Tensor,
    kernel: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    zero_lag: int = 0,
    method: str = 'auto',
    engine: str = 'auto',
    backend: str | None = None,
    spectrum_cache: dict | None = None,
) -> torch.Tensor:
    """Depthwise linear convolution (see the module docstring for the lag convention, methods and engines).

    Args:
        x: ``(B, C, L)`` floating-point input.
        kernel: ``(C, K)`` or ``(N, C, K)`` kernels; ``N`` kernels share one input transform. Shared filters:
            ``(M, K)`` / ``(N, M, K)`` for any ``M`` that divides ``C`` (channel ``g M + m`` takes filter ``m``).
        bias: optional ``(C,)`` added to every output.
        zero_lag: index of lag 0 in the kernel.
        method: ``'auto'``, ``'fft'``, ``'direct'``, ``'toeplitz'`` or ``'rowdft'``.
        engine: ``'auto'``, ``'native'``, ``'torch'``, ``'flashfft'`` or ``'onnx'`` (the matmul and direct methods
            in the forms ONNX runtimes run fast: what ``'auto'`` runs under ``torch.onnx.export``).
        backend: deprecated spelling (``'fft'`` / ``'direct'``: the method; ``'flashfft'``: the engine).
        spectrum_cache: deprecated and ignored (the function keeps no state, and nothing derived from a kernel is
            kept between calls).

    Returns:
        ``(B, C, L)``, or ``(B, N, C, L)`` for a stacked kernel, in ``x.dtype``.
    """
    if backend is not None:
        method, engine = engines.from_backend('long_conv1d', 'long_conv', backend, method, engine)
    if spectrum_cache is not None:
        warnings.warn(
            'long_conv1d(spectrum_cache=...) is deprecated and ignored: nothing is cached between calls',
            DeprecationWarning,
            stacklevel=2,
        )
    check_long_conv(x, kernel, zero_lag, bias, shared=True)
    grad = torch.is_grad_enabled() and (x.requires_grad or kernel.requires_grad)
    plan, amp, compute = _plan(x, kernel, zero_lag, method, engine, grad)
    return _run(plan, amp, compute, x, kernel, bias, zero_lag)


def _run(
    plan: dispatch.LongConvPlan,
    amp: torch.dtype | None,
    compute: torch.dtype,
    x: torch.Tensor,
    kernel: torch.Tensor,
    bias: torch.Tensor | None,
    zero_lag: int,
) -> torch.Tensor:
    """:func:`long_conv1d` as ``plan`` says, nothing chosen again."""
    if kernel.shape[-2] != x.shape[1]:  # shared filters (module docstring)
        if plan.method not in dispatch.MATMUL_METHODS:
            kernel = _per_channel(kernel, x.shape[1])
        else:
            y = _batch_to_groups(_run(plan, amp, compute, _groups_to_batch(x, kernel.shape[-2]), kernel, None,
                                      zero_lag), x.shape[0])  # fmt: skip
            return y if bias is None else y + bias.to(y.dtype).unsqueeze(-1)
    L = x.shape[-1]
    out_dtype = x.dtype
    if plan.method in dispatch.MATMUL_METHODS:
        # plain products: autocast (if on) runs them in its dtype
        kernel, zero_lag = crop_kernel(kernel, zero_lag, L)
        like = x
        stacked = kernel.dim() == 3
        if amp is None:  # products in the input's dtype (float64 if either operand is)
            dtype = torch.float64 if compute == torch.float64 else x.dtype
            x, kernel = x.to(dtype), kernel.to(dtype)
        k = kernel if stacked else kernel.unsqueeze(0)
        if plan.operator in _MATMUL_VJP and torch.is_grad_enabled() and (x.requires_grad or k.requires_grad):
            # under autocast x in its dtype first, as the products would cast it (float64 they leave): the backward
            # keeps that copy
            half = amp is not None and x.dtype != torch.float64
            y = _MatmulConv.apply(_cast(x, amp) if half else x, k, zero_lag, plan.operator)
        else:
            y = _MATMUL[plan.operator](x, k, zero_lag)
        if plan.engine == 'torch' and not torch.jit.is_tracing():  # (a TorchScript export: as the products leave it)
            y = _in_layout(like, y, bias, torch.promote_types(y.dtype, out_dtype))
        elif bias is not None:
            y = y + bias.to(y.dtype).unsqueeze(-1)
        return y if stacked else y.squeeze(1)
    if plan.operator == 'flashfft':
        kernel, zero_lag = crop_kernel(kernel, zero_lag, L)
        y = engine_flashfft.conv1d(x, kernel, zero_lag)
        return (y if bias is None else y + bias.to(y.dtype).unsqueeze(-1)).to(out_dtype)
    # Kernels are cast to the compute dtype here; the FFT operators compute in the kernel's dtype and the direct
    # method's convolutions run with autocast off (autocast would cast them back to half).
    b = None if bias is None else _cast(bias, compute)
    if plan.operator in ('direct', 'direct_onnx'):
        kernel, zero_lag = crop_kernel(kernel, zero_lag, L)
        conv = direct_conv1d if plan.operator == 'direct' else engine_onnx.folded_conv2d
        with autocast_off(x.device.type):
            y = conv(_cast(x, compute), _cast(kernel, compute), zero_lag, b)
        return _cast(y, out_dtype)
    stacked = kernel.dim() == 3
    k = _cast(kernel, compute)
    op = operators.fft_conv_torch if plan.operator == 'fft_conv_torch' else operators.fft_conv
    y = op(_fft_input(plan, x, compute), k if stacked else k.unsqueeze(0), zero_lag, b)
    return _cast(y if stacked else y.squeeze(1), out_dtype)


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, calling no op where it is already (the deployed model's small-batch forward is bound by
    the host: every op call counts)."""
    return t if t.dtype == dtype else t.to(dtype)


def _in_layout(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The products' ``y (B, N, C, L)`` (+ ``bias``) in ``dtype`` (``x``'s under autocast, as the FFT operators
    return it), one kernel's laid out like ``x``. The Toeplitz products leave the batch innermost, which a LayerNorm
    after them would copy into the channels-last order (its CUDA kernel makes its input contiguous) after a cast of
    its own. Here the bias and the cast come first, in ``y``'s layout (a GPU transposes 4-byte elements faster than
    2-byte ones: docs/gpu/cost-model-calibration.md), then one copy reorders. Several kernels (the branch passes of
    the BatchNorm fold, which reduce them) stay as the products leave them: a reordering would be a pass of ``N``
    maps."""
    y = y.to(dtype) if bias is None else y + bias.to(dtype).unsqueeze(-1)
    if y.shape[1] > 1:
        return y
    out = torch.empty_like(x, dtype=dtype).unsqueeze(1)
    return y if out.stride() == y.stride() else out.copy_(y)


def _fft_input(plan: dispatch.LongConvPlan, t: torch.Tensor, compute: torch.dtype) -> torch.Tensor:
    """``t`` as the FFT operators take it: as it is on the torch.fft engine, which casts it to the kernels' dtype as
    it pads it (:func:`.engine_torch.padded_rfft`; the output comes back in ``t``'s dtype, two passes fewer than a
    cast before and after), cast to ``compute`` for the native kernels."""
    return t if plan.engine == 'torch' else _cast(t, compute)


def long_conv1d_vjp(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    *,
    method: str = 'auto',
    engine: str = 'auto',
    need_x: bool = True,
    need_kernel: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_kernel)`` of :func:`long_conv1d` (no bias) for the output gradient ``grad_y``, callable where
    autograd is not (inside an operator, under any dispatch mode). Each method's own backward: the FFT operators'
    (the native kernels on the CPU), grouped convolution's, and the matmul methods' products taken back in turn
    (:func:`.engine_torch.toeplitz_conv_vjp`, :func:`.engine_torch.rowdft_conv_vjp`); flashfftconv, which has no
    backward here, is replaced by the torch.fft engine. Shapes and dtypes as ``x`` and ``kernel`` (shared filters'
    gradients summed over their channels); a gradient not asked for (``need_x``, ``need_kernel``) is not computed
    and comes back as None."""
    plan, amp, compute = _plan(x, kernel, zero_lag, method, engine, grad=True)
    return _vjp(plan, amp, compute, grad_y, x, kernel, zero_lag, need_x, need_kernel)


def _vjp(
    plan: dispatch.LongConvPlan,
    amp: torch.dtype | None,
    compute: torch.dtype,
    grad_y: torch.Tensor,
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    need_x: bool = True,
    need_kernel: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """:func:`long_conv1d_vjp` as ``plan`` says (flashfftconv's plan runs the torch.fft backward)."""
    need = (need_x, need_kernel)
    if kernel.shape[-2] != x.shape[1]:  # shared filters, as long_conv1d takes them
        M = kernel.shape[-2]
        if plan.method not in dispatch.MATMUL_METHODS:
            grad_x, grad_k = _vjp(plan, amp, compute, grad_y, x, _per_channel(kernel, x.shape[1]), zero_lag, *need)
            return grad_x, None if grad_k is None else grad_k.unflatten(-2, (-1, M)).sum(-3)
        grad_x, grad_k = _vjp(
            plan, amp, compute, _groups_to_batch(grad_y, M), _groups_to_batch(x, M), kernel, zero_lag, *need
        )
        return None if grad_x is None else _batch_to_groups(grad_x, x.shape[0]), grad_k
    L = x.shape[-1]
    stacked = kernel.dim() == 3
    k = kernel if stacked else kernel.unsqueeze(0)
    g = grad_y if stacked else grad_y.unsqueeze(1)
    if plan.method == 'fft':
        op = operators.fft_conv_backward if plan.engine == 'native' else operators.fft_conv_torch_backward
        grad_x, grad_k = op(
            _fft_input(plan, g, compute), _fft_input(plan, x, compute), _cast(k, compute), zero_lag, *need
        )
        # (empty: not needed)
        grad_x = grad_x.to(x.dtype) if need_x else None
        return grad_x, (grad_k if stacked else grad_k.squeeze(0)).to(kernel.dtype) if need_kernel else None
    # the other methods work on the cropped kernel (as long_conv1d does); its gradient goes back in place
    cropped, z = crop_kernel(k, zero_lag, L)
    lo = zero_lag - z
    if plan.method == 'direct':
        with autocast_off(x.device.type):
            grad_x, grad_c = engine_torch.direct_conv1d_vjp(g.to(compute), x.to(compute), cropped.to(compute), z, *need)
    else:
        dtype = amp or (torch.float64 if compute == torch.float64 else x.dtype)
        xs = x if amp is not None else x.to(dtype)
        grad_x, grad_c = _MATMUL_VJP[plan.method](g.to(dtype), xs, cropped.to(dtype), z, None, *need)
    grad_k = None
    if need_kernel:
        grad_k = k.new_zeros(k.shape)
        grad_k[..., lo : lo + cropped.shape[-1]] = grad_c.to(k.dtype)
        grad_k = grad_k if stacked else grad_k.squeeze(0)
    return None if grad_x is None else grad_x.to(x.dtype), grad_k
