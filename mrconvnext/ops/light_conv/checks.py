"""Input checks, dtypes and lag helpers shared by the LightConv / DynamicConv functions and operators."""

from __future__ import annotations

import torch

from ..checks import check_int

__all__ = [
    'LOW_PRECISION',
    'zero_lag_for',
    'check_x',
    'check_weight',
    'check_bias',
    'check_heads',
    'compute_dtypes',
    'add_bias',
    'tap_span',
]

LOW_PRECISION = (torch.float16, torch.bfloat16)


def zero_lag_for(kernel_size: int, causal: bool) -> int:
    """Index of the lag-0 tap: ``0`` if causal, else ``(kernel_size - 1) // 2``."""
    return 0 if causal else (kernel_size - 1) // 2


def check_x(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'{name} expects x to be a torch.Tensor, got {type(x).__name__}')
    if not x.is_floating_point():
        raise TypeError(f'{name} expects a floating-point x, got dtype {x.dtype}')
    if x.ndim != 3:
        raise ValueError(f'{name} expects x of shape (B, C, L), got shape {tuple(x.shape)}')
    return x


def check_weight(name: str, x: torch.Tensor, weight: object) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f'{name} expects weight to be a torch.Tensor, got {type(weight).__name__}')
    if not weight.is_floating_point():
        raise TypeError(f'{name} expects a floating-point weight, got dtype {weight.dtype}')
    if weight.device != x.device:
        raise ValueError(f'{name} expects weight on {x.device} like x, got {weight.device}')
    return weight


def check_bias(name: str, x: torch.Tensor, bias: object) -> None:
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f'{name} expects bias to be a torch.Tensor or None, got {type(bias).__name__}')
    if not bias.is_floating_point():
        raise TypeError(f'{name} expects a floating-point bias, got dtype {bias.dtype}')
    C = x.shape[1]
    if tuple(bias.shape) != (C,):
        raise ValueError(f'{name} expects a bias of shape ({C},), got {tuple(bias.shape)}')


def check_heads(name: str, channels: int, num_heads: int) -> None:
    check_int(name, 'num_heads', num_heads)
    if channels % num_heads != 0:
        raise ValueError(f'{name}: channels ({channels}) must be divisible by num_heads ({num_heads})')


def compute_dtypes(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(dtype to compute in, dtype to return)."""
    out = torch.promote_types(x.dtype, weight.dtype)
    return (torch.float32 if out in LOW_PRECISION else out), out


def add_bias(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return y if bias is None else y + bias.to(y.dtype)[:, None]


def tap_span(lag: int, length: int) -> tuple[int, int]:
    """Outputs ``t0 <= t < t1`` whose input ``t - lag`` lies inside ``[0, length)``."""
    return max(0, lag), min(length, length + lag)
