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


def remap_lags_loop(kernel: torch.Tensor, zero_lag: int, width: int, new_width: int, new_length: int | None = None):
    """The 2-D lag remap rule tap by tap: ``{new_lag: (C,) weight}`` (see ``mrconvnext.ops.lag_remap``).

    Lag ``tau = q * width + r`` (``0 <= r < width``) is read as ``(q, r)`` on ``width - r`` columns and as
    ``(q + 1, r - width)`` on ``r`` columns; each reading with ``|dx| < new_width`` goes to ``dy * new_width + dx``
    with its column fraction; lags ``|tau'| >= new_length`` are dropped."""
    out: dict[int, torch.Tensor] = {}
    for j in range(kernel.shape[-1]):
        q, r = divmod(j - zero_lag, width)
        readings = [(q, r, (width - r) / width)]
        if r > 0:
            readings.append((q + 1, r - width, r / width))
        for dy, dx, frac in readings:
            if abs(dx) >= new_width:
                continue
            lag = dy * new_width + dx
            if new_length is not None and abs(lag) >= new_length:
                continue
            out[lag] = out.get(lag, 0) + frac * kernel[..., j].double()
    return out
