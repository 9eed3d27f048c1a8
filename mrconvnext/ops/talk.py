"""TaLK (Time-aware Large Kernel) summation convolutions, 1-D and 2-D (box), functional form.

Lioutas & Guo, ICML 2020, Sec. 3.1-3.5; the 2-D box variant is ours (integral image, as box convolutions).

1-D conventions
    ``x`` (B, C, L); ``offsets`` (B, heads, L, 2) relative offsets in [0, 1]: ``[..., 0]`` left (ã_l),
    ``[..., 1]`` right (ã_r); channel c uses head ``c // (C // heads)`` (contiguous channel groups).
    Window of position i: ``[a_l, a_r]`` with ``a_l = i - ã_l * max_left``, ``a_r = i + ã_r * max_right``, both
    clamped to ``[0, L - 1]``. ``y[b, c, i] = (S(a_r) - S(a_l - 1)) / (max_left + max_right + 1)``, S the
    inclusive prefix sum of x with ``S(-1) = 0``, linearly interpolated at real positions (Eq. 5): the window
    sum with fractional weights on its two end cells, normalized by the maximum window size (Eq. 8).
    Causal (decoder) TaLK is ``max_right = 0``.
2-D conventions
    ``x`` (B, C, H, W); ``offsets`` (B, heads, H, W, 4) = (left, right, top, bottom). Box of pixel (i, j):
    rows ``[i - ã_t * max_top, i + ã_b * max_bottom]`` x cols ``[j - ã_l * max_left, j + ã_r * max_right]``,
    clamped to the image; box sum by bilinear interpolation of the integral image (zero first row/column) at
    the real-valued corners, i.e. fractional border strips and corners; normalized by the maximum box area
    ``(max_top + max_bottom + 1) * (max_left + max_right + 1)``.
Gradients
    Exact w.r.t. x and offsets (Eq. 6-7): d/d(boundary) is the interpolation slope, zero where the boundary
    is clamped; offset gradients are summed over the head's channels. At an integer boundary position (a kink)
    the one-sided slope in the direction of a *growing* window is used, so offsets that are exactly 0 (e.g.
    after offsets dropout) get the gradient of opening the window, and a boundary exactly on the sequence
    end it would grow past (a_l = 0, a_r = L - 1) gets zero.
Names
    ``heads`` is always the number of heads (``NH`` in the C++ kernel), ``H`` / ``W`` the image height and width.
Precision
    Positions, interpolation weights and the prefix table are computed in float32 for float16 / bfloat16 /
    float32 inputs (float64 for float64), with int64 indexing; outputs are in x's dtype.

Implementations (``backend``): ``'reference'`` (cumsum + gather + autograd: the specification, in
:mod:`.talk_reference` with the input checks), ``'torch'`` (fused operator in PyTorch ops, O(B*C*L) memory,
:mod:`.talk_torch`), ``'native'`` (the C++ CPU kernel from ``kernels/talk``),
``'triton'`` (the Triton kernels of :mod:`mrconvnext.ops.talk_triton`: CUDA tensors, or CPU tensors under
``TRITON_INTERPRET=1``) and ``'auto'`` (Triton on CUDA, native on the CPU, else ``'torch'`` with a one-time
warning). This module holds the dispatch, the operators and the public functions.
"""

from __future__ import annotations

from typing import Literal

import torch

from . import _native
from ._warnings import warn_once
from .talk_reference import _acc_dtype, _check_inputs, _check_max, talk1d_reference, talk2d_reference
from .talk_torch import TORCH_KERNELS

__all__ = [
    'talk1d',
    'talk2d',
    'talk1d_reference',
    'talk2d_reference',
    'talk_offsets_dropout',
    'talk_backend',
    'TALK_BACKENDS',
]

Backend = Literal['auto', 'triton', 'native', 'torch', 'reference']
TALK_BACKENDS = ('auto', 'triton', 'native', 'torch', 'reference')


# ------------------------------------------------------------------------------- dispatch + autograd


def _check_backend(backend: str) -> None:
    if backend not in TALK_BACKENDS:
        raise ValueError(f'backend: expected one of {TALK_BACKENDS}, got {backend!r}')


_TRITON_REASONS: dict[str, str | None] = {}


