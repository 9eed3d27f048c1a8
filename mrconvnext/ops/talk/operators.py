"""The TaLK operators (``torch.library``), forward and backward, 1-D and 2-D.

``mrconvnext::talk1d`` / ``talk2d`` (and their backwards) dispatch per device, as ATen's operators do: the native C++
kernel on the CPU (the ``'torch'`` engine, with a one-time warning, where it does not build), the Triton kernels on
CUDA (``'torch'`` where Triton is missing), the fused PyTorch engine on any other device. Exported graphs hold these
and run on either device. ``mrconvnext::talk1d_torch`` / ``talk2d_torch`` are the fused PyTorch engine on every
device (``engine='torch'``); the Triton engine's own operators are in :mod:`.engine_triton`.

Signatures: ``talk1d(x, offsets, max_left, max_right) -> y`` (y laid out like a flattened channels-last x, else
contiguous); ``talk2d(x, offsets, max_left, max_right, max_top, max_bottom) -> (y, P)``, ``P (B, C, H + 1, W + 1)``
the integral image in the accumulation dtype (kept for the backward). Backwards return ``(dx, doff)``, an empty
tensor for one not needed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import availability
from . import dispatch
from .autograd import register_talk1d_autograd, register_talk2d_autograd
from .checks import acc_dtype, is_channels_last_1d, talk1d_out
from .engine_torch import TORCH_ENGINE
from .flops import register_talk_flops

__all__ = [
    'talk1d',
    'talk1d_backward',
    'talk2d',
    'talk2d_backward',
    'talk1d_torch',
    'talk1d_torch_backward',
    'talk2d_torch',
    'talk2d_torch_backward',
    'talk1d_on_cpu',
    'talk1d_backward_on_cpu',
    'talk2d_on_cpu',
    'talk2d_backward_on_cpu',
    'talk1d_on_cuda',
    'talk1d_backward_on_cuda',
    'talk2d_on_cuda',
    'talk2d_backward_on_cuda',
]


def _cpu_engine():
    """The native extension where it builds, else the fused PyTorch engine (after one warning)."""
    native = availability.load_native(availability.TALK_EXT)
    if native is None:
        dispatch.talk_engine('cpu')  # warns once, saying why
        return TORCH_ENGINE
    return native


def _cuda_engine():
    """The Triton engine's module where Triton runs, else None (the fused PyTorch engine, after one warning)."""
    if dispatch.talk_engine('cuda') != 'triton':
        return None
    from . import engine_triton

    return engine_triton


