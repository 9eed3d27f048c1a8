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

Engines (``engine=``, resolved by :func:`mrconvnext.ops.talk.dispatch.talk_engine`): ``'reference'`` (cumsum + gather +
autograd: the specification, :mod:`.reference`), ``'torch'`` (fused PyTorch ops, O(B*C*L) memory,
:mod:`.engine_torch`), ``'native'`` (the C++ CPU kernel from ``kernels/talk``), ``'triton'`` (:mod:`.engine_triton`:
CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``), ``'onnx'`` (:mod:`.engine_onnx`: standard ops for ONNX
runtimes, inference only) and ``'auto'`` (``'onnx'`` while ``torch.onnx.export`` traces, else Triton on CUDA, native
on the CPU, else ``'torch'`` with a one-time warning). ``'auto'`` and ``'native'`` call the per-device operators of
:mod:`.operators`.
"""

from __future__ import annotations

import torch

from .. import engines
from . import dispatch, operators
from .checks import check_inputs, check_maxima
from .engine_onnx import talk1d_onnx, talk2d_onnx
from .reference import talk1d_reference, talk2d_reference

__all__ = ['talk1d', 'talk2d', 'talk_offsets_dropout']


def _engine(x: torch.Tensor, engine: str, backend: str | None) -> tuple[str, str]:
    """``(requested, resolved)`` engine: ``'torch'`` asked for runs the ``*_torch`` operators on every device,
    while ``'auto'`` and ``'native'`` call the per-device operators."""
    if backend is not None:
        engine = engines.from_backend('talk', 'talk', backend, 'auto', engine)[1]
    return engine, dispatch.talk_engine_constant(x.device.type, engine)


def talk1d(
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    engine: str = 'auto',
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """TaLK 1-D: ``x`` (B, C, L), ``offsets`` (B, heads, L, 2) [left, right] in [0, 1] -> (B, C, L).

    See the module docstring for the conventions and engines (``backend=`` is the deprecated spelling of
    ``engine=``). Raises TypeError / ValueError on bad inputs, RuntimeError for an engine that cannot run here.
    """
    check_inputs(x, offsets, 1)
    max_left, max_right = check_maxima(max_left, max_right)
    engine, resolved = _engine(x, engine, backend)
    if resolved == 'reference':
        return talk1d_reference(x, offsets, max_left, max_right)
    if resolved == 'onnx':
        return talk1d_onnx(x, offsets, max_left, max_right)
    if resolved == 'triton':
        from .engine_triton import talk1d_triton

        return talk1d_triton(x, offsets, max_left, max_right)
    op = operators.talk1d_torch if engine == 'torch' else operators.talk1d
    return op(x, offsets, max_left, max_right)


def talk2d(
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    max_top: int,
    max_bottom: int,
    engine: str = 'auto',
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """TaLK 2-D box op: ``x`` (B, C, H, W), ``offsets`` (B, heads, H, W, 4) [left, right, top, bottom].

    Returns (B, C, H, W). See the module docstring for the conventions and engines.
    """
    check_inputs(x, offsets, 2)
    maxes = check_maxima(max_left, max_right, max_top, max_bottom)
    engine, resolved = _engine(x, engine, backend)
    if resolved == 'reference':
        return talk2d_reference(x, offsets, *maxes)
    if resolved == 'onnx':
        return talk2d_onnx(x, offsets, *maxes)
    if resolved == 'triton':
        from .engine_triton import talk2d_triton

        return talk2d_triton(x, offsets, *maxes)[0]
    op = operators.talk2d_torch if engine == 'torch' else operators.talk2d
    return op(x, offsets, *maxes)[0]


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