def _triton_unavailable(device_type: str) -> str | None:
    """Why the Triton kernels cannot run on ``device_type`` tensors, or None when they can."""
    if device_type not in _TRITON_REASONS:
        try:
            from . import talk_triton
        except Exception as exc:  # noqa: BLE001 - no Triton (e.g. CPU-only or macOS wheels): say why
            reason = f'Triton is not importable ({type(exc).__name__}: {exc})'
        else:
            if device_type == 'cuda':
                reason = None
            elif device_type == 'cpu':
                reason = None if talk_triton.interpreted() else 'CPU tensors need TRITON_INTERPRET=1 before first use'
            else:
                reason = f'no Triton kernels for {device_type} tensors'
        _TRITON_REASONS[device_type] = reason
    return _TRITON_REASONS[device_type]


def talk_backend(device: torch.device | str, backend: Backend = 'auto') -> str:
    """The implementation ``backend`` resolves to for tensors on ``device``: 'triton', 'native', 'torch' or
    'reference'.

    ``'auto'``: Triton on CUDA, the native kernel where one builds (CPU), else ``'torch'`` with a one-time warning.
    ``'triton'`` and ``'native'`` raise RuntimeError, saying why, where their kernels cannot run.
    """
    _check_backend(backend)
    if backend in ('torch', 'reference'):
        return backend
    device = torch.device(device)
    triton_reason = _triton_unavailable(device.type) if backend == 'triton' or device.type == 'cuda' else None
    if backend == 'triton':
        if triton_reason is not None:
            raise RuntimeError(f'Triton TaLK kernels unavailable for {device}: {triton_reason}')
        return 'triton'
    if backend == 'auto' and device.type == 'cuda' and triton_reason is None:
        return 'triton'
    if _native.talk_native(device) is not None:
        return 'native'
    if device.type == 'meta' and backend == 'auto':
        return 'torch'  # shapes only: no kernel runs, nothing to warn about
    name = _native.CPU_NAME if device.type == 'cpu' else None
    reason = (name and _native.native_error(name)) or (
        'disabled by MRCONVNEXT_DISABLE_NATIVE' if _native.native_disabled() else 'no kernel for this device'
    )
    if triton_reason is not None:
        reason = f'{reason}; {triton_reason}'
    if backend == 'native':
        raise RuntimeError(f'native TaLK kernels unavailable for {device}: {reason}')
    warn_once(
        f'talk-fallback-{device.type}',
        f'mrconvnext: no native TaLK kernel for {device.type} tensors ({reason}); using the PyTorch implementation',
    )
    return 'torch'


@torch.compiler.assume_constant_result
def _resolve(device_type: str, backend: str) -> str:
    # a constant for torch.compile: the loaders behind it (locks, imports, builds) cannot be traced
    return talk_backend(device_type, backend)


def _kernels(device: torch.device, backend: str):
    """Kernels of the ``mrconvnext::talk*`` operators: ``backend`` 'native' or 'torch' ('auto': native where it
    builds, else torch). The Triton kernels are operators of their own (:mod:`.talk_triton`)."""
    if backend not in ('auto', 'native', 'torch'):
        raise ValueError(f"backend: expected 'auto', 'native' or 'torch' for this operator, got {backend!r}")
    native = None if backend == 'torch' else _native.talk_native(device)
    if native is None and backend == 'native':
        talk_backend(device, 'native')  # raises, saying why
    return native if native is not None else TORCH_KERNELS


def _is_channels_last_1d(x: torch.Tensor) -> bool:
    """``x (B, C, L)`` laid out as a contiguous ``(B, L, C)`` (e.g. a flattened channels-last map), not also
    contiguous as ``(B, C, L)``."""
    return not x.is_contiguous() and x.transpose(1, 2).is_contiguous()


