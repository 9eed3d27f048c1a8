"""Memory-heavy unfold forms of LightConv / DynamicConv (fairseq's unfold fallback: an explicit ``(B, C, L, K)``
copy): benchmark baselines, and an independent form of the same convolutions. Do not use them in models."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import add_bias, check_x, zero_lag_for

__all__ = ['light_conv1d_unfold', 'dynamic_conv1d_unfold']


def light_conv1d_unfold(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    num_heads: int,
    causal: bool = False,
) -> torch.Tensor:
    """BENCHMARK BASELINE ONLY (memory-heavy): LightConv via an explicit ``(B, C, L, K)`` unfold.

    Same signature and result as :func:`light_conv1d`; mirrors fairseq's unfold fallback.
    """
    x = check_x('light_conv1d_unfold', x)
    B, C, L = x.shape
    H, K = weight.shape
    R = C // num_heads
    zero_lag = zero_lag_for(K, causal)
    xp = F.pad(x, (K - 1 - zero_lag, zero_lag))
    # (B, C, L, K) window view -> materialized copy (the K-fold expansion this baseline measures).
    xu = xp.unfold(2, K, 1).reshape(B, H, R * L, K)
    y = torch.matmul(xu, weight.flip(-1).reshape(1, H, K, 1)).reshape(B, C, L)
    return add_bias(y, bias)


def dynamic_conv1d_unfold(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    causal: bool = False,
) -> torch.Tensor:
    """BENCHMARK BASELINE ONLY (memory-heavy): DynamicConv via an explicit ``(B, C, L, K)`` unfold.

    Same signature and result as :func:`dynamic_conv1d`; mirrors fairseq's unfold fallback
    (a ``(B*H*L, R, K) @ (B*H*L, K, 1)`` batched matmul).
    """
    x = check_x('dynamic_conv1d_unfold', x)
    B, C, L = x.shape
    _, H, _, K = weight.shape
    R = C // H
    zero_lag = zero_lag_for(K, causal)
    xp = F.pad(x, (K - 1 - zero_lag, zero_lag))
    xu = xp.unfold(2, K, 1).view(B, H, R, L, K).permute(0, 1, 3, 2, 4).reshape(B * H * L, R, K)
    w = weight.flip(-1).reshape(B * H * L, K, 1)
    y = torch.bmm(xu, w).view(B, H, L, R).permute(0, 1, 3, 2).reshape(B, C, L)
    return add_bias(y, bias)
