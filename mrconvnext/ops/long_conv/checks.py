"""Input checks of the long convolutions, shared by their functions and operators."""

from __future__ import annotations

import torch

__all__ = ['check_long_conv', 'check_branch_norm']


def check_long_conv(
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    bias: torch.Tensor | None,
    name: str = 'long_conv1d',
    shared: bool = False,
) -> None:
    """TypeError / ValueError naming ``name`` unless ``x (B, C, L)``, ``kernel (C, K)`` / ``(N, C, K)`` with
    ``0 <= zero_lag < K`` and ``bias (C,)`` fit together; with ``shared``, the kernel may have ``M`` filters for
    any ``M`` that divides ``C`` (shared filters: channel ``g M + m`` takes filter ``m``)."""
    if not isinstance(x, torch.Tensor) or not isinstance(kernel, torch.Tensor):
        raise TypeError(f'{name} expects tensors for x and kernel')
    if not x.is_floating_point():
        raise TypeError(f'{name} expects a floating-point input, got dtype {x.dtype}')
    if not kernel.is_floating_point():
        raise TypeError(f'{name} expects a floating-point kernel, got dtype {kernel.dtype}')
    if x.dim() != 3:
        raise ValueError(f'{name} expects x of shape (B, C, L), got shape {tuple(x.shape)}')
    B, C, L = x.shape
    if L == 0:
        raise ValueError(f'{name} got an empty sequence (L = 0)')
    filters = kernel.shape[-2] if kernel.dim() in (2, 3) else 0
    fits = filters == C or (shared and filters > 0 and C % filters == 0)
    if kernel.dim() not in (2, 3) or not fits or kernel.shape[-1] == 0:
        what = f'{C} or a divisor of it' if shared else f'{C}'
        raise ValueError(
            f'{name} expects a kernel of shape (M, K) or (N, M, K) with M = {what} and K >= 1 for an input '
            f'with {C} channels, got shape {tuple(kernel.shape)}'
        )
    if not 0 <= zero_lag < kernel.shape[-1]:
        raise ValueError(
            f'{name}: zero_lag must index a tap of the kernel (0 <= zero_lag < {kernel.shape[-1]}), got {zero_lag}'
        )
    if bias is not None and bias.shape != (C,):
        raise ValueError(f'{name} expects a bias of shape ({C},), got {tuple(bias.shape)}')


def check_branch_norm(
    name: str,
    x: torch.Tensor,
    kernels: torch.Tensor,
    zero_lag: int,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    shared: bool = False,
) -> None:
    """The checks of :func:`check_long_conv` for ``kernels (N, C, K)`` (``shared``: or ``(N, M, K)``), plus
    ``weight`` / ``bias`` / ``alpha (N, C)`` and more than one value per channel (batch statistics), as ValueError
    naming ``name``."""
    check_long_conv(x, kernels, zero_lag, None, name, shared)
    if kernels.dim() != 3:
        raise ValueError(
            f'{name} expects x (B, C, L) and kernels (N, M, K), got {tuple(x.shape)} and {tuple(kernels.shape)}'
        )
    B, C, L = x.shape
    N = kernels.shape[0]
    for arg, t in (('weight', weight), ('bias', bias), ('alpha', alpha)):
        if t.shape != (N, C):
            raise ValueError(f'{name} expects {arg} of shape ({N}, {C}), got {tuple(t.shape)}')
    if B * L < 2:
        raise ValueError(
            f'expected more than 1 value per channel for batch statistics, got input of shape {tuple(x.shape)}'
        )