def _none_to_empty(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return like.new_empty(0) if t is None else t


# ------------------------------------------------------------------------------------------------- operators
# torch.library operators: the kernel (native for the device where it builds, else the fused PyTorch one) is chosen
# inside the operator, so torch.compile / torch.export see one opaque node with a fake implementation, and autograd
# is registered on the operator. ``backend`` is 'auto', 'native' or 'torch'.


def _talk1d_out(x: torch.Tensor) -> torch.Tensor:
    """The forward's output: laid out like ``x`` when x is a flattened channels-last map, else contiguous."""
    return torch.empty_like(x) if _is_channels_last_1d(x) else torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op('mrconvnext::talk1d', mutates_args=())
def talk1d_op(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, backend: str) -> torch.Tensor:
    """TaLK 1-D forward (see :func:`talk1d`); ``offsets`` in any floating dtype, any strides."""
    kernels = _kernels(x.device, backend)
    off = offsets.to(_acc_dtype(x.dtype))
    if _is_channels_last_1d(x):
        if hasattr(kernels, 'talk1d_forward_cl'):
            # the CPU kernel reads channels-last maps and strided offsets (e.g. a view of a channels-last projection)
            return kernels.talk1d_forward_cl(x.transpose(1, 2), off, max_left, max_right).transpose(1, 2)
        return _talk1d_out(x).copy_(kernels.talk1d_forward(x.contiguous(), off.contiguous(), max_left, max_right))
    return kernels.talk1d_forward(x.contiguous(), off.contiguous(), max_left, max_right)


@talk1d_op.register_fake
def _(x, offsets, max_left, max_right, backend):
    return _talk1d_out(x)


@torch.library.custom_op('mrconvnext::talk1d_backward', mutates_args=())
def talk1d_backward_op(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    backend: str,
    need_dx: bool,
    need_doff: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, C, L) contiguous, doff in offsets' dtype)`` of :func:`talk1d_op`; an empty tensor for one not needed."""
    kernels = _kernels(x.device, backend)
    off = offsets.to(_acc_dtype(x.dtype)).contiguous()
    dx, doff = kernels.talk1d_backward(
        grad_y.to(x.dtype).contiguous(), x.contiguous(), off, max_left, max_right, need_dx, need_doff
    )
    return _none_to_empty(dx, x), _none_to_empty(None if doff is None else doff.to(offsets.dtype), offsets)


@talk1d_backward_op.register_fake
def _(grad_y, x, offsets, max_left, max_right, backend, need_dx, need_doff):
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else x.new_empty(0)
    doff = torch.empty(offsets.shape, dtype=offsets.dtype, device=offsets.device) if need_doff else offsets.new_empty(0)
    return dx, doff


def _talk1d_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])  # x itself (slopes) and the offsets: O(B*C*L), nothing per window
    ctx.args = inputs[2:]


def register_talk1d_autograd(forward_op, backward_op) -> None:
    """Autograd of a TaLK 1-D operator ``forward_op(x, offsets, *args)`` through
    ``backward_op(grad_y, x, offsets, *args, need_dx, need_doff) -> (dx, doff)``."""

    def grad(ctx, grad_y):
        x, offsets = ctx.saved_tensors
        need_dx, need_doff = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, doff = backward_op(grad_y, x, offsets, *ctx.args, need_dx, need_doff)
        return (dx if need_dx else None), (doff if need_doff else None), *(None,) * len(ctx.args)

    forward_op.register_autograd(grad, setup_context=_talk1d_setup)


register_talk1d_autograd(talk1d_op, talk1d_backward_op)


@torch.library.custom_op('mrconvnext::talk2d', mutates_args=())
def talk2d_op(
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    max_top: int,
    max_bottom: int,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TaLK 2-D forward (see :func:`talk2d`): ``(y (B, C, H, W) contiguous, P)``, ``P (B, C, H + 1, W + 1)`` the
    integral image in the accumulation dtype (kept for the backward)."""
    kernels = _kernels(x.device, backend)
    off = offsets.to(_acc_dtype(x.dtype)).contiguous()
    y, P = kernels.talk2d_forward(x.contiguous(), off, max_left, max_right, max_top, max_bottom)
    return y, P  # a tuple: the native kernels return a list, which the operator's autograd would not wrap


@talk2d_op.register_fake
def _(x, offsets, max_left, max_right, max_top, max_bottom, backend):
    B, C, H, W = x.shape
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return y, x.new_empty((B, C, H + 1, W + 1), dtype=_acc_dtype(x.dtype))


@torch.library.custom_op('mrconvnext::talk2d_backward', mutates_args=())
def talk2d_backward_op(
    grad_y: torch.Tensor,
    P: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    max_top: int,
    max_bottom: int,
    backend: str,
    need_dx: bool,
    need_doff: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, C, H, W) contiguous, doff in offsets' dtype)`` of :func:`talk2d_op` from its integral image ``P``;
    an empty tensor for one not needed."""
    kernels = _kernels(P.device, backend)
    off = offsets.to(P.dtype).contiguous()
    maxes = (max_left, max_right, max_top, max_bottom)
    dx, doff = kernels.talk2d_backward(grad_y.contiguous(), P, off, *maxes, need_dx, need_doff)
    return _none_to_empty(dx, grad_y), _none_to_empty(None if doff is None else doff.to(offsets.dtype), offsets)


@talk2d_backward_op.register_fake
def _(grad_y, P, offsets, max_left, max_right, max_top, max_bottom, backend, need_dx, need_doff):
    dx = torch.empty(grad_y.shape, dtype=grad_y.dtype, device=grad_y.device) if need_dx else grad_y.new_empty(0)
    doff = torch.empty(offsets.shape, dtype=offsets.dtype, device=offsets.device) if need_doff else offsets.new_empty(0)
    return dx, doff


def _talk2d_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1], inputs[1])  # the integral image (accumulation dtype) and the offsets
    ctx.args = inputs[2:]
    ctx.x_dtype = inputs[0].dtype