def _empty_if_none(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return like.new_empty(0) if t is None else t


# ---------------------------------------------------------------------------------------- engine calls


def _forward_1d(engine, x, offsets, max_left, max_right):
    off = offsets.to(acc_dtype(x.dtype))
    if is_channels_last_1d(x):
        if hasattr(engine, 'talk1d_forward_cl'):
            # the CPU kernel reads channels-last maps and strided offsets (e.g. a view of a channels-last projection)
            return engine.talk1d_forward_cl(x.transpose(1, 2), off, max_left, max_right).transpose(1, 2)
        return talk1d_out(x).copy_(engine.talk1d_forward(x.contiguous(), off.contiguous(), max_left, max_right))
    return engine.talk1d_forward(x.contiguous(), off.contiguous(), max_left, max_right)


def _backward_1d(engine, grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    off = offsets.to(acc_dtype(x.dtype)).contiguous()
    dx, doff = engine.talk1d_backward(
        grad_y.to(x.dtype).contiguous(), x.contiguous(), off, max_left, max_right, need_dx, need_doff
    )
    return _empty_if_none(dx, x), _empty_if_none(None if doff is None else doff.to(offsets.dtype), offsets)


def _forward_2d(engine, x, offsets, *maxes):
    off = offsets.to(acc_dtype(x.dtype)).contiguous()
    y, P = engine.talk2d_forward(x.contiguous(), off, *maxes)
    return y, P  # a tuple: the native kernels return a list, which the operator's autograd would not wrap


def _backward_2d(engine, grad_y, P, offsets, *rest):
    off = offsets.to(P.dtype).contiguous()
    dx, doff = engine.talk2d_backward(grad_y.contiguous(), P, off, *rest)
    return _empty_if_none(dx, grad_y), _empty_if_none(None if doff is None else doff.to(offsets.dtype), offsets)


# ------------------------------------------------------------------------------------------ definitions


def _define_1d(name: str, engine: Callable[[], object]):
    """``mrconvnext::{name}`` and its backward, running ``engine()`` (fake implementations, autograd)."""

    def forward(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
        return _forward_1d(engine(), x, offsets, max_left, max_right)

    def backward(
        grad_y: torch.Tensor,
        x: torch.Tensor,
        offsets: torch.Tensor,
        max_left: int,
        max_right: int,
        need_dx: bool,
        need_doff: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _backward_1d(engine(), grad_y, x, offsets, max_left, max_right, need_dx, need_doff)

    fwd = torch.library.custom_op(f'mrconvnext::{name}', forward, mutates_args=())
    bwd = torch.library.custom_op(f'mrconvnext::{name}_backward', backward, mutates_args=())
    fwd.register_fake(lambda x, offsets, max_left, max_right: talk1d_out(x))

    @bwd.register_fake
    def _(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else x.new_empty(0)
        doff = torch.empty_like(offsets, memory_format=torch.contiguous_format) if need_doff else offsets.new_empty(0)
        return dx, doff

    register_talk1d_autograd(fwd, bwd)
    return fwd, bwd


def _define_2d(name: str, engine: Callable[[], object]):
    """``mrconvnext::{name}`` (2-D) and its backward, running ``engine()``."""

    def forward(
        x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _forward_2d(engine(), x, offsets, max_left, max_right, max_top, max_bottom)

    def backward(
        grad_y: torch.Tensor,
        P: torch.Tensor,
        offsets: torch.Tensor,
        max_left: int,
        max_right: int,
        max_top: int,
        max_bottom: int,
        need_dx: bool,
        need_doff: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        maxes = (max_left, max_right, max_top, max_bottom)
        return _backward_2d(engine(), grad_y, P, offsets, *maxes, need_dx, need_doff)

    fwd = torch.library.custom_op(f'mrconvnext::{name}', forward, mutates_args=())
    bwd = torch.library.custom_op(f'mrconvnext::{name}_backward', backward, mutates_args=())

    @fwd.register_fake
    def _(x, offsets, max_left, max_right, max_top, max_bottom):
        B, C, H, W = x.shape
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return y, x.new_empty((B, C, H + 1, W + 1), dtype=acc_dtype(x.dtype))

    @bwd.register_fake
    def _(grad_y, P, offsets, max_left, max_right, max_top, max_bottom, need_dx, need_doff):
        dx = torch.empty(grad_y.shape, dtype=grad_y.dtype, device=grad_y.device) if need_dx else grad_y.new_empty(0)
        doff = torch.empty_like(offsets, memory_format=torch.contiguous_format) if need_doff else offsets.new_empty(0)
        return dx, doff

    register_talk2d_autograd(fwd, bwd)
    return fwd, bwd


def _torch_engine():
    return TORCH_ENGINE


talk1d, talk1d_backward = _define_1d('talk1d', _torch_engine)
talk2d, talk2d_backward = _define_2d('talk2d', _torch_engine)
talk1d_torch, talk1d_torch_backward = _define_1d('talk1d_torch', _torch_engine)
talk2d_torch, talk2d_torch_backward = _define_2d('talk2d_torch', _torch_engine)

# ------------------------------------------------------------------------------ per-device implementations
# Public so that tests can run the CUDA ones on CPU tensors under Triton's interpreter.


def talk1d_on_cpu(x, offsets, max_left, max_right):
    return _forward_1d(_cpu_engine(), x, offsets, max_left, max_right)


def talk1d_backward_on_cpu(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    return _backward_1d(_cpu_engine(), grad_y, x, offsets, max_left, max_right, need_dx, need_doff)


def talk2d_on_cpu(x, offsets, *maxes):
    return _forward_2d(_cpu_engine(), x, offsets, *maxes)


def talk2d_backward_on_cpu(grad_y, P, offsets, *rest):
    return _backward_2d(_cpu_engine(), grad_y, P, offsets, *rest)


def talk1d_on_cuda(x, offsets, max_left, max_right):
    triton = _cuda_engine()
    if triton is None:
        return _forward_1d(TORCH_ENGINE, x, offsets, max_left, max_right)
    return triton.talk1d_triton(x, offsets, max_left, max_right)


def talk1d_backward_on_cuda(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    triton = _cuda_engine()
    if triton is None:
        return _backward_1d(TORCH_ENGINE, grad_y, x, offsets, max_left, max_right, need_dx, need_doff)
    dx, doff = triton.talk1d_triton_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff)
    return dx.contiguous(), doff  # the operator's dx is contiguous (its fake says so); Triton's follows x's layout


def talk2d_on_cuda(x, offsets, *maxes):
    triton = _cuda_engine()
    if triton is None:
        return _forward_2d(TORCH_ENGINE, x, offsets, *maxes)
    y, P = triton.talk2d_tables(x, offsets, *maxes)  # the table at every size: the operator's second output
    return y.contiguous(), P.contiguous()  # as the operator's fake says; Triton's follow a channels-last x


def talk2d_backward_on_cuda(grad_y, P, offsets, *rest):
    triton = _cuda_engine()
    if triton is None:
        return _backward_2d(TORCH_ENGINE, grad_y, P, offsets, *rest)
    dx, doff = triton.talk2d_triton_backward(grad_y, P, offsets, *rest)
    return dx.contiguous(), doff


for _op, _impls in (
    (talk1d, (talk1d_on_cpu, talk1d_on_cuda)),
    (talk1d_backward, (talk1d_backward_on_cpu, talk1d_backward_on_cuda)),
    (talk2d, (talk2d_on_cpu, talk2d_on_cuda)),
    (talk2d_backward, (talk2d_backward_on_cpu, talk2d_backward_on_cuda)),
):
    _op.register_kernel('cpu')(_impls[0])
    _op.register_kernel('cuda')(_impls[1])

register_talk_flops('')
register_talk_flops('_torch')
