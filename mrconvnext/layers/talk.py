"""TaLK (time-aware large kernel) convolution modules for ``(B, C, L)`` and ``(B, C, H, W)``.

Each module owns ``offset_proj = nn.Linear(dim, 2 * num_heads)`` (``4 * num_heads`` for the 2-D box
variant) applied at every position, then ``sigmoid`` gives relative offsets in [0, 1], then offsets dropout
(training only, zeroing without rescaling), then the functional op of :mod:`mrconvnext.ops.talk`.
Offset features ``h * 2 + side`` (``h * 4 + side`` in 2-D) of the linear output belong to head ``h`` and side
``(left, right)`` / ``(left, right, top, bottom)``.

The offset projection runs in float32 at least (autocast disabled) because the absolute positions
``i -/+ offset * max`` need more precision than float16/bfloat16 give for large maxima.

Maximum offsets left as ``None`` default to half the extent of the nominal size (``seq_len // 2``,
``W // 2`` / ``H // 2``, ``H * W // 2`` for the flattened variant); e.g. a 7x7 map gets a box of at most
7x7, like ConvNeXt's depthwise conv. ``seq_len`` / ``input_size`` only set these defaults: any input size
works at run time.

The maxima define the computation, so they are state: the persistent int64 buffer ``max_offsets`` holds them
(``[left, right]``, 2-D ``[left, right, top, bottom]``), and loading a state dict sets the layer's maxima to the
checkpoint's. A checkpoint trained at one size therefore computes the same windows in a layer built at another size.
State dicts written before the buffer existed load with the layer's own maxima, as they always did.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_module

from ..ops import engines
from ..ops.checks import autocast_off, check_choice, check_int, check_size2
from ..ops.map_layout import flatten_map, unflatten_map
from ..ops.talk import MAX_OFFSET, talk1d, talk2d, talk_offsets_dropout
from ..ops.talk import dispatch as talk_dispatch
from .checks import check_mixer_input, set_engine_of
from .torchscript import ScriptedInPython, python_forward

__all__ = ['TaLKConv1d', 'TaLKConv2d', 'TaLKConvFlat2d']


def _resolve_max(cls: str, name: str, value: int | None, extent: int | None) -> int:
    if value is None:
        if extent is None:
            raise ValueError(f'{cls}: {name}=None needs the nominal size (seq_len / input_size) for its default')
        return extent // 2
    return check_int(cls, name, value, minimum=0, maximum=MAX_OFFSET)


def _check_common(cls: str, dim: int, num_heads: int, offsets_dropout: float, engine: str, backend: str | None) -> str:
    """Checks the common arguments; returns the engine (``backend`` is its deprecated spelling)."""
    check_int(cls, 'dim', dim)
    check_int(cls, 'num_heads', num_heads)
    if dim % num_heads != 0:
        raise ValueError(f'{cls}: num_heads ({num_heads}) must divide dim ({dim})')
    if not 0.0 <= offsets_dropout <= 1.0:
        raise ValueError(f'{cls}: offsets_dropout must be in [0, 1], got {offsets_dropout}')
    if backend is not None:
        return engines.from_backend(cls, 'talk', backend, 'auto', engine)[1]
    return check_choice(cls, 'engine', engine, talk_dispatch.TALK_ENGINES)


def _predict_offsets(proj: nn.Linear, x: torch.Tensor, heads: int) -> torch.Tensor:
    """``sigmoid(proj(x))`` at every position of ``x (B, C, L)`` -> ``(B, heads, L, n)``, ``n = out / heads``
    (output feature ``h n + i`` at ``[:, h, :, i]``).

    In float32 or wider, outside autocast. Computed in ``x``'s layout, never copying ``x``: a plain
    ``F.linear`` when ``x`` is laid out channels-last (a flattened channels-last map, as in the ConvNeXt
    blocks, and the map of :func:`~mrconvnext.ops.map_layout.flatten_map` under export; the result is then a view of a
    ``(B, L, heads, n)`` tensor, which the CPU kernel reads in place and the ONNX form's transpose cancels), else a
    matmul on the channels-first layout.
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    bias = None if proj.bias is None else proj.bias.to(dtype)
    B, _, L = x.shape
    with autocast_off(x.device.type):
        x_cl = x.transpose(1, 2)
        if x_cl.is_contiguous() and not x.is_contiguous():
            # on the (B L, C) rows: ONNX exports a 2-D linear as one Gemm with its bias, a 3-D one as a MatMul and
            # an Add that ONNX Runtime broadcasts one run of `out` values at a time (twice the time at stage 1)
            logits = F.linear(x_cl.to(dtype).reshape(-1, x.shape[1]), proj.weight.to(dtype), bias)  # (B L, out)
            return torch.sigmoid(logits).view(B, L, heads, -1).transpose(1, 2)
        logits = torch.matmul(proj.weight.to(dtype), x.to(dtype))
        if bias is not None:
            logits = logits + bias.unsqueeze(-1)
    return torch.sigmoid(logits).view(B, heads, -1, L).transpose(2, 3)


class _MaximaInState(ScriptedInPython):
    """The TaLK layers' base: keeps the maxima named by ``_MAXIMA`` in the buffer ``max_offsets``, takes them from a
    loaded state dict, and sets the engine."""

    _MAXIMA: tuple[str, ...] = ()

    def _record_maxima(self) -> None:
        self.register_buffer('max_offsets', torch.tensor(self._maxima(), dtype=torch.int64))

    def _maxima(self) -> list[int]:
        return [getattr(self, n) for n in self._MAXIMA]

    def set_engine(self, method: str | None = None, engine: str | None = None) -> None:
        """Choose the implementation (``engine``, as the constructor's keyword; None: keep). TaLK has one method."""
        set_engine_of(self, talk_dispatch.TALK_ENGINES, method, engine)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        key = prefix + 'max_offsets'
        if key not in state_dict:  # written before the maxima were recorded: the layer's own
            state_dict[key] = torch.tensor(self._maxima(), dtype=torch.int64)
        values = state_dict[key]
        cls = type(self).__name__
        if not isinstance(values, torch.Tensor) or values.shape != (len(self._MAXIMA),) or values.is_floating_point():
            got = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
            error_msgs.append(f'{cls} {prefix!r}: max_offsets must be {len(self._MAXIMA)} integers, got {got}')
            return
        try:
            maxima = [check_int(cls, n, int(v), minimum=0, maximum=MAX_OFFSET) for n, v in zip(self._MAXIMA, values)]
        except ValueError as e:
            error_msgs.append(f'{prefix!r}: {e}')
            return
        if getattr(self, 'causal', False) and maxima[1] != 0:
            error_msgs.append(f'{cls} {prefix!r}: a causal layer needs max_right = 0, the state dict has {maxima[1]}')
            return
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for name, value in zip(self._MAXIMA, maxima):
            setattr(self, name, value)


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class TaLKConv1d(_MaximaInState):
    """TaLK convolution over ``(B, C, L) -> (B, C, L)`` (paper Sec. 3; causal = decoder, ``max_right = 0``)."""

    _MAXIMA = ('max_left', 'max_right')

    def __init__(
        self,
        dim: int,
        seq_len: int | None = None,
        num_heads: int = 1,
        max_left: int | None = None,
        max_right: int | None = None,
        causal: bool = False,
        offsets_dropout: float = 0.0,
        engine: str = 'auto',
        backend: str | None = None,
    ) -> None:
        super().__init__()
        cls = type(self).__name__
        engine = _check_common(cls, dim, num_heads, offsets_dropout, engine, backend)
        if seq_len is not None:
            check_int(cls, 'seq_len', seq_len)
        if causal:
            if max_right not in (None, 0):
                raise ValueError(f'{cls}: causal=True needs max_right=0 (or None), got {max_right}')
            max_right = 0
        self.dim, self.seq_len, self.num_heads, self.causal = dim, seq_len, num_heads, causal
        self.max_left = _resolve_max(cls, 'max_left', max_left, seq_len)
        self.max_right = _resolve_max(cls, 'max_right', max_right, seq_len)
        self.offsets_dropout = float(offsets_dropout)
        self.engine = engine
        self.offset_proj = nn.Linear(dim, 2 * num_heads)
        self._record_maxima()

    def compute_offsets(self, x: torch.Tensor) -> torch.Tensor:
        """Relative offsets ``(B, num_heads, L, 2)`` [left, right] in [0, 1] for input ``(B, C, L)``."""
        off = _predict_offsets(self.offset_proj, x, self.num_heads)  # (B, heads, L, 2)
        return talk_offsets_dropout(off, self.offsets_dropout, self.training)

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, L) -> (B, C, L)``."""
        check_mixer_input(self, x, 3)
        return talk1d(x, self.compute_offsets(x), self.max_left, self.max_right, engine=self.engine)

    def extra_repr(self) -> str:
        return (
            f'dim={self.dim}, num_heads={self.num_heads}, max_left={self.max_left}, max_right={self.max_right}, '
            f'causal={self.causal}, offsets_dropout={self.offsets_dropout}, engine={self.engine!r}'
        )


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class TaLKConvFlat2d(TaLKConv1d):
    """TaLK 1-D over the row-major flattened map: ``(B, C, H, W) -> (B, C, H, W)``.

    Windows run along the flattened sequence and wrap across image rows (unlike :class:`TaLKConv2d`).
    Options as :class:`TaLKConv1d` with ``seq_len = H * W``.
    """

    def __init__(self, dim: int, input_size: tuple[int, int], **options) -> None:
        H, W = input_size
        super().__init__(dim, H * W, **options)
        self.input_size = (H, W)

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W) -> (B, C, H, W)``."""
        check_mixer_input(self, x, 4)
        return unflatten_map(super().forward(flatten_map(x)), x.shape[-2:])


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class TaLKConv2d(_MaximaInState):
    """2-D box TaLK convolution: ``(B, C, H, W) -> (B, C, H, W)``; boxes respect image rows and columns.

    The box of pixel (i, j) spans rows ``[i - o_t * max_top, i + o_b * max_bottom]`` and columns
    ``[j - o_l * max_left, j + o_r * max_right]`` (clamped), normalized by the maximum box area.
    ``causal=True`` (``max_right = max_bottom = 0``): boxes reach up and left only, so every pixel they cover comes
    at or before (i, j) in raster order (our extension of the paper's decoder windows to 2-D).
    """

    _MAXIMA = ('max_left', 'max_right', 'max_top', 'max_bottom')

    def __init__(
        self,
        dim: int,
        input_size: tuple[int, int],
        num_heads: int = 1,
        max_left: int | None = None,
        max_right: int | None = None,
        max_top: int | None = None,
        max_bottom: int | None = None,
        causal: bool = False,
        offsets_dropout: float = 0.0,
        engine: str = 'auto',
        backend: str | None = None,
    ) -> None:
        super().__init__()
        cls = type(self).__name__
        engine = _check_common(cls, dim, num_heads, offsets_dropout, engine, backend)
        H, W = check_size2(cls, 'input_size', input_size)
        if causal:
            if max_right not in (None, 0) or max_bottom not in (None, 0):
                raise ValueError(
                    f'{cls}: causal=True needs max_right=0 and max_bottom=0 (or None), got {max_right}, {max_bottom}'
                )
            max_right = max_bottom = 0
        self.dim, self.input_size, self.num_heads, self.causal = dim, (H, W), num_heads, causal
        self.max_left = _resolve_max(cls, 'max_left', max_left, W)
        self.max_right = _resolve_max(cls, 'max_right', max_right, W)
        self.max_top = _resolve_max(cls, 'max_top', max_top, H)
        self.max_bottom = _resolve_max(cls, 'max_bottom', max_bottom, H)
        self.offsets_dropout = float(offsets_dropout)
        self.engine = engine
        self.offset_proj = nn.Linear(dim, 4 * num_heads)
        self._record_maxima()

    def compute_offsets(self, x: torch.Tensor) -> torch.Tensor:
        """Relative offsets ``(B, num_heads, H, W, 4)`` [left, right, top, bottom] for input ``(B, C, H, W)``."""
        B, _, H, W = x.shape
        off = _predict_offsets(self.offset_proj, x.reshape(B, -1, H * W), self.num_heads)  # (B, heads, H W, 4)
        off = off.view(B, self.num_heads, H, W, 4)
        return talk_offsets_dropout(off, self.offsets_dropout, self.training)

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W) -> (B, C, H, W)``."""
        check_mixer_input(self, x, 4)
        off = self.compute_offsets(x)
        return talk2d(x, off, self.max_left, self.max_right, self.max_top, self.max_bottom, engine=self.engine)

    def extra_repr(self) -> str:
        return (
            f'dim={self.dim}, input_size={self.input_size}, num_heads={self.num_heads}, '
            f'max_left={self.max_left}, max_right={self.max_right}, max_top={self.max_top}, '
            f'max_bottom={self.max_bottom}, causal={self.causal}, offsets_dropout={self.offsets_dropout}, '
            f'engine={self.engine!r}'
        )
