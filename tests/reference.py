"""Independent reference computations for the tests (naive, float64, no package code)."""

import torch


def shifted_sum_conv(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """y[b, c, t] = sum_j kernel[c, j] * x[b, c, t - (j - zero_lag)], zero outside [0, L): a loop over taps."""
    B, C, L = x.shape
    y = torch.zeros_like(x)
    for j in range(kernel.shape[-1]):
        lag = j - zero_lag
        if abs(lag) >= L:
            continue
        if lag >= 0:
            y[..., lag:] += kernel[:, j, None] * x[..., : L - lag]
        else:
            y[..., :lag] += kernel[:, j, None] * x[..., -lag:]
    return y
