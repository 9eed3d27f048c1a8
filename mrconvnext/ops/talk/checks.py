"""TaLK's common pieces: input checks, the accumulation dtype and the output layout every engine shares."""

from __future__ import annotations

import torch

from ..checks import check_int

__all__ = ['MAX_OFFSET', 'acc_dtype', 'check_inputs', 'check_maxima', 'is_channels_last_1d', 'talk1d_out']


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Positions, fractions and prefix tables: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# Largest maximum offset: a window of 2**31 positions covers any row a kernel indexes, and every engine computes
# the normalizer exactly up to it (the operators' int64 schema would refuse 2**63 with an unclear message).
MAX_OFFSET = 2**31 - 1


_MAXIMA = ('max_left', 'max_right', 'max_top', 'max_bottom')


def check_maxima(*values: int) -> tuple[int, ...]:
    """The maximum offsets ``(max_left, max_right[, max_top, max_bottom])`` as ints in ``[0, MAX_OFFSET]``, else a
    clear TypeError / ValueError naming the one that is wrong."""
    return tuple(check_int('talk', name, v, minimum=0, maximum=MAX_OFFSET) for name, v in zip(_MAXIMA, values))


def check_inputs(x: torch.Tensor, offsets: torch.Tensor, spatial: int) -> int:
    """Validate ``x`` / ``offsets`` of a ``spatial``-D TaLK op; returns the number of heads."""
    names = {1: ('(B, C, L)', '(B, heads, L, 2)', 2), 2: ('(B, C, H, W)', '(B, heads, H, W, 4)', 4)}
    x_layout, off_layout, n_off = names[spatial]
    for name, t in (('x', x), ('offsets', offsets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f'{name}: expected a torch.Tensor, got {type(t).__name__}')
    if x.dim() != 2 + spatial:
        raise ValueError(f'x: expected a {2 + spatial}-D tensor {x_layout}, got shape {tuple(x.shape)}')
    if not x.is_floating_point():
        raise TypeError(f'x: expected a floating-point dtype, got {x.dtype}')
    if not offsets.is_floating_point():
        raise TypeError(f'offsets: expected a floating-point dtype, got {offsets.dtype}')
    B, C = x.shape[:2]
    expected_tail = (*x.shape[2:], n_off)
    if offsets.dim() != 3 + spatial or offsets.shape[0] != B or tuple(offsets.shape[2:]) != expected_tail:
        exp = f'({B}, heads, {", ".join(str(s) for s in expected_tail)})'
        raise ValueError(f'offsets: expected shape {off_layout} = {exp}, got {tuple(offsets.shape)}')
    heads = offsets.shape[1]
    if heads == 0 or C % heads != 0:
        raise ValueError(f'offsets: the number of heads ({heads}) must divide the channels ({C})')
    if offsets.device != x.device:
        raise ValueError(f'offsets on {offsets.device} but x on {x.device}')
    return heads


def is_channels_last_1d(x: torch.Tensor) -> bool:
    """``x (B, C, L)`` laid out as a contiguous ``(B, L, C)`` (e.g. a flattened channels-last map), not also
    contiguous as ``(B, C, L)``."""
    return not x.is_contiguous() and x.transpose(1, 2).is_contiguous()


def talk1d_out(x: torch.Tensor) -> torch.Tensor:
    """The 1-D forward's output: laid out like ``x`` when x is a flattened channels-last map, else contiguous."""
    return torch.empty_like(x) if is_channels_last_1d(x) else torch.empty(x.shape, dtype=x.dtype, device=x.device)
