"""The Triton engine of the TaLK operators: the ``triton_op``s (1-D and 2-D, forward and backward) and the choice of
kernel variant for each call. The kernels live by algorithm:

- :mod:`.triton_table`: channels-first maps. Prefix tables (1-D) or integral images (2-D) by the scans of
  :mod:`.triton_scan`, then one program per (batch, head, block of positions) gathers the table at the window edges
  for each of the head's channels; the backward adds ``dP`` atomically and takes its suffix sum.
- :mod:`.triton_channels_last`: channels-last maps, as ConvNeXt blocks hand them over, with a head's channels
  gathered as one vector.
- :mod:`.triton_plane`: channels-first rows and maps of at most :data:`PLANE_MAX_LENGTH` positions in one launch and
  no table (the windows as a weight matrix; no atomics).
- :mod:`.triton_common`: the window-edge rules and the exact normalizer they all use.

The conventions and per-element math are those of :mod:`mrconvnext.ops.talk` (the specification) and
``kernels/talk/talk_math.h`` (the CPU kernel): window edges ``(k, f, live)`` from ``start``/``end`` edge rules,
prefix tables with a zero first entry, the one-sided derivative of a growing window at integer boundaries, NaN
offsets propagating through the fractions. Positions, fractions and prefix tables are float32 (float64 for float64
inputs); indices are int64.

Devices
    CUDA tensors; CPU tensors when ``TRITON_INTERPRET=1`` was set before these modules were first imported (Triton's
    interpreter runs the same kernels with NumPy; used by the tests on machines without a GPU). Under the
    interpreter the operators run eagerly only: ``torch.compile`` and fake tensors need compiled kernels.
"""

import torch
from torch.library import triton_op

from .autograd import register_talk1d_autograd, register_talk2d_autograd
from .checks import acc_dtype, is_channels_last_1d, talk1d_out
from .flops import register_talk_flops
from .triton_channels_last import integral_image_cl, talk1d_cl, talk1d_cl_backward, talk2d_cl, talk2d_cl_backward
from .triton_common import interpreted
from .triton_plane import talk1d_plane, talk1d_plane_backward, talk2d_plane, talk2d_plane_backward
from .triton_table import integral_image, talk1d_table, talk1d_table_backward, talk2d_table, talk2d_table_backward

__all__ = [
    'PLANE_MAX_LENGTH',
    'interpreted',
    'plane_applies',
    'talk1d_triton',
    'talk1d_triton_backward',
    'talk2d_triton',
    'talk2d_triton_backward',
    'talk2d_triton_table',
    'talk2d_tables',
    'saves_input',
]

# Channels-first 1-D rows and 2-D maps of at most this many positions (ConvNeXt-T's stages 3 and 4 at 224 px: 196,
# 49) run in one launch, an (image, head) plane per program, with no table and no atomics (:mod:`.triton_plane`);
# larger ones take the scans and the gathers. Channels-last maps (what ConvNeXt blocks hand over) take the
# channels-last scans and gathers at every size: in the two H200 profiles of TaLK-ConvNeXt-T (eval and training step,
# batch 128, bf16, docs/gpu/h200_2026-11-26b/call1 and h200_2026-11-27/call1, the rows' top kernels) the plane
# kernels took 53 us (1-D forward), 86 (1-D backward), 113 (2-D forward) and 310 (2-D backward) per million
# elements at stages 3-4, the channels-last scans and gathers 6.8, 19, 9.6 and 32 at stages 1-2 (not yet timed at
# stages 3-4 on a GPU).
PLANE_MAX_LENGTH = 256


def plane_applies(x: torch.Tensor, heads: int) -> bool:
    """Whether ``x (B, C, L)`` (a 2-D map flattened) takes the one-launch plane kernels: a channels-first map of at
    most :data:`PLANE_MAX_LENGTH` positions in float32 accumulation (float16 / bfloat16 / float32 maps), heads of at
    most 64 channels."""
    B, C, L = x.shape
    if is_channels_last_1d(x):
        return False
    return acc_dtype(x.dtype) == torch.float32 and L <= PLANE_MAX_LENGTH and C // heads <= 64


def _is_channels_last_2d(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


@triton_op('mrconvnext::talk1d_triton', mutates_args=())
def talk1d_triton(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
    """TaLK 1-D forward (see :func:`mrconvnext.ops.talk1d`): x (B, C, L) any strides -> y laid out like x."""
    heads = offsets.shape[1]
    acc = acc_dtype(x.dtype)
    y = talk1d_out(x)
    if x.numel() == 0:
        return y
    if plane_applies(x, heads):
        return talk1d_plane(x, offsets.to(acc), max_left, max_right, y)
    if is_channels_last_1d(x):
        return talk1d_cl(x, offsets.to(acc), max_left, max_right, y)
    return talk1d_table(x, offsets.to(acc), max_left, max_right, y)


@triton_op('mrconvnext::talk1d_triton_backward', mutates_args=())
def talk1d_triton_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    need_dx: bool,
    need_doff: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, C, L) laid out like x, doff in offsets' dtype)`` of :func:`talk1d_triton`; empty when not needed."""
    heads = offsets.shape[1]
    if x.numel() > 0 and (need_dx or need_doff) and plane_applies(x, heads):
        return talk1d_plane_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff)
    if is_channels_last_1d(x) and x.numel() > 0 and (need_dx or need_doff):
        return talk1d_cl_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff)
    return talk1d_table_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff)


