"""LightConv / DynamicConv token mixers (Wu et al., ICLR 2019) for ``(B, C, L)`` and ``(B, C, H, W)``.

- :class:`LightConv1d`: parameter ``weight`` of shape ``(num_heads, kernel_size)``; the kernel
  is ``softmax(weight)`` over the taps, shared by the ``dim // num_heads`` consecutive channels
  of each head.
- :class:`DynamicConv1d`: ``weight_linear = nn.Linear(dim, num_heads * kernel_size)`` predicts
  the kernel of every position from that position's features, softmax over the taps. Without a bias by default,
  as in the paper (Eq. 4) and fairseq; ``predictor_bias=True`` adds one (with its weight at zero the module is then a
  LightConv). A checkpoint decides: a layer loading a state dict that has ``weight_linear.bias`` takes it (checkpoints
  written before the default changed load as they were trained), one loading ``weight_linear.weight`` without it drops
  its own.
- DropConnect (``weight_dropout = p``), training only: every entry of the *normalized* kernel
  is zeroed with probability ``p`` and the survivors are divided by ``1 - p`` (as in the
  paper, §3, and ``F.dropout``), so a kernel keeps its expected sum of 1. LightConv draws one
  mask per forward for the ``(H, K)`` kernel, DynamicConv one per ``(b, h, t, k)`` entry.
- ``bias`` (optional, ``(dim,)``) is added to the output of every channel.
- :class:`LightConv2d` / :class:`DynamicConv2d`: ``(dim, input_size, **options)``; they
  flatten ``(B, C, H, W)`` row-major to ``(B, C, H*W)``, apply the 1D mixer and reshape back.
  Parameters have the same names as in the 1D modules (state dicts are interchangeable).

Lag and padding conventions (bidirectional vs causal, even kernel sizes) are those of
:mod:`mrconvnext.ops.light_conv`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_module

from ..ops.checks import check_choice, check_int, check_size2
from ..ops.light_conv import dispatch as light_conv_dispatch
from ..ops.light_conv import light_conv1d
from ..ops.light_conv.api import dynamic_conv_kernel, dynamic_conv_logits, dynamic_mix
from ..ops.map_layout import flatten_map, unflatten_map
from .checks import check_mixer_input, set_engine_of
from .torchscript import ScriptedInPython, python_forward

__all__ = ['LightConv1d', 'DynamicConv1d', 'LightConv2d', 'DynamicConv2d']


def _check_options(cls: str, dim: int, kernel_size: int, num_heads: int, weight_dropout: float) -> None:
    for arg, value in (('dim', dim), ('kernel_size', kernel_size), ('num_heads', num_heads)):
        check_int(cls, arg, value)
    if dim % num_heads != 0:
        raise ValueError(f'{cls}: dim ({dim}) must be divisible by num_heads ({num_heads})')
    if not 0.0 <= weight_dropout < 1.0:
        raise ValueError(f'{cls} expects 0 <= weight_dropout < 1, got {weight_dropout}')


class _HeadConv1d(ScriptedInPython):
    """Shared options, bias, input check and repr of :class:`LightConv1d` and :class:`DynamicConv1d`."""

    def __init__(
        self,
        dim: int,
        kernel_size: int,
        num_heads: int,
        causal: bool = False,
        weight_dropout: float = 0.0,
        bias: bool = False,
    ) -> None:
        super().__init__()
        _check_options(type(self).__name__, dim, kernel_size, num_heads, weight_dropout)
        self.dim = dim
        self.kernel_size = kernel_size
        self.num_heads = num_heads
        self.causal = causal
        self.weight_dropout = float(weight_dropout)
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def _mix(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._mix(check_mixer_input(self, x, 3))

    def extra_repr(self) -> str:
        return (
            f'{self.dim}, kernel_size={self.kernel_size}, num_heads={self.num_heads}, causal={self.causal}, '
            f'weight_dropout={self.weight_dropout}, bias={self.bias is not None}'
        )


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class LightConv1d(_HeadConv1d):
    """LightConv on ``(B, C, L) -> (B, C, L)``: softmax-normalized kernels shared over heads.

    ``engine`` (:func:`~mrconvnext.ops.light_conv.dispatch.light_conv_engine`): ``'auto'`` (the Triton kernels on
    CUDA in batches of at least ``LIGHT_TRITON_MIN_BATCH``, the grouped conv elsewhere), ``'torch'`` (one grouped conv)
    or ``'triton'`` (DynamicConv's channels-last kernels with shared weights).
    """

    def __init__(self, dim: int, kernel_size: int, num_heads: int, engine: str = 'auto', **options) -> None:
        super().__init__(dim, kernel_size, num_heads, **options)
        self.engine = check_choice(type(self).__name__, 'engine', engine, light_conv_dispatch.LIGHT_CONV_ENGINES)
        self.weight = nn.Parameter(torch.empty(num_heads, kernel_size))
        self.reset_parameters()

    def set_engine(self, method: str | None = None, engine: str | None = None) -> None:
        """Choose the implementation (``engine``, as the constructor's keyword; None: keep); one method."""
        set_engine_of(self, light_conv_dispatch.LIGHT_CONV_ENGINES, method, engine)

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def kernel(self) -> torch.Tensor:
        """Normalized (and, in training, DropConnect-ed) kernel ``(H, K)``."""
        w = torch.softmax(self.weight, dim=-1)
        return F.dropout(w, self.weight_dropout, self.training)

    def _mix(self, x: torch.Tensor) -> torch.Tensor:
        return light_conv1d(
            x, self.kernel(), self.bias, num_heads=self.num_heads, causal=self.causal, engine=self.engine
        )


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class DynamicConv1d(_HeadConv1d):
    """DynamicConv on ``(B, C, L) -> (B, C, L)``: a softmax-normalized kernel per position and head.

    ``engine`` (:func:`~mrconvnext.ops.light_conv.dispatch.dynamic_conv_engine`): ``'auto'`` (Triton on CUDA, else PyTorch; the
    ONNX form under ``torch.onnx.export``), ``'torch'``, ``'triton'`` or ``'onnx'``. The Triton engine takes the logits from one GEMM on the ``(B*L, C)`` view of x
    (:meth:`logits`) and fuses softmax, DropConnect and taps (:func:`~mrconvnext.ops.dynamic_softmax_conv1d`): the
    output is then channels-last, like a channels-last input, with no copy of x (under autocast, one cast to its
    dtype, which the logits' GEMM reads too; the output then has that dtype, as a depthwise conv's). DropConnect
    there multiplies by float32 multipliers drawn per ``(b, t, h, k)`` (the same distribution as ``F.dropout`` on
    the kernel, another random stream).
    """

    def __init__(
        self,
        dim: int,
        kernel_size: int,
        num_heads: int,
        engine: str = 'auto',
        predictor_bias: bool = False,
        **options,
    ) -> None:
        super().__init__(dim, kernel_size, num_heads, **options)
        self.engine = check_choice(type(self).__name__, 'engine', engine, light_conv_dispatch.DYNAMIC_CONV_ENGINES)
        self.weight_linear = nn.Linear(dim, num_heads * kernel_size, bias=predictor_bias)

    def set_engine(self, method: str | None = None, engine: str | None = None) -> None:
        """Choose the implementation (``engine``, as the constructor's keyword; None: keep); one method."""
        set_engine_of(self, light_conv_dispatch.DYNAMIC_CONV_ENGINES, method, engine)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # the checkpoint's predictor has a bias or not: the layer follows it (see the module docstring)
        lin, key = self.weight_linear, prefix + 'weight_linear.'
        if key + 'bias' in state_dict and lin.bias is None:
            lin.bias = nn.Parameter(lin.weight.new_zeros(lin.out_features))
        elif key + 'weight' in state_dict and key + 'bias' not in state_dict and lin.bias is not None:
            lin.bias = None
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    @property
    def predictor_bias(self) -> bool:
        return self.weight_linear.bias is not None

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        """Per-position kernels ``(B, H, L, K)`` for ``x (B, C, L)`` (:func:`~mrconvnext.ops.light_conv.api.dynamic_conv_kernel`)."""
        lin = self.weight_linear
        return dynamic_conv_kernel(x, lin.weight, lin.bias, self.num_heads, self.weight_dropout, self.training)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Kernel logits ``(B, L, H, K)`` for ``x (B, C, L)`` (:func:`~mrconvnext.ops.light_conv.api.dynamic_conv_logits`)."""
        return dynamic_conv_logits(x, self.weight_linear.weight, self.weight_linear.bias, self.num_heads)

    def _mix(self, x: torch.Tensor) -> torch.Tensor:
        lin = self.weight_linear
        return dynamic_mix(x, lin.weight, lin.bias, self.num_heads, self.bias, causal=self.causal,
                           weight_dropout=self.weight_dropout, training=self.training, engine=self.engine)  # fmt: skip


class _RowMajor2d:
    """Mixin: ``(B, C, H, W)`` flattened row-major to ``(B, C, H*W)``, mixed in 1D, reshaped back.

    ``input_size`` is the nominal ``(H, W)`` (kept as an attribute); the mixer itself is
    length-agnostic, so other sizes are accepted too. Defaults: ``kernel_size=31, num_heads=8``.
    """

    def __init__(
        self,
        dim: int,
        input_size: tuple[int, int],
        kernel_size: int = 31,
        num_heads: int = 8,
        causal: bool = False,
        weight_dropout: float = 0.0,
        bias: bool = False,
        **options,
    ) -> None:
        super().__init__(
            dim, kernel_size, num_heads, causal=causal, weight_dropout=weight_dropout, bias=bias, **options
        )
        self.input_size = check_size2(type(self).__name__, 'input_size', input_size)

    # the ONNX form reads the flattened map channels-last (DynamicConv's bands): flatten_map / unflatten_map then meet
    # its transposes and the block's with their inverses; LightConv's grouped Conv reads the map as it lies
    _channels_last_onnx = False

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = check_mixer_input(self, x, 4).shape
        if self._channels_last_onnx:
            return unflatten_map(self._mix(flatten_map(x)), (H, W))
        return self._mix(x.reshape(B, C, H * W)).reshape(B, C, H, W)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, input_size={self.input_size}'


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class LightConv2d(_RowMajor2d, LightConv1d):
    """LightConv on ``(B, C, H, W)`` flattened row-major (see :class:`_RowMajor2d`)."""


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class DynamicConv2d(_RowMajor2d, DynamicConv1d):
    """DynamicConv on ``(B, C, H, W)`` flattened row-major (see :class:`_RowMajor2d`)."""

    _channels_last_onnx = True