def register_talk2d_autograd(forward_op, backward_op) -> None:
    """Autograd of a TaLK 2-D operator ``forward_op(x, offsets, *args) -> (y, P)`` through
    ``backward_op(grad_y, P, offsets, *args, need_dx, need_doff) -> (dx, doff)``."""

    def grad(ctx, grad_y, _grad_P):
        P, offsets = ctx.saved_tensors
        need_dx, need_doff = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, doff = backward_op(grad_y.to(ctx.x_dtype), P, offsets, *ctx.args, need_dx, need_doff)
        return (dx if need_dx else None), (doff if need_doff else None), *(None,) * len(ctx.args)

    forward_op.register_autograd(grad, setup_context=_talk2d_setup)


register_talk2d_autograd(talk2d_op, talk2d_backward_op)


def talk1d(
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    backend: Backend = 'auto',
) -> torch.Tensor:
    """TaLK 1-D: ``x`` (B, C, L), ``offsets`` (B, heads, L, 2) [left, right] in [0, 1] -> (B, C, L).

    See the module docstring for the conventions. Raises TypeError / ValueError on bad inputs.
    """
    _check_inputs(x, offsets, 1)
    max_left, max_right = _check_max('max_left', max_left), _check_max('max_right', max_right)
    resolved = _resolve(x.device.type, backend)
    if resolved == 'reference':
        return talk1d_reference(x, offsets, max_left, max_right)
    if resolved == 'triton':
        from .talk_triton import talk1d_triton

        return talk1d_triton(x, offsets, max_left, max_right)
    return talk1d_op(x, offsets, max_left, max_right, backend)  # "auto" stays "auto" in exported graphs


def talk2d(
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    max_top: int,
    max_bottom: int,
    backend: Backend = 'auto',
) -> torch.Tensor:
    """TaLK 2-D box op: ``x`` (B, C, H, W), ``offsets`` (B, heads, H, W, 4) [left, right, top, bottom].

    Returns (B, C, H, W). See the module docstring for the conventions.
    """
    _check_inputs(x, offsets, 2)
    maxes = (
        _check_max('max_left', max_left),
        _check_max('max_right', max_right),
        _check_max('max_top', max_top),
        _check_max('max_bottom', max_bottom),
    )
    resolved = _resolve(x.device.type, backend)
    if resolved == 'reference':
        return talk2d_reference(x, offsets, *maxes)
    if resolved == 'triton':
        from .talk_triton import talk2d_triton

        return talk2d_triton(x, offsets, *maxes)[0]
    return talk2d_op(x, offsets, *maxes, backend)[0]


def talk_offsets_dropout(offsets: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each relative offset with probability ``p`` during training, WITHOUT rescaling.

    Unlike ``nn.Dropout`` (which scales kept values by 1 / (1 - p), pushing offsets above 1), offsets stay in
    [0, 1]; a dropped offset collapses that side of the window to the position itself.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f'offsets dropout probability: expected 0 <= p <= 1, got {p}')
    if not training or p == 0.0:
        return offsets
    keep = torch.empty_like(offsets).bernoulli_(1.0 - p)
    return offsets * keep