def saves_input(x: torch.Tensor) -> bool:
    """Whether :func:`talk2d_triton` leaves its table out for ``x``, the backward rebuilding it from x itself
    (:func:`talk2d_triton_table`): channels-last maps, what ConvNeXt blocks hand over. x is never larger than the
    table (``(H + 1) (W + 1) C`` per image in float32, or float64 for float64 x); where the 2-D TaLK layer's offsets'
    projection saves x itself (a float32 map with trainable projection weights, as the ConvNeXt blocks' stream under
    autocast) it costs no memory at all (TaLK-ConvNeXt-2D-T at batch 128 held about 1.1 GiB of tables over its 18
    blocks)."""
    return _is_channels_last_2d(x) and x.numel() > 0


@triton_op('mrconvnext::talk2d_triton', mutates_args=())
def talk2d_triton(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """TaLK 2-D forward: ``(y (B, C, H, W), P)``, what the backward needs: the integral image ``(B, C, H + 1, W + 1)``
    in the accumulation dtype; where :func:`plane_applies` (channels-first maps of at most :data:`PLANE_MAX_LENGTH`
    positions), which the one-launch plane kernels compute without a table, x itself in float32 ``(B, C, H, W)``;
    where :func:`saves_input` (channels-last maps), an empty ``(0,)`` tensor: the autograd saves x and rebuilds the
    table (:func:`talk2d_triton_table`) for the backward. y is laid out like x (channels-last or contiguous)."""
    maxes = (max_left, max_right, max_top, max_bottom)
    if x.numel() > 0 and plane_applies(x.flatten(2), offsets.shape[1]):
        return talk2d_plane(x, offsets.to(torch.float32), maxes)
    if saves_input(x):
        y, _ = talk2d_cl(x, offsets.to(acc_dtype(x.dtype)), maxes)
        return y, x.new_empty(0, dtype=acc_dtype(x.dtype))
    return talk2d_tables(x, offsets, *maxes)


@triton_op('mrconvnext::talk2d_triton_table', mutates_args=())
def talk2d_triton_table(x: torch.Tensor) -> torch.Tensor:
    """The integral image :func:`talk2d_tables` returns for ``x (B, C, H, W)``: ``(B, C, H + 1, W + 1)`` in the
    accumulation dtype, channels-last for a channels-last x (a view of a contiguous ``(B, H + 1, W + 1, C)``),
    contiguous otherwise; the backward's table where the forward saved x (:func:`saves_input`)."""
    if _is_channels_last_2d(x) and x.numel() > 0:
        return integral_image_cl(x, acc_dtype(x.dtype)).permute(0, 3, 1, 2)
    return integral_image(x, acc_dtype(x.dtype))


def talk2d_tables(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`talk2d_triton` through the integral image at every size (the per-device operator's CUDA kernel, whose
    second output is always the table)."""
    acc = acc_dtype(x.dtype)
    if _is_channels_last_2d(x) and x.numel() > 0:
        return talk2d_cl(x, offsets.to(acc), (max_left, max_right, max_top, max_bottom))
    return talk2d_table(x, offsets, max_left, max_right, max_top, max_bottom)


@triton_op('mrconvnext::talk2d_triton_backward', mutates_args=())
def talk2d_triton_backward(
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
    """``(dx (B, C, H, W), doff in offsets' dtype)`` of :func:`talk2d_triton` from the integral image (its second
    output, or for a channels-last x the table :func:`talk2d_triton_table` rebuilds), or x for the plane kernels; dx
    is laid out like the forward's x."""
    maxes = (max_left, max_right, max_top, max_bottom)
    if P.shape[-2:] == grad_y.shape[-2:] and grad_y.numel() > 0 and (need_dx or need_doff):  # the plane kernels' x
        return talk2d_plane_backward(grad_y, P, offsets, maxes, need_dx, need_doff)
    if _is_channels_last_2d(P) and grad_y.numel() > 0 and (need_dx or need_doff):
        return talk2d_cl_backward(grad_y, P, offsets, maxes, need_dx, need_doff)
    return talk2d_table_backward(grad_y, P, offsets, *maxes, need_dx, need_doff)


# the same autograd as the other TaLK operators (autograd.py): saved tensors, backward operator, input gradients
register_talk1d_autograd(talk1d_triton, talk1d_triton_backward)
register_talk2d_autograd(talk2d_triton, talk2d_triton_backward, talk2d_triton_table)
register_talk_flops('_triton')
