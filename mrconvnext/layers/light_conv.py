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

from ..ops import engines
from ..ops.checks import autocast_dtype, check_choice, check_int, check_size2
from ..ops.light_conv import dynamic_conv1d, dynamic_softmax_conv1d, light_conv1d
from .checks import check_mixer_input
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

    ``engine`` (:func:`~mrconvnext.ops.engines.light_conv_engine`): ``'auto'`` / ``'torch'`` (one grouped conv) or
    ``'triton'`` (DynamicConv's channels-last kernels with shared weights; opt-in until measured faster on a GPU).
    """

    def __init__(self, dim: int, kernel_size: int, num_heads: int, engine: str = 'auto', **options) -> None:
        super().__init__(dim, kernel_size, num_heads, **options)
        self.engine = check_choice(type(self).__name__, 'engine', engine, engines.LIGHT_CONV_ENGINES)
        self.weight = nn.Parameter(torch.empty(num_heads, kernel_size))
        self.reset_parameters()

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

    ``engine`` (:func:`~mrconvnext.ops.engines.dynamic_conv_engine`): ``'auto'`` (Triton on CUDA, else PyTorch; the
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
        self.engine = check_choice(type(self).__name__, 'engine', engine, engines.DYNAMIC_CONV_ENGINES)
        self.weight_linear = nn.Linear(dim, num_heads * kernel_size, bias=predictor_bias)

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
        """Per-position kernels ``(B, H, L, K)`` for ``x`` of shape ``(B, C, L)``.

        Returned as a transposed view of a contiguous ``(B, H, K, L)`` tensor, the layout the op
        consumes without a copy (the linear map is applied as ``W @ x``, no transpose of x).
        """
        B, _, L = x.shape
        lin = self.weight_linear
        logits = torch.matmul(lin.weight, x)  # (B, H*K, L)
        if lin.bias is not None:
            logits = logits + lin.bias[:, None]
        w = torch.softmax(logits.view(B, self.num_heads, self.kernel_size, L), dim=2)
        w = F.dropout(w, self.weight_dropout, self.training)
        return w.transpose(2, 3)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Kernel logits ``(B, L, H, K)`` (contiguous) for ``x (B, C, L)``: one GEMM on the ``(B*L, C)`` view."""
        lin = self.weight_linear
        return F.linear(x.transpose(1, 2), lin.weight, lin.bias).unflatten(-1, (self.num_heads, self.kernel_size))

    def _mix(self, x: torch.Tensor) -> torch.Tensor:
        resolved = engines.dynamic_conv_engine_constant(x.device.type, self.engine)
        if resolved != 'triton':
            return dynamic_conv1d(x, self.kernel(x), self.bias, causal=self.causal, engine=resolved)
        # under autocast, x is cast once (as the logits' GEMM would) and the kernel reads and writes that dtype
        cast = autocast_dtype(x.device.type)
        if cast is not None and x.dtype == torch.float32:
            x = x.to(cast)
        logits = self.logits(x)
        drop = None
        if self.training and self.weight_dropout > 0:
            keep = 1.0 - self.weight_dropout
            dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
            drop = torch.empty(logits.shape, dtype=dtype, device=x.device).bernoulli_(keep).div_(keep)
        return dynamic_softmax_conv1d(x, logits, self.bias, causal=self.causal, dropconnect=drop, engine='triton')


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

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = check_mixer_input(self, x, 4).shape
        return self._mix(x.reshape(B, C, H * W)).reshape(B, C, H, W)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, input_size={self.input_size}'


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class LightConv2d(_RowMajor2d, LightConv1d):
    """LightConv on ``(B, C, H, W)`` flattened row-major (see :class:`_RowMajor2d`)."""


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class DynamicConv2d(_RowMajor2d, DynamicConv1d):
    """DynamicConv on ``(B, C, H, W)`` flattened row-major (see :class:`_RowMajor2d`)."""
